"""An Equinox model as flowsim's network: a user's (`flowsim.simulate`, or a scenario's
`model.kind = "python"` factory) or the `mlp` kind's.

The model maps one input x (d,) to its outputs (k,). `eqx.partition` splits it by the
user's `trainable` filter: the trainable leaves are the `Params` (the ODE state, GD's state,
the checkpoint), the rest stays inside `ModuleNet` and never moves. The NTG is J Jᵀ by
autodiff, by the strategy measured faster on the backend (`flowsim.nn.ntg.ntg_strategy`); the
weight measures are per trainable leaf, named by their pytree paths (`leaf_paths`).
"""

from typing import ClassVar

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


class ModuleNet(AbstractNet):
    """The frozen part of a user's model; call it with the trainable leaves."""

    frozen: eqx.Module      # the model with its trainable leaves replaced by None

    # The weight measures' axes: the trainable parameters as one flat vector
    # (jax.flatten_util.ravel_pytree's order), the change per trainable leaf and per unit.
    series_axes: ClassVar[dict[str, tuple[str, ...]]] = {
        "weights": ("param",), "weight_change": ("leaf",), "unit_change": ("unit",)}

    def model(self, params: Params) -> eqx.Module:
        return eqx.combine(params, self.frozen)

    def __call__(self, params: Params, X: jax.Array) -> jax.Array:
        """Predictions (n, k) at inputs X (n, d)."""
        return jax.vmap(self.model(params))(X)

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
        """‖w_i − w_i(0)‖ per unit of every dense layer: the rows of each 2-D trainable leaf
        (a layer's (out, in) weight matrix, Equinox's layout), layers in `leaf_paths` order."""
        rows = [jnp.linalg.norm(a - b, axis=-1) for a, b in
                zip(jax.tree.leaves(params), jax.tree.leaves(params0), strict=True) if a.ndim == 2]
        return jnp.concatenate(rows) if rows else jnp.zeros(0, jax.tree.leaves(params)[0].dtype)


def leaf_paths(params: Params) -> list[str]:
    """Each trainable leaf's path in the model ("layers.0.weight"), in pytree order."""
    return [jax.tree_util.keystr(path, simple=True, separator=".")
            for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]]


def module_network(params: Params, frozen: eqx.Module, key: jax.Array) -> Network:
    """The `Network` of a model split into its trainable `params` and `frozen` rest (the
    `mlp` kind, and `flowsim.simulate`): the flow is dθ/dt = −∇L (rate 1), and the archive's
    init record holds each trainable leaf under its path."""
    init = {path: np.asarray(v) for path, v in zip(leaf_paths(params), jax.tree.leaves(params))}
    return Network(net=ModuleNet(frozen=frozen), params=params, rate=1.0, init=init, key=key)


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
