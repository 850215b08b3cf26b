"""An Equinox model as flowsim's network: a user's (`flowsim.simulate`, or a scenario's
`model.kind = "python"` factory) or the `mlp` kind's; and, through `foreign.py`'s adapter, a
Flax model or a plain `(apply_fn, params)` pair given to `flowsim.simulate`.

The model maps one input x (d,) to its outputs (k,). `eqx.partition` splits it (a foreign
model: its parameter pytree) by the user's `trainable` filter: the trainable leaves are the
`Params` (the ODE state, GD's state, the checkpoint), the rest stays inside `ModuleNet` and
never moves. The NTG is J Jᵀ by autodiff, by the strategy measured faster on the backend
(`flowsim.nn.ntg.ntg_strategy`); the weight measures are per trainable leaf, named by their
pytree paths (`leaf_paths`).
"""

from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .. import plugins
from ..config.typed import Config
from ..data import Dataset
from ..nn.net import AbstractNet
from ..nn.ntg import ntg_strategy
from ..nn.problem import Params
from .base import BuildError, Network, dtype_of
from .foreign import call_module


class ModuleNet(AbstractNet):
    """The frozen part of a user's model; call it with the trainable leaves."""

    frozen: Any             # the model (or parameter pytree) with its trainable leaves replaced by None
    # apply(model, x): one input's outputs; a foreign model's adapter (foreign.py), which may
    # hold fixed state (a pytree field, so that seeds' states stack)
    apply: Callable = call_module
    unit_axis: int = eqx.field(static=True, default=0)   # a 2-D leaf's axis of units: 0 (out, in), 1 (in, out)
    # `AbstractNet.smooth`: told by the builder that knows the model (the `mlp` kind's)
    differentiable: bool = eqx.field(static=True, default=False)

    # The weight measures' axes: the trainable parameters as one flat vector
    # (jax.flatten_util.ravel_pytree's order), the change per trainable leaf and per unit.
    series_axes: ClassVar[dict[str, tuple[str, ...]]] = {
        "weights": ("param",), "weight_change": ("leaf",), "unit_change": ("unit",)}

    @property
    def smooth(self) -> bool:
        return self.differentiable

    def model(self, params: Params) -> Any:
        return eqx.combine(params, self.frozen)

    def __call__(self, params: Params, X: jax.Array) -> jax.Array:
        """Predictions (n, k) at inputs X (n, d)."""
        model = self.model(params)
        return jax.vmap(lambda x: self.apply(model, x))(X)

    def ntg(self, params: Params, X: jax.Array) -> jax.Array:
        # Chosen when the program is traced, so a program compiled for a backend keeps its strategy.
        return ntg_strategy(jax.default_backend())(self, params, X)

    def weights(self, params: Params) -> jax.Array:
        return ravel_pytree(params)[0]

    def weight_change(self, params: Params, params0: Params) -> jax.Array:
        """‖θ_ℓ − θ_ℓ(0)‖ per trainable leaf ℓ, in `leaf_paths` order."""
        return jnp.stack([jnp.linalg.norm(a - b) for a, b in
                          zip(jax.tree.leaves(params), jax.tree.leaves(params0), strict=True)])

    def unit_change(self, params: Params, params0: Params) -> jax.Array:
        """‖w_i − w_i(0)‖ per unit of every dense layer: the slices of each 2-D trainable leaf
        along `unit_axis` (the rows of Equinox's (out, in) weight matrix, the columns of
        Flax's (in, out) kernel), layers in `leaf_paths` order."""
        rows = [jnp.linalg.norm(a - b, axis=1 - self.unit_axis) for a, b in
                zip(jax.tree.leaves(params), jax.tree.leaves(params0), strict=True) if a.ndim == 2]
        return jnp.concatenate(rows) if rows else jnp.zeros(0, jax.tree.leaves(params)[0].dtype)


def leaf_paths(params: Params) -> list[str]:
    """Each trainable leaf's path in the model ("layers.0.weight"), in pytree order."""
    return [jax.tree_util.keystr(path, simple=True, separator=".")
            for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]]


def module_network(params: Params, frozen: Any, key: jax.Array, apply: Callable = call_module,
                   unit_axis: int = 0, smooth: bool = False) -> Network:
    """The `Network` of a model split into its trainable `params` and `frozen` rest (the
    `mlp` kind, and `flowsim.simulate`; `apply` and `unit_axis`: a foreign model's, see
    `foreign.Adapted`; `smooth`: `AbstractNet.smooth`): the flow is dθ/dt = −∇L (rate 1),
    and the archive's init record holds each trainable leaf under its path."""
    init = {path: np.asarray(v) for path, v in zip(leaf_paths(params), jax.tree.leaves(params))}
    net = ModuleNet(frozen=frozen, apply=apply, unit_axis=unit_axis, differentiable=smooth)
    return Network(net=net, params=params, rate=1.0, init=init, key=key)


def build_python(config: Config, ds: Dataset, seed: int) -> Network:
    """`model.kind = "python"`: the scenario's `factory(key, d, k)` builds the network (an
    Equinox module mapping one input (d,) to outputs (k,)); every floating array trains. The
    loader has imported the factory already (`flowsim.plugins`); a factory that fails or
    builds the wrong thing is a `BuildError` naming `model.factory`."""
    path = config.model.factory
    d, k = ds.X_train.shape[1], ds.y_train.shape[1]
    allowed = f"a factory (key, d, k) returning an eqx.Module that maps an input of shape ({d},) to ({k},)"
    model_key, solver_key = jax.random.split(jax.random.PRNGKey(seed))
    dtype = dtype_of(config)
    try:
        with plugins.running("model.factory", path, f"factory(key, d={d}, k={k}) and its module called"):
            model = plugins.load(path)(model_key, d, k)
            out = jax.eval_shape(model, jax.ShapeDtypeStruct((d,), dtype)) if isinstance(model, eqx.Module) else None
    except plugins.RAISED as err:  # the user's code may raise anything
        raise BuildError(f"`model.factory` = {path!r}: factory(key, d={d}, k={k}) raised "
                         f"{plugins.describe(err)}; allowed: {allowed}") from None
    if out is None or getattr(out, "shape", None) != (k,):
        what = f"returned an object of type {type(model).__name__}" if out is None else \
            f"returned a module mapping ({d},) to {getattr(out, 'shape', out)}"
        raise BuildError(f"`model.factory` = {path!r}: factory(key, d={d}, k={k}) {what}; allowed: {allowed}")
    model = jax.tree.map(lambda x: x.astype(dtype) if eqx.is_inexact_array(x) else x, model)
    params, frozen = eqx.partition(model, eqx.is_inexact_array)
    return module_network(params, frozen, solver_key)
