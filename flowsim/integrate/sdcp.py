"""The central flow's k×k semidefinite complementarity problem, solved inside the compiled
program (no host callback: it is cached, vmapped and resumed like every other part of a flow).

The problem: given a symmetric q (k×k) and a linear map M on symmetric k×k matrices that is
positive semidefinite (⟨X, M(X)⟩ ≥ 0; here M(X)_ij = ½ Σ_ab ⟨g_ij, g_ab⟩ X_ab, a Gram
operator), find

    X ⪰ 0,   Y = q + M(X) ⪰ 0,   ⟨X, Y⟩ = 0.

It is the optimality condition of the convex QP  min_{X ⪰ 0} ½⟨X, M(X)⟩ + ⟨q, X⟩, so a
solution exists when M is positive definite, and it is unique then.

Why an interior-point method: the problem is tiny (k ≤ 8 or so), its answer must be accurate
to far below a flow's tolerance (1e-8 against CVXPY, `tests/test_central.py`), and a fixed
iteration count suits a compiled loop. Projected gradient converges linearly at a rate set by
M's condition number, which the third-derivative Gram matrices make poor. This is the
infeasible primal–dual path-following method with the HKM search direction (Helmberg–Rendl–
Vanderbei–Wolkowicz; Kojima–Shindoh–Hara; Monteiro): Newton's step on XY = μI and
Y − M(X) = q, ΔX symmetrised, a step that keeps X and Y positive definite, μ cut by a
fixed factor. Where q ⪰ 0 the answer is X = 0 exactly (no direction needs holding back),
returned without iterating, so that below the edge of stability the central flow is the
gradient flow to the last bit.
"""

import jax
import jax.numpy as jnp

# Iterations at most; each cuts the duality gap by about SIGMA when the full step is taken,
# so 60 reach the round-off of the data from any start the scaling below makes.
MAX_ITERATIONS = 60
SIGMA = 0.1
# Fraction of the way to the boundary of the positive definite cone a step goes.
STEP_BACK = 0.95
# Stop when the gap ⟨X, Y⟩ and the residual ‖Y − q − M(X)‖ are this far below the data's scale:
# Newton's method (`polish`) takes it from there, before the path-following loses its way.
TOLERANCE = 1e-10
# Newton steps on the natural residual after the interior-point method (`polish`).
POLISH_STEPS = 8


def gram_operator(G: jax.Array, m=None, weight: jax.Array | None = None) -> jax.Array:
    """The tensor T (k,k,k,k) of M(X)_ij = Σ_ab T_ijab X_ab = ½ Σ_ab ⟨g_ij, g_ab⟩ X_ab from the
    vectors g (k, k, n), g_ij = g_ji; with `weight` (n,), ½ ⟨g_ij, weight ⊙ g_ab⟩.
    `m` (traced): g_ij is zero unless i, j < m, and only those m(m+1)/2 rows are formed, each
    k² inner products of length n (the whole tensor, k⁴ of them, took a gradient's time on an
    80 810-parameter network at k = 6)."""
    k = G.shape[0]
    flat = G.reshape(k * k, -1)
    if m is None:
        return 0.5 * (flat @ (flat if weight is None else flat * weight).T).reshape(k, k, k, k)
    ii, jj = _pairs(k)

    def row(p, T):
        i, j = ii[p], jj[p]
        r = 0.5 * (flat @ (G[i, j] if weight is None else G[i, j] * weight)).reshape(k, k)
        return T.at[i, j].set(r).at[j, i].set(r)

    return jax.lax.fori_loop(0, m * (m + 1) // 2, row, jnp.zeros((k, k, k, k), G.dtype))


def _pairs(k: int) -> tuple[jax.Array, jax.Array]:
    """The k(k+1)/2 pairs i ≤ j ordered by j, so that the pairs among the top m come first."""
    ii, jj = zip(*[(i, j) for j in range(k) for i in range(j + 1)])
    return jnp.asarray(ii), jnp.asarray(jj)


def rotate(T: jax.Array, W: jax.Array) -> jax.Array:
    """T (k,k,k,k) in the basis V as the tensor of the same operator in the basis V·W (W
    orthogonal): T'_ijab = Σ W_pi W_qj W_ra W_sb T_pqrs."""
    return jnp.einsum("pi,qj,ra,sb,pqrs->ijab", W, W, W, W, T)


def apply(T: jax.Array, X: jax.Array) -> jax.Array:
    return jnp.einsum("ijab,ab->ij", T, X)


def _sym(A: jax.Array) -> jax.Array:
    return 0.5 * (A + A.T)


def _max_step(P: jax.Array, D: jax.Array) -> jax.Array:
    """The largest a ≤ 1/STEP_BACK with P + a D ⪰ 0, for P ≻ 0 (through P's Cholesky factor)."""
    L = jnp.linalg.cholesky(P)
    Li = jax.scipy.linalg.solve_triangular(L, jnp.eye(P.shape[0], dtype=P.dtype), lower=True)
    lo = jnp.linalg.eigvalsh(_sym(Li @ D @ Li.T))[0]
    return jnp.where(lo < 0, -1.0 / jnp.minimum(lo, -1e-300), 1.0 / STEP_BACK)


def solve(q: jax.Array, T: jax.Array) -> jax.Array:
    """X of the complementarity problem for q (k×k symmetric) and the operator T: GD's is PSD
    (`gram_operator`); RMSProp's adds the preconditioner's motion, whose symmetric part can be
    slightly indefinite (−0.8 % of its norm on test_engine's toy problem), so that there the
    complementarity conditions, not a QP's optimum, define the answer. Returns X symmetric
    PSD; 0 exactly where q ⪰ 0.
    The problem is first balanced by the congruence X = S X' S / σ, Y' = S Y S, S = diag(s),
    s_i = |q_ii|^{-1/2}, which keeps X ⪰ 0, Y ⪰ 0 and ⟨X, Y⟩ ∝ ⟨X', Y'⟩: q' has a unit diagonal,
    and σ the norm of the operator T' = σ⁻¹ S⊗S T S⊗S, 1.
    The central flow's q mixes the held margins with the free ones held well above them (by
    κ(1 − threshold)·2/η); unbalanced, the interior-point method's scale and stopping rule follow
    the largest entry, and a held X of 1e-8 of it came back 0 (measured: q = diag(−1, 10⁶),
    T = 10⁸ on the first entry alone, X₀₀ = 0 instead of 1e-8; with q = diag(−1, 1), T = 10¹⁰:
    1 + 8e-8 times the answer; balanced, both to 1e-15)."""
    q = _sym(q)
    d = jnp.sqrt(jnp.abs(jnp.diag(q)))
    top = jnp.max(d)
    s = 1.0 / jnp.where(d > 1e-8 * top, d, jnp.where(top > 0, top, 1.0))
    Ts = jnp.einsum("ijab,i,j,a,b->ijab", T, s, s, s, s)
    size = jnp.linalg.norm(Ts.reshape(q.shape[0] ** 2, -1))
    size = jnp.where(size > 0, size, 1.0)
    X = _solve(s[:, None] * q * s[None, :], Ts / size) / size
    return s[:, None] * X * s[None, :]


def _solve(q: jax.Array, T: jax.Array) -> jax.Array:
    """`solve` on the balanced problem."""
    k = q.shape[0]
    dtype = q.dtype
    eye = jnp.eye(k, dtype=dtype)
    scale_q = jnp.linalg.norm(q) + 1e-300
    scale_t = jnp.linalg.norm(T.reshape(k * k, k * k)) + 1e-300
    tol = TOLERANCE * scale_q * (scale_q / scale_t)

    def newton(c):
        X, Y, it, _ = c
        R = Y - q - apply(T, X)                       # the infeasibility left
        mu = SIGMA * jnp.trace(X @ Y) / k
        rhs = mu * eye - X @ Y + X @ R
        # ΔX Y + X M(ΔX) = rhs, linear in the k² entries of ΔX (M reads ΔX's symmetric part)
        op = lambda d: (d.reshape(k, k) @ Y + X @ apply(T, _sym(d.reshape(k, k)))).reshape(-1)
        K = jax.jacfwd(op)(jnp.zeros(k * k, dtype))
        dX = _sym(jnp.linalg.solve(K, rhs.reshape(-1)).reshape(k, k))
        dY = _sym(apply(T, dX) - R)
        a = jnp.minimum(1.0, STEP_BACK * jnp.minimum(_max_step(X, dX), _max_step(Y, dY)))
        Xn, Yn = _sym(X + a * dX), _sym(Y + a * dY)
        # at the round-off of the data the Cholesky factors of a nearly singular X or Y can
        # break down: the last finite iterate is the answer
        ok = jnp.all(jnp.isfinite(Xn)) & jnp.all(jnp.isfinite(Yn))
        return jnp.where(ok, Xn, X), jnp.where(ok, Yn, Y), it + 1, ~ok

    def going(c):
        X, Y, it, broke = c
        gap = jnp.trace(X @ Y)
        res = jnp.linalg.norm(Y - q - apply(T, X))
        return (it < MAX_ITERATIONS) & ~broke & ((gap > tol) | (res > tol * scale_t / scale_q))

    def interior():
        # Y of q's size; X at least twice the least-squares answer of M(X) = −q (X's size
        # where every direction is held), not merely q's size over M's norm. An infeasible
        # start below the answer stalls the path-following: steps of 1e-3 while X grew
        # towards it for all 60 iterations. M's small eigenvalues make the answer large: on
        # test_engine's toy problems, 67 of 326 of GD's central solves and 13 of 3 143 of
        # RMSProp's ended far from it (Y with eigenvalues of −0.2 to −0.7 of q's norm);
        # started so, none did (natural residual ≤ 1e-7 of X), and their integrations took
        # seconds where they had stalled. In this branch, so that a q ⪰ 0 (below the edge:
        # most evaluations) pays no least-squares solve.
        X_ls = jnp.linalg.lstsq(T.reshape(k * k, k * k), -q.reshape(-1), rcond=1e-12)[0]
        X0 = eye * jnp.maximum(2.0 * jnp.linalg.norm(X_ls), scale_q / scale_t)
        X = jax.lax.while_loop(going, newton, (X0, eye * scale_q, jnp.asarray(0), jnp.asarray(False)))[0]
        return polish(q, T, X)

    slack = jnp.linalg.eigvalsh(q)[0] >= 0
    return jax.lax.cond(slack, lambda: jnp.zeros_like(q), interior)


def _psd_part(Z: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Π(Z), Z's projection on the PSD cone, with Z's eigenvalues d and eigenvectors P."""
    d, P = jnp.linalg.eigh(Z)
    return _sym((P * jnp.maximum(d, 0.0)) @ P.T), d, P


def _natural_residual(q: jax.Array, T: jax.Array, X: jax.Array) -> jax.Array:
    """X − Π(X − Y(X)): zero exactly at a solution (X ⪰ 0, Y ⪰ 0, XY = 0)."""
    return X - _psd_part(X - q - apply(T, X))[0]


def polish(q: jax.Array, T: jax.Array, X: jax.Array) -> jax.Array:
    """Newton's method on the natural residual X − Π(X − Y(X)), from the interior-point answer.

    The path-following iterates lose the central path once the gap nears the round-off of the
    Newton systems (their matrices grow singular with X and Y), and stop short by about √gap
    in X (measured: 1e-6 at a gap of 1e-12). Near a strictly complementary solution the
    residual is smooth (X − Y has no zero eigenvalue there), and Newton's method converges
    quadratically: with X − Y = P diag(d) Pᵀ, Π's derivative is H ↦ P (Ω ∘ PᵀHP) Pᵀ,
    Ω_ij = (d_i⁺ − d_j⁺)/(d_i − d_j) (1 where both are positive, 0 where neither is). A step
    is kept only where it lowers the residual; the answer is Π(X − Y), PSD exactly."""
    k = q.shape[0]
    dtype = q.dtype

    def newton(_, X):
        F = _natural_residual(q, T, X)
        _, d, P = _psd_part(X - q - apply(T, X))
        dp = jnp.maximum(d, 0.0)
        diff = d[:, None] - d[None, :]
        same = jnp.abs(diff) <= 1e-14 * (jnp.abs(d[:, None]) + jnp.abs(d[None, :]) + 1e-300)
        omega = jnp.where(same, (d[:, None] > 0).astype(dtype) * (d[None, :] > 0),
                          (dp[:, None] - dp[None, :]) / jnp.where(same, 1.0, diff))
        lin = lambda h: (h.reshape(k, k) - P @ (omega * (P.T @ (_sym(h.reshape(k, k)) - apply(T, _sym(h.reshape(k, k)))) @ P))
                         @ P.T).reshape(-1)
        K = jax.jacfwd(lin)(jnp.zeros(k * k, dtype))
        Xn = _sym(X + jnp.linalg.solve(K, -F.reshape(-1)).reshape(k, k))
        better = jnp.all(jnp.isfinite(Xn)) & (jnp.linalg.norm(_natural_residual(q, T, Xn)) < jnp.linalg.norm(F))
        return jnp.where(better, Xn, X)

    X = jax.lax.fori_loop(0, POLISH_STEPS, newton, X)
    return _psd_part(X - q - apply(T, X))[0]
