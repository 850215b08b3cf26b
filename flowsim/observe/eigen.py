"""The eigen-tracker: the k largest eigenvalues of a symmetric operator given by its products,
warm-started from the Ritz vectors of a nearby operator (the previous checkpoint's Hessian),
stopped at a relative accuracy of each eigenvalue.

The method is LOBPCG without a preconditioner (Knyazev 2001), in its orthonormal-basis form
(Hetmaniuk & Lehoucq 2006): a block X of b = k + g orthonormal vectors, g of them guards
beneath the k tracked, is improved by the Rayleigh–Ritz procedure on span[X, P, W] (W the
residuals H x − θ x of the k tracked vectors, P their last update), whose basis is kept
orthonormal so that the projected problem is an ordinary symmetric one. Each iteration
applies the operator to W only (k products at most); H X and H P follow from the Ritz
coefficients. A tracked column already within rtol is soft-locked: it stays in X, but its
residual is left out of W and takes no product (hessian_top, k = 5, on cohen-scale-quick's
GD rows: 15.6 products a row instead of 18.2).
The guards are refined by the Rayleigh–Ritz step alone (`refine_guards` adds their residuals
to W: full block LOBPCG, b products an iteration). The first step of a call is the
Rayleigh–Ritz procedure on X alone (b products), which is all a warm start needs when the
operator has moved little.

The guards sit in the block beneath the tracked vectors: when the k-th and (k+1)-th
eigenvalues come together (the edge of stability packs eigenvalues at 2/η), both directions
are in the block, so the tracked Ritz values converge to the pair instead of waiting on the
gap between them, and each tracked value's gap δ (below) is taken against the guards' values.

Stopping rule, in the units the user reads. For a unit Ritz vector x with Ritz value θ and
residual r = H x − θ x, some eigenvalue λ of H satisfies |λ − θ| ≤ ‖r‖ (for a symmetric H),
and |λ − θ| ≤ ‖r‖²/δ where δ is the distance from θ to the rest of the spectrum (the
quadratic, Kato–Temple-type, bound). δ is estimated from the other Ritz values, each moved
towards θ by its own residual: δ_i = min_{j≠i} |θ_i − θ_j| − ‖r_j‖ (PRIMME's estimate). The
error bound reported is e_i = min(‖r_i‖, ‖r_i‖²/δ_i) (just ‖r_i‖ where δ_i ≤ 0), and the
tracker stops once e_i ≤ rtol · |θ_i| for each of the k tracked eigenvalues (rtol: default
1e-4, far below what a plot against 2/η resolves), or after `max_iters` iterations.

Preconditioned Hessians: with `precond` = the diagonal d of a positive P the operator is
P^{-1/2} H P^{-1/2}, v ↦ d^{-1/2} ⊙ H(d^{-1/2} ⊙ v), whose spectrum is the stability
threshold of the preconditioned step W ← W − η P^{-1} ∇L (Adam and its kind).

Everything is pure JAX in fixed shapes (a `lax.while_loop` over iterations): it jits once
and maps over seeds.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ..kinds import EIGEN_RTOL

RTOL = EIGEN_RTOL   # default relative accuracy of each tracked eigenvalue (run.eigen_rtol)
MAX_ITERS = 100    # iterations at most (a cold start to rtol 1e-12 on the test networks: < 60)


def guards(k: int) -> int:
    """Guard vectors beneath k tracked ones: 1 beneath the top one alone (a second cost 21 %
    more products along cohen-scale-quick's GD leg), else 2, or k/2 for a larger block (the
    edge of stability packs several eigenvalues at 2/η; a guard inside that pack does not
    help)."""
    return 1 if k == 1 else max(2, k // 2)


class Eigen(NamedTuple):
    """What `top_eigen` found; the b = k + g Ritz pairs in descending order (tracked, then
    guards)."""

    values: jax.Array      # (b,) Ritz values, descending
    vectors: jax.Array     # (b, n) orthonormal Ritz vectors, one per row: the next warm start
    residuals: jax.Array   # (b,) ‖A x_i − θ_i x_i‖
    errors: jax.Array      # (b,) the bound min(‖r‖, ‖r‖²/δ) on |λ − θ| (module text)
    products: jax.Array    # operator products taken (one per vector)
    iterations: jax.Array  # LOBPCG iterations after the first Rayleigh–Ritz step
    converged: jax.Array   # every tracked eigenvalue within rtol


def start_block(n: int, b: int, dtype, key: jax.Array | None = None) -> jax.Array:
    """A cold start: b pseudo-random rows of length n from a fixed key (deterministic, so a
    resumed run repeats it)."""
    key = jax.random.PRNGKey(0) if key is None else key
    return jax.random.normal(key, (b, n), dtype)


def _orth(V: jax.Array) -> jax.Array:
    """Orthonormal columns spanning V's columns (Householder QR: always orthonormal; a column
    that V lacks is completed by some direction). For the small coefficient matrices."""
    return jnp.linalg.qr(V)[0]


def _project_out(W: jax.Array, B: jax.Array) -> jax.Array:
    """W's columns with their components along B's (orthonormal or zero) columns removed,
    twice (one pass loses orthogonality when W lies nearly in span B)."""
    W = W - B @ (B.T @ W)
    return W - B @ (B.T @ W)


def _orthonormal(V: jax.Array) -> jax.Array:
    """V's columns orthonormalised through the eigen-decomposition of their Gram matrix (SVQB):
    for a start block of well-conditioned columns (orthonormal to about eps·cond(V)²; a warm
    start's columns are orthonormal already, a random block's condition is near 1). (A
    QR of the tall block took longer than the block's operator products inside the
    compiled tracker on cohen-scale-quick's network.)"""
    s, U = jnp.linalg.eigh(V.T @ V)
    return V @ (U / jnp.sqrt(jnp.maximum(s, jnp.finfo(V.dtype).tiny))[None, :])


def _expansion(R: jax.Array, B: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Orthonormal columns spanning the part of R's columns outside span B (B orthonormal or
    zero columns), and which columns are real: R projected off B, orthonormalised through the
    eigen-decomposition of its Gram matrix (SVQB, Stathopoulos & Wu 2002), projected off B
    once more and normalised. A direction whose Gram eigenvalue is below 1e-14 of the
    largest (a residual 1e-7 of the largest or less: a converged or locked vector, whose
    column of R is zero) is dropped, its column zero and flagged, rather than normalised from
    the Gram matrix's rounding (about 1e-16 of its largest eigenvalue: at 1e-24 a locked
    column's zero came back as a direction that was not orthogonal to B, and the Ritz
    values blew up on cohen-scale-quick's rows). Each pass is two products of tall matrices and no QR of one: on
    cohen-scale-quick's 80 810 parameters these, not the operator, were half the time."""
    W = R - B @ (B.T @ R)
    s, U = jnp.linalg.eigh(W.T @ W)
    keep = s > 1e-14 * jnp.max(s)
    W = W @ (U * jnp.where(keep, 1 / jnp.sqrt(jnp.where(keep, s, 1.0)), 0.0)[None, :])
    W = W - B @ (B.T @ W)
    norm = jnp.linalg.norm(W, axis=0, keepdims=True)
    return jnp.where(keep[None, :], W / jnp.where(keep[None, :], norm, 1.0), 0.0), keep


def error_bounds(theta: jax.Array, res: jax.Array) -> jax.Array:
    """e_i = min(‖r_i‖, ‖r_i‖²/δ_i), δ_i = min_{j≠i} |θ_i − θ_j| − ‖r_j‖ (module text)."""
    b = theta.shape[0]
    dist = jnp.abs(theta[:, None] - theta[None, :]) - res[None, :]
    delta = jnp.min(jnp.where(jnp.eye(b, dtype=bool), jnp.inf, dist), axis=1)
    quad = jnp.where(delta > 0, res ** 2 / jnp.where(delta > 0, delta, 1.0), jnp.inf)
    return jnp.minimum(res, quad)


def operator(matvec, precond: jax.Array | None = None):
    """The operator's product with one flat vector: `matvec`, or with `precond` (the diagonal
    of P, positive) the product of P^{-1/2} A P^{-1/2}."""
    if precond is None:
        return matvec
    s = 1 / jnp.sqrt(precond)
    return lambda v: s * matvec(s * v)


def _some(apply, W: jax.Array, need: jax.Array) -> jax.Array:
    """`apply` to the columns of W flagged `need` only (zero columns for the rest), one after
    another in a loop of as many passes as there are such columns: the products of converged
    columns are not taken."""
    order = jnp.argsort(~need)          # the needed columns first (stable)
    count = jnp.sum(need, dtype=jnp.int32)
    rows = W.T                          # (a contiguous vector per product: a column's strided
                                        # reads and writes took as long as the loop's products
                                        # of a cheap operator)

    def body(c):
        j, AW = c
        return j + 1, AW.at[order[j]].set(apply(rows[order[j]]))

    return jax.lax.while_loop(lambda c: c[0] < count, body, (jnp.zeros((), jnp.int32), jnp.zeros_like(rows)))[1].T


def _ritz(H: jax.Array, b: int, invalid: jax.Array):
    """Rayleigh–Ritz on an orthonormal basis S whose projected operator is H = S A Sᵀ: the top
    b eigenpairs of H as coefficient columns (descending). Rows flagged `invalid` (a P block
    not yet formed, a dropped direction: all zero) get a diagonal entry below every
    eigenvalue of the rest (Gershgorin), so that no spurious pair is taken."""
    H = (H + H.T) / 2
    floor = -(jnp.max(jnp.sum(jnp.abs(H), axis=1)) + 1)
    H = jnp.where(jnp.diag(invalid), floor, H)
    w, C = jnp.linalg.eigh(H)
    return w[::-1][:b], C[:, ::-1][:, :b]


def top_eigen(matvec, X0: jax.Array, k: int, rtol: float = RTOL, max_iters: int = MAX_ITERS,
              precond: jax.Array | None = None, refine_guards: bool = False) -> Eigen:
    """The k largest eigenvalues of the symmetric operator `matvec` (flat vectors of length n),
    from the start block X0 (b × n, b > k: the rows beyond k are guards; the previous call's
    `vectors` for a warm start, `start_block` for a cold one), each to relative accuracy
    `rtol` as the module text states it. `precond`: the diagonal of P for P^{-1/2} A P^{-1/2}.
    `refine_guards`: expand the basis by the guards' residuals too (b products an iteration
    instead of k: full LOBPCG; by default the guards are refined by the Rayleigh–Ritz step
    alone, which on cohen-scale-quick's rows took 23 % fewer products). Needs n ≥ 3b."""
    b, n = X0.shape
    e = b if refine_guards else k     # the rows whose residuals expand the basis
    if not 0 < k < b or 3 * b > n:
        raise ValueError(f"top_eigen: k = {k} tracked of a block of {b} on {n} unknowns; need 0 < k < b and 3·b ≤ n")
    apply = operator(matvec, precond)

    def finish(X, AX, theta):
        R = AX - theta[None, :] * X
        res = jnp.linalg.norm(R, axis=0)
        err = error_bounds(theta, res)
        return R, res, err, jnp.all(err[:k] <= rtol * jnp.abs(theta[:k]))

    # The block is held as columns (n × b) inside, X0's rows transposed: XLA's CPU products
    # of tall blocks (Gram matrices, combinations), the tracker's linear algebra, took about
    # half the time on columns that they took on rows. On n = 80 810 (cohen-scale-quick's
    # network), the operator aside, k = 5: 12.0 → 7.0 ms an iteration (k = 1: 2.4 → 2.0);
    # on its GD rows, hessian_top's wall 1.09 → 0.95 of the rows' GD steps, its CPU 0.98 →
    # 0.96 (the same products; the linear algebra runs on both cores). One SVQB pass: the
    # start block is a warm start's orthonormal Ritz vectors or a random block (condition
    # ≈ 1 for b ≪ n), orthonormal to rounding after one.
    X = _orthonormal(X0.T)
    # the start's products in batches of two (vmapped): for the top eigenvalue's block of two,
    # 0.86× the CPU of two in a loop on cohen-scale-quick's network; a batch of seven took 1.3×
    AX = jax.lax.map(apply, X.T, batch_size=2).T
    theta, C = _ritz(X.T @ AX, b, jnp.zeros(b, bool))
    X, AX = X @ C, AX @ C
    R, res, err, done = finish(X, AX, theta)
    # [X, P] and their products are carried as one block each (P not yet formed: zero
    # columns), the basis that W is orthogonalised against without a copy
    XP, AXP = jnp.zeros((n, b + e), X.dtype).at[:, :b].set(X), jnp.zeros((n, b + e), X.dtype).at[:, :b].set(AX)
    # the projected operator on [X, P] (P not yet formed: zero); each iteration computes only
    # the rows of its new directions W (Wᵀ A S: e × (b + 2e) instead of the whole Gram matrix,
    # 0.3× the reads) and carries [X, P]'s block to the next in the coefficient space, where
    # X = S C and P = S D give [X, P]ᵀ A [X, P] = [C D]ᵀ H [C D]
    HXP = jnp.zeros((b + e, b + e), X.dtype).at[jnp.arange(b), jnp.arange(b)].set(theta)

    def more(c):
        it, *_, done, _ = c
        return (it < max_iters) & ~done

    def body(c):
        it, XP, AXP, HXP, has_p, theta, R, res, err, done, taken = c
        # soft locking: a tracked column already within rtol stays in the Rayleigh–Ritz basis
        # but adds no residual and takes no product (its zero column is a dropped direction);
        # the stop is still checked on all k after every step
        want = jnp.concatenate([err[:k] > rtol * jnp.abs(theta[:k]), jnp.ones(e - k, bool)])
        W, real = _expansion(jnp.where(want[None, :], R[:, :e], 0.0), XP)
        AW = _some(apply, W, real)
        S, AS = jnp.concatenate([XP, W], axis=1), jnp.concatenate([AXP, AW], axis=1)
        HW = W.T @ AS                                     # (e, b + 2e): W's rows of Sᵀ A S
        H = jnp.zeros((b + 2 * e, b + 2 * e), XP.dtype).at[:b + e, :b + e].set(HXP)
        H = H.at[b + e:].set(HW).at[:, b + e:].set(HW.T)
        invalid = jnp.concatenate([jnp.zeros(b, bool), jnp.full(e, ~has_p), ~real])
        theta, C = _ritz(H, b, invalid)
        # P: the part of the new tracked vectors outside the old X, orthonormalised against
        # the new block in the coefficient space (S is orthonormal), so that it costs no product
        D = C[:, :e].at[:b].set(0.0)
        D = _orth(_project_out(D, C))
        D = _orth(_project_out(D, C))
        CD = jnp.concatenate([C, D], axis=1)
        H = (H + H.T) / 2
        HXP = CD.T @ H @ CD
        XP, AXP = S @ CD, AS @ CD                         # one product of tall blocks for X and P
        R, res, err, done = finish(XP[:, :b], AXP[:, :b], theta)
        return it + 1, XP, AXP, HXP, jnp.asarray(True), theta, R, res, err, done, taken + jnp.sum(real, dtype=jnp.int32)

    it, XP, _, _, _, theta, R, res, err, done, taken = jax.lax.while_loop(
        more, body, (jnp.zeros((), jnp.int32), XP, AXP, HXP, jnp.asarray(False), theta, R, res, err, done,
                     jnp.asarray(b, jnp.int32)))
    return Eigen(values=theta, vectors=XP[:, :b].T, residuals=res, errors=err, products=taken, iterations=it,
                 converged=done)


def lanczos_quadrature(matvec, v: jax.Array, steps: int) -> tuple[jax.Array, jax.Array]:
    """Gauss quadrature of the spectral measure of `matvec` seen from the unit vector v/‖v‖:
    `steps` Lanczos steps with full re-orthogonalisation; the nodes are the eigenvalues of the
    tridiagonal matrix T and the weights the squares of their eigenvectors' first components
    (they sum to 1). Σ w θ^j = vᵀAʲv/‖v‖² exactly for j < 2·steps. A Krylov space that becomes
    invariant early leaves β = 0 and decoupled trailing nodes of weight 0."""
    n = v.shape[0]
    tiny = jnp.finfo(v.dtype).eps
    Q = jnp.zeros((steps + 1, n), v.dtype).at[0].set(v / jnp.linalg.norm(v))

    def body(i, c):
        Q, alpha, beta, scale = c
        q = Q[i]
        w = matvec(q)
        a = q @ w
        w = w - Q.T @ (Q @ w)          # rows past i are zero
        w = w - Q.T @ (Q @ w)
        b = jnp.linalg.norm(w)
        scale = jnp.maximum(scale, jnp.abs(a) + b)
        ok = b > 100 * tiny * scale
        Q = Q.at[i + 1].set(jnp.where(ok, w / jnp.where(ok, b, 1.0), 0.0))
        return Q, alpha.at[i].set(a), beta.at[i].set(jnp.where(ok, b, 0.0)), scale

    zeros = jnp.zeros(steps, v.dtype)
    _, alpha, beta, _ = jax.lax.fori_loop(0, steps, body, (Q, zeros, zeros, jnp.zeros((), v.dtype)))
    theta, S = jnp.linalg.eigh(jnp.diag(alpha) + jnp.diag(beta[:-1], 1) + jnp.diag(beta[:-1], -1))
    return theta, S[0] ** 2


def spectral_density(matvec, n: int, dtype, probes: int, steps: int, key: jax.Array,
                     pairs: tuple[jax.Array, jax.Array] | None = None) -> tuple[jax.Array, jax.Array]:
    """Stochastic Lanczos quadrature (Ghorbani, Krishnan & Xiao 2019; PyHessian): nodes and
    weights (probes × steps) from `probes` Rademacher vectors drawn from `key`, such that
    Σ w δ(x − θ) (all probes) estimates the spectral density (1/n) Σ_i δ(x − λ_i): its moments
    Σ w θʲ are Hutchinson estimates of tr(Aʲ)/n.

    `pairs` = (values (b,), orthonormal vectors (b, n)) of converged top eigenpairs deflates
    them: they enter as nodes of weight 1/n each (the first column, a row of its own), and the
    probes (projected off them) see only the operator on their complement. The estimate's
    variance is then that of the rest of the spectrum: without it a few outliers (a trained
    network's Hessian) leave Hutchinson's moments tens of per cent off at 8 probes."""
    V = jax.random.rademacher(key, (probes, n), dtype)
    if pairs is None:
        nodes, weights = jax.lax.map(lambda v: lanczos_quadrature(matvec, v, steps), V)
        return nodes, weights / probes
    values, U = pairs
    b = values.shape[0]
    if b > probes:
        raise ValueError(f"spectral_density: {b} deflated pairs need at most {probes} probes (a node each)")

    def project(v):
        return v - U.T @ (U @ v)

    nodes, weights = jax.lax.map(lambda v: lanczos_quadrature(lambda x: project(matvec(project(x))), project(v),
                                                              steps), V)
    outliers = jnp.zeros((probes, 1), dtype).at[:b, 0].set(values)
    share = jnp.zeros((probes, 1), dtype).at[:b, 0].set(1.0 / n)
    return (jnp.concatenate([outliers, nodes], axis=1),
            jnp.concatenate([share, weights * (n - b) / (n * probes)], axis=1))


def broadened(nodes: jax.Array, weights: jax.Array, grid: jax.Array, sigma: jax.Array) -> jax.Array:
    """The quadrature's density on `grid`, each node a Gaussian of width `sigma` (it
    integrates to Σ w = 1 over the real line)."""
    z = (grid[:, None] - nodes.reshape(-1)[None, :]) / sigma
    dens = jnp.exp(-z ** 2 / 2) / (sigma * jnp.sqrt(2 * jnp.pi))
    return dens @ weights.reshape(-1)
