"""A user's Equinox model as flowsim's network (`flowsim.simulate`).

The model maps one input x (d,) to its outputs (k,). `eqx.partition` splits it by the
user's `trainable` filter: the trainable leaves are the `Params` (the ODE state, GD's state,
the checkpoint), the rest stays inside `ModuleNet` and never moves. The NTG is J Jᵀ by
autodiff (`flowsim.ntg`); the weight measures are per trainable leaf, named by their
pytree paths (`leaf_paths`).
"""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from ..ntg import jacobian_ntg
from ..problem import Params


class ModuleNet(eqx.Module):
    """The frozen part of a user's model; call it with the trainable leaves."""

    frozen: eqx.Module      # the model with its trainable leaves replaced by None

    # The weight measures' axes (flowsim.observe.series_axes): per trainable leaf, and the
    # trainable parameters as one flat vector (jax.flatten_util.ravel_pytree's order).
    SERIES_AXES: ClassVar[dict[str, tuple[str, ...]]] = {"weight_change": ("leaf",), "weights": ("param",)}

    def model(self, params: Params) -> eqx.Module:
        return eqx.combine(params, self.frozen)

    def __call__(self, params: Params, X: jax.Array) -> jax.Array:
        """Predictions (n, k) at inputs X (n, d)."""
        return jax.vmap(self.model(params))(X)

    def ntg(self, params: Params, X: jax.Array) -> jax.Array:
        return jacobian_ntg(self, params, X)

    def weights(self, params: Params) -> jax.Array:
        return ravel_pytree(params)[0]

    def weight_change(self, params: Params, params0: Params) -> jax.Array:
        """‖θ_ℓ − θ_ℓ(0)‖ per trainable leaf ℓ, in `leaf_paths` order."""
        return jnp.stack([jnp.linalg.norm(a - b) for a, b in
                          zip(jax.tree.leaves(params), jax.tree.leaves(params0), strict=True)])


def leaf_paths(params: Params) -> list[str]:
    """Each trainable leaf's path in the model ("layers.0.weight"), in pytree order."""
    return [jax.tree_util.keystr(path, simple=True, separator=".")
            for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
