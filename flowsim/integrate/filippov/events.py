"""The events of a step of the exact ReLU flow, located on its dense output (a quartic in
the step's fraction θ): the first crossing of a free pair through its surface, the first
exit of a slider's control from [low, 1], and the first sample past a pole of the
controls (the package's docstring says how each is found and to what accuracy).
"""

import math

import jax
import jax.numpy as jnp

from ...nn.problem import Problem
from .modes import Mode, loss_grad, output_layer, slopes, whole

SAMPLES = 16        # points of a step at which every pair's s_ji is looked at
ROOT_TOL = 2.0 ** -40   # a crossing's θ is located to this fraction of the step
EXIT_ITERATIONS = 30
# An exit is located to this fraction of the step. Its velocity is continuous there (the
# control reaches its bound), so an exit found Δθ late moves W by O(Δθ²): far below the
# tolerances at 1e-10, where a tighter bracket only spends iterations at the round-off of
# the controls.
EXIT_TOL = 1e-10


def first_exit(excess, at0, hi, at1, found) -> tuple[jax.Array, tuple, jax.Array]:
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
        fb = whole(jnp.max, vb)
        ga = whole(jnp.max, jnp.where(vb == fb, va, -jnp.inf))        # that slider at a
        width = b - a
        secant = jnp.clip(b - fb * width / (fb - ga), a + 1e-3 * width, b - 1e-3 * width)
        m = jnp.where(width > 0.5 * older, 0.5 * (a + b), secant)
        at_m = excess(m)
        up = whole(jnp.max, at_m[0]) > 0
        pick = lambda x, y: jax.tree.map(lambda u, v: jnp.where(up, u, v), x, y)  # noqa: E731
        return jnp.where(up, a, m), pick(at_a, at_m), jnp.where(up, m, b), pick(at_m, at_b), k + 1, old, width

    def going(c):
        a, _, b, _, k, _, _ = c
        return (k < EXIT_ITERATIONS) & (b - a > EXIT_TOL)

    one = jnp.ones((), at1[0].dtype)
    start = (0 * one, at0, hi * one, at1, jnp.where(found, 0, EXIT_ITERATIONS), jnp.inf * one, jnp.inf * one)
    _, _, theta, at_theta, iterations, _, _ = jax.lax.while_loop(going, step, start)
    return theta, at_theta, jnp.where(found, iterations, 0)


def horner(coeffs: jax.Array, theta) -> jax.Array:
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


def first_pole(problem: Problem, sc: jax.Array, mode: Mode) -> jax.Array:
    """The first of the step's sample points (θ = 1/SAMPLES, ..., 1) at which some slider's
    b_ji has the opposite sign to its value at θ = 0; 1 where none has. Where b_ji passes
    through 0 (the residual of a fitted point changing sign), δ_ji = −μ/b_ji passes through
    a pole, and the slider's control may leave [low, 1] and come back within one step,
    unseen at the step's ends (measured on chen-exp2-quick: a slider of a point with
    b ≈ 1e-6 held through a step of 0.06 in which its δ went from 0.1 to −∞ and from +∞ to
    0.47, and the run drifted 1e-4 from the exact flow). Cheap: the predictions are quartic
    in θ within the step, their coefficients products of sc (5, m, n) with the output layer."""
    n = problem.X.shape[0]
    ca = output_layer(problem)
    D = slopes(problem, mode.active, sc.dtype)
    coeffs = jnp.einsum("pmn,mk->pnk", D * sc, ca) / math.sqrt(problem.X.shape[-1])     # f(θ): (5, n, k)
    pred = _at_samples(coeffs, 0)                  # (SAMPLES + 1, n, k), θ = 0 first
    ref = problem.net.frozen_output(problem.X)
    if ref is not None:
        pred = pred - ref
    g = jax.vmap(loss_grad(problem))(pred)       # (SAMPLES + 1, n, k)
    # the sliders' only: −b up to a positive factor, (SAMPLES + 1, m, slots)
    b = jnp.einsum("smik,mk->smi", g[:, jnp.minimum(mode.slide, n - 1)], ca)
    first = _first_sample((b[1:] * b[0] < 0) & (mode.slide < n))
    return (jnp.minimum(first + 1, SAMPLES) / SAMPLES).astype(sc.dtype)


def first_crossing(sc: jax.Array, sign: jax.Array, free: jax.Array) -> jax.Array:
    """The first θ in (0, 1] at which a free pair's sign·s(θ) goes below 0 (sc: (5, m, n)
    coefficients of s(θ)); 2 where there is none."""
    values = sign * _at_samples(sc, 0)                        # (SAMPLES + 1, m, n), θ = 0 first
    neg = (values[1:] < 0) & free
    hit = neg.any(0)
    crossing = whole(jnp.any, hit)
    first = _first_sample(neg)          # the first sample interval with a crossing
    dsc = sc[:-1] * jnp.arange(sc.shape[0] - 1, 0, -1, dtype=sc.dtype)[:, None, None]

    def newton(c):
        # Newton's method on the lowest of the pairs that cross, F(θ) = min sign·s(θ), which
        # is ≥ 0 at the bracket's start and < 0 at its end; bisecting where it would leave
        # the bracket
        k, lo, hi, x, _ = c
        f = jnp.where(hit, sign * horner(sc, x), jnp.inf)
        fx = whole(jnp.min, f)
        dfx = whole(jnp.max, jnp.where(f == fx, sign * horner(dsc, x), -jnp.inf))
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
    start = lo + (hi - lo) * jnp.clip(whole(jnp.min, chord), 0.0, 1.0)
    # a while loop, not a cond: under vmap a cond runs both branches, this runs no iteration
    # when no member of the batch has a crossing
    _, _, hi, x, _ = jax.lax.while_loop(lambda c: crossing & (c[4] > ROOT_TOL) & (c[0] < 60), newton,
                                        (0, lo, hi, start, jnp.asarray(1.0, sc.dtype)))
    return jnp.where(crossing, jnp.minimum(x, hi), 2.0)


def crossed(sc: jax.Array, sign: jax.Array, free: jax.Array, theta) -> jax.Array:
    """(m, n) the free pairs that have crossed their surfaces within ROOT_TOL after θ (θ
    being the first crossing or an earlier event, the pairs that reach their surfaces at
    the event)."""
    return free & (sign * horner(sc, theta + 4 * ROOT_TOL) < 0)
