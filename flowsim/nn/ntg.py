"""The generic NTG by autodiff, Θ̂ = J Jᵀ with J_i = ∂f(x_i)/∂θ over every trainable parameter
(first output, p points), two ways:

- `vector_product_ntg`: Θ̂ e_i = J (Jᵀ e_i), a VJP then a JVP per point; J is never formed
  (p² + one VJP of memory instead of p × P).
- `jacobian_ntg`: the p × P Jacobian by reverse mode, contracted. The oracle for the other
  one and for the shallow network's closed form (`flowsim.models.ShallowNet.ntg`).

`ntg_strategy` picks one per backend, by measurement (bench/bench_deep.py, a 3-layer MLP with
P = 296 449 and p = 100): on CPU the vector products took 0.51–0.63× the contraction's time;
on an H200 GPU 5.74× its time (2026-11-26): `lax.map` runs the p columns one after another,
where the contraction is one batched reverse pass and one matmul. The NTG of an Equinox model
(`flowsim.models.ModuleNet`) uses it.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp

from .problem import Params


def vector_product_ntg(net: Callable[[Params, jax.Array], jax.Array], params: Params, X: jax.Array) -> jax.Array:
    """NTG of the first output of `net(params, X)` on inputs X, column by column."""
    f = lambda p: net(p, X)[:, 0]  # noqa: E731
    out, vjp = jax.vjp(f, params)
    column = lambda e: jax.jvp(f, (params,), vjp(e))[1]  # noqa: E731
    return jax.lax.map(column, jnp.eye(X.shape[0], dtype=out.dtype))


def jacobian_ntg(net: Callable[[Params, jax.Array], jax.Array], params: Params, X: jax.Array) -> jax.Array:
    """NTG of the first output of `net(params, X)` on inputs X by Jacobian contraction."""
    jac = jax.jacrev(lambda p: net(p, X)[:, 0])(params)
    flat = jnp.concatenate([j.reshape(X.shape[0], -1) for j in jax.tree.leaves(jac)], axis=1)
    return flat @ flat.T


def ntg_strategy(backend: str) -> Callable[[Callable, Params, jax.Array], jax.Array]:
    """The NTG strategy measured faster on `backend` (`jax.default_backend()`'s names): the
    vector products on "cpu", the Jacobian contraction on an accelerator ("gpu", "tpu", …),
    whose p × P Jacobian `flowsim.run.resources` counts in a run's memory estimate."""
    return vector_product_ntg if backend == "cpu" else jacobian_ntg
