"""The central flow of GD at step η (Cohen, Damian, Talwalkar, Kolter, Lee, ICLR 2025): the
path GD's time average follows at the edge of stability, integrated under error control.
RMSProp's central flow is the same field and solver handed RMSProp's stable flow as `form`:
the state is then (w, ν), the tracked matrix D^{-1/2}∇²L̃D^{-1/2} (D = √ν + ε) and the margins
move with ν too (`flowsim.integrate.central_rmsprop` derives what changes); the rest of this
docstring speaks of GD's.

With L̃ = rate·L (GD on L moves W ← W − η·rate·∇L, i.e. GD on L̃ with step η) and flowsim's
time t = kη,

    dW/dt = −∇L̃(W) − ½ ∇_W⟨∇²L̃(W), Σ⟩,   Σ = U X Uᵀ, X ⪰ 0 (k×k),

U the top k eigenvectors of ∇²L̃ (λ descending). With g_ij = ∇_W(u_iᵀ ∇²L̃ u_j) (u held
fixed: third derivatives, from nested jvp/grad), the stability margins S = 2/η − UᵀHU move as
dS/dt = α + ½ β[X] with α_ij = ⟨g_ij, ∇L̃⟩ and β_ijab = ⟨g_ij, g_ab⟩. X solves the
complementarity problem (`flowsim.integrate.sdcp`)

    X ⪰ 0,   Y = κ S + α + ½ β[X] ⪰ 0,   ⟨X, Y⟩ = 0:

while a direction is held (X > 0 on it) its margin obeys dS/dt = −κS, so it relaxes onto
2/η at rate κ, and a direction with S > 0 that is not rising faster than κS is free. κ → ∞ is
the paper's continuous-time problem (S ≥ 0, dS/dt ⪰ 0 on the held directions); a finite κ
keeps the field a function of W alone (no state beyond W) and absorbs the integration's
drift off 2/η, which the κ → ∞ problem lets accumulate. The published codes have the same
relaxation in discrete form: their substep dt enters the problem as α + S/dt (κ = 1/dt).
Here κ = 1/η: a margin closes over one GD step (`RELAX_STEPS`).
Directions whose ηλ/2 is below `threshold` are taken as free (no third derivatives are
computed for them): below the edge of stability X = 0 and the field is the gradient flow's.
Above it that is a choice, not an identity: with κ finite a direction beneath the edge can
still couple into the problem of the held ones (through the off-diagonal entries of α and β),
so leaving it out moves the field a little. Measured by bench/bench_central_threshold.py: on
central-mlp (one held, the next at ηλ/2 = 0.44) 0.9 instead of 0.4 moved the weights by
1.2e-5 of |W| over 40 GD steps for 100 third-derivative products instead of 270; on
central-cohen-scale at η = 0.25 (two held, the next at 0.91–0.95) 0.97 instead of 0.9 by
3.8e-6 over 16, for 135 instead of 240 and 417 Hessian-vector products instead of 541.

Predicted time-averaged loss: L + ½⟨∇²L̃, Σ⟩/rate = L + ½ Σ_i λ_i X_ii / rate.

Integration: ROCK4 (`flowsim.integrate.rock4`, the method of central-mlp's leg: a method that
`steps_at_given_rho`) or an explicit Runge–Kutta method of Diffrax (`inner`) on this field,
under flowsim's PID control.
The eigenvectors are solver state: each evaluation starts the eigen-tracking (`track`) from
the last accepted points' U extrapolated to its time (`WarmStart`), so a checkpoint holds
them and a resumed run is the same computation. The vectors at t = 0 are tracked from random
ones, every column converged (`cold`). ROCK4's step needs ρ, the spectral radius of the
field's Jacobian: it is taken from the last accepted point (`spectral_bound`), not from power
iteration through the field. Its inner stages track to `STAGE_TRACK_TOL`, its end point (the
next step's f(y0) and warm start) to `END_TRACK_TOL`, the certificate at a checkpoint to
`TRACK_TOL`; each evaluation's products are counted as spent.
Each evaluation tracks only the block that matters (`WarmStart.columns`): a step's inner
stages the candidates alone (below the edge none: the field is −∇L̃ at a gradient's price),
its end point the candidates and one guard; the certificate at a checkpoint tracks all k.
An inner stage starts from its third-derivative products (`from_start` in `central_point`):
each linearises w ↦ ∇²L̃(w)u_j, whose value is the Hessian-vector product H·u_j, so
Rayleigh–Ritz on the warm start costs nothing, and where that start is converged the stage
spends its m(m+1)/2 third-derivative products and no Hessian-vector product.
Measured on central-mlp (bench/results/central-cost.md, `python bench/bench_central.py
--cost`): ROCK4 at rtol 1e-5 with PI control 0.3/0.3 costs 5.39 gradient-equivalents
(gradients + HVPs + third-derivative products) per GD step, 2.18 + 1.42 + 1.79 (every
column tracked at every evaluation, by block steepest descent, events located to 1e-6·η:
25.8 = 2.38 + 21.4 + 1.98), own error 7.7e-6 (‖Δθ‖ / ‖θ_ref − θ0‖ at rows every 100 GD
steps, against rtol 1e-8); Tsit5 at rtol 1e-6 cost 61.4 with every column tracked (its
explicit step held by stability: h·2/η inside its interval of 3.5). On central-scale
(80 810 parameters, two directions held by the end; rtol 3e-6) 4.52 and 6.61 at η = 0.04 and
0.05 (6.33 and 9.81 before the inner stages took their eigenpairs from their third-derivative
products, 4.80 and 7.65 before the end points' guards started on the line: `WarmStart.at`),
own error 5.2e-6 and 7.3e-6 relative to the weights (bench/results/central-cost-central-scale-*.md).
The field is continuous but has a kink where the set of
held directions (the rank of X) changes; such a change inside a step is an event: the step is
rejected (its error reported as huge, so the controller shrinks it by its factormin) until
the step that holds the change is no longer than `EVENT_TOL`·η, and then accepted and counted
(`events`). The event is thus located to `EVENT_TOL`·η in time (a hundredth of a GD step),
not stepped over; the located step is still under error control.
Measured on the valley of tests/test_central.py (one event, the onset), with location to
1e-6·η: at rtol 1e-6 and 1e-8 the located run ends 3.5e-7 and 8.8e-10 from the closed form at
t = 12, in 77 and 98 steps (33 and 31 rejected); with location switched off, 3.5e-7 and
8.2e-10 in 29 and 65 steps. The relaxed field is continuous across the event (only its
derivative jumps), so the error control alone already resolves it there: the location buys
the event's time, not accuracy, and each factor of 5 in it costs a rejected try. On
central-scale at η = 0.05 (two events; rock4, rtol 1e-5) locating to 1e-2·η instead of 1e-6·η
cut the rejected tries from 38 to 17 and the cost from 10.0 to 8.9 gradient-equivalents per GD
step; its rows lie 1.14e-4 (relative to the displacement) from those of the run that located
to 1e-6·η with the tracking before LOBPCG, and 1.08e-4 with LOBPCG alone. What is left of an
event's cost is the arrival itself: the margin closing at rate κ = 1/η holds ROCK4's steps to
about η/3 for a few GD steps (23 accepted steps in the 8 GD steps of the second arrival).
"""

from typing import ClassVar, NamedTuple

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from ..nn.problem import Params, Problem
from . import central_rmsprop, sdcp
from .solver import AbstractFlowSolver

# A held margin relaxes onto 2/η over this many GD steps (κ = 1/(RELAX_STEPS·η)).
RELAX_STEPS = 1.0
# The eigen-tracking's tolerance: an eigenpair that matters (`track`) is converged when its
# residual ‖Hu − λu‖ is below this share of the block's largest |λ|. The eigenvalues are then
# good to about (1e-6 λ)²/gap. On central-mlp (bench/bench_central.py, tsit5 at rtol 1e-6,
# linear warm start) the warm-started `track` spends 12.2 HVPs per evaluation (k = 5:
# Rayleigh–Ritz on the start and 1.4 block steps on average, then block steepest descent:
# `track` is LOBPCG since) against jax's LOBPCG's 115 from the last accepted vectors, with the
# same tracking figures.
TRACK_TOL = 1e-6
# The columns that cannot reach the edge (λ + ‖r‖ < 2·threshold/η) are converged to this share
# instead: enough to keep the block on the top eigenvectors (`track`). On central-mlp at
# η = 0.05 up to t = 20 (the top eigenvalue rising from 4.6 to 20.5 beneath the edge 36), the
# top tracked eigenvalue is then within 1e-4 of the dense Hessian's (1e-2: 7e-3; 1e-4: 8e-7)
# for 11 HVPs per evaluation (1e-2: 8; 1e-4: 24; every column to TRACK_TOL: 63).
GUARD_TOL = 1e-3
# ROCK4's inner stages (not its end point) track to this: their eigenvectors enter only that
# step, and the warm start (`WarmStart`) is then mostly good enough for Rayleigh–Ritz alone.
# On central-mlp (rock4, rtol 1e-6, steps ended on each matched time): HVPs per evaluation 8.5
# → 5.9, cost per GD step 32.7 → 25.1, own error at step 600 7.3e-7 → 1.1e-6
# (bench/results/central.md, variants).
STAGE_TRACK_TOL = 1e-4
# A step's end point (the next step's f(y0) and warm start; the certificate at a row tracks to
# TRACK_TOL) tracks its candidates to this. On central-scale at η = 0.04 (rock4, rtol 3e-6, 1 000
# GD steps) 1e-5 instead of 1e-6 cut the products per GD step from 5.03 to 4.78 and left the
# weights at every 100th step where they were to 3 digits (4.72e-5 of the displacement from the
# rtol-1e-8 run): the tracking's error is far beneath the step's there; 1e-4 cost 4.90 (the next
# stages' warm starts, extrapolated from it, fall back to `track` more often).
END_TRACK_TOL = 1e-5
# The block an evaluation tracks: the candidates (ηλ/2 ≥ threshold at the last accepted point)
# and this many guards beneath them, at a step's inner stages and at its end point
# (`WarmStart.columns` says why the stages need none); max_eigen bounds the block. A guard is
# converged to GUARD_TOL and kept out of the complementarity problem (`track`, `central_point`):
# it only tells when the block must grow; where the candidates fill max_eigen there is none
# (compare's saturated-block note then says so).
STAGE_GUARDS = 0
END_GUARDS = 1
# A conjugate direction (`_conjugate`) is kept while its part off span[U, R] has at least this
# eigenvalue in the Gram matrix of the unit directions: its image, carried as combinations of
# earlier products, then has at most 1e5× their rounding.
CONJUGATE_FLOOR = 1e-10
# Block steps at most per evaluation (TRACK_ITERATIONS_INIT: from the random vectors at t = 0).
TRACK_ITERATIONS = 50
TRACK_ITERATIONS_INIT = 500
# Models this small (n ≤ DENSE·k; `track`'s basis [U, R, P] needs n ≥ 3k) form the Hessian
# and use eigh.
DENSE = 5
# An accepted step that holds a change of the held set is at most this many GD steps long.
EVENT_TOL = 1e-2
# An eigenvalue of X above this share of X's largest (and above ZERO_X) counts as held.
RANK_SHARE = 1e-8
# A held direction has arrived at the edge (series `central_held`) once |ηλ/2 − 1| ≤ this.
# The relaxation (κ = 1/η) holds a direction while its margin would close within a GD step,
# so X turns positive before the eigenvalue reaches 2/η, and the margin then shrinks by e per
# GD step. On central-mlp (rows every GD step): X > 0 from step 194 (margin 2.9e-3), GD's
# sharpness at 2/η from step 197, the margin 1.5e-4 at step 197 and 5.5e-5 at step 198 (the
# arrival), then within the integration's 8e-7 of 2/η from step 203 on (rtol 1e-5).
ARRIVAL_TOL = 1e-4
# ROCK4: ρ, the spectral radius of the field's Jacobian, is this factor times its bound from
# the last accepted point (`spectral_bound`), as rock4's own power-iteration estimate is.
RHO_SAFETY = 1.2
# The error a step across an event reports: large and finite (a non-finite error is counted
# by FlowIntegrator as a blow-up).
_EVENT_ERROR = 1e30


class CentralPoint(NamedTuple):
    velocity: Params
    U: jax.Array        # (n, k) eigenvectors of ∇²L̃, eigenvalues descending
    lam: jax.Array      # (k,)
    X: jax.Array        # (k, k), Σ = U X Uᵀ
    held: jax.Array     # rank of X
    hvps: jax.Array     # Hessian-vector products spent (eigen-tracking)
    thirds: jax.Array   # third-derivative products spent


def initial_vectors(n: int, k: int, dtype) -> jax.Array:
    """A fixed start for the eigen-tracking (the same for every member: deterministic)."""
    return jax.random.normal(jax.random.PRNGKey(0), (n, k), dtype)


def rank(X: jax.Array) -> jax.Array:
    e = jnp.linalg.eigvalsh(X)
    return jnp.sum(e > RANK_SHARE * jnp.maximum(e[-1], 0.0) + jnp.finfo(X.dtype).tiny).astype(jnp.int32)


def _ritz(B: jax.Array, HB: jax.Array, k: int, on: jax.Array):
    """Rayleigh–Ritz on the orthonormal basis B (n, b) with HB = H·B, restricted to the columns
    `on` (b,): the top k Ritz values of span B[:, on] (descending, then values beneath them)
    and their vectors' coefficients W (b, k) in B — the vectors are B·W, their images under H
    HB·W (exact products, no new ones). The columns off `on` are decoupled and shifted beneath
    every Ritz value of the others (Gershgorin: |θ| ≤ b·max|A|), so the Ritz pairs of
    span B[:, on] come first."""
    A = B.T @ HB
    A = jnp.where(on[:, None] & on[None, :], 0.5 * (A + A.T), 0.0)
    beneath = -(A.shape[0] * jnp.max(jnp.abs(A)) + 1.0)
    theta, W = jnp.linalg.eigh(A + jnp.diag(jnp.where(on, 0.0, beneath)))
    return theta[::-1][:k], W[:, ::-1][:, :k]


def _complement(U: jax.Array, R: jax.Array) -> jax.Array:
    """An orthonormal basis of R's columns with U's span taken out (U orthonormal). Classical
    Gram–Schmidt twice, QR, and once more against U: a residual that has converged to round-off
    yields an arbitrary unit direction orthogonal to U, which Rayleigh–Ritz then ignores."""
    for _ in range(2):
        R = R - U @ (U.T @ R)
    Q = jnp.linalg.qr(R)[0]
    Q = Q - U @ (U.T @ Q)
    return jnp.linalg.qr(Q)[0]


def _conjugate(U: jax.Array, HU: jax.Array, Q: jax.Array, HQ: jax.Array, P: jax.Array, HP: jax.Array):
    """LOBPCG's conjugate directions: P's part off span[U, Q] (U, Q orthonormal, HU, HQ their
    images), orthonormalised, with its image carried along as the same combinations (no
    product). Directions that P holds no more of than `CONJUGATE_FLOOR` (in the Gram matrix
    of its unit columns) are dropped, as their images' rounding would be amplified; the
    returned mask says which columns are kept."""
    # unit columns first, so that the Gram matrix below measures what is left after projection
    # (the cancellation that amplifies the images' rounding)
    norm = jnp.linalg.norm(P, axis=0)
    unit = jnp.where(norm > 0, 1.0 / jnp.where(norm > 0, norm, 1.0), 0.0)
    P, HP = P * unit, HP * unit
    for _ in range(2):
        a, b = U.T @ P, Q.T @ P
        P, HP = P - U @ a - Q @ b, HP - HU @ a - HQ @ b
    s, V = jnp.linalg.eigh(P.T @ P)
    keep = s > CONJUGATE_FLOOR
    scale = jnp.where(keep, 1.0 / jnp.sqrt(jnp.where(keep, s, 1.0)), 0.0)
    return P @ V * scale, HP @ V * scale, keep


def masked_block(hvp):
    """`block(V, on)` = H·V on the columns `on`, zero elsewhere, one product per such column
    (one after another: a block that tracks fewer columns spends fewer products)."""
    def block(V, on):
        column = lambda vo: jax.lax.cond(vo[1], hvp, jnp.zeros_like, vo[0])
        return jax.lax.map(column, (V.T, on)).T
    return block


def _signs(U: jax.Array, U0: jax.Array) -> jax.Array:
    """±1 per column: each vector's sign as the start's, so that the tracked vectors move
    continuously (the extrapolated warm start of `CentralSolver` differences them)."""
    return jnp.where(jnp.sum(U * U0, axis=0) < 0, -1.0, 1.0)


def _converged(lam, U, HU, floor, guard, tol: float, guard_tol: float) -> jax.Array:
    """Whether no column's residual ‖Hu − λu‖ is above its tolerance (`track`): a column that
    may reach `floor` (λ + ‖r‖ ≥ floor) and is not a guard to `tol`, the others to
    `guard_tol`, each times the block's largest |λ|."""
    r = jnp.linalg.norm(HU - U * lam, axis=0)
    want = jnp.where((lam + r >= floor) & ~guard, tol, guard_tol) * jnp.max(jnp.abs(lam))
    return ~jnp.any(r > want)


def track(block, U0: jax.Array, floor, tol: float, guard_tol: float, iterations: int, columns=None, guards=0,
          HU0=None):
    """The top eigenpairs of the symmetric H (`block(V, on)` = H·V on the columns `on`) from
    the warm start U0 (n, k): Rayleigh–Ritz on span U0 (k products), then, while a column's
    residual ‖Hu − λu‖ is above its tolerance (times max|λ|), one LOBPCG step (Knyazev 2001):
    Rayleigh–Ritz on span[U, R, P], R the residuals and P the conjugate directions (the last
    step's move outside span U, `_conjugate`). k products per step: the images of U and P are
    carried as combinations of earlier products, not recomputed (jax's LOBPCG multiplies 3k
    vectors per iteration). Without P (block steepest descent, as before 2026-11-28) the steps
    were 2–2.5× as many where the next eigenvalue is close: on central-scale at η = 0.05, t = 38
    (two directions held at 2/η, the guard's eigenvalue 0.8 % above the next), from the
    vectors of 8 GD steps before, 51 products → 24 to track the held pair and a guard; on a
    random 250 × 250 Wishart matrix 102 → 48 for the top two
    (tests/test_central.py::test_track_converges_to_the_top_eigenpairs).
    A column that may reach `floor` (λ + ‖r‖ ≥ floor: by the residual bound an eigenvalue lies
    within ‖r‖ of λ) — a candidate of the edge of stability — is converged to `tol`; the others
    to the looser `guard_tol`. They must be converged too: Ritz values bound the spectrum from
    below, so a block left unconverged drifts off the top eigenvectors unnoticed and misses the
    onset. (Converging only the candidates, the tracker reported 11.1 for a top eigenvalue of
    20.5 on central-mlp at η = 0.05, t = 20: tests/test_central.py::
    test_tracking_follows_the_top_eigenvalues_beneath_the_edge.)
    `columns` (traced, 0 … k; None: k): only U0's leading `columns` are tracked, on their own
    span (the top `columns` eigenpairs when they hold the top eigenvectors' span); the others
    are returned as U0's (orthonormalised), with eigenvalue 0, at no product.
    `guards` (traced): the last this many tracked columns are guards beneath the candidates, as
    in `flowsim.observe.eigen`: converged to `guard_tol` whatever their eigenvalue. The
    candidates' convergence then depends on the gap beneath the whole block, never on the one
    between the last candidate and the first guard, which vanishes where the edge of stability
    packs eigenvalues at 2/η (on central-cohen-scale five tracked eigenvalues within 0.7 % of
    2/η, the sixth at 0.99: the tracking's products per evaluation rose from 10.5 to 47.8 with
    the guard converged as a candidate). A guard's eigenvalue, good to its residual, only says
    whether it has become a candidate (`WarmStart.columns`: the block then grows by one).
    `HU0`: U0's images, U0 then orthonormal already (the first Rayleigh–Ritz spends no product:
    `central_point`'s start from the third-derivative products).
    Returns the Ritz values (descending), vectors and the products spent."""
    k = U0.shape[1]
    active = k if columns is None else columns
    on = jnp.arange(k) < active
    guard = on & (jnp.arange(k) >= active - guards)
    if HU0 is None:
        U0q = jnp.linalg.qr(U0)[0]
        HU0, spent = block(U0q, on), jnp.sum(on)
    else:
        U0q, spent = U0, 0

    def tracked(lam, U, HU, P, HP):
        # the untracked columns keep the start's vectors (and no image, no conjugate direction)
        return (jnp.where(on, lam, 0.0), jnp.where(on, U, U0q), jnp.where(on, HU, 0.0), jnp.where(on, P, 0.0),
                jnp.where(on, HP, 0.0))

    lam, W = _ritz(U0q, HU0, k, on)
    zero = jnp.zeros_like(U0q)

    def pending(c):
        lam, U, HU, _, _, its = c
        return ~_converged(lam, U, HU, floor, guard, tol, guard_tol) & (its < iterations)

    def one(c):
        lam, U, HU, P, HP, its = c
        U_on = jnp.where(on, U, 0.0)
        Q = _complement(U_on, HU - U * lam)
        HQ = block(Q, on)
        # Q's untracked columns (arbitrary directions, without images) are not in the basis
        P, HP, P_on = _conjugate(U_on, HU, jnp.where(on, Q, 0.0), HQ, P, HP)
        B = jnp.concatenate([U, Q, P], axis=1)
        HB = jnp.concatenate([HU, HQ, HP], axis=1)
        lam, W = _ritz(B, HB, k, jnp.concatenate([on, on, P_on]))
        # the move outside span U: the next step's conjugate directions
        return (*tracked(lam, B @ W, HB @ W, B[:, k:] @ W[k:], HB[:, k:] @ W[k:]), its + 1)

    start = (*tracked(lam, U0q @ W, HU0 @ W, zero, zero), jnp.asarray(0))
    lam, U, HU, _, _, its = jax.lax.while_loop(pending, one, start)
    return lam, U * _signs(U, U0), spent + jnp.sum(on) * its


def third_products(grad, w: jax.Array, U: jax.Array, m) -> tuple[jax.Array, jax.Array]:
    """The third-derivative vectors g_ij = ∇_w(u_iᵀ∇²L̃(w)u_j) for i ≤ j < m as G (k, k, n) (g_ij
    at [i, j] and [j, i], zero beyond m), with grad = ∇L̃ and U (n, k); and H·u_j for j < m (n, k,
    zero beyond), at the price of the m(m+1)/2 products alone: one linearisation of
    w ↦ ∇²L̃(w)u_j per j, whose value is the Hessian-vector product, pulled back along each u_i."""
    n, k = U.shape

    def column(j, carry):
        G, HU = carry
        Hu, pull = jax.vjp(lambda v: jax.jvp(grad, (v,), (U[:, j],))[1], w)

        def row(i, G):
            gij = pull(U[:, i])[0]
            return G.at[i, j].set(gij).at[j, i].set(gij)

        return jax.lax.fori_loop(0, j + 1, row, G), HU.at[:, j].set(Hu)

    return jax.lax.fori_loop(0, m, column, (jnp.zeros((k, k, n), U.dtype), jnp.zeros((n, k), U.dtype)))


def central_point(problem: Problem, y, U0: jax.Array, eta, k: int, threshold: float,
                  iterations: int = TRACK_ITERATIONS, cold: bool = False, tol: float = TRACK_TOL,
                  columns=None, guards=0, most: int | None = None, form=None, from_start: bool = False) -> CentralPoint:
    """The central flow's field at the state y and everything it is made of, eigen-tracking
    started from U0 (n, k); `cold`: U0 is not a warm start (every column converged to `tol`,
    none to the guards' looser one: the vectors at t = 0 and any one-off eigen-decomposition;
    on central-scale at t = 0, k = 6, 150 products where jax's LOBPCG, which multiplies 3k
    vectors a step, and `track` after it took 408, for the same eigenvalues); `columns` (traced):
    track U0's leading columns alone (`WarmStart.columns`: a step's inner stages), None: all k;
    `guards` (traced): the last this many of them are guards (`track`), left out of the
    complementarity problem whatever their eigenvalue (the next step's block takes in one that
    has become a candidate: the threshold beneath the edge leaves it that step); `most`: at
    most this many candidates (the leading ones) enter it (`CentralField.capacity`);
    `from_start`: Rayleigh–Ritz on U0 from the third-derivative products' own Hessian-vector
    products first, `track` only where that is not converged (a ROCK4 inner stage).
    `form`: None for GD's central flow (y the weights); RMSProp's stable flow
    (`flowsim.integrate.adaptive_flows.RmspropFlow`) for RMSProp's, y = {"w", "nu"}: its
    preconditioner enters as `flowsim.integrate.central_rmsprop` derives (the module's
    docstring there); the tracked eigenpairs are then those of D^{-1/2}∇²L̃D^{-1/2}."""
    w, unravel = ravel_pytree(y if form is None else form.weights(y))
    n, dtype = w.size, w.dtype
    eta = jnp.asarray(eta, dtype)
    loss = lambda v: problem.rate * problem.loss(unravel(v))
    grad = jax.grad(loss)
    hvp = lambda v: jax.jvp(grad, (w,), (v,))[1]
    g = grad(w)
    pre = None if form is None else central_rmsprop.Preconditioned.at(form, y, g, eta)
    # the tracked operator: ∇²L̃ (GD), D^{-1/2}∇²L̃D^{-1/2} (RMSProp)
    op = hvp if pre is None else pre.symmetric(hvp)

    floor = 2 * threshold / eta
    active = k if columns is None else columns
    # the directions Σ lives on: U (GD), D^{-1/2}U (RMSProp: D-orthonormal, Uᵀ∇²L̃U = diag λ)
    directions = (lambda U: U) if pre is None else pre.directions

    def candidates(lam):
        """How many leading columns enter the complementarity problem: the candidates
        (ηλ/2 ≥ threshold), not the guards, at most `most`."""
        m = jnp.minimum(jnp.sum(eta * lam / 2 >= threshold), active - guards)
        return m if most is None else jnp.minimum(m, most)

    def thirds_at(lam, U):
        m = candidates(lam)
        return third_products(grad, w, directions(U), m)[0], jnp.asarray(m * (m + 1) // 2, jnp.int32)

    def eigenpairs():
        """(λ, U, W, G, HVPs, third-derivative products): G holds the third-derivative vectors
        of the vectors U Wᵀ (W orthogonal: the start's, rotated onto U by Rayleigh–Ritz, or I)."""
        if n <= DENSE * k:
            H = jax.vmap(op)(jnp.eye(n, dtype=dtype))
            lam, V = jnp.linalg.eigh(0.5 * (H + H.T))
            lam, U = lam[::-1][:k], V[:, ::-1][:, :k]
            G, thirds = thirds_at(lam, U)
            return lam, U, jnp.eye(k, dtype=dtype), G, jnp.int32(n), thirds
        if not from_start:
            block = masked_block(op) if columns is not None else (lambda V, on: jax.vmap(op, in_axes=1, out_axes=1)(V))
            # cold: from a start unrelated to the Hessian, every column converged to `tol`
            lam, U, hvps = track(block, U0, floor, tol, tol if cold else GUARD_TOL, iterations, columns, guards)
            G, thirds = thirds_at(lam, U)
            return lam, U, jnp.eye(k, dtype=dtype), G, jnp.asarray(hvps, jnp.int32), thirds
        # Rayleigh–Ritz on the warm start from the third-derivative products' own images (each
        # product linearises w ↦ ∇²L̃(w)u_j, whose value is H·u_j): the start costs no product
        # of its own. Where it is converged (`track` would stop there) and every column is a
        # candidate, nothing more is spent: the products stay the start's, and what is made of
        # them is rotated onto the Ritz vectors (g_ij is bilinear in the vectors); otherwise
        # `track` goes on from the Ritz vectors and the products are taken again at its own.
        on = jnp.arange(k) < active
        U0q = jnp.linalg.qr(U0)[0]
        G0, HW = third_products(grad, w, directions(U0q), active)
        HU0 = HW if pre is None else pre.symmetric_images(HW)
        lam, W = _ritz(U0q, HU0, k, on)
        W = jnp.where(on[None, :], W, jnp.eye(k, dtype=dtype))      # the untracked columns: the start's
        W = W * _signs(U0q @ W, U0)
        lam, U, HU = jnp.where(on, lam, 0.0), U0q @ W, HU0 @ W
        guard = on & (jnp.arange(k) >= active - guards)
        ready = _converged(lam, U, HU, floor, guard, tol, GUARD_TOL) & (candidates(lam) == active)
        thirds = jnp.asarray(active * (active + 1) // 2, jnp.int32)

        def tracked(_):
            lam_t, U_t, spent = track(masked_block(op), U, floor, tol, GUARD_TOL, iterations, active, guards, HU)
            G, again = thirds_at(lam_t, U_t)
            return lam_t, U_t, jnp.eye(k, dtype=dtype), G, jnp.asarray(spent, jnp.int32), thirds + again

        return jax.lax.cond(ready, lambda _: (lam, U, W, G0, jnp.int32(0), thirds), tracked, None)

    def held():
        """(λ, U, X, ⟨X, g⟩ = Σ_ab X_ab g_ab, HVPs, third-derivative products)."""
        lam, U, W, G, hvps, thirds = eigenpairs()
        m = candidates(lam)
        kappa = 1.0 / (RELAX_STEPS * eta)
        # a column left out (a guard, or beyond `most`) is free: its margin is held positive, as
        # it has no third derivative through which X could close it (a guard past the threshold
        # joins the candidates at the next step)
        margin = kappa * (2.0 / eta - lam)
        margin = jnp.where(jnp.arange(k) < m, margin, jnp.maximum(margin, kappa * (1.0 - threshold) * 2.0 / eta))
        # the margins' rate dS/dt = α + ½β[X] from the third-derivative vectors (RMSProp: of
        # g/√D, `central_rmsprop`), formed in G's basis and rotated onto U's
        alpha = W.T @ (G @ (g if pre is None else g / pre.D)) @ W
        T = sdcp.rotate(sdcp.gram_operator(G, m, None if pre is None else 1.0 / pre.D), W)
        if pre is not None:
            alpha_own, T_own = pre.stability(directions(U), lam, jnp.arange(k) < m)
            alpha, T = alpha + alpha_own, T + T_own
        X = sdcp.solve(jnp.diag(margin) + alpha, T)
        return lam, U, X, jnp.einsum("ab,abn->n", W @ X @ W.T, G), hvps, thirds

    def free():
        # no column tracked (a stage beneath the edge): X = 0, the stable flow's field, at no product
        U = jnp.linalg.qr(U0)[0]
        U = U * _signs(U, U0)
        zero = jnp.zeros((), jnp.int32)
        return jnp.zeros(k, dtype), U, jnp.zeros((k, k), dtype), jnp.zeros_like(w), zero, zero

    if columns is None:
        lam, U, X, pull, hvps, thirds = held()
    else:
        lam, U, X, pull, hvps, thirds = jax.lax.cond(active > 0, lambda _: held(), lambda _: free(), None)
    v = -g - 0.5 * pull
    velocity = unravel(v) if pre is None else pre.velocity(y, v, directions(U), lam, X, unravel)
    return CentralPoint(velocity=velocity, U=U, lam=lam, X=X, held=rank(X), hvps=hvps, thirds=thirds)


def predicted_loss(problem: Problem, w: Params, point: CentralPoint) -> jax.Array:
    """The method's time-averaged loss as the central flow predicts it, at the weights w:
    L + ½⟨∇²L, Σ⟩ (Σ's directions diagonalise ∇²L̃ to λ, GD's and RMSProp's alike)."""
    return problem.loss(w) + 0.5 * jnp.sum(point.lam * jnp.diag(point.X)) / problem.rate


class WarmStart(eqx.Module):
    """The eigen-tracking's start at any time: the vectors U tracked at the last accepted
    step's end t, extrapolated by the quadratic through the last three accepted points
    (Newton's form: divided differences D1, D2; t_before the point before t). Within a step
    the stages then start O(h³) from their eigenvectors instead of O(h) (the last vectors)
    or O(h²) (the line through two points), and the block steps that correct them are fewer
    (`track` orthonormalises the start). On central-mlp (bench/bench_central.py, rock4 at
    rtol 1e-6, every stage tracked to 1e-6, steps ended on each matched time): HVPs per
    evaluation 9.9 with the line, 8.5 with the quadratic.
    Its eigenvalues `lam` (at t) size the block a step's inner stages track (`columns`)."""
    U: jax.Array
    lam: jax.Array          # (k,) the eigenvalues at t; +inf where unknown (every column is then tracked)
    D1: jax.Array           # (U(t) − U(t_before)) / (t − t_before); zero until a step is accepted
    D2: jax.Array           # the second divided difference; zero until two are
    t: jax.Array
    t_before: jax.Array
    points: jax.Array       # accepted points known, at most 3

    @classmethod
    def first(cls, U: jax.Array, t, lam: jax.Array | None = None) -> "WarmStart":
        t = jnp.asarray(t, U.dtype)
        lam = jnp.full(U.shape[1], jnp.inf, U.dtype) if lam is None else lam
        return cls(U=U, lam=lam, D1=jnp.zeros_like(U), D2=jnp.zeros_like(U), t=t, t_before=t,
                   points=jnp.asarray(1, jnp.int32))

    def at(self, t, linear_from=None) -> jax.Array:
        """The start at t; the columns from `linear_from` (traced) on — a step end point's
        guards — extrapolated along the line alone. A guard is converged only to GUARD_TOL,
        and the quadratic's divided differences amplify that error (at equal steps its
        weights are 3, −3, 1): on central-scale at η = 0.05 (to GD step 400) the guard's start
        had a residual of 2e-3–3e-2 of max|λ| at most end points, above GUARD_TOL, so that each
        one paid block steps for it; along the line mostly 1e-4–1e-3, and the products per GD
        step over the whole leg fell from 7.65 to 6.61. The candidates, converged 100× tighter,
        keep the quadratic: along the line their residuals rose to 1.3e-4 where the eigenvalues
        move (3e-5 by the quadratic)."""
        line = self.U + (t - self.t) * self.D1
        quadratic = line + (t - self.t) * (t - self.t_before) * self.D2
        if linear_from is None:
            return quadratic
        return jnp.where(jnp.arange(self.U.shape[1]) >= linear_from, line, quadratic)

    def columns(self, eta, threshold: float, guards: int) -> jax.Array:
        """The leading columns an evaluation within the next step tracks: the candidates at t
        (ηλ/2 ≥ threshold) and `guards` more. The inner stages need no guard: within a step
        whose held set does not change (a step where it does is rejected until it is
        `EVENT_TOL`·η short), the field is a function of the candidates alone — a direction
        that is not held has X = 0 on it, and the complementarity problem without it has the
        same solution — and below the edge, without candidates, it is −∇L̃ at no product. The
        step's end point tracks one guard beneath the candidates, which becomes a candidate
        (and the block grows) when its eigenvalue reaches the threshold.
        On central-mlp (rock4 at rtol 1e-5, k = 5, one direction held from step 200) the HVPs
        per GD step fall from 21.4 (all five columns at every evaluation) to 3.64, 1.53 per
        evaluation (bench/results/central-cost.md)."""
        return jnp.minimum(self.candidates(eta, threshold) + guards, self.U.shape[1])

    def candidates(self, eta, threshold: float) -> jax.Array:
        """The columns at t whose ηλ/2 is at `threshold` or above."""
        return jnp.sum(eta * self.lam / 2 >= threshold)

    def next(self, U: jax.Array, lam: jax.Array, t) -> "WarmStart":
        """The start after an accepted step ending at t with vectors U and eigenvalues lam."""
        t = jnp.asarray(t, U.dtype)
        D1 = (U - self.U) / (t - self.t)
        D2 = jnp.where(self.points >= 2, (D1 - self.D1) / (t - self.t_before), 0.0)
        return WarmStart(U=U, lam=lam, D1=D1, D2=D2, t=t, t_before=self.t, points=jnp.minimum(self.points + 1, 3))


class CentralField(eqx.Module):
    """The vector field; `args` is (problem, start): the warm start of the eigen-tracking
    (a `WarmStart`).
    η is an array leaf, so central flows of different η share one compilation.
    `form`: None for GD's central flow (the state is the weights); RMSProp's stable flow
    (`flowsim.integrate.adaptive_flows.RmspropFlow`) for RMSProp's, in {"w", "nu"}."""

    eta: jax.Array
    k: int = eqx.field(static=True)
    threshold: float = eqx.field(static=True)
    form: object = None

    def weights(self, y) -> Params:
        return y if self.form is None else self.form.weights(y)

    @property
    def capacity(self) -> int:
        """The tracked block's columns: the k (max_eigen) that may be held and `END_GUARDS`
        beneath them, so that a block whose k columns are all candidates still has a guard
        (its eigenvalue converged to GUARD_TOL, `track`): the k-th candidate never waits on the
        gap beneath it, and a direction beyond the k is watched. The block an evaluation
        tracks grows and shrinks within it (`WarmStart.columns`)."""
        return self.k + END_GUARDS

    def __call__(self, t, y, args) -> Params:
        problem, start = args
        return central_point(problem, y, start.at(t), self.eta, self.capacity, self.threshold,
                             columns=start.columns(self.eta, self.threshold, STAGE_GUARDS), most=self.k,
                             form=self.form).velocity


def spectral_bound(point: CentralPoint, eta, threshold: float) -> jax.Array:
    """The spectral radius of the central field's Jacobian as the point tells it (no product
    of its own, no derivative of the tracking), for ROCK4's ρ (× `RHO_SAFETY`): the gradient
    flow's part −∇²L̃ has radius λ1, and on a held direction the field is the gradient flow
    projected off g (the margin's gradient) plus the relaxation −κ along it: max(λ1, κ). λ1 is
    converged to TRACK_TOL only where it matters (`track`: λ1 + ‖r‖ ≥ 2·threshold/η), below
    that to GUARD_TOL. The floor stands for it beneath the edge (the measured configuration,
    from before the guard tolerance): ρ is then an overestimate there, which costs ROCK4 stages,
    not stability.
    Not a bound in general: the held term −½⟨∇_W ∇²L̃, Σ⟩ adds ½X∇²λ (λ's curvature in W,
    which includes the eigenvector's rotation, ~X (∂H)²/gap), left to the safety factor.
    Measured: on central-mlp, power iteration on finite-difference Jacobian-vector products
    gives 16.3–16.9 after the onset where this gives 20 (bench/bench_central.py); on the valley
    of tests/test_central.py the exact radius on the held flow is 1.05 × this."""
    eta = jnp.asarray(eta, point.lam.dtype)
    return jnp.maximum(jnp.maximum(point.lam[0], 2 * threshold / eta), 1.0 / (RELAX_STEPS * eta))


class Rock4Inner(eqx.Module):
    """ROCK4's own state when it steps the central flow: f at the last accepted point and ρ
    from it (`spectral_bound` × `RHO_SAFETY`)."""
    f0: Params
    rho: jax.Array


class CentralState(eqx.Module):
    inner: object           # the Runge–Kutta method's own state (ROCK4: a `Rock4Inner`)
    start: WarmStart        # the eigenvectors at the last accepted step's end, and their extrapolation
    held: jax.Array         # rank of X there
    events: jax.Array       # changes of the held set since t = 0 (accepted steps holding one)
    spent: jax.Array        # (3,) field evaluations, HVPs, third-derivative products since t = 0, tries included
    tried: jax.Array        # (3,) the same for the last try alone


class CentralSolver(AbstractFlowSolver):
    """A flow method stepping `CentralField`, with the eigenvectors, the held set and the cost
    counters in its state (see the module's docstring for the events): a Diffrax explicit
    Runge–Kutta method (`flowsim.integrate.runge_kutta`), or a stabilised one that
    `steps_at_given_rho` (ROCK4).
    The stabilised method takes ρ from the last accepted point (`spectral_bound`), not from
    power iteration through the field (which would differentiate the tracking and the
    complementarity solver), and passes each stage its abscissa, from which the stage's warm
    start is extrapolated as a Runge–Kutta stage's is; its cost is counted stage by stage."""

    inner: AbstractFlowSolver    # a stabilised one: only its step's arithmetic is used (`step_at_rho`)
    field: CentralField
    evals_per_step: int = eqx.field(static=True)    # Runge–Kutta: evaluations per try; ROCK4: 0 (per try)

    term_structure: ClassVar = dfx.AbstractTerm

    @property
    def certificate_series(self) -> tuple[str, ...]:
        return certificate_names(self.field.k)

    @property
    def stabilised(self) -> bool:
        """Stepped at the ρ of the tracked spectrum (ROCK4), not by a Runge–Kutta method."""
        return self.inner.steps_at_given_rho

    @property
    def interpolation_cls(self):
        return self.inner.interpolation_cls

    @property
    def tableau(self):
        return self.inner.tableau

    def order(self, terms) -> int:
        return self.inner.order(terms)

    def error_order(self, terms) -> int:
        return self.inner.error_order(terms)

    def max_step(self, state: CentralState) -> jax.Array | None:
        """ROCK4: the longest step it keeps stable at ρ; no bound otherwise."""
        if not self.stabilised:
            return None
        return self.inner.max_step_at_rho(state.inner.rho)

    @property
    def init_evals(self) -> int:
        # the first step's size (2 evaluations), the state's first point, and a Runge–Kutta
        # method's FSAL stage (ROCK4 takes f(y0) from the first point)
        return 3 if self.stabilised else 4

    def cost(self, state: CentralState):
        # field evaluations; "hvps" holds the try's Hessian-vector and third-derivative products
        return state.tried[0], state.tried[1] + state.tried[2], jnp.asarray(self.stabilised)

    def held(self, dense: dict) -> jax.Array:
        return self.inner.held(dense)

    def certificate(self, problem: Problem, y: Params, state: CentralState) -> dict[str, jax.Array]:
        return certificate(self, problem, y, state)

    def _start(self, y0) -> jax.Array:
        w, _ = ravel_pytree(self.field.weights(y0))
        return initial_vectors(w.size, self.field.capacity, w.dtype)

    def _rock4_inner(self, point: CentralPoint) -> Rock4Inner:
        return Rock4Inner(f0=point.velocity,
                          rho=RHO_SAFETY * spectral_bound(point, self.field.eta, self.field.threshold))

    def func(self, terms, t0, y0, args):
        # Diffrax's first step-size search calls this with the problem alone: it is given the
        # stable flow's field (−∇L̃ for GD), no column tracked, as the vectors are still random
        # here and tracking them from scratch (twice) would cost more than the search is worth
        U = self._start(y0)
        return terms.vf(t0, y0, (args, WarmStart.first(U, t0, jnp.full(U.shape[1], -jnp.inf, U.dtype))))

    def init(self, terms, t0, t1, y0, args) -> CentralState:
        f = self.field
        point = central_point(args, y0, self._start(y0), f.eta, f.capacity, f.threshold, TRACK_ITERATIONS_INIT,
                             cold=True, most=f.k, form=f.form)
        if self.stabilised:     # f(y0) is the point's: no evaluation of its own
            inner = self._rock4_inner(point)
        else:
            inner = self.inner.init(terms, t0, t1, y0, (args, WarmStart.first(point.U, t0, point.lam)))
        zero = jnp.zeros((), jnp.int32)
        cost = _cost(1, point)
        return CentralState(inner=inner, start=WarmStart.first(point.U, t0, point.lam), held=point.held, events=zero,
                            spent=cost, tried=cost)

    def point(self, problem: Problem, y: Params, state: CentralState, t=None,
              tol: float = TRACK_TOL, guards: int | None = None, from_start: bool = False) -> CentralPoint:
        """The field's point at y: at time t, from the extrapolated warm start; without t, at
        the state's own time (from its vectors); tracked to `tol`; `guards`: only the
        candidates and this many more columns are tracked (`WarmStart.columns`), None: all k;
        the columns beyond the candidates (up to k) are guards (`track`)."""
        f = self.field
        if guards is None:
            U = state.start.U if t is None else state.start.at(t)
            return central_point(problem, y, U, f.eta, f.capacity, f.threshold, tol=tol, most=f.k, form=f.form)
        columns = state.start.columns(f.eta, f.threshold, guards)
        spare = columns - jnp.minimum(state.start.candidates(f.eta, f.threshold), f.k)
        U = state.start.U if t is None else state.start.at(t, linear_from=columns - spare)
        return central_point(problem, y, U, f.eta, f.capacity, f.threshold, tol=tol, columns=columns, guards=spare,
                             most=f.k, form=f.form, from_start=from_start)

    def _rock4_step(self, t0, t1, y0, args, state: CentralState):
        def end(t, y):
            point = self.point(args, y, state, t, END_TRACK_TOL, END_GUARDS)
            return point.velocity, _cost(1, point), point

        def field(t, y):
            point = self.point(args, y, state, t, STAGE_TRACK_TOL, STAGE_GUARDS, from_start=True)
            return point.velocity, _cost(1, point)

        y1, y_error, dense, _, point, tried, _ = self.inner.step_at_rho(field, end, t0, t1, y0, state.inner.f0,
                                                                        state.inner.rho, jnp.zeros(3, jnp.int64))
        return y1, y_error, dense, self._rock4_inner(point), point, tried, dfx.RESULTS.successful

    def step(self, terms, t0, t1, y0, args, state: CentralState, made_jump):
        if self.stabilised:
            y1, y_error, dense, inner, end, tried, result = self._rock4_step(t0, t1, y0, args, state)
        else:
            y1, y_error, dense, inner, result = self.inner.step(terms, t0, t1, y0, (args, state.start),
                                                                state.inner, made_jump)
            end = self.point(args, y1, state, t1, guards=END_GUARDS)
            # cost of the try: its stages, each paying about what the step's end paid
            tried = _cost(self.evals_per_step + 1, end)
        changed = end.held != state.held
        # a change of the held set inside a step longer than EVENT_TOL GD steps: rejected
        located = (t1 - t0) <= EVENT_TOL * self.field.eta
        y_error = jax.tree.map(lambda e: jnp.where(changed & ~located, _EVENT_ERROR, e), y_error)
        new = CentralState(inner=inner, start=state.start.next(end.U, end.lam, t1), held=end.held,
                           events=state.events + changed.astype(jnp.int32), spent=state.spent + tried, tried=tried)
        return y1, y_error, dense, new, result

    def rejected(self, committed: CentralState, tried: CentralState) -> CentralState:
        """The committed state after a rejected try: the try's cost counted, nothing else."""
        return eqx.tree_at(lambda s: s.spent, committed, tried.spent)


def _cost(evals, point: CentralPoint) -> jax.Array:
    """(evaluations, HVPs, third-derivative products) of `evals` evaluations costing what `point` did."""
    return jnp.stack([evals, evals * point.hvps, evals * point.thirds]).astype(jnp.int64)


def certificate_names(k: int) -> tuple[str, ...]:
    """The series a central flow records beside the observables: the tracked eigenvalues of
    ∇²L̃ (raw and as ηλ/2, 1 at the edge of stability), Σ's eigenvalues (descending), the
    predicted time-averaged loss, the held directions that have arrived at the edge
    (`arrived`), the events (changes of the held set, X's rank: where the hold starts, before
    the arrival), and the cost since t = 0."""
    per = [f"{name}{i + 1}" for name in ("central_eig", "central_edge", "central_sigma") for i in range(k)]
    return (*per, "predicted_loss", "central_held", "central_events",
            "central_evals", "central_hvps", "central_thirds")


def conventions(eta: float, rmsprop: bool = False) -> str:
    """The conventions of a central flow of GD (`rmsprop`: RMSProp) at step η where codes differ
    (from the JAX central-flow package's, github alex-damian/central_flows_jax), one per line:
    the archive writes them as the central leg's attribute `conventions`, `flowsim inspect` and
    `flowsim compare` print them."""
    if rmsprop:
        return _rmsprop_conventions(eta)
    return "\n".join((
        f"time: t = kη after k GD steps of η = {eta:g} (the JAX central-flow package's time is k)",
        "sharpness: λ_i, the eigenvalues of ∇²(rate·L), the Hessian of the loss GD's step η applies to; "
        "GD's `sharpness` at its iterate θ_k, the row at t = kη before the step (the package's `discrete`: at "
        "θ_k, or at the midpoint (θ_k + θ_{k+1})/2 with midpoint=True); the central flow's central_eig<i> at θ(t)",
        f"edge of stability: λ = 2/η = {2 / eta:.6g}; central_edge<i> = ηλ_i/2 is 1 there (the package's "
        "effective eigenvalue ηλ is 2 there)",
        "Σ: dθ/dt = −∇(rate·L) − ½∇⟨∇²(rate·L), Σ⟩, Σ = U X Uᵀ on the tracked eigenvectors U; central_sigma<i> "
        "are Σ's eigenvalues; the package's X is Σ/η (its tr X = Σ_i central_sigma<i>/η)",
        "predicted_loss: L + ½⟨∇²L, Σ⟩, the package's L + ½⟨UᵀHU, X⟩ (L + tr X where rate = 1 and every "
        "held eigenvalue is at 2/η)",
        f"central_held: the held directions (Σ > 0 on them) whose eigenvalue has arrived at the edge, "
        f"|ηλ_i/2 − 1| ≤ {ARRIVAL_TOL:g}; the hold starts a few GD steps earlier (central_events counts its "
        "starts and ends), while the margin still closes",
    ))


def _rmsprop_conventions(eta: float) -> str:
    return "\n".join((
        f"time: t = kη after k RMSProp steps of η = {eta:g} (the JAX central-flow package's time is k)",
        "preconditioner: D = √ν + ε, RMSProp's P = D/η; central_eig<i> are the eigenvalues of D^{-1/2}∇²(rate·L)"
        "D^{-1/2} (the preconditioned sharpness's matrix)",
        f"edge of stability: λ = 2/η = {2 / eta:.6g}; central_edge<i> = ηλ_i/2 is 1 there (the package's "
        "effective eigenvalue ηλ is 2 there)",
        "Σ: dθ/dt = −D⁻¹[∇(rate·L) + ½∇⟨∇²(rate·L), Σ⟩], Σ = U X Uᵀ with UᵀDU = I; central_sigma<i> are X's "
        "eigenvalues; the package's X is X/η",
        "ν: dν/dt = (1 − β₂)/(β₂η)·(g² + diag(HΣH) − ν), the gradient's covariance as the authors' PyTorch code (the "
        "package adds diag(Σ)), X's off-diagonal entries with weight 2 (the package's √2), ν(0) = g₀²",
        "predicted_loss: L + ½⟨∇²L, Σ⟩, the package's L + ½⟨UᵀHU, X⟩",
        f"central_held: the held directions whose eigenvalue has arrived at the edge, |ηλ_i/2 − 1| ≤ {ARRIVAL_TOL:g}",
    ))


def arrived(point: CentralPoint, eta) -> jax.Array:
    """How many held directions have arrived at the edge: X's rank, at most the tracked
    eigenvalues within ARRIVAL_TOL of 2/η (`ARRIVAL_TOL` says why the rank alone is early)."""
    at_edge = jnp.sum(jnp.abs(eta * point.lam / 2 - 1) <= ARRIVAL_TOL)
    return jnp.minimum(point.held, at_edge)


def certificate(solver: CentralSolver, problem: Problem, y: Params, state: CentralState) -> dict[str, jax.Array]:
    point = solver.point(problem, y, state)
    dtype = point.lam.dtype
    eta = solver.field.eta.astype(dtype)
    sigma = jnp.linalg.eigvalsh(point.X)[::-1]
    k = solver.field.k
    lam = point.lam[:k]     # the guard beneath the k is not recorded
    values = [*lam, *(eta * lam / 2), *sigma[:k], predicted_loss(problem, solver.field.weights(y), point),
              arrived(point, eta), state.events, *state.spent]
    return {name: jnp.asarray(v, dtype) for name, v in zip(certificate_names(k), values)}
