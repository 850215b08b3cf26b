"""Tsitouras' 5(4) method as flowsim steps it: Diffrax's Tsit5 (its tableau, error estimate,
first-same-as-last evaluation and dense output: Diffrax's interpolant of the seven stage
increments), written out so that each pass over the weights does only what it must.

Why not Diffrax's step: it loops over its stages with a zero-filled buffer of all seven stage
increments, and forms each stage's point as the tableau's whole row times that buffer (the rows
not yet written are zeros: ~2.5× the arithmetic and memory traffic a stage needs), then adds y0
in a pass of its own and stores the increment in a third; the error estimate is one more product
with the buffer. On the Fig. 1 problem (m = 2 000) that was 22 % of the flow's time
(bench/bench_flow_overhead.py). Here each stage's point is one fused sum over the stages
written so far, y0 + Σ_j (a_ij·h)·f_j; the step's end is the last stage's point (the tableau is
first-same-as-last: its last row is b), the error is one fused sum Σ_j (e_j·h)·f_j, and the
dense output keeps the stage fields f_j as they are: a time inside the step is read as one
fused sum y0 + Σ_j (b_j(θ)·h)·f_j with Diffrax's interpolant's weights (`_Interpolation`:
Diffrax's increments k_j = h·f_j are never stacked), and the stiffness probe reads the fields
(its ratio does not depend on h). Same method, other rounding: a step agrees with
Diffrax's to round-off, a flow to 1e-10 (tests/test_tsit5.py).
"""

from typing import ClassVar

import diffrax as dfx
import jax
import jax.numpy as jnp

from . import stiffness
from ..kinds.solvers import Accuracy, FlowMethod, StepControl
from ..nn.problem import Params
from .flow import FlowIntegrator, flow_term, stepping
from .solver import INIT_STEP_SEARCH_EVALS, AbstractFlowSolver

_DIFFRAX = dfx.Tsit5()
TABLEAU: dfx.ButcherTableau = _DIFFRAX.tableau
# Evaluations per try: seven stages, the first the last try's last (first same as last); `c`
# holds the abscissae of the six after it.
EVALS_PER_STEP = len(TABLEAU.c)
assert TABLEAU.fsal and TABLEAU.ssal    # the step's end is its last stage's point


def _combine(base, coeffs, fs):
    """base + Σ_j coeffs_j · fs_j leaf by leaf, one fused pass (base None: the sum alone);
    the coefficients are traced scalars (h folded in), the zero ones skipped."""
    def leaf(b, *f):
        terms = [c * x for c, x in zip(coeffs, f) if c is not None]
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        return total if b is None else b + total
    if base is None:
        return jax.tree.map(lambda *f: leaf(None, *f), *fs)
    return jax.tree.map(leaf, base, *fs)


def increments(t0, t1, f) -> Params:
    """Diffrax's dense output, the stage increments k_j = h·f_j stacked (each leaf [7, ...]),
    from the stage fields f (a tuple) of the step from t0 to t1."""
    h = t1 - t0
    return jax.tree.map(lambda *x: h * jnp.stack(x), *f)


class _Interpolation(dfx.AbstractLocalInterpolation):
    """The step's dense output: Diffrax's Tsit5 interpolant y0 + Σ_j b_j(θ)·k_j of the stage
    increments k_j = h·f_j, formed where a time inside the step is read as one fused sum
    y0 + Σ_j (b_j(θ)·h)·f_j. The weights b_j(θ) are Diffrax's, read off its interpolant of the
    unit increments (k = I, y0 = 0: its sum is then b itself, exactly); the increments and their
    stack, which Diffrax's sum would need, are not formed (per row read on the Fig. 1 problem
    that was 2 % of the driver's time: bench_flow_overhead.py). h = t1 − t0 is the step's own,
    bit for bit."""

    t0: jax.Array
    t1: jax.Array
    y0: Params
    f: tuple

    def __init__(self, *, t0, t1, y0, y1, f):
        del y1     # (Diffrax's interpolants take it)
        self.t0, self.t1, self.y0, self.f = t0, t1, y0, f

    def evaluate(self, t0, t1=None, left: bool = True) -> Params:
        del left
        if t1 is not None:
            return jax.tree.map(jnp.subtract, self.evaluate(t1), self.evaluate(t0))
        h, stages = self.t1 - self.t0, len(self.f)
        unit = dfx.Tsit5.interpolation_cls(t0=self.t0, t1=self.t1, y0=jnp.zeros(stages, h.dtype), y1=None,
                                           k=jnp.eye(stages, dtype=h.dtype))
        b = unit.evaluate(t0)
        return _combine(self.y0, [b[j] * h for j in range(stages)], self.f)


def _scaled(row, h):
    """The tableau row's coefficients times the step h (None for a zero coefficient)."""
    return [None if float(a) == 0.0 else jnp.asarray(float(a), h.dtype) * h for a in row]


class Tsit5(AbstractFlowSolver):
    """Tsit5 (see the module's docstring); its state is f(y0), the last step's last stage."""

    term_structure: ClassVar = dfx.AbstractTerm
    interpolation_cls: ClassVar = _Interpolation
    tableau: ClassVar[dfx.ButcherTableau] = TABLEAU

    def order(self, terms):
        return _DIFFRAX.order(terms)

    def error_order(self, terms):
        return _DIFFRAX.error_order(terms)

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)

    def init(self, terms, t0, t1, y0, args) -> Params:
        return self.func(terms, t0, y0, args)

    @property
    def init_evals(self) -> int:
        # the step-size search and `init`'s f(y0)
        return INIT_STEP_SEARCH_EVALS + 1

    def cost(self, state) -> tuple[jax.Array, jax.Array, jax.Array]:
        return jnp.asarray(EVALS_PER_STEP), jnp.asarray(0), jnp.asarray(False)

    def step(self, terms, t0, t1, y0, args, f0: Params, made_jump):
        """One step from (t0, y0), f0 = f(y0): y1, the error estimate, the dense output (y0, y1
        and the stage fields f_j, a tuple, which `_Interpolation` reads with Diffrax's weights
        where a time inside the step is read; a step held ahead keeps the fields,
        every other try only reads them), f(y1) and Diffrax's result. The flow has no jumps
        (`made_jump` is always False: f0 is always f(y0))."""
        del made_jump
        h = t1 - t0
        fs = [f0]
        for c, row in zip(TABLEAU.c, TABLEAU.a_lower):
            y = _combine(y0, _scaled(row, h), fs)
            fs.append(terms.vf(t0 + jnp.asarray(float(c), h.dtype) * h, y, args))
        y1 = y     # the last stage's point is the step's end (first same as last)
        y_error = _combine(None, _scaled(TABLEAU.b_error, h), fs)
        return y1, y_error, dict(y0=y0, y1=y1, f=tuple(fs)), fs[-1], dfx.RESULTS.successful

    def held(self, dense: dict) -> jax.Array:
        """Hairer's h·ρ from the step's stages reached `stiffness.HELD_SHARE` of Tsit5's
        stability limit (the estimate is a ratio of two sums of the stages: the fields do, h
        cancels)."""
        return stiffness.held(TABLEAU, dense["f"])


def tsit5_integrator(spec: FlowMethod, *, accuracy: Accuracy, step_control: StepControl,
                     learning_rate: float | None = None, stop_loss: float = 0.0) -> FlowIntegrator:
    """The factory the registry names for tsit5; `learning_rate`: GD's step whose modified
    flow is solved (None: the gradient flow)."""
    return FlowIntegrator(solver=Tsit5(), **stepping(accuracy, step_control, stop_loss), term=flow_term(learning_rate))
