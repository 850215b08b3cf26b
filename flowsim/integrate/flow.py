"""Exact gradient flow dW/dt = −rate ∇L(W) with an adaptive Diffrax solver, advanced
segment by segment between checkpoint times.

Every segment is one `diffeqsolve` that starts from a complete `FlowState`: the solver's
own state (e.g. Tsit5's first-same-as-last evaluation), the PID controller's error history,
and the controller's proposal for the next step. Carrying all of it makes the segmented
solve one computation — resuming from a stored `FlowState` is bit-identical to never having
stopped — and makes a segmented solve agree with a single long solve to within tolerance
(their difference is that each segment's last step is clipped to its end time, after which
the next segment starts from the step the clipped one replaced).
The initial state is built once, outside the segment function, so every segment has the
same pytree structure and the segment function compiles once.
"""

from collections.abc import Callable
from typing import ClassVar

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import optimistix as optx

from .. import status
from ..config.typed import FlowPreset
from ..problem import Params
from ..problem import Problem, hessian_vector_product
from .base import AbstractIntegrator
from .filippov import FilippovIntegrator
from .registry import FLOW_METHODS

# Vector-field evaluations outside the per-step count: the initial step-size search (2)
# plus, for FSAL methods, the first step's extra evaluation of f(t0, y0) (1).
_INIT_EVALS_STEP_SEARCH = 2


class ProposingPID(dfx.AbstractAdaptiveStepSizeController):
    """A `PIDController` whose state also carries its own proposal for the next step.

    Diffrax's PID state is (inv_err, prev_inv_err, at_dtmin) — the proposed next step is
    not in it, so a chained solve would otherwise re-run the initial step search. Here the
    proposal (before clipping to a segment end) rides along and is passed back as `dt0`.
    """

    pid: dfx.PIDController
    rtol: float
    atol: float
    norm: Callable = optx.rms_norm

    def wrap(self, direction):
        return self

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        tnext, inner = self.pid.init(terms, t0, t1, y0, dt0, args, func, error_order)
        # PID's initial `at_dtmin` is a Python bool and becomes an array after one step: make
        # it an array now, so that the state has one structure (one compilation, one
        # checkpoint layout) from the first segment on.
        return tnext, (jax.tree.map(jnp.asarray, inner), tnext - t0)

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        inner, proposed = controller_state
        keep, next_t0, next_t1, jump, inner, result = self.pid.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, inner)
        # A step shorter than the one proposed was clipped to a segment end. Its small error
        # would let PID grow the next step by up to `factormax` from the clipped length; in a
        # stability-limited tail that oversized first step of the next segment is rejected
        # again and again. Carry at most the proposal the clipped step replaced.
        step = next_t1 - next_t0
        clipped = keep & (t1 - t0 < proposed)
        return keep, next_t0, next_t1, jump, (inner, jnp.where(clipped, jnp.minimum(step, proposed), step)), result


class FlowState(eqx.Module):
    t: jax.Array
    y: Params
    solver_state: object
    controller_state: object


def _finite(tree) -> jax.Array:
    """True when every entry of every leaf is finite."""
    return jnp.all(jnp.asarray([jnp.all(jnp.isfinite(v)) for v in jax.tree.leaves(tree)]))


def _velocity(t, y, problem: Problem) -> Params:
    return problem.velocity(y)


class _ModifiedVelocity(eqx.Module):
    """Backward-error-analysis flow of GD with step η (Barrett & Dherin 2021):
    dW/dt = −rate (∇L + (η/2) rate ∇²L ∇L), i.e. the gradient flow of L + (η·rate/4)‖∇L‖².
    η is an array leaf, not a constant of the closure, so modified flows of different
    steps share one compilation."""

    eta: jax.Array

    def __call__(self, t, y, problem: Problem) -> Params:
        g = problem.grad(y)
        hg = hessian_vector_product(problem, y, g)
        return jax.tree.map(lambda gi, hi: -problem.rate * (gi + 0.5 * self.eta.astype(gi.dtype) * problem.rate * hi),
                            g, hg)


def _modified_velocity(eta: float) -> _ModifiedVelocity:
    return _ModifiedVelocity(eta=jnp.asarray(eta, dtype=jnp.float64))


class FlowIntegrator(AbstractIntegrator):
    """Advances a `FlowState` to a later time; knows nothing of files or checkpoints."""

    solver: dfx.AbstractSolver
    controller: ProposingPID
    term: dfx.ODETerm
    max_steps: int = eqx.field(static=True)
    stop_loss: float = eqx.field(static=True)
    evals_per_step: int = eqx.field(static=True)    # 0 when not countable (implicit)

    discrete: ClassVar[bool] = False
    certificate_series: ClassVar[tuple[str, ...]] = ()

    def init(self, problem: Problem, params: Params, key: jax.Array | None = None) -> FlowState:
        """The state at t = 0: solver state and the controller's first step proposal (the
        flow is deterministic: `key` is not used)."""
        t0 = jnp.asarray(0.0, dtype=jax.tree.leaves(params)[0].dtype)
        terms = self.term
        tnext, cstate = self.controller.init(terms, t0, t0 + 1.0, params, None, problem,
                                             self.solver.func, self.solver.error_order(terms))
        sstate = self.solver.init(terms, t0, tnext, params, problem)
        return FlowState(t=t0, y=params, solver_state=sstate, controller_state=cstate)

    @property
    def init_evals(self) -> int:
        if not self.evals_per_step:
            return 0
        return _INIT_EVALS_STEP_SEARCH + int(self.solver.tableau.fsal)

    def advance(self, problem: Problem, state: FlowState, t_next) -> tuple[FlowState, dict]:
        """Integrate from `state.t` to `t_next`. Returns the new state and the segment's
        statistics (steps, accepted, rejected, vf_evals, status code)."""
        event = None
        if self.stop_loss > 0:
            event = dfx.Event(lambda t, y, args, **kw: args.loss(y) <= self.stop_loss)
        # A state whose vector field is already non-finite cannot be integrated: the step
        # controller would reject step after step until `max_steps` (minutes of work for a
        # foregone result). Such a segment is solved over zero length and ends `nonfinite`.
        finite0 = _finite(problem.grad(state.y))
        t_next = jnp.where(finite0, t_next, state.t)
        sol = dfx.diffeqsolve(
            self.term, self.solver, t0=state.t, t1=t_next, dt0=state.controller_state[1], y0=state.y,
            args=problem, saveat=dfx.SaveAt(t1=True, solver_state=True, controller_state=True),
            stepsize_controller=self.controller, solver_state=state.solver_state,
            controller_state=state.controller_state, made_jump=False, event=event,
            max_steps=self.max_steps, throw=False)
        y = jax.tree.map(lambda x: x[-1], sol.ys)
        new = FlowState(t=sol.ts[-1], y=y, solver_state=sol.solver_state,
                        controller_state=sol.controller_state)
        finite = _finite(problem.grad(y))
        code = jnp.where(~finite0, status.NONFINITE,
               jnp.where(sol.result == dfx.RESULTS.successful, status.DONE,
               jnp.where(sol.result == dfx.RESULTS.event_occurred, status.STOPPED,
               jnp.where(~finite, status.NONFINITE,
               jnp.where(sol.result == dfx.RESULTS.max_steps_reached, status.MAX_STEPS, status.FAILED)))))
        steps = sol.stats["num_steps"]
        stats = {"steps": steps, "accepted": sol.stats["num_accepted_steps"],
                 "rejected": sol.stats["num_rejected_steps"],
                 "vf_evals": steps * self.evals_per_step, "status": code}
        return new, stats

    def time(self, state: FlowState) -> jax.Array:
        return state.t

    def params(self, state: FlowState) -> Params:
        return state.y

    def step(self, state: FlowState) -> None:
        return None

    def certificate(self, problem: Problem, state: FlowState) -> dict[str, jax.Array]:
        return {}

    def out_of_steps(self, steps: int) -> bool:
        return steps >= self.max_steps


def make_flow_integrator(preset: FlowPreset, *, stop_loss: float = 0.0) -> AbstractIntegrator:
    """Build the integrator of a `flow` or `modified-flow` solver preset."""
    if preset.method not in FLOW_METHODS:
        raise ValueError(f"unknown flow method {preset.method!r}; allowed: {', '.join(FLOW_METHODS)}")
    method = FLOW_METHODS[preset.method]
    if method.filippov:
        return FilippovIntegrator(rtol=preset.rtol, atol=preset.atol, max_steps=int(preset.max_steps),
                                  stop_loss=float(stop_loss), slots=preset.slots)
    pid = dfx.PIDController(rtol=preset.rtol, atol=preset.atol, pcoeff=preset.pcoeff,
                            icoeff=preset.icoeff, dtmin=preset.dtmin or None, dtmax=preset.dtmax or None)
    solver_class = getattr(dfx, method.diffrax)
    if method.implicit:
        # Matrix-free Newton–Krylov: Newton linearises the vector field with jax.linearize,
        # so GMRES only ever applies Hessian-vector products; the md×md Jacobian that the
        # default VeryChord root finder would build is never formed.
        newton = optx.Newton(rtol=preset.newton_rtol, atol=preset.newton_atol,
                             linear_solver=lx.GMRES(rtol=preset.linear_rtol, atol=preset.linear_atol,
                                                    restart=preset.krylov_restart,
                                                    max_steps=preset.krylov_max_steps))
        solver = solver_class(root_finder=newton)
        evals = 0
    else:
        solver = solver_class()
        tab = solver.tableau
        evals = len(tab.c) + 1 - int(tab.fsal)
    field = _modified_velocity(preset.learning_rate) if preset.kind == "modified-flow" else _velocity
    controller = ProposingPID(pid=pid, rtol=pid.rtol, atol=pid.atol)
    return FlowIntegrator(solver=solver, controller=controller, term=dfx.ODETerm(field),
                          max_steps=int(preset.max_steps), stop_loss=float(stop_loss), evals_per_step=evals)
