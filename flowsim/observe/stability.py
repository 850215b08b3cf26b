"""Stability observables: the sharpness of the training loss and its Gauss–Newton part.

Both are stored in the units of the gradient-descent step, so that they compare directly
with 2/η:

    sharpness     = rate · λ_max(∇²_W L(W))
    gn_sharpness  = rate · λ_max(G),   G = J_fᵀ (∇²_f ℓ) J_f   (the Gauss–Newton matrix)

where `rate` is the problem's flow rate (dW/dt = −rate ∇L; GD is W ← W − η·rate·∇L), J_f is
the Jacobian of the training predictions f(X; W) (n·k of them) with respect to the trainable
parameters, and ∇²_f ℓ is the Hessian of the loss in prediction space. Gradient descent with
learning rate η is linearly stable at a minimum iff η · sharpness < 2; near a minimum of a
squared loss the two coincide up to the residual term Σ_i r_i ∇²f_i.

For the ½Σ loss ∇²_f ℓ = I, so G = J_fᵀJ_f has the non-zero spectrum of J_f J_fᵀ = Θ̂(X, X),
the NTG on the *whole* training set: gn_sharpness = rate · λ_max(Θ̂_full). For the mean
squared error (1/(n·k)) Σ (y − f)², ∇²_f ℓ = 2/(n·k) · I and gn_sharpness =
rate · 2/(n·k) · λ_max(Θ̂_full). For softmax cross-entropy, ∇²_f ℓ = (1/n) ⊕_i (diag p_i − p_i p_iᵀ)
(positive semi-definite), and G is the usual generalised Gauss–Newton matrix.

Both eigenvalues are computed matrix-free. The `sharpness` observable takes λ_max from the
eigen-tracker (flowsim/observe/eigen.py: block LOBPCG warm-started from the row before,
stopped at the relative accuracy `run.eigen_rtol`) on `hessian_matvec`'s products; the
Lanczos here is what it used before and what `gn_sharpness` uses: Lanczos with full
re-orthogonalisation on Hessian-vector products (forward-over-reverse) or Gauss–Newton
products (one jvp, one vjp), from a fixed pseudo-random start vector. The largest Ritz
value θ is a lower bound on λ_max (Ritz values interlace), and its residual ‖H u − θ u‖ (u
the Ritz vector; = β_k |s_k| from the tridiagonal matrix) bounds the distance from θ to the
nearest eigenvalue of H. Lanczos stops once that residual is below `LANCZOS_RTOL` · θ, or
after `LANCZOS_STEPS` iterations (a while loop, so the observable compiles once). On the
dense spectra of these networks (a well-separated top eigenvalue) θ agrees with the dense
eigen-decomposition to about 1e-12 relative in the tests (tests/test_compare.py).
"""

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from ..nn.problem import Params, Problem, hessian_vector_product

LANCZOS_STEPS = 32
# Lanczos stops once ‖A u − θ u‖ ≤ LANCZOS_RTOL · |θ|: θ is then within that of an eigenvalue
# (within residual² / gap of it where the top is separated by a gap), below any flow
# tolerance a scenario can ask for. On central-scale's network that takes 13–26 steps along
# the flow, GD at the edge of stability and the central flow holding two eigenvalues at 2/η
# (bench/bench_sharpness.py), where 32 were always taken before.
LANCZOS_RTOL = 1e-10


def _top_ritz(alpha: jax.Array, beta: jax.Array, i: jax.Array, scale: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The largest eigenvalue of the leading (i+1)×(i+1) block of the Lanczos tridiagonal
    matrix and the residual norm of its Ritz vector. The fixed-size matrix keeps the block
    and puts −(3·scale + 1) on the rest of its diagonal: by Gershgorin those entries lie
    below every eigenvalue of the block, so that the top eigenpair is the block's."""
    j = jnp.arange(alpha.shape[0])
    diag = jnp.where(j <= i, alpha, -(3 * scale + 1))
    off = jnp.where(j[:-1] < i, beta[:-1], 0.0)
    theta, S = jnp.linalg.eigh(jnp.diag(diag) + jnp.diag(off, 1) + jnp.diag(off, -1))
    return theta[-1], jnp.abs(beta[i] * S[i, -1])


def lanczos_top(matvec, v0: jax.Array, steps: int = LANCZOS_STEPS,
                rtol: float = LANCZOS_RTOL) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Largest eigenvalue θ of the symmetric operator `matvec` (on flat vectors like `v0`),
    the residual norm ‖A u − θ u‖ of its Ritz vector u, and the number of products taken:
    Lanczos with full (twice-applied) re-orthogonalisation, stopped once the residual is
    at most `rtol`·|θ| or after `steps` iterations (a while loop: it compiles once). A
    Krylov space that becomes invariant early (breakdown) has residual 0 and stops there."""
    n = v0.shape[0]
    k = min(steps, n)
    dtype = v0.dtype
    tiny = jnp.finfo(dtype).eps
    Q = jnp.zeros((k + 1, n), dtype).at[0].set(v0 / jnp.linalg.norm(v0))
    zero = jnp.zeros((), dtype)

    def more(carry):
        i, _, _, _, _, theta, res = carry
        return (i < k) & ~(res <= rtol * jnp.abs(theta))

    def body(carry):
        i, Q, alpha, beta, scale, _, _ = carry
        q = Q[i]
        w = matvec(q)
        a = q @ w
        w = w - Q.T @ (Q @ w)          # rows past i are zero: projects on span(q_0..q_i)
        w = w - Q.T @ (Q @ w)
        b = jnp.linalg.norm(w)
        scale = jnp.maximum(scale, jnp.abs(a) + b)
        ok = b > 100 * tiny * scale
        Q = Q.at[i + 1].set(jnp.where(ok, w / jnp.where(ok, b, 1.0), 0.0))
        alpha, beta = alpha.at[i].set(a), beta.at[i].set(jnp.where(ok, b, 0.0))
        theta, res = _top_ritz(alpha, beta, i, scale)
        return i + 1, Q, alpha, beta, scale, theta, res

    start = (jnp.zeros((), jnp.int32), Q, jnp.zeros(k, dtype), jnp.zeros(k, dtype), zero, zero,
             jnp.full((), jnp.inf, dtype))
    i, _, _, _, _, theta, res = jax.lax.while_loop(more, body, start)
    return theta, res, i


def _start(flat: jax.Array) -> jax.Array:
    return jax.random.normal(jax.random.PRNGKey(0), flat.shape, flat.dtype)


# A differenced product's step along a unit vector, relative to 1 + ‖params‖. Measured on
# cohen-scale-quick's fc-tanh at GD's edge (80 810 parameters, float64), against the
# linearised product: 1e-9 leaves 1.9e-8 of the product along the top eigenvector and 8.6e-8
# along a random one (2e-9 and 1.6e-8 in the Rayleigh quotient); 1e-8 leaves 1.9e-7 and
# 2.0e-8 (truncation grows with the step, round-off as it shrinks). At initialisation, along
# a random vector: 3.1e-7 (cohen-scale-quick), 1.5e-7 (central-mlp), 7.8e-7 (caron-fig1-quick).
DIFFERENCE_STEP = 1e-9
# Differenced products serve an accuracy this coarse or coarser (`run.eigen_rtol`), ten times
# their worst error above; a finer one gets the linearised product.
DIFFERENCE_RTOL = 1e-5


def differenced(problem: Problem, dtype) -> bool:
    """Whether `hessian_matvec` differences gradients: a network with no kinks
    (`AbstractNet.smooth`), a built-in loss, float64 and an `eigen_rtol` of at least
    `DIFFERENCE_RTOL`. At ReLU kinks a difference would step across a kink; in float32 a step
    of 1e-9 of the weights is below their rounding."""
    return (problem.net.smooth and problem.custom_loss is None and dtype == jnp.float64
            and problem.eigen_rtol >= DIFFERENCE_RTOL)


def hessian_matvec(problem: Problem, params: Params, gradient: jax.Array | None = None):
    """(v ↦ ∇²L(params)·v on flat vectors, the flat params). Where `differenced`, a forward
    difference of gradients, (∇L(w + εv) − ∇L(w))/ε with ε‖v‖ = DIFFERENCE_STEP·(1 + ‖w‖):
    one gradient a product where the linearised one costs about 1.5 on CPU (cohen-scale-quick;
    bench/bench_observe.py); `gradient`: ∇L(w) (flat) where the caller has it already.
    Otherwise the gradient linearised once (`jax.linearize`, forward over reverse), so that
    the products of one observation share its forward and backward pass instead of each
    computing it again."""
    flat, unravel = ravel_pytree(params)
    grad = lambda w: ravel_pytree(problem.grad(unravel(w)))[0]
    if not differenced(problem, flat.dtype):
        return jax.linearize(grad, flat)[1], flat
    g0 = grad(flat) if gradient is None else gradient
    size = DIFFERENCE_STEP * (1.0 + jnp.linalg.norm(flat))

    def hvp(v):
        norm = jnp.linalg.norm(v)
        eps = size / jnp.where(norm > 0, norm, 1.0)
        return (grad(flat + eps * v) - g0) / eps

    return hvp, flat


def sharpness(problem: Problem, params: Params, steps: int = LANCZOS_STEPS,
              rtol: float = LANCZOS_RTOL) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(rate · λ_max(∇²L), rate · Lanczos residual, Hessian-vector products taken) at
    `params`, Lanczos stopped as `lanczos_top` says: the cold, single-vector method the
    observable used before the eigen-tracker (bench/bench_observe.py compares the two), with
    its products as they were (each a forward-over-reverse pass of its own)."""
    flat, unravel = ravel_pytree(params)

    def hvp(v):
        return ravel_pytree(hessian_vector_product(problem, params, unravel(v)))[0]

    lam, res, taken = lanczos_top(hvp, _start(flat), steps, rtol)
    return problem.rate * lam, problem.rate * res, taken


def gn_sharpness(problem: Problem, params: Params, steps: int = LANCZOS_STEPS) -> jax.Array:
    """rate · λ_max(J_fᵀ ∇²_f ℓ J_f) on the whole training set (see the module text)."""
    flat, unravel = ravel_pytree(params)
    ell = problem.loss_function()

    def predict(p):
        return problem.net(p, problem.X)

    pred, vjp = jax.vjp(predict, params)
    grad_pred = jax.grad(lambda f: ell(f, problem.y))

    def ggn(v):
        _, jv = jax.jvp(predict, (params,), (unravel(v),))
        hjv = jax.jvp(grad_pred, (pred,), (jv,))[1]
        return ravel_pytree(vjp(hjv)[0])[0]

    lam, _, _ = lanczos_top(ggn, _start(flat), steps)
    return problem.rate * lam
