"""A model given to `flowsim.simulate` as the engine runs it: a parameter pytree (what
`trainable` selects from, and what the archive names leaf by leaf by its paths) and a pure
`apply(params, x)` giving the outputs (k,) for one input x (d,). An Equinox module is both
at once; a Flax NNX module, a Flax Linen module with its variables, or a plain
`(apply_fn, params)` pair is converted here, so that `ModuleNet` runs all four alike.

Flax is imported only when a Flax object is given: it is an optional extra
(`pip install flowsim[flax]`).

Non-trainable state (BatchNorm statistics, Dropout's RNG state, Linen collections other
than "params") is held fixed at its given value: the network is a function of its
parameters alone, as the flow dθ/dt = −∇L(θ) needs. A module that changes that state when
called (BatchNorm in training mode, Dropout not deterministic) is refused when first
traced, naming the variable: Linen refuses it itself (its collections are immutable in
`apply`), NNX through `NNXApply`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax

ALLOWED = ("an eqx.Module or a Flax NNX module (flax.nnx.Module) mapping one input (d,) to outputs (k,); a pair "
           "(Flax Linen module, its variables from module.init); a pair (apply_fn, params) with apply_fn(params, "
           "x) -> outputs; or a function key -> any of these")


@dataclasses.dataclass(frozen=True)
class Adapted:
    """A model as the engine runs it."""

    params: Any             # the parameter pytree: what `trainable` filters, named by its paths
    apply: Callable         # apply(params, x) -> outputs (k,) for one input (d,); may hold fixed state
    unit_axis: int          # the axis of a 2-D leaf that indexes its units (`ModuleNet.unit_change`)
    kind: str               # what was given, in words
    shown: str              # how a message shows it: "<MLP Flax NNX module>"


def call_module(module: eqx.Module, x: jax.Array) -> jax.Array:
    """An Equinox module's own apply: the module is its parameter pytree."""
    return module(x)


def adapt(model: Any) -> Adapted | None:
    """`model` as an `Adapted`, or None where it is none of the kinds `ALLOWED` names but a
    factory may still be (the caller decides). A Linen module without its variables, or a
    pair that is neither of the two, raises `TypeError` saying what to pass."""
    if isinstance(model, eqx.Module):
        return Adapted(params=model, apply=call_module, unit_axis=0, kind="an Equinox module",
                       shown=f"<{type(model).__name__} module>")
    if from_flax(model):
        from flax import linen, nnx

        if isinstance(model, nnx.Module):
            return _nnx(model)
        if isinstance(model, linen.Module):
            raise TypeError(f"a Flax Linen module ({type(model).__name__}) without its variables: pass "
                            "model=(module, module.init(key, x))")
    if isinstance(model, tuple) and len(model) == 2:
        first, second = model
        if from_flax(first):
            from flax import linen

            if isinstance(first, linen.Module):
                return _linen(first, second)
        if callable(first):
            if not jax.tree.leaves(second):
                raise TypeError(f"a pair (apply_fn, params) whose params hold no arrays "
                                f"({type(second).__name__})")
            # a plain function's layout is unknown: 2-D leaves as Equinox's (out, in), a row per unit
            return Adapted(params=second, apply=first, unit_axis=0, kind="a pair (apply_fn, params)",
                           shown=f"<({getattr(first, '__name__', type(first).__name__)}, params)>")
        raise TypeError(f"a pair ({type(first).__name__}, {type(second).__name__}): neither "
                        "(Flax Linen module, variables) nor (apply_fn, params)")
    return None


def from_flax(obj: Any) -> bool:
    """Whether `obj` is an instance of a Flax class, told without importing Flax."""
    return any(cls.__module__.split(".")[0] == "flax" for cls in type(obj).__mro__)


class NNXApply(eqx.Module):
    """A Flax NNX module's apply: its graph (static) and its non-`Param` state (fixed),
    merged with the parameters at each call. Both are held as plain nested dicts of arrays
    (`nnx.to_pure_dict`: paths "layers.0.kernel") and unflattened to fresh `nnx.State`s of
    Variables at each call (their leaves come in the same sorted-key order): a merged
    module shares the Variables it is given, so a call that assigned one would otherwise
    leave its traced value in the state held here. An RNG key (Dropout's) is held as its key
    data, with its implementation's name: seeds' states are stacked as numbers."""

    graphdef: Any = eqx.field(static=True)
    params_def: Any = eqx.field(static=True)    # the treedef of the Params' nnx.State
    rest_def: Any = eqx.field(static=True)      # the treedef of the other variables' nnx.State
    key_impls: tuple = eqx.field(static=True)   # per leaf of `rest`: its RNG implementation, or None
    rest: Any                                   # the other variables, a dict of arrays, held fixed

    def __call__(self, params: Any, x: jax.Array) -> jax.Array:
        from flax import nnx

        held = [v if impl is None else jax.random.wrap_key_data(v, impl=impl)
                for v, impl in zip(jax.tree.leaves(self.rest), self.key_impls, strict=True)]
        module = nnx.merge(self.graphdef, jax.tree.unflatten(self.params_def, jax.tree.leaves(params)),
                           jax.tree.unflatten(self.rest_def, held))
        out = module(x)
        # A variable the call assigned holds a new array; an untouched one, the one passed in.
        _, _, after = nnx.split(module, nnx.Param, ...)
        changed = [_path(p) for (p, a), b in zip(jax.tree_util.tree_flatten_with_path(after)[0], held, strict=True)
                   if a is not b]
        if changed:
            raise ValueError(f"the module changes its non-trainable state ({', '.join(changed)}) when called; "
                             "flowsim holds it fixed: call it in evaluation mode (model.eval(), or "
                             "BatchNorm(use_running_average=True), Dropout(deterministic=True))")
        return out


def _nnx(model: Any) -> Adapted:
    from flax import nnx

    graphdef, state, rest = nnx.split(model, nnx.Param, ...)
    params, fixed = nnx.to_pure_dict(state), nnx.to_pure_dict(rest)
    for held, pure in ((state, params), (rest, fixed)):
        if [_path(p) for p, _ in jax.tree_util.tree_flatten_with_path(held)[0]] != \
                [_path(p) for p, _ in jax.tree_util.tree_flatten_with_path(pure)[0]]:   # (were Flax to change it)
            raise TypeError(f"a Flax NNX module ({type(model).__name__}) whose variables do not flatten in "
                            "one order as an nnx.State and as a dict")
    leaves, fixed_def = jax.tree.flatten(fixed)
    impls = tuple(jax.random.key_impl(v) if _is_key(v) else None for v in leaves)
    fixed = jax.tree.unflatten(fixed_def, [jax.random.key_data(v) if _is_key(v) else v for v in leaves])
    apply = NNXApply(graphdef=graphdef, params_def=jax.tree.structure(state), rest_def=jax.tree.structure(rest),
                     key_impls=impls, rest=fixed)
    return Adapted(params=params, apply=apply,
                   unit_axis=1, kind="a Flax NNX module", shown=f"<{type(model).__name__} Flax NNX module>")


class LinenApply(eqx.Module):
    """A Flax Linen module's apply: the module (static) and its collections other than
    "params", held fixed (`apply` refuses to change them: they are immutable there)."""

    module: Any = eqx.field(static=True)
    rest: dict

    def __call__(self, params: Any, x: jax.Array) -> jax.Array:
        return self.module.apply({"params": params, **self.rest}, x)


def _linen(module: Any, variables: Any) -> Adapted:
    if not hasattr(variables, "keys") or "params" not in variables:
        shown = sorted(variables.keys()) if hasattr(variables, "keys") else type(variables).__name__
        raise TypeError(f"a Flax Linen module ({type(module).__name__}) with variables {shown}, not the "
                        "dict module.init(key, x) returns, with a \"params\" collection")
    rest = {name: value for name, value in variables.items() if name != "params"}
    return Adapted(params=variables["params"], apply=LinenApply(module=module, rest=rest), unit_axis=1,
                   kind="a Flax Linen module with its variables", shown=f"<({type(module).__name__}, variables)>")


def _is_key(value: Any) -> bool:
    return isinstance(value, jax.Array) and jax.numpy.issubdtype(value.dtype, jax.dtypes.prng_key)


def _path(path: tuple) -> str:
    """A flattened leaf's path as the archive names it ("layers.0.kernel"); an NNX
    variable's trailing `.value` (the array inside the Variable) dropped."""
    name = jax.tree_util.keystr(path, simple=True, separator=".")
    return name.removesuffix(".value")
