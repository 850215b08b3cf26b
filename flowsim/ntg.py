"""The generic NTG by autodiff: the NTG of a user's model (`flowsim.models.ModuleNet`), and
the oracle for the closed form in `flowsim.models.ShallowNet.ntg`.

    Θ̂ = J Jᵀ,  J_i = ∂f(x_i)/∂θ flattened over every trainable parameter.

This forms the p × P Jacobian of the first output on the p NTG points (reverse mode, one
pass per point); the shallow network's closed form is O(p² m) and forms none.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp

from .problem import Params


def jacobian_ntg(net: Callable[[Params, jax.Array], jax.Array], params: Params, X: jax.Array) -> jax.Array:
    """NTG of the first output of `net(params, X)` on inputs X by Jacobian contraction."""
    jac = jax.jacrev(lambda p: net(p, X)[:, 0])(params)
    flat = jnp.concatenate([j.reshape(X.shape[0], -1) for j in jax.tree.leaves(jac)], axis=1)
    return flat @ flat.T
