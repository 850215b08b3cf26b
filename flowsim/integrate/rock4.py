"""ROCK4 (Abdulle 2002): a stabilised explicit Runge–Kutta–Chebyshev method of order 4, as a
flow method (`flowsim.integrate.solver`) that the engine steps like any other.

Why: the Jacobian of a gradient flow is −rate ∇²L, symmetric, so its spectrum is real. An
explicit method of fixed stages is stable only while h·λ_max stays below a constant (Tsit5:
about 3.5), so on a sharp network its steps are held by stability, not accuracy, and its
cost per unit time grows like λ_max. A ROCK4 step of degree s is stable on the negative real
axis up to h·ρ ≈ 0.353 (s + 4)², so the step is set by accuracy and the stage count grows
only like √(h·ρ) (`STIFF-FLOWS.md`).

A step: s − 1 evaluations of a three-term Chebyshev recurrence (the first uses f(y0), kept
from the last step), a 4-stage finishing procedure, and f(y1) for the embedded third-order
error estimate and the next step's first stage: s + 4 evaluations. The degree is chosen per
step from h and the spectral radius ρ of ∂f/∂y, as rock4.f chooses it. The coefficients are
the published tables (`rock4.json`, with their provenance); degrees whose stability
polynomial leaves [−1, 1] on their interval are not used (`tests/test_rock4.py`).

ρ comes from power iteration on Jacobian-vector products of the vector field itself (a
`jvp` of the field: Hessian-vector products for a gradient flow, no access to the loss),
warm-started from the last vector, refreshed every `rho_every` accepted steps, and at the
next try after a rejection iterated to convergence from the last vector plus the rejected
try's error direction (`_RETRY_RTOL`), times a safety factor: the top of a network's Hessian
spectrum is clustered, so a few iterations underestimate it. ρ, its vector, the last try's
error and the refresh counter are solver state, so a checkpoint holds them and a resumed run
is the same computation. That machinery is `AbstractStabilised`, which `flowsim.integrate.rkc2`
steps with too.

The step's arithmetic is `advance`, given f(y0) and ρ: a solver that knows ρ otherwise (the
central flow: `flowsim.integrate.central_field`) steps with it directly; each stage hands the field
its abscissa (the recurrence applied to dt/dt = 1), for fields that warm-start an inner solve
from a time, and the evaluations' costs are summed.

Round-off sets a second ceiling on h·ρ, below the stability one. The step's polynomial is
P(z)·R₄(z): the Chebyshev part's P damps the stiff components by as much as the finishing
procedure's quartic R₄ (four stages of step h, coefficients of order one) amplifies them, about
0.01 (hρ)⁴. Rounding errors made in the Chebyshev part's last iterate, and the field's own
(a gradient evaluated at θ errs by about eps·λ_max·‖θ‖ along the stiff directions), are not
damped by P but are amplified by R₄: a step from the exact rest point of the log-spaced
quadratic (‖θ‖ = 18.6) ends 4.2e-7 from it at h·λ_max = 532, 6.9e-6 at 824 and 4.9e-4 at 2 000,
about 0.1–0.8 × eps·‖θ‖·|R₄(−h·λ_max)|; in long double, 2 000× less. Where that noise reaches
the tolerance the error estimate reads it, the step stops growing with accuracy, and integral
control chatters on it (2 360 steps, 797 rejected, at λ_max = 1e4, rtol 1e-6). So a step is
also held to `roundoff_bound(rtol)`, where eps·|R₄| is a tenth of rtol (h·ρ ≤ 463 at rtol
1e-6): steps are as many, but rejected ones rare (`tests/test_rock4.py`). Past that bound
ROCK4's cost grows like λ_max, whatever its stability interval.

ROCK4 has no dense output of its own. A checkpoint inside a step is read by `read`: a step
of the method from the committed start y0 to the checkpoint, at the step's ρ (h·ρ smaller, so
of lower degree: the step's stages at most, less f(y1)), which is as accurate as a step end.
The cubic Hermite interpolant of y0, y1, f(y0), f(y1) (Diffrax's, still the step's dense
output for `diffeqsolve`) is not, on a stiff flow: it takes h·f(y0), in which an error e along
an eigen-direction of curvature λ weighs h·λ·e, so where the step damps e the interpolant
multiplies it by up to 4/27·h·λ. On the log-spaced quadratic (λ_max = 1e4, T = 100, rtol
1e-6, PI control, 40 checkpoints) it read rows 1.43 × rtol from the closed form (relative to the
displacement) where the step ends were within 0.070 × rtol; the step from y0 reads them within
0.064 × rtol, for 0.9 % more evaluations (λ_max = 1e3: 0.95 → 0.080 × rtol, 5.8 % more;
`tests/test_rock4.py`). Ending the steps on the checkpoints instead costs as much or more
(+0.1 %, +4.6 % over the read there) and makes the steps depend on the checkpoints; with the
read they do not: only the observation costs, and its evaluations are counted
(`flowsim.integrate.flow`).
"""

import abc
import json
from importlib import resources
from typing import ClassVar

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..nn.problem import Params, Problem
from .flow import FlowIntegrator, flow_term, stepping
from ..kinds.solvers import Accuracy, FlowMethod, Stabilised, StepControl
from .solver import INIT_STEP_SEARCH_EVALS, AbstractFlowSolver

# Power iterations at t = 0 from f(y0): enough for a first estimate within the safety factor
# on the clustered spectra measured (1.72, 1.57, 1.50 at t = 0 on cohen-eos-quick).
_INIT_ITERATIONS = 20
# Power iterations per refresh, continuing from the last vector.
_REFRESH_ITERATIONS = 1
# After a rejected try, ρ may have been underestimated (the step unstable). One more
# iteration from the old vector raises it only by the ratio of the top eigenvalues, which on
# a clustered spectrum is slow; but an unstable step's error estimate is dominated by the
# components it amplified, the eigen-directions past the estimate. So the power iteration
# starts from the old vector plus the try's error direction, and goes on until the estimate
# moves by less than _RETRY_RTOL, at most _INIT_ITERATIONS times. Where ρ was right this
# stops after two products.
_RETRY_RTOL = 1e-2
# The share of rtol that the finishing procedure's amplified round-off may reach
# (`roundoff_bound`); measured on the log-spaced quadratic (λ_max = 1e4, rtol 1e-6): a ceiling
# at a tenth of rtol (h·ρ ≤ 463) rejects 20 of 2 724 steps, at a quarter (h·ρ ≈ 600) 219 of 2 399.
_ROUNDOFF_SHARE = 0.1


def _load_tables() -> dict:
    raw = json.loads(resources.files(__package__).joinpath("rock4.json").read_text())
    ms = np.asarray(raw["ms"], np.int64)
    starts = np.concatenate([[0], np.cumsum(2 * ms - 1)[:-1]])
    usable = ~np.isin(ms, raw["unstable"])
    return {"ms": ms[usable], "start": starts[usable], "fpa": np.asarray(raw["fpa"])[usable],
            "fpb": np.asarray(raw["fpb"])[usable], "fpbe": np.asarray(raw["fpbe"])[usable],
            "recf": np.asarray(raw["recf"]), "source": raw["source"]}


TABLES = _load_tables()


def stability_bound(ms: int) -> float:
    """The largest h·ρ that rock4.f's degree rule gives a Chebyshev part of degree `ms`."""
    return 0.353 * (ms + 4) ** 2 - 3.0


#: The largest h·ρ a step can take: the highest usable degree's interval.
MAX_H_RHO = stability_bound(int(TABLES["ms"][-1]))


def finishing_amplification(h_rho) -> np.ndarray:
    """|R₄(−h·ρ)| for the quartic of the finishing procedure of the degree a step at h·ρ takes
    (its four stages applied to y' = λy at hλ = h·ρ): how much it amplifies a perturbation
    of its input."""
    x = np.asarray(h_rho, np.float64)
    index = np.asarray(degree(x, 1.0)[1])
    a21, a31, a32, a41, a42, a43 = TABLES["fpa"][index].T
    b = TABLES["fpb"][index].T
    k1 = -x
    k2 = -x * (1 + a21 * k1)
    k3 = -x * (1 + a31 * k1 + a32 * k2)
    k4 = -x * (1 + a41 * k1 + a42 * k2 + a43 * k3)
    return np.abs(1 + b[0] * k1 + b[1] * k2 + b[2] * k3 + b[3] * k4)


def roundoff_bound(rtol: float) -> float:
    """The largest h·ρ (at most `MAX_H_RHO`) at which the round-off that the finishing
    procedure amplifies, eps·|R₄(−h·ρ)| relative to ‖y‖, stays within `_ROUNDOFF_SHARE` of
    `rtol` (see the module's docstring). float64 eps: the flows are integrated in float64."""
    x = np.linspace(0.0, MAX_H_RHO, 200_001)
    within = np.finfo(np.float64).eps * finishing_amplification(x) <= _ROUNDOFF_SHARE * rtol
    return float(x[np.argmin(within) - 1]) if not within.all() else MAX_H_RHO


def _dot(a: Params, b: Params) -> jax.Array:
    return sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def _axpy(a, x: Params, y: Params) -> Params:
    """a·x + y, leaf by leaf."""
    return jax.tree.map(lambda xi, yi: a * xi + yi, x, y)


def _normalised(v: Params) -> Params:
    norm = jnp.sqrt(_dot(v, v))
    # a zero vector (a start at a stationary point) becomes the constant direction
    ones = jax.tree.map(jnp.ones_like, v)
    v = jax.tree.map(lambda x, o: jnp.where(norm > 0, x, o), v, ones)
    norm = jnp.sqrt(_dot(v, v))
    return jax.tree.map(lambda x: x / norm, v)


def power_iteration(field, y: Params, v: Params, iterations: int) -> tuple[jax.Array, Params]:
    """`iterations` steps of power iteration on J = ∂field/∂y at y from v: (‖J v‖ for the last
    unit v, the next unit vector). ‖J v‖ ≤ ρ(J) for symmetric J, and approaches it."""
    def one(_, carry):
        _, v = carry
        jv = jax.jvp(field, (y,), (v,))[1]
        return jnp.sqrt(_dot(jv, jv)), _normalised(jv)

    v = _normalised(v)
    zero = jnp.zeros((), jax.tree.leaves(y)[0].dtype)
    return jax.lax.fori_loop(0, iterations, one, (zero, v))


def power_iteration_converged(field, y: Params, v: Params, rtol: float,
                              most: int) -> tuple[jax.Array, Params, jax.Array]:
    """Power iteration as `power_iteration` from v, until ‖J v‖ changes by less than `rtol`
    of itself between two iterations, or `most` iterations: (‖J v‖, the next unit vector, the
    iterations done)."""
    def going(carry):
        rho, before, _, k = carry
        return (k < 2) | ((k < most) & (jnp.abs(rho - before) > rtol * rho))

    def one(carry):
        rho, _, v, k = carry
        jv = jax.jvp(field, (y,), (v,))[1]
        return jnp.sqrt(_dot(jv, jv)), rho, _normalised(jv), k + 1

    zero = jnp.zeros((), jax.tree.leaves(y)[0].dtype)
    rho, _, v, k = jax.lax.while_loop(going, one, (zero, zero, _normalised(v), jnp.zeros((), jnp.int32)))
    return rho, v, k


class StabilisedState(eqx.Module):
    f0: Params              # the field at the step's start (the last step's f(y1))
    rho: jax.Array          # spectral radius estimate of ∂f/∂y (safety factor included)
    v: Params               # the power iteration's unit vector
    age: jax.Array          # accepted steps since ρ was estimated (counting the one that estimated it);
                            # negative after a rejected try: estimate ρ until it converges
    stages: jax.Array       # the last try's field evaluations
    hvps: jax.Array         # the last try's Jacobian-vector products
    error: Params           # the last try's error estimate (where a retry's power iteration looks)


# What a stabilised method certifies its steps with: its spectral radius estimate and the last
# try's stage count (auto's too).
RHO_SERIES = ("rho", "stages")


class AbstractStabilised(AbstractFlowSolver):
    """A stabilised explicit (Runge–Kutta–Chebyshev) method for an autonomous ODE dy/dt = f(y)
    (the time argument is passed on, unused by a gradient flow's field), its stage count set
    per step by h·ρ: the spectral radius ρ of ∂f/∂y from power iteration, refreshed every
    `rho_every` accepted steps and to convergence after a rejection, in its state. A method
    provides `advance_with(field, t0, t1, y0, f0, rho)` → (y1, its error estimate, the dense
    output, f(y1), the evaluations spent), `solution_with` (y1 alone, for `read`) and the
    longest h·ρ it may take (`h_rho_max`)."""

    h_rho_max: eqx.AbstractVar[float | jax.Array]
    # the preset's `rho_every`, `rho_safety` (flowsim.config.FlowPreset): the same defaults
    rho_every: int = eqx.field(static=True, default=10, kw_only=True)
    rho_safety: float = eqx.field(static=True, default=1.2, kw_only=True)

    term_structure: ClassVar = dfx.AbstractTerm
    interpolation_cls: ClassVar = dfx.ThirdOrderHermitePolynomialInterpolation.from_k
    certificate_series: ClassVar[tuple[str, ...]] = RHO_SERIES

    @property
    def init_evals(self) -> int:
        # the step-size search and `init`'s f(y0)
        return INIT_STEP_SEARCH_EVALS + 1

    @property
    def init_hvps(self) -> int:
        return _INIT_ITERATIONS     # the first estimate of ρ

    def cost(self, state: StabilisedState) -> tuple[jax.Array, jax.Array, jax.Array]:
        return state.stages, state.hvps, jnp.asarray(True)

    def certificate(self, problem: Problem, y: Params, state: StabilisedState) -> dict[str, jax.Array]:
        return {"rho": state.rho, "stages": state.stages}

    @abc.abstractmethod
    def advance_with(self, field, t0, t1, y0: Params, f0: Params, rho):
        """One step at spectral radius ρ; `field(t, y)` → (f(y), cost) as `advance`'s."""

    @abc.abstractmethod
    def solution_with(self, field, t0, t1, y0: Params, f0: Params, rho):
        """`advance_with`'s y1 alone, without f(y1) or the error estimate: (y1, the evaluations
        spent)."""

    def read(self, terms, t0, t, y0, args, committed: StabilisedState, step: StabilisedState, interpolated=None):
        """The solution at t inside the accepted step from (t0, y0) whose try left `step`: a
        step of this method from t0 to t at that step's ρ, f(y0) from the `committed` state (see
        the module's docstring for why not the step's `interpolated` value). Returns it, the
        field evaluations and the Jacobian-vector products it cost (none: ρ is the step's)."""
        zero = jnp.zeros((), jnp.int32)
        staged = lambda s, y: (self.func(terms, s, y, args), zero)
        y, evaluations = self.solution_with(staged, t0, t, y0, committed.f0, step.rho)
        return y, jnp.asarray(evaluations, jnp.int32), zero

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)

    def init(self, terms, t0, t1, y0, args) -> StabilisedState:
        f0 = self.func(terms, t0, y0, args)
        field = lambda y: self.func(terms, t0, y, args)
        rho, v = power_iteration(field, y0, f0, _INIT_ITERATIONS)
        int_zero = jnp.zeros((), jnp.int32)
        return StabilisedState(f0=f0, rho=self.rho_safety * rho, v=v, age=int_zero, stages=int_zero,
                               hvps=jnp.asarray(_INIT_ITERATIONS, jnp.int32), error=jax.tree.map(jnp.zeros_like, y0))

    def max_step(self, state: StabilisedState) -> jax.Array:
        """The longest step `h_rho_max` allows at the estimated ρ."""
        return self.h_rho_max / jnp.maximum(state.rho, jnp.finfo(state.rho.dtype).tiny)

    def rejected(self, committed: StabilisedState, tried: StabilisedState) -> StabilisedState:
        """The committed state after a rejected try: the try's ρ, vector and error kept, and
        ρ estimated again to convergence at the next try (a rejection may be a stability
        failure: ρ underestimated)."""
        return eqx.tree_at(lambda s: (s.rho, s.v, s.error, s.age), committed,
                           (tried.rho, tried.v, tried.error, jnp.asarray(-1, jnp.int32)))

    def step(self, terms, t0, t1, y0, args, state: StabilisedState, made_jump):
        del made_jump
        field = lambda y: self.func(terms, t0, y, args)
        retry = state.age < 0
        refresh = retry | (state.age >= self.rho_every)
        kept = lambda: (state.rho / self.rho_safety, state.v, jnp.zeros((), jnp.int32))
        renewed = lambda: (*power_iteration(field, y0, state.v, _REFRESH_ITERATIONS),
                           jnp.asarray(_REFRESH_ITERATIONS, jnp.int32))
        start = lambda: jax.tree.map(jnp.add, _normalised(state.v), _normalised(state.error))
        converged = lambda: power_iteration_converged(field, y0, start(), _RETRY_RTOL, _INIT_ITERATIONS)
        rho, v, hvps = jax.lax.cond(retry, converged, lambda: jax.lax.cond(refresh, renewed, kept))
        # never below the estimate the rejected try used: a converging iteration approaches ρ
        # from below, and a try that failed at that ρ is not tried again at a smaller one
        rho = jnp.where(retry, jnp.maximum(self.rho_safety * rho, state.rho), self.rho_safety * rho)
        zero = jnp.zeros((), jnp.int32)
        staged = lambda t, y: (self.func(terms, t, y, args), zero)
        y1, y_error, dense, f1, evaluations = self.advance_with(staged, t0, t1, y0, state.f0, rho)
        new = StabilisedState(f0=f1, rho=rho, v=v, age=jnp.where(refresh, 1, state.age + 1).astype(jnp.int32),
                              stages=jnp.asarray(evaluations, jnp.int32), hvps=hvps.astype(jnp.int32),
                              error=y_error)
        return y1, y_error, dense, new, dfx.RESULTS.successful


class Rock4(AbstractStabilised):
    """ROCK4, a step of degree ms costing ms + 4 evaluations. It can also step at a ρ known
    otherwise (`steps_at_given_rho`: the central flow's, from its tracked spectrum)."""

    # the longest h·ρ a step may take: `MAX_H_RHO`, or the round-off ceiling of the run's
    # tolerance (`roundoff_bound`), which `rock4_integrator` passes as an array, not a
    # static field, so that another tolerance runs the same compiled program
    h_rho_max: float | jax.Array = MAX_H_RHO

    steps_at_given_rho: ClassVar[bool] = True

    def order(self, terms) -> int:
        return 4

    def error_order(self, terms) -> int:
        # the embedded solution is of order 3: the estimate is O(h⁴), and rock4.f scales the
        # step by err^(-1/4)
        return 4

    def advance_with(self, field, t0, t1, y0, f0, rho):
        y1, y_error, dense, f1, _, _, ms = advance(field, None, t0, t1, y0, f0, rho, jnp.zeros((), jnp.int32))
        return y1, y_error, dense, f1, ms + 4

    def solution_with(self, field, t0, t1, y0, f0, rho):
        zero = jnp.zeros((), jnp.int32)
        # no f(y1): the end's field is zeros, and the estimate that uses it is never computed
        unevaluated = lambda t, y: (jax.tree.map(jnp.zeros_like, y), zero, None)
        y1, *_, ms = advance(field, unevaluated, t0, t1, y0, f0, rho, zero)
        return y1, ms + 3

    def step_at_rho(self, field, end, t0, t1, y0, f0, rho, no_cost):
        return advance(field, end, t0, t1, y0, f0, rho, no_cost)

    def max_step_at_rho(self, rho) -> jax.Array:
        return self.h_rho_max / rho


def degree(h, rho) -> tuple[jax.Array, jax.Array]:
    """The Chebyshev part's degree for a step h at spectral radius ρ, as rock4.f chooses it:
    the smallest usable ms ≥ ⌊√((3 + h·ρ)/0.353)⌋ + 1 − 4 (the highest where none is); and its
    index in `TABLES`."""
    need = jnp.floor(jnp.sqrt((3.0 + h * rho) / 0.353)) + 1 - 4
    ms = jnp.asarray(TABLES["ms"])
    index = jnp.minimum(jnp.searchsorted(ms, jnp.maximum(need, 1), side="left"), ms.size - 1)
    return ms[index], index


def advance(field, end, t0, t1, y0: Params, f0: Params, rho, no_cost):
    """One ROCK4 step from (t0, y0) to t1 at spectral radius ρ, f0 = f(y0) given.

    `field(t, y)` → (f(y), c): each stage passes its own abscissa t (the recurrence applied to
    dt/dt = 1), so that a field which warm-starts an inner solve from a time (the central
    flow's eigen-tracking) starts each stage near its point; c (an array) is what the
    evaluation cost, summed over the step's evaluations from `no_cost` (c's zero).
    `end(t1, y1)` → (f(y1), c, aux) is the last evaluation (None: `field`'s, aux None), for a
    field whose end point carries more than f.
    Returns y1, the embedded error estimate, the dense output, f(y1), the end's aux, the
    summed costs and the degree (the step's evaluations: degree + 4)."""
    h = t1 - t0
    ms, index = degree(h, rho)
    start = jnp.asarray(TABLES["start"])[index]
    recf = jnp.asarray(TABLES["recf"], h.dtype)

    # the Chebyshev part: u_1 = y0 + h μ1 f0, u_i = h μ_i f(u_{i-1}) + (1 + κ_i) u_{i-1} − κ_i u_{i-2}
    def chebyshev(i, carry):
        (before, t_before), (last, t_last), spent = carry
        mu, kappa = recf[start + 2 * i - 3], recf[start + 2 * i - 2]
        f, c = field(t_last, last)
        u = jax.tree.map(lambda f, a, b: h * mu * f + (1 + kappa) * a - kappa * b, f, last, before)
        return (last, t_last), (u, h * mu + (1 + kappa) * t_last - kappa * t_before), spent + c

    first = (_axpy(h * recf[start], f0, y0), t0 + h * recf[start])
    _, (u, tu), spent = jax.lax.fori_loop(2, ms + 1, chebyshev, ((y0, t0), first, no_cost))

    # the finishing procedure: four stages from u, and the embedded estimate with f(y1)
    fpa = jnp.asarray(TABLES["fpa"], h.dtype)[index] * h
    b = jnp.asarray(TABLES["fpb"], h.dtype)[index] * h
    be = jnp.asarray(TABLES["fpbe"], h.dtype)[index] * h
    k1, c1 = field(tu, u)
    k2, c2 = field(tu + fpa[0], _axpy(fpa[0], k1, u))
    k3, c3 = field(tu + fpa[1] + fpa[2], jax.tree.map(lambda x, p, q: x + fpa[1] * p + fpa[2] * q, u, k1, k2))
    k4, c4 = field(tu + fpa[3] + fpa[4] + fpa[5],
                   jax.tree.map(lambda x, p, q, r: x + fpa[3] * p + fpa[4] * q + fpa[5] * r, u, k1, k2, k3))
    y1 = jax.tree.map(lambda x, p, q, r, s: x + b[0] * p + b[1] * q + b[2] * r + b[3] * s, u, k1, k2, k3, k4)
    f1, c5, aux = (*field(t1, y1), None) if end is None else end(t1, y1)
    d = be[:4] - b
    y_error = jax.tree.map(lambda p, q, r, s, f: d[0] * p + d[1] * q + d[2] * r + d[3] * s + be[4] * f,
                           k1, k2, k3, k4, f1)
    dense = {"y0": y0, "y1": y1, "k": jax.tree.map(lambda a, c: jnp.stack([h * a, h * c]), f0, f1)}
    return y1, y_error, dense, f1, aux, spent + c1 + c2 + c3 + c4 + c5, ms


def rock4_integrator(spec: FlowMethod, *, accuracy: Accuracy, step_control: StepControl, stabilised: Stabilised,
                     learning_rate: float | None = None, stop_loss: float = 0.0) -> FlowIntegrator:
    """The factory the registry names for rock4: its steps no longer than round-off at this
    tolerance allows (the module's docstring)."""
    solver = Rock4(rho_every=stabilised.rho_every, rho_safety=stabilised.rho_safety,
                   h_rho_max=jnp.asarray(roundoff_bound(accuracy.rtol)))
    return FlowIntegrator(solver=solver, **stepping(accuracy, step_control, stop_loss), term=flow_term(learning_rate))
