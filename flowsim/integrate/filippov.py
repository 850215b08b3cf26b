"""The exact gradient flow of a shallow ReLU (or leaky-ReLU) network through its kinks: an
event-driven Filippov integrator (`../shared/RELU-FILIPPOV.md` has the measurements and the
mathematics; DESIGN.md §1 the network).

With s_ji = w_j·x_i/√d and the output layer fixed, the velocity of w_j is

    ẇ_j = Σ_i b_ji D_ji x_i,   b_ji = −rate c_j (a_j · ∂L/∂f_i)/√d,   D_ji = σ'(s_ji),

and D_ji jumps (between `low` = σ' on the negative side and 1) where s_ji crosses 0.

A *mode* fixes every D: `active` says which side each pair is on, and `slide` lists the
pairs held on their surface s_ji = 0. Within a mode the field is smooth, so Dormand–Prince
5(4) steps with error control are accurate to high order (the error is held to the
tolerances in W and, relative to its size, in the loss gradient, which near a minimum W's
tolerances alone leave unresolved); the predictions use the mode's
D too (f = Σ c a D s), the smooth continuation of each branch past its kink, so that a
step straddling a kink is still a step of one smooth field. A sliding pair contributes
whatever keeps it on its surface: w_j's velocity is projected off span{x_i : i slides}
(the equivalent control; the Filippov convex hull is this one vector here, the field
being affine in the D's). The control of pair i is δ_ji = −μ_i/b_ji, μ = G⁻¹ X_S u, and
the pair slides as long as δ_ji stays within [low, 1].

Events, located on the step's dense output (the quartic of the Dormand–Prince step):
- a crossing: s_ji of a pair off its surface changes sign (sampled at 16 points of the
  step, then the first located to 2⁻⁴⁰ of the step by safeguarded Newton on the lowest
  of the crossing pairs);
- an exit: a sliding pair's δ leaves [low, 1] by the exit slack, weighted by the force the
  pair can exert (`_violation`; a safeguarded secant on the worst one, `_first_exit`, to
  1e-10 of the step), looked for up to the first crossing, the step's end or, where a
  slider's b_ji changes sign within the step (δ through a pole, `_first_pole`), the first
  sample after it.
The step is truncated at the first event (its end value read from the dense output, whose
error is of the step's order), every pair on a surface at that point is put back on it
exactly (an orthogonal correction of w_j), and the new mode is resolved node by node by
an active-set solve over the pairs on surfaces (`_resolve`): a pair slides where both
sides push into its surface (b_ji < 0 and δ within [low, 1]), otherwise it goes to the
side its velocity points to. Then stepping restarts (the first stage is evaluated again).

All of it runs in `lax.while_loop`s per segment: no Python per step or per event. A node
may slide on at most `slots` surfaces at once (the preset's key, 8 by default; the
prototype saw 4; never more than min(n, d), see `initial_mode`): more ends the member with
status `failed`, and a larger `slots` goes on. A step's cost grows as slots² per node, so
each segment is stepped with 4 slots while every node's sliders fit in them, then with 8,
and so on (`advance`).
The flow of a trained output layer, smooth activations and deeper networks are out of
scope: the loader refuses them by name.
"""

import functools
import math
from typing import ClassVar

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp

from ..status import Status
from ..activations import PIECEWISE_LINEAR
from ..problem import Params, Problem
from .base import AbstractIntegrator

SAMPLES = 16        # points of a step at which every pair's s_ji is looked at
ROOT_TOL = 2.0 ** -40   # a crossing's θ is located to this fraction of the step
EXIT_ITERATIONS = 30
# An exit is located to this fraction of the step. Its velocity is continuous there (the
# control reaches its bound), so an exit found Δθ late moves W by O(Δθ²): far below the
# tolerances at 1e-10, where a tighter bracket only spends iterations at the round-off of
# the controls.
EXIT_TOL = 1e-10
# An exit is an event once a control is this far outside [low, 1]: far above the round-off
# in which the event's two computations of δ (on the step, and in `_resolve` after the
# pairs are put back on their surfaces) differ, so that the resolution always sees the
# exit it was called for (a control on the bound to round-off would be an exit at every
# step, and time would stand still), and far below the tolerances' effect on W.
EXIT_SLACK = 1e-9
NOISE_SLACK = 1e3   # the slack per unit of the controls' relative round-off (`_exit_slack`)
EVENT_KINDS = ("crossings", "entries", "exits")
_TINY = 1e-300


class Mode(eqx.Module):
    active: jax.Array     # (m, n) bool: the side of each pair off its surface (s_ji > 0)
    slide: jax.Array      # (m, slots) int32: the pairs held on s_ji = 0; n marks an empty slot
    # (m, slots, slots) the sliders' inverse Gram matrices (identity rows for empty slots),
    # made with the mode: every evaluation then projects with products, not a solve
    gram_inv: jax.Array


class FilippovState(eqx.Module):
    t: jax.Array
    y: Params
    mode: Mode
    h: jax.Array          # the next step's proposal
    solver_state: object  # Dormand–Prince's first-same-as-last stage
    jumped: jax.Array     # the mode changed since the last step: its stored stage is stale
    events: jax.Array     # (3,) crossings, sliding entries, sliding exits since t = 0


def low_slope(problem: Problem) -> float:
    """σ' on the negative side of the network's activation."""
    return PIECEWISE_LINEAR[problem.net.activation]


def _slopes(problem: Problem, active: jax.Array, dtype) -> jax.Array:
    """The mode's D: σ' of each pair on its side."""
    return jnp.where(active, 1.0, low_slope(problem)).astype(dtype)


def _slider_weight(bs: jax.Array, Xs: jax.Array, u: jax.Array) -> jax.Array:
    """The force each slider can exert, |b_ji|‖x_i‖, against its node's free velocity ‖u_j‖
    (see `_violation`)."""
    return jnp.abs(bs) * jnp.linalg.norm(Xs, axis=-1) / (jnp.linalg.norm(u, axis=-1, keepdims=True) + _TINY)


def _whole(reduce, x: jax.Array) -> jax.Array:
    """`reduce` (jnp.max, jnp.any, ...) over all of x, its leading axes first. XLA:CPU reduces
    a whole array to a scalar one element after another (6 µs for the 4 000 pairs of
    caron-fig1-relu-quick), but along leading axes with vector instructions (1 µs)."""
    return reduce(reduce(x.reshape(-1, x.shape[-1]), axis=0))


def _on(slide: jax.Array, n: int) -> jax.Array:
    """(m, n) mask of the sliding pairs."""
    return (slide[..., None] == jnp.arange(n)).any(-2)


def _compact(mask: jax.Array, slots: int) -> tuple[jax.Array, jax.Array]:
    """The pairs of `mask` (m, n) as slot lists (m, slots), and whether every node's fit."""
    m, n = mask.shape
    # each pair's rank among its node's, written to that slot (the others, and pairs past
    # the last slot, out of range: dropped); a scatter, as argsort and argmax are slow on CPU
    rank = jnp.where(mask, jnp.cumsum(mask, axis=-1) - 1, slots)
    pairs = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (m, n))
    index = jnp.full((m, slots), n, jnp.int32).at[jnp.arange(m)[:, None], rank].set(pairs, mode="drop")
    return index, mask.sum(-1) <= slots


def _basis(X: jax.Array, slide: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The sliding pairs' inputs (m, slots, d), their Gram matrices (identity rows for empty
    slots) and which slots are filled."""
    n = X.shape[0]
    valid = slide < n
    idx = jnp.minimum(slide, n - 1)
    Xs = jnp.where(valid[..., None], X[idx], 0.0)
    # the entries of X Xᵀ, where Xs Xsᵀ would be m small products (slow on CPU: 130 µs for
    # 128 Gram matrices of 8 × 8 from 100 dimensions; the gather, 5 µs)
    both = valid[..., :, None] & valid[..., None, :]
    G = jnp.where(both, (X @ X.T)[idx[..., :, None], idx[..., None, :]], 0.0)
    return Xs, G + jnp.eye(slide.shape[-1], dtype=X.dtype) * ~valid[..., None, :], valid


def _spd_solve(G: jax.Array, B: jax.Array) -> jax.Array:
    """G⁻¹B for a batch of small symmetric positive definite G (..., k, k), B (..., k, r):
    Gauss–Jordan elimination without pivoting (stable for SPD), unrolled over the k pivots.
    The whole batch then takes k fused elementwise passes, where LAPACK is called once per
    matrix (for m = 200 Gram matrices of 8 × 8, about 6× slower on CPU)."""
    k = G.shape[-1]
    for p in range(k):
        row_g = G[..., p, :] / G[..., p, p, None]
        row_b = B[..., p, :] / G[..., p, p, None]
        # rows i ≠ p lose G_ip times row p; row p becomes row p / G_pp
        col = (G[..., :, p] - (jnp.arange(k) == p))[..., None]
        G = G - col * row_g[..., None, :]
        B = B - col * row_b[..., None, :]
    return B


def _output_layer(problem: Problem) -> jax.Array:
    """c_j a_j (m, k): the fixed output layer with its scaling."""
    return problem.net.output_layer()


def _preactivations(problem: Problem, W: jax.Array) -> jax.Array:
    """s_ji = w_j·x_i/√d (m, n)."""
    return problem.net.preactivations(W, problem.X)


def _predictions(problem: Problem, S: jax.Array, D: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The mode's branch of f on the training points (n, k), f = Σ_j c_j a_j D_j s_j (S: the
    preactivations s), and the size of its round-off (first order: ε times the sum of what
    the sums cancel)."""
    ca, terms = _output_layer(problem), D * S
    pred, spread = (ca.T @ terms).T, (jnp.abs(ca).T @ jnp.abs(terms)).T
    ref = problem.net.frozen_output(problem.X)     # the zeroed variant's frozen copy
    if ref is not None:
        pred, spread = pred - ref, spread + jnp.abs(ref)
    return pred, jnp.finfo(S.dtype).eps * spread


def _loss_grad(problem: Problem):
    """∂L/∂f as a function of the predictions f (n, k)."""
    return jax.grad(lambda p: problem.loss_function()(p, problem.y))


def _loss_gradient(problem: Problem, pred: jax.Array):
    """∂L/∂f at `pred`, and its linearisation there (pred's round-off and the step's error
    both reach the gradient through it)."""
    return jax.linearize(_loss_grad(problem), pred)


def _response(problem: Problem, S: jax.Array, active: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """b (m, n) with ẇ_j = Σ_i b_ji D_ji x_i at the preactivations S, the mode's D, and the
    relative round-off of b (`_exit_slack`)."""
    D = _slopes(problem, active, S.dtype)
    pred, roundoff = _predictions(problem, S, D)
    g, linear = _loss_gradient(problem, pred)
    noise = jnp.linalg.norm(linear(roundoff)) / (jnp.linalg.norm(g) + _TINY)
    return -problem.rate * (_output_layer(problem) @ g.T) / math.sqrt(problem.X.shape[-1]), D, noise


def velocity_and_control(problem: Problem, W: jax.Array, mode: Mode) -> tuple[jax.Array, ...]:
    """The mode's velocity of W, the sliding pairs' controls δ (m, slots; an empty slot gets
    a value inside [low, 1]), each slider's weight (`_slider_weight`) and the exit slack
    (`_exit_slack`)."""
    return _velocity_and_control_at(problem, _preactivations(problem, W), mode)


def _velocity_and_control_at(problem: Problem, S: jax.Array, mode: Mode) -> tuple[jax.Array, ...]:
    """`velocity_and_control` at the preactivations S: none of it needs W itself, and
    within a step S is a quartic in θ whose coefficients the event search has, so that each
    evaluation of the exit search makes one product with X, not two."""
    X = problem.X
    b, D, noise = _response(problem, S, mode.active)
    u = (b * jnp.where(_on(mode.slide, X.shape[0]), 0.0, D)) @ X
    Xs, _, valid = _basis(X, mode.slide)
    mu = jnp.einsum("mkl,mld,md->mk", mode.gram_inv, Xs, u)
    bs = jnp.take_along_axis(b, jnp.minimum(mode.slide, X.shape[0] - 1), axis=-1)
    inside = 0.5 * (1.0 + low_slope(problem))
    delta = jnp.where(valid & (bs != 0), -mu / jnp.where(bs != 0, bs, 1.0), jnp.where(valid, jnp.inf, inside))
    return u - jnp.einsum("mkd,mk->md", Xs, mu), delta, _slider_weight(bs, Xs, u), _exit_slack(noise)


def _field(t, y: Params, args) -> Params:
    problem, mode = args
    return {"W": velocity_and_control(problem, y["W"], mode)[0]}


def _exit_slack(noise: jax.Array) -> jax.Array:
    """How far outside [low, 1] (weighted, `_violation`) a control must be for an exit.
    Near a global minimum the residual is a difference of predictions of order 1: at a loss
    of 1e-21 its round-off is 1e-6 of it, and so is that of every control; a fixed slack
    below that made sliders exit and re-enter on round-off. The slack grows with it."""
    return EXIT_SLACK + NOISE_SLACK * noise


def _violation(delta: jax.Array, weight: jax.Array, low: float) -> jax.Array:
    """How far each slider's control is outside [low, 1] (≤ 0: inside), weighted by the
    force the slider can exert relative to its node's velocity (at most 1). When a fitted
    point's residual nears 0, b_ji → 0 and δ = −μ/b is round-off over round-off: such a
    slider holds its node with a force too small to matter, and its δ must not make events."""
    return jnp.maximum(low - delta, delta - 1.0) * jnp.minimum(weight, 1.0)


def _exit_excess(delta: jax.Array, weight: jax.Array, slack: jax.Array, low: float) -> jax.Array:
    """Each slider's violation less the exit slack (m, slots; > 0: an exit)."""
    return _violation(delta, weight, low) - slack


def _first_exit(excess, at0, hi, at1, found) -> tuple[jax.Array, tuple, jax.Array]:
    """The first θ in (0, hi] where a slider's excess (`excess(θ)` returns it, (m, slots),
    with whether each control is above 1) rises above 0, given that none is above 0 at θ = 0
    (at0) and one is at θ = hi (at1), when `found`; the bracket's upper end, where the exit
    is seen, with `excess` there, and the evaluations it took.

    The largest excess is flat (sliders of fitted points, weighted near 0, sit just below
    0) until the exiting slider rises through it: a secant on the largest stalls there (a
    whole step late after 30 Illinois iterations, measured on chen-exp2-quick). The secant
    is taken on the slider that is largest at the bracket's upper end, with its own value
    at the lower end, and a bisection whenever two iterations have not halved the bracket."""
    def step(c):
        a, at_a, b, at_b, k, older, old = c
        va, vb = at_a[0], at_b[0]
        fb = _whole(jnp.max, vb)
        ga = _whole(jnp.max, jnp.where(vb == fb, va, -jnp.inf))        # that slider at a
        width = b - a
        secant = jnp.clip(b - fb * width / (fb - ga), a + 1e-3 * width, b - 1e-3 * width)
        m = jnp.where(width > 0.5 * older, 0.5 * (a + b), secant)
        at_m = excess(m)
        up = _whole(jnp.max, at_m[0]) > 0
        pick = lambda x, y: jax.tree.map(lambda u, v: jnp.where(up, u, v), x, y)  # noqa: E731
        return jnp.where(up, a, m), pick(at_a, at_m), jnp.where(up, m, b), pick(at_m, at_b), k + 1, old, width

    def going(c):
        a, _, b, _, k, _, _ = c
        return (k < EXIT_ITERATIONS) & (b - a > EXIT_TOL)

    one = jnp.ones((), at1[0].dtype)
    start = (0 * one, at0, hi * one, at1, jnp.where(found, 0, EXIT_ITERATIONS), jnp.inf * one, jnp.inf * one)
    _, _, theta, at_theta, iterations, _, _ = jax.lax.while_loop(going, step, start)
    return theta, at_theta, jnp.where(found, iterations, 0)


def _horner(coeffs: jax.Array, theta) -> jax.Array:
    out = coeffs[0]
    for c in coeffs[1:]:
        out = out * theta + c
    return out


def _at_samples(coeffs: jax.Array, start: int) -> jax.Array:
    """A polynomial in θ (coefficients (p, ...), highest first) at θ = start/SAMPLES, ...,
    1: one product with the samples' powers, where Horner's rule per sample would be
    fused into every consumer and evaluated again in each."""
    grid = jnp.arange(start, SAMPLES + 1, dtype=coeffs.dtype) / SAMPLES
    powers = grid[:, None] ** jnp.arange(coeffs.shape[0] - 1, -1, -1, dtype=coeffs.dtype)
    # (a matrix product of two matrices: as `tensordot`, twice as slow on XLA:CPU)
    return (powers @ coeffs.reshape(coeffs.shape[0], -1)).reshape((-1,) + coeffs.shape[1:])


def _first_sample(flags: jax.Array) -> jax.Array:
    """The first k at which any of `flags` (SAMPLES, ...) is set; SAMPLES where none is. Per
    sample first, then over the samples (argmax and argmin are slow on CPU: 18 µs for 4 000
    pairs)."""
    per_sample = flags.reshape(SAMPLES, -1, flags.shape[-1]).any(1).any(-1)
    return jnp.min(jnp.where(per_sample, jnp.arange(SAMPLES, dtype=jnp.int32), SAMPLES))


def _first_pole(problem: Problem, sc: jax.Array, mode: Mode) -> jax.Array:
    """The first of the step's sample points (θ = 1/SAMPLES, ..., 1) at which some slider's
    b_ji has the opposite sign to its value at θ = 0; 1 where none has. Where b_ji passes
    through 0 (the residual of a fitted point changing sign), δ_ji = −μ/b_ji passes through
    a pole, and the slider's control may leave [low, 1] and come back within one step,
    unseen at the step's ends (measured on chen-exp2-quick: a slider of a point with
    b ≈ 1e-6 held through a step of 0.06 in which its δ went from 0.1 to −∞ and from +∞ to
    0.47, and the run drifted 1e-4 from the exact flow). Cheap: the predictions are quartic
    in θ within the step, their coefficients products of sc (5, m, n) with the output layer."""
    n = problem.X.shape[0]
    ca = _output_layer(problem)
    D = _slopes(problem, mode.active, sc.dtype)
    coeffs = jnp.einsum("pmn,mk->pnk", D * sc, ca) / math.sqrt(problem.X.shape[-1])     # f(θ): (5, n, k)
    pred = _at_samples(coeffs, 0)                  # (SAMPLES + 1, n, k), θ = 0 first
    ref = problem.net.frozen_output(problem.X)
    if ref is not None:
        pred = pred - ref
    g = jax.vmap(_loss_grad(problem))(pred)       # (SAMPLES + 1, n, k)
    # the sliders' only: −b up to a positive factor, (SAMPLES + 1, m, slots)
    b = jnp.einsum("smik,mk->smi", g[:, jnp.minimum(mode.slide, n - 1)], ca)
    first = _first_sample((b[1:] * b[0] < 0) & (mode.slide < n))
    return (jnp.minimum(first + 1, SAMPLES) / SAMPLES).astype(sc.dtype)


def _first_crossing(sc: jax.Array, sign: jax.Array, free: jax.Array) -> jax.Array:
    """The first θ in (0, 1] at which a free pair's sign·s(θ) goes below 0 (sc: (5, m, n)
    coefficients of s(θ)); 2 where there is none."""
    values = sign * _at_samples(sc, 0)                        # (SAMPLES + 1, m, n), θ = 0 first
    neg = (values[1:] < 0) & free
    hit = neg.any(0)
    crossing = _whole(jnp.any, hit)
    first = _first_sample(neg)          # the first sample interval with a crossing
    dsc = sc[:-1] * jnp.arange(sc.shape[0] - 1, 0, -1, dtype=sc.dtype)[:, None, None]

    def newton(c):
        # Newton's method on the lowest of the pairs that cross, F(θ) = min sign·s(θ), which
        # is ≥ 0 at the bracket's start and < 0 at its end; bisecting where it would leave
        # the bracket
        k, lo, hi, x, _ = c
        f = jnp.where(hit, sign * _horner(sc, x), jnp.inf)
        fx = _whole(jnp.min, f)
        dfx = _whole(jnp.max, jnp.where(f == fx, sign * _horner(dsc, x), -jnp.inf))
        lo, hi = jnp.where(fx >= 0, x, lo), jnp.where(fx >= 0, hi, x)
        guess = x - fx / jnp.where(dfx != 0, dfx, 1.0)
        x_new = jnp.where((dfx != 0) & (guess > lo) & (guess < hi), guess, 0.5 * (lo + hi))
        return k + 1, lo, hi, x_new, jnp.abs(x_new - x)

    lo, hi = (first / SAMPLES).astype(sc.dtype), ((first + 1) / SAMPLES).astype(sc.dtype)
    # Newton starts from the earliest of the crossing pairs' chords over the interval: on a
    # sixteenth of the step a quartic is nearly straight, and the chord's root is a few
    # digits from the crossing, where the interval's middle is none
    f_lo, f_hi = values[jnp.minimum(first, SAMPLES - 1)], values[jnp.minimum(first + 1, SAMPLES)]
    chord = jnp.where((f_lo >= 0) & (f_hi < 0) & free, f_lo / jnp.where(f_lo > f_hi, f_lo - f_hi, 1.0), 1.0)
    start = lo + (hi - lo) * jnp.clip(_whole(jnp.min, chord), 0.0, 1.0)
    # a while loop, not a cond: under vmap a cond runs both branches, this runs no iteration
    # when no member of the batch has a crossing
    _, _, hi, x, _ = jax.lax.while_loop(lambda c: crossing & (c[4] > ROOT_TOL) & (c[0] < 60), newton,
                                        (0, lo, hi, start, jnp.asarray(1.0, sc.dtype)))
    return jnp.where(crossing, jnp.minimum(x, hi), 2.0)


def _crossed(sc: jax.Array, sign: jax.Array, free: jax.Array, theta) -> jax.Array:
    """(m, n) the free pairs that have crossed their surfaces within ROOT_TOL after θ (θ
    being the first crossing or an earlier event, the pairs that reach their surfaces at
    the event)."""
    return free & (sign * _horner(sc, theta + 4 * ROOT_TOL) < 0)


def _resolve(problem: Problem, W: jax.Array, mode: Mode, touching: jax.Array, leaving: jax.Array):
    """The mode after an event at W: every pair on a surface (sliding, or `touching` it now)
    is put back on it exactly and assigned to slide, go up (D = 1) or go down (D = low) by
    an active-set iteration per node on ṡ_Z(δ) = q + A δ, until every pair is consistent
    (sliding: δ within [low, 1]; up: ṡ ≥ 0; down: ṡ ≤ 0). `leaving` (m, slots, aligned with
    `mode.slide`: 0 stays, 1 leaves down, 2 leaves up) are the sliders whose exit is the
    event: they leave whatever the solve here says, because where b_ji is tiny (a fitted
    point) δ = −μ/b is too sensitive for two computations of it to agree on the bound.
    Returns the corrected W, the new mode, the event counts (3,) and whether every node's
    surfaces fit in its slots."""
    X = problem.X
    n = X.shape[0]
    low = low_slope(problem)
    was = _on(mode.slide, n)
    k_slots = mode.slide.shape[-1]
    slots, fit = _compact(was | touching, k_slots)
    Xz, G, valid = _basis(X, slots)
    # back onto the surfaces: w_j minus its component along span{x_i : i on a surface}
    W = W - jnp.einsum("mkd,mk->md", Xz, _spd_solve(G, Xz @ W[..., None])[..., 0])
    b, D, noise = _response(problem, _preactivations(problem, W), mode.active)
    slack = _exit_slack(noise)
    idx = jnp.minimum(slots, n - 1)
    u = (b * jnp.where(was | touching, 0.0, D)) @ X
    q = jnp.einsum("mkd,md->mk", Xz, u)
    bz = jnp.where(valid, jnp.take_along_axis(b, idx, axis=-1), 0.0)
    A = G * bz[..., None, :]
    weight = _slider_weight(bz, Xz, u)
    scale = jnp.abs(q) + jnp.abs(A).sum(-1) + jnp.finfo(W.dtype).tiny
    # 0: down, 1: slide, 2: up; a touching pair starts on the side it comes from
    sides = jnp.where(jnp.take_along_axis(mode.active, idx, axis=-1), 2, 0)
    r = jnp.where(jnp.take_along_axis(was, idx, axis=-1), 1, sides)
    rows = jnp.arange(W.shape[0])[:, None]
    exits = jnp.zeros(was.shape, jnp.int32).at[rows, mode.slide].set(leaving, mode="drop")
    frozen = jnp.take_along_axis(exits, idx, axis=-1) > 0
    r = jnp.where(frozen, 2 * (jnp.take_along_axis(exits, idx, axis=-1) == 2), r)
    r = jnp.where(valid, r, 0)

    def controls(r):
        sliding = (r == 1) & valid
        fixed = jnp.where(r == 2, 1.0, low) * (valid & ~sliding)
        # A_SS δ_S = rhs with A = G diag(b): solved as G_SS (b δ)_S = rhs, G_SS being SPD
        both = sliding[..., :, None] & sliding[..., None, :]
        Gs = jnp.where(both, G, jnp.eye(k_slots, dtype=G.dtype))
        rhs = jnp.where(sliding, -(q + jnp.einsum("mkl,ml->mk", A, fixed)), 0.0)
        bdelta = _spd_solve(Gs, rhs[..., None])[..., 0]
        delta = jnp.where(sliding, jnp.where(bz != 0, bdelta / jnp.where(bz != 0, bz, 1.0), jnp.inf), fixed)
        return delta, q + jnp.einsum("mkl,ml->mk", A, delta), sliding

    def fix(r):
        delta, sdot, sliding = controls(r)
        # (half the exit's slack: a slider the event did not name leaves only if it is out)
        out = jnp.where(sliding, _violation(delta, weight, low) - 0.5 * slack, 0.0)
        wrong = jnp.where(valid & (r == 2), -sdot, jnp.where(valid & (r == 0), sdot, 0.0)) / scale
        wrong = jnp.where(frozen, 0.0, wrong)
        wrong = jnp.where(wrong > 1e-12, wrong, 0.0)
        k_out, k_wrong = jnp.argmax(out, -1), jnp.argmax(wrong, -1)
        any_out, any_wrong = out.max(-1) > 0, wrong.max(-1) > 0
        k = jnp.where(any_out, k_out, k_wrong)
        pick = lambda x: jnp.take_along_axis(x, k[:, None], axis=-1)[:, 0]  # noqa: E731
        # a slider out of its range leaves to the side of the bound it passed; a pair
        # moving against its side slides if both sides push into the surface (b < 0)
        # and crosses otherwise
        to = jnp.where(any_out, jnp.where(pick(delta) > 1.0, 2, 0),
                       jnp.where(pick(bz) < 0, 1, jnp.where(pick(r) == 2, 0, 2)))
        change = any_out | any_wrong
        return jnp.where(change[:, None] & (jnp.arange(k_slots) == k[:, None]), to[:, None], r), _whole(jnp.any, change[:, None])

    # until no node changes (usually after 0 to 2 rounds; at most 4·slots)
    _, r, _ = jax.lax.while_loop(lambda c: c[2] & (c[0] < 4 * k_slots),
                                 lambda c: (c[0] + 1, *fix(c[1])), (0, r, jnp.asarray(True)))
    # A touching pair is one the mode's own continuation carries across its surface. Left on
    # its side by the solve, it grazes (ṡ = 0 to within the solve's resolution): left there,
    # the next step would find the same crossing at once, and flipped, it may graze back, in
    # either case forever. It is held on its surface instead; holding it takes next to no
    # force, and as soon as it would take more than the exit slack of its node's, it exits (an
    # event) to the side that force points to.
    grazing = jnp.take_along_axis(touching, idx, axis=-1) & valid & (r == sides)
    r = jnp.where(grazing, 1, r)
    sliding = (r == 1) & valid
    # (empty slots hold index n, out of range: their writes are dropped)
    active = mode.active.at[rows, slots].set(jnp.where(sliding, jnp.take_along_axis(mode.active, idx, axis=-1),
                                                       r == 2), mode="drop")
    now = jnp.zeros_like(was).at[rows, slots].set(sliding, mode="drop")
    new_slide, _ = _compact(now, k_slots)
    off = ~was & ~now
    events = jnp.stack([_whole(jnp.sum, off & (active != mode.active)), _whole(jnp.sum, now & ~was),
                        _whole(jnp.sum, was & ~now)])
    # the sliders' inverse Gram matrices change with their sets only: a crossing (most events)
    # keeps them (a cond, which under vmap computes both and selects)
    gram_inv = jax.lax.cond(_whole(jnp.all, new_slide == mode.slide), lambda: mode.gram_inv,
                            lambda: make_mode(X, active, new_slide).gram_inv)
    return W, Mode(active=active, slide=new_slide, gram_inv=gram_inv), events, _whole(jnp.all, fit[:, None])


def projected_ntg(problem: Problem, W: jax.Array, mode: Mode) -> jax.Array:
    """The NTG (first output, every training point) of the mode's flow: the Jacobian of the
    predictions with each w_j's directions restricted to the complement of its sliding
    surfaces' normals, Θ = Σ_j (c_j a_j)² D_j D_jᵀ ⊙ X P_j Xᵀ/d. While pairs slide, its λ_min
    (not the plain NTG's) bounds the rate of the residual (Caron et al.'s bound)."""
    X = problem.X
    d = X.shape[-1]
    weight = _output_layer(problem)[:, 0] ** 2
    D = _slopes(problem, mode.active, W.dtype)
    plain = ((D.T * weight) @ D) * (X @ X.T)
    Xs, _, _ = _basis(X, mode.slide)
    E = D[..., None] * (X @ jnp.swapaxes(Xs, -1, -2)) * jnp.sqrt(weight)[:, None, None]    # (m, n, slots)
    return (plain - jnp.einsum("mis,mst,mkt->ik", E, mode.gram_inv, E)) / d


def initial_mode(problem: Problem, W: jax.Array, slots: int) -> Mode:
    """The mode of W off every surface, with room for `slots` sliders per node, or min(n, d)
    where that is fewer: a node's sliding surfaces have linearly independent normals x_i
    (their Gram matrix is solved), so further slots would stay empty, and each costs time
    (chen-exp2-quick's d = 10 points under `filippov16` run with 10)."""
    n = problem.X.shape[0]
    slots = min(slots, *problem.X.shape)
    return make_mode(problem.X, W @ problem.X.T > 0, jnp.full((W.shape[0], slots), n, jnp.int32))


def make_mode(X: jax.Array, active: jax.Array, slide: jax.Array) -> Mode:
    G = _basis(X, slide)[1]
    return Mode(active=active, slide=slide, gram_inv=_spd_solve(G, jnp.broadcast_to(jnp.eye(slide.shape[-1], dtype=X.dtype), G.shape)))


def _with_slots(state: FilippovState, k: int, n: int) -> FilippovState:
    """The state with k slots per node: slots cut off (they must be empty: the sliders are
    compacted to the first slots) or added empty (index n), with identity rows in the
    inverse Gram matrices (block diagonal, so that either is exact)."""
    slide, gram_inv = state.mode.slide, state.mode.gram_inv
    have = slide.shape[-1]
    if k <= have:
        slide, gram_inv = slide[:, :k], gram_inv[:, :k, :k]
    else:
        slide = jnp.concatenate([slide, jnp.full((slide.shape[0], k - have), n, slide.dtype)], axis=-1)
        eye = jnp.broadcast_to(jnp.eye(k, dtype=gram_inv.dtype), (gram_inv.shape[0], k, k))
        gram_inv = eye.at[:, :have, :have].set(gram_inv)
    return eqx.tree_at(lambda s: (s.mode.slide, s.mode.gram_inv), state, (slide, gram_inv))


class FilippovIntegrator(AbstractIntegrator):
    """Advances a `FilippovState` to a later time (see the module's docstring)."""

    rtol: float = eqx.field(static=True)
    atol: float = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    stop_loss: float = eqx.field(static=True)
    slots: int = eqx.field(static=True)
    # a segment's first pass holds this many sliders per node (see `advance`)
    few_slots: int = eqx.field(static=True, default=4)

    discrete: ClassVar[bool] = False
    certificate_series: ClassVar[tuple[str, ...]] = ("active_pairs", "sliding_pairs", *EVENT_KINDS,
                                                     "projected_ntg_eig_min")
    solver: ClassVar[dfx.Dopri5] = dfx.Dopri5()
    term: ClassVar[dfx.ODETerm] = dfx.ODETerm(_field)

    def init(self, problem: Problem, params: Params, key: jax.Array | None = None) -> FilippovState:
        W = params["W"]
        t0 = jnp.asarray(0.0, W.dtype)
        mode = initial_mode(problem, W, self.slots)
        v = _field(t0, params, (problem, mode))["W"]
        # Hairer & Wanner's first guess: a step that moves W by 1 % of its size
        size = lambda x: jnp.sqrt(jnp.mean(jnp.square(x / (self.atol + self.rtol * jnp.abs(W)))))  # noqa: E731
        h = jnp.where(size(v) > 0, 0.01 * size(W) / jnp.maximum(size(v), 1e-300), 1.0)
        return FilippovState(t=t0, y=params, mode=mode, h=h.astype(W.dtype),
                             solver_state=self.solver.init(self.term, t0, t0 + h, params, (problem, mode)),
                             jumped=jnp.asarray(True), events=jnp.zeros(3, jnp.int64))

    @property
    def init_evals(self) -> int:
        return 1          # the first step's size is guessed from the velocity at t = 0

    def advance(self, problem: Problem, state: FilippovState, t_next, horizon=None) -> tuple[FilippovState, dict]:
        """Integrate to `t_next`, a step ending there (`horizon` is not used)."""
        low = low_slope(problem)
        X = problem.X
        t_next = jnp.asarray(t_next, state.t.dtype)

        def err_norm(y0, y1, y_err, mode):
            scale = self.atol + self.rtol * jnp.maximum(jnp.abs(y0["W"]), jnp.abs(y1["W"]))
            err_w = jnp.sqrt(_whole(jnp.sum, jnp.square(y_err["W"] / scale)) / scale.size)
            # The loss gradient (the residual, for a squared loss) must be as accurate, relative
            # to its size, down to its round-off. Near a minimum it is a difference of order-1
            # predictions that W's tolerances alone leave unresolved (at a loss of 1e-21 and
            # rtol 1e-8, the step's error in it was 1e3 times its size): the loss decayed at
            # a wrong rate and the sliders' controls, ratios of its entries, were noise.
            D = _slopes(problem, mode.active, y1["W"].dtype)
            pred, roundoff = _predictions(problem, _preactivations(problem, y1["W"]), D)
            g, linear = _loss_gradient(problem, pred)
            ca, terms = _output_layer(problem), D * _preactivations(problem, y_err["W"])
            err_g = (jnp.linalg.norm(linear((ca.T @ terms).T))
                     / (self.rtol * jnp.linalg.norm(g) + jnp.linalg.norm(linear(roundoff)) + _TINY))
            return jnp.maximum(err_w, err_g)

        def cond(c):
            s, stats, code, go = c
            return go & (s.t < t_next) & (code == Status.RUNNING) & (stats[0] < self.max_steps)

        def body(c, last):
            s, stats, code, go = c
            h = jnp.minimum(s.h, t_next - s.t)
            t1 = jnp.where(h == t_next - s.t, t_next, s.t + h)
            args = (problem, s.mode)
            y1, y_err, dense, sstate, _ = self.solver.step(self.term, s.t, t1, s.y, args, s.solver_state, s.jumped)
            err = err_norm(s.y, y1, y_err, s.mode)
            ok = jnp.isfinite(err) & (err <= 1.0)
            factor = jnp.clip(0.9 * jnp.where(err > 0, err, 1e-10) ** -0.2, 0.2, 10.0)
            proposal = jnp.where(ok & (h < s.h), jnp.minimum(h * factor, s.h), h * factor)
            # events on the accepted step
            coeffs = self.solver.interpolation_cls(t0=s.t, t1=t1, **dense).coeffs["W"]
            root_d = math.sqrt(X.shape[-1])
            sc = coeffs @ X.T                                    # s_ji(θ)·√d, quartic in θ
            free = ~_on(s.mode.slide, X.shape[0])
            sign = jnp.where(s.mode.active, 1.0, -1.0)
            theta_cross = _first_crossing(sc, sign, free)

            def excess(th):
                _, delta, weight, slack = _velocity_and_control_at(problem, _horner(sc, th) / root_d, s.mode)
                return _exit_excess(delta, weight, slack, low), delta > 1.0

            # the exits are looked for up to the first crossing, or the step's end or, where a
            # slider's b changes sign within the step, up to the first sample after
            # (`_first_pole`); the step ends there if no exit is found before it
            pole = _first_pole(problem, sc, s.mode)
            end = jnp.minimum(pole, theta_cross)
            at0, at1 = excess(0.0), excess(end)
            f0, e1 = _whole(jnp.max, at0[0]), _whole(jnp.max, at1[0])
            exit_found = ok & (e1 > 0) & (f0 <= 0)
            theta_exit, at_exit, iters = _first_exit(excess, at0, end, at1, exit_found)
            theta = jnp.where(ok & (f0 > 0), 0.0,
                              jnp.where(exit_found, theta_exit, jnp.where(pole < 1.0, end, theta_cross)))
            event = ok & (theta <= 1.0)
            theta = jnp.minimum(theta, 1.0)
            # the sliders whose exit is the event, and the side each leaves to (none where the
            # event is a crossing or the pole: the excess is ≤ 0 up to there)
            v, above = jax.tree.map(lambda a, b, c: jnp.where(f0 > 0, a, jnp.where(exit_found, b, c)),
                                    at0, at_exit, at1)
            leaving = jnp.where(v > 0, jnp.where(above, 2, 1), 0)
            touching = _crossed(sc, sign, free, theta)
            Wstar = _horner(coeffs, theta)

            def resolution(c):
                return False, *_resolve(problem, Wstar, s.mode, touching, leaving)

            # once on a step with an event, else not at all (a while loop, not a cond: under
            # vmap it runs while any member has an event, where a cond would always run)
            _, Wnew, mode, events, fit = jax.lax.while_loop(
                lambda c: c[0], resolution, (event, Wstar, s.mode, jnp.zeros(3, s.events.dtype), jnp.asarray(True)))
            t_event = s.t + theta * (t1 - s.t)
            new = FilippovState(
                t=jnp.where(event, t_event, jnp.where(ok, t1, s.t)),
                y={"W": jnp.where(event, Wnew, jnp.where(ok, y1["W"], s.y["W"]))},
                mode=jax.tree.map(lambda a, b: jnp.where(event, a, b), mode, s.mode),
                h=jnp.where(ok, proposal, h * factor),
                solver_state=jax.tree.map(lambda a, b: jnp.where(ok & ~event, a, b), sstate, s.solver_state),
                jumped=event | (s.jumped & ~ok),
                events=s.events + jnp.where(event, events, 0))
            finite = jnp.isfinite(err) | ok
            # the stages, the exit test at both ends and the event's resolution
            evals = 6 + s.jumped + 2 + event + iters
            overflow = event & ~fit
            code = jnp.where(finite, code, Status.NONFINITE)
            if last:        # a node with more sliders than the preset's slots: the member fails
                code = jnp.where(overflow, Status.FAILED, code)
            else:           # the step is left undone (rejected) for the next pass, with more
                            # slots, to take again
                new = jax.tree.map(lambda a, b: jnp.where(overflow, a, b), s, new)
                ok = ok & ~overflow
            if self.stop_loss > 0:
                code = jnp.where(ok & (problem.loss(new.y) <= self.stop_loss), Status.STOPPED, code)
            stats = stats + jnp.stack([1, ok, ~ok, evals]).astype(stats.dtype)
            return new, stats, code, go & ~overflow

        stats = jnp.zeros(4, jnp.int64)
        code = jnp.asarray(Status.RUNNING)
        # A step's cost grows as slots² (caron-fig1-relu-quick: 430 µs a step with 4 slots,
        # 600 µs with 8), and most nodes slide on 1 to 3 surfaces: the segment is stepped with
        # `few_slots` per node while every node's sliders fit in them, then with twice as many,
        # and so on up to the preset's. The state between segments always holds the preset's
        # slots (the checkpoint's shapes, and the same passes for a resumed run).
        full = state.mode.slide.shape[-1]
        n = X.shape[0]
        k = self.few_slots
        while k < full:
            fits = _whole(jnp.all, state.mode.slide[:, k:] >= n)
            few, stats, code, _ = jax.lax.while_loop(cond, functools.partial(body, last=False),
                                                     (_with_slots(state, k, n), stats, code, fits))
            state = jax.tree.map(lambda a, b: jnp.where(fits, a, b), _with_slots(few, full, n), state)
            k *= 2
        new, stats, code, _ = jax.lax.while_loop(cond, functools.partial(body, last=True),
                                                 (state, stats, code, jnp.asarray(True)))
        code = jnp.where(code != Status.RUNNING, code,
                         jnp.where(new.t < t_next, Status.MAX_STEPS, Status.DONE))
        return new, {"steps": stats[0], "accepted": stats[1], "rejected": stats[2], "vf_evals": stats[3],
                     "status": code}

    def time(self, state: FilippovState) -> jax.Array:
        return state.t

    def params(self, state: FilippovState) -> Params:
        return state.y

    def step(self, state: FilippovState) -> None:
        return None

    def certificate(self, problem: Problem, state: FilippovState) -> dict[str, jax.Array]:
        on = _on(state.mode.slide, problem.X.shape[0])
        counts = {"active_pairs": (state.mode.active & ~on).sum(), "sliding_pairs": on.sum()}
        eig = jnp.linalg.eigvalsh(projected_ntg(problem, state.y["W"], state.mode))[0]
        return counts | dict(zip(EVENT_KINDS, state.events)) | {"projected_ntg_eig_min": eig}

    def out_of_steps(self, steps: int) -> bool:
        return steps >= self.max_steps
