"""The generic NTG by autodiff — the oracle for the closed form in `flowsim.models.ShallowNet.ntg`.

    Θ̂ = J Jᵀ,  J_i = ∂f(x_i)/∂θ flattened over every trainable parameter.

This forms the full n × P Jacobian, so it is for tests and benchmarks, never the
production path (the closed form is O(n² m) and forms no Jacobian).
"""

import jax
import jax.numpy as jnp

from .models import ShallowNet
from .problem import Params


def jacobian_ntg(net: ShallowNet, params: Params, X: jax.Array) -> jax.Array:
    """NTG of the first output on inputs X by Jacobian contraction."""
    jac = jax.jacrev(lambda p: net(p, X)[:, 0])(params)
    flat = jnp.concatenate([j.reshape(X.shape[0], -1) for j in jax.tree.leaves(jac)], axis=1)
    return flat @ flat.T
