"""The flow engine: exact gradient flow dW/dt = −rate ∇L(W) stepped by a flow method (an
`AbstractFlowSolver`, `flowsim.integrate.solver`: every method declares what the engine asks
of it) under flowsim's PID controller, advanced from one checkpoint time to the next by a
loop over the method's steps. The methods import this module, never the reverse; their
factories build a `FlowIntegrator` with `stepping` and `flow_term`.

The steps do not depend on the checkpoints: a checkpoint inside a step is read from the
step's dense output (the method's interpolant, as Diffrax's `SaveAt(ts=...)` does), or by the
method's own `read` (a stabilised method: a shorter step from the step's start, its
evaluations counted), and only the run's horizon ends a step on a given time. So
the checkpoint count costs observations, not steps (ending a step on each of 60 log-spaced
checkpoints took 83 steps where 38 reach t = 20 000 on the Fig. 1 problem), and where the
chunks of the driver end changes nothing. The step that passes a checkpoint is held in the state, uncommitted
(`Ahead`, scratch): the committed state is the last step end before it, with the solver's
own state (e.g. Tsit5's first-same-as-last evaluation), the PID controller's error history
and its proposal for the next step. A checkpoint stores the committed state only, and the
step held ahead is computed again from it on resume, with the same result: a resumed run is
bit-identical to one never stopped.
The initial state is built once, outside the advance function, so every stretch has the
same pytree structure and the advance function compiles once.
"""

import math
from collections.abc import Callable
from typing import ClassVar

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx

from ..status import Status
from ..nn.problem import Params
from ..nn.problem import Problem, hessian_vector_product
from .base import AbstractIntegrator, Scratch
from ..kinds.solvers import Accuracy, StepControl
from .solver import AbstractFlowSolver

# Tries in a row whose values were not finite after which a member ends `nonfinite`: each
# shrinks the step by the controller's factormin (0.2), so the last was ~1e-14 of the first
# (a state whose vector field is not finite would otherwise be tried until `max_steps`).
_NONFINITE_TRIES = 20

# A flow's statistics, in the order its advance accumulates them: `hvps` counts ROCK4's
# Jacobian-vector products (power iteration for ρ), `stiff_steps` the accepted steps held by
# stability (explicit Runge–Kutta methods, and `auto` in its Tsit5 steps: Hairer's estimate of
# h·ρ from the last two stages reached `stiffness.HELD_SHARE` of the stability limit),
# `stabilised_steps` the accepted steps a stabilised method took (all of rock4's and rkc2's,
# `auto`'s in ROCK4), `stiff_rejections` the rejected tries at the stability limit: held, as a
# step in `stiff_steps` is, or a stabilised method's try as long as its h·ρ ceiling allows
# (`max_step`: round-off or its stability interval). Rejections that are not at the limit are
# what the solver advisor reads as kinks (flowsim.run.advice).
FLOW_STAT_KEYS = ("steps", "accepted", "rejected", "vf_evals", "hvps", "stiff_steps", "stabilised_steps",
                  "stiff_rejections")


class ProposingPID(dfx.AbstractAdaptiveStepSizeController):
    """A `PIDController` whose state also carries its own proposal for the next step.

    Diffrax's PID state is (inv_err, prev_inv_err, at_dtmin) — the proposed next step is
    not in it. Here the proposal (before a step is clipped to end on a time) rides along, and
    the next step is tried with it.
    """

    pid: dfx.PIDController
    rtol: jax.Array     # the PID's own (Diffrax's controllers carry them)
    atol: jax.Array
    norm: Callable = optx.rms_norm

    def wrap(self, direction):
        return self

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        tnext, inner = self.pid.init(terms, t0, t1, y0, dt0, args, func, error_order)
        # PID's initial `at_dtmin` is a Python bool and becomes an array after one step: make
        # it an array now, so that the state has one structure (one compilation, one
        # checkpoint layout) from the first segment on.
        return tnext, (jax.tree.map(jnp.asarray, inner), tnext - t0)

    def error(self, y0, y1, y_error) -> tuple[jax.Array, jax.Array]:
        """The try's error in the PID's units, rms(y_error / (atol + rtol·max(|y0|, |y1|))) as
        Diffrax's PID forms it (inf where it is not finite), and whether y1 and y_error are
        finite: one fused pass over the three. The sum of squares carries 0·y1 + 0·y_error,
        NaN where either is not finite (a square that overflows is inf, not NaN: an error too
        large, not a blowup); a separate finiteness sum, NaN guard and Diffrax's own scaling
        and norm were four passes (6.8 % of the Fig. 1 flow's time: bench_flow_overhead --trace)."""
        def leaf(a, b, e):
            q = e / (self.atol + jnp.maximum(jnp.abs(a), jnp.abs(b)) * self.rtol)
            return jnp.sum(q * q + (b * 0 + e * 0))
        total = sum(jax.tree.leaves(jax.tree.map(leaf, y0, y1, y_error)))
        size = sum(x.size for x in jax.tree.leaves(y0))
        finite = ~jnp.isnan(total)
        return jnp.where(finite, jnp.sqrt(total) / math.sqrt(size), jnp.inf), finite

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        return self.judge(t0, t1, self.error(y0, y1_candidate, y_error)[0], error_order, controller_state)

    def judge(self, t0, t1, error, error_order, controller_state):
        """`adapt_step_size` given the try's error as `error` computes it: Diffrax's PID on that
        scalar, which its scaling (made atol 1, rtol 0) and norm leave as it is."""
        inner, proposed = controller_state
        unit = eqx.tree_at(lambda p: (p.rtol, p.atol), self.pid, (jnp.zeros_like(error), jnp.ones_like(error)))
        zero = jnp.zeros_like(error)
        keep, next_t0, next_t1, jump, inner, result = unit.adapt_step_size(
            t0, t1, zero, zero, None, error, error_order, inner)
        # A step shorter than the one proposed was clipped to end on a time. Its small error
        # would let PID grow the next step by up to `factormax` from the clipped length; in a
        # stability-limited tail that oversized first step of the next segment is rejected
        # again and again. Carry at most the proposal the clipped step replaced.
        step = next_t1 - next_t0
        clipped = keep & (t1 - t0 < proposed)
        return keep, next_t0, next_t1, jump, (inner, jnp.where(clipped, jnp.minimum(step, proposed), step)), result


class Ahead(Scratch):
    """What lies past the committed state: the accepted step that ends beyond the time the
    member was advanced to, not yet committed (`valid`), and that time `at` with the
    weights there (read from the step's dense output). Zero after a restore, where the
    member's position is its committed time and the step is computed again."""

    valid: jax.Array
    t1: jax.Array
    y1: Params
    solver_state: object
    controller_state: object
    stages: object          # the step's dense output without its ends (see `_stages`)
    held: jax.Array         # whether the step was held by stability (counted when committed)
    at: jax.Array
    y_at: Params


class FlowState(eqx.Module):
    t: jax.Array                # where the last committed step ended
    y: Params                   # the weights there
    solver_state: object
    controller_state: object
    ahead: Ahead


def _stages(dense: dict) -> dict:
    """A Runge–Kutta step's dense output (every flow method is one: y0, y1 and the stages k)
    without its ends, which the state holds already: two parameter-sized copies fewer."""
    return {k: v for k, v in dense.items() if k not in ("y0", "y1")}


def _where(c, a, b):
    """`a` where `c`, else `b`, leaf by leaf; `c` has the leading (batch) axes of the leaves."""
    return jax.tree.map(lambda x, y: jnp.where(jnp.reshape(c, jnp.shape(c) + (1,) * (jnp.ndim(x) - jnp.ndim(c))),
                                               x, y), a, b)


@eqx.filter_jit
def _velocity(t, y, problem: Problem) -> Params:
    # jitted so that it is traced once per process: `init` calls it four times (the first
    # step's size, the first stage, a step's shapes), the segment program again (JAX inlines it)
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


class StateForm(eqx.Module):
    """What the engine integrates in: the gradient flow's state is the weights themselves; an
    adaptive method's stable flow's (`flowsim.integrate.adaptive_flows`) is the weights beside the
    method's moments. The engine steps, controls and checkpoints the whole state; the
    observables, the archive's weights and `stop_loss` see the weights only."""

    start_evals: ClassVar[int] = 0      # gradient evaluations of `start`, outside the statistics

    def start(self, problem: Problem, params: Params):
        """The state at t = 0 from the initial weights."""
        return params

    def weights(self, y) -> Params:
        """The weights in the state y."""
        return y

    def preconditioner(self, y) -> Params | None:
        """The diagonal of the flow's preconditioner at the state y (`AbstractIntegrator.preconditioner`);
        None: the gradient flow's, P = I."""
        return None


class FlowIntegrator(AbstractIntegrator):
    """Advances a `FlowState` to a later time by a flow method (`solver`, an
    `AbstractFlowSolver`) under the PID controller; knows nothing of files or checkpoints.
    What a try costs, what bounds its step, what a rejected try keeps, how a time inside a
    step is read and what certifies the result are the method's (`flowsim.integrate.solver`)."""

    solver: AbstractFlowSolver
    controller: ProposingPID
    term: dfx.ODETerm
    max_steps: int = eqx.field(static=True)
    stop_loss: float = eqx.field(static=True)
    form: StateForm = StateForm()     # the state's form (the field `term` is the form's field)

    discrete: ClassVar[bool] = False

    @property
    def certificate_series(self) -> tuple[str, ...]:
        return self.solver.certificate_series

    @property
    def init_evals(self) -> int:
        return self.solver.init_evals + self.form.start_evals

    @property
    def init_hvps(self) -> int:
        return self.solver.init_hvps

    def certificate(self, problem: Problem, state: FlowState) -> dict[str, jax.Array]:
        return self.solver.certificate(problem, self.params(state), state.solver_state)

    def init(self, problem: Problem, params: Params, key: jax.Array | None = None) -> FlowState:
        """The state at t = 0: solver state and the controller's first step proposal (the
        flow is deterministic: `key` is not used)."""
        t0 = jnp.asarray(0.0, dtype=jax.tree.leaves(params)[0].dtype)
        terms = self.term
        params = self.form.start(problem, params)     # (the state the flow is integrated in)
        tnext, cstate = self.controller.init(terms, t0, t0 + 1.0, params, None, problem,
                                             self.solver.func, self.solver.error_order(terms))
        sstate = self.solver.init(terms, t0, tnext, params, problem)
        step = jax.eval_shape(lambda: self._attempt(problem, t0, params, sstate, cstate, t0))
        zeros = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), step[1:6] + step[8:9])
        return FlowState(t=t0, y=params, solver_state=sstate, controller_state=cstate,
                         ahead=Ahead(jnp.asarray(False), *zeros, at=t0, y_at=params))

    @eqx.filter_jit
    def _attempt(self, problem: Problem, t, y, solver_state, controller_state, clip):
        """One try of the step the controller proposes from the committed state (t, y, solver
        state, controller state), ended on `clip` where it would pass it: (accepted, t1, y1,
        solver state, controller state, dense output, result, non-finite, held by stability, at
        the stability limit: held or at the solver's h·ρ ceiling). Jitted, and so
        traced once per process: `init` traces it for the shapes of a step held ahead, and
        the first segment's program finds that trace (JAX inlines the call)."""
        proposal = controller_state[1]
        ceiling = jnp.asarray(False)
        longest = self.solver.max_step(solver_state)
        if longest is not None:    # ROCK4: no longer than stability and round-off allow
            ceiling = longest <= proposal
            proposal = jnp.minimum(proposal, longest)
        order = self.solver.step_error_order(self.term, solver_state)
        # as Diffrax: a step that would end within an ulp of `clip` ends on it
        t1 = jnp.where(t + proposal > jnp.nextafter(clip, -jnp.inf), clip, t + proposal)
        y1, y_err, dense, sstate, solver_result = self.solver.step(self.term, t, t1, y, problem, solver_state, False)
        error, finite = self.controller.error(y, y1, y_err)
        keep, _, _, _, cstate, result = self.controller.judge(t, t1, error, order, controller_state)
        blowup = ~finite
        # a rejected step's solver failure only makes the next try smaller (as in Diffrax)
        result = dfx.RESULTS.where(keep & (solver_result != dfx.RESULTS.successful), solver_result, result)
        held = self.solver.held(dense)
        return keep, t1, y1, sstate, cstate, _stages(dense), result, blowup, held, held | ceiling

    def advance(self, problem: Problem, state: FlowState, t_next, horizon=None) -> tuple[FlowState, dict]:
        """Integrate from the member's position to `t_next`, ending a step there only if it is
        the `horizon` (None: `t_next` is). Returns the new state and the stretch's statistics
        (steps, accepted, rejected, vf_evals, status code); a step is counted once, when it
        is committed (or rejected), however often it was computed."""
        t_next = jnp.asarray(t_next, state.t.dtype)
        clip = t_next if horizon is None else jnp.maximum(jnp.asarray(horizon, t_next.dtype), t_next)

        def commit(s: FlowState, take, t1, y1, sstate, cstate, held, stats, code):
            evals, hvps, stabilised = self.solver.cost(sstate)
            # a cond, not a select (as the step held ahead): vmapped, a select again
            t, y, sstate, cstate = jax.lax.cond(take, lambda: (t1, y1, sstate, cstate),
                                                lambda: (s.t, s.y, s.solver_state, s.controller_state))
            s = FlowState(t=t, y=y, solver_state=sstate, controller_state=cstate, ahead=s.ahead)
            stats = stats + take * jnp.stack([1, 1, 0, evals, hvps, held, stabilised, 0]).astype(stats.dtype)
            if self.stop_loss > 0:
                code = jnp.where(take & (problem.loss(self.form.weights(s.y)) <= self.stop_loss), Status.STOPPED,
                                 code)
            return s, stats, code

        def cond(c):
            s, stats, code, streak, tries = c
            return ((code == Status.RUNNING) & ~s.ahead.valid & (s.t < t_next) & (streak < _NONFINITE_TRIES)
                    & (tries < self.max_steps))

        def body(c):
            s, stats, code, streak, tries = c
            keep, t1, y1, sstate, cstate, stages, result, blowup, held, limited = self._attempt(
                problem, s.t, s.y, s.solver_state, s.controller_state, clip)
            hold = keep & (t1 > t_next)
            a = s.ahead     # not valid here (the loop runs only without a step held)
            # a cond, not a select: a step is held ahead once per checkpoint at most, and a
            # select would copy its stages on every try (9 % of the Fig. 1 flow's time); vmapped,
            # the cond is a select again
            ahead = jax.lax.cond(hold, lambda: Ahead(valid=hold, t1=t1, y1=y1, solver_state=sstate,
                                                     controller_state=cstate, stages=stages, held=held, at=a.at,
                                                     y_at=a.y_at), lambda: a)
            # a rejected try updates the committed controller (its next proposal); a step held
            # ahead leaves it as it was, so that the step is proposed again after a restore.
            # ROCK4 also keeps what the rejected try learnt of ρ, the central flow its cost.
            sstate_kept = _where(keep, s.solver_state, self.solver.rejected(s.solver_state, sstate))
            s = FlowState(t=s.t, y=s.y, solver_state=sstate_kept,
                          controller_state=_where(hold, s.controller_state, cstate), ahead=ahead)
            evals, hvps, _ = self.solver.cost(sstate)
            stats = stats + ~keep * jnp.stack([1, 0, 1, evals, hvps, 0, 0, limited]).astype(stats.dtype)
            s, stats, code = commit(s, keep & ~hold, t1, y1, sstate, cstate, held, stats, code)
            code = jnp.where(result != dfx.RESULTS.successful, Status.FAILED, code)
            return s, stats, code, jnp.where(blowup & ~keep, streak + 1, 0), tries + 1

        a = state.ahead
        # a member held where it is (advanced to the time it is at) reads nothing again
        again = a.valid & (a.at == t_next)
        # the step held ahead is committed once the new checkpoint is past its end
        s, stats, code = commit(state, a.valid & (a.t1 <= t_next), a.t1, a.y1, a.solver_state,
                                a.controller_state, a.held, jnp.zeros(len(FLOW_STAT_KEYS), jnp.int64),
                                jnp.asarray(Status.RUNNING))
        s = eqx.tree_at(lambda s: s.ahead.valid, s, a.valid & (a.t1 > t_next))
        s, stats, code, streak, _ = jax.lax.while_loop(
            cond, body, (s, stats, code, jnp.asarray(0), jnp.asarray(0)))
        reached = (s.t >= t_next) | (s.ahead.valid & (s.ahead.t1 > t_next))
        blowup = streak > 0
        code = jnp.where(code == Status.FAILED, jnp.where(blowup, Status.NONFINITE, Status.FAILED),
               jnp.where(code != Status.RUNNING, code,
               jnp.where(reached, Status.DONE, jnp.where(blowup, Status.NONFINITE, Status.MAX_STEPS))))
        # the member's position: t_next, inside the step held ahead or at the committed end;
        # a member that ended (stopped, failed) stays at its last committed step
        done = code == Status.DONE
        inside = done & (s.t < t_next)
        dense, evals, hvps = self._read(problem, s, t_next, inside & ~again)
        read_cost = jnp.zeros_like(stats).at[FLOW_STAT_KEYS.index("vf_evals")].set(evals)
        stats = stats + (inside & ~again) * read_cost.at[FLOW_STAT_KEYS.index("hvps")].set(hvps)
        a = s.ahead
        s = eqx.tree_at(lambda s: (s.ahead.valid, s.ahead.at, s.ahead.y_at), s,
                        (a.valid & done, jnp.where(done, t_next, s.t), _where(inside, dense, s.y)))
        return s, dict(zip(FLOW_STAT_KEYS, stats)) | {"status": code}

    def _read(self, problem: Problem, s: FlowState, t, fresh) -> tuple[Params, jax.Array, jax.Array]:
        """The weights at t inside the step held ahead of the committed state (where `fresh`;
        else the last read, `s.ahead.y_at`), and the field evaluations and Jacobian-vector
        products the reading cost: the method's `read`, given the step's interpolant (which it
        may return, at no cost)."""
        a = s.ahead
        zero = jnp.zeros((), jnp.int32)
        y = self.solver.interpolation_cls(t0=s.t, t1=a.t1, y0=s.y, y1=a.y1, **a.stages).evaluate(t)
        read = lambda: self.solver.read(self.term, s.t, t, s.y, problem, s.solver_state, a.solver_state, y)
        return jax.lax.cond(fresh, read, lambda: (a.y_at, zero, zero))

    def time(self, state: FlowState) -> jax.Array:
        # (a restored state's scratch is zero: it is where its committed step ended)
        return jnp.maximum(state.ahead.at, state.t)

    def _y(self, state: FlowState):
        """The whole state at the member's time (inside the step held ahead, or where it ended)."""
        return _where(state.ahead.at > state.t, state.ahead.y_at, state.y)

    def params(self, state: FlowState) -> Params:
        return self.form.weights(self._y(state))

    def preconditioner(self, problem: Problem, state: FlowState) -> Params | None:
        return self.form.preconditioner(self._y(state))

    def step(self, state: FlowState) -> None:
        return None

    def out_of_steps(self, steps: int) -> bool:
        return steps >= self.max_steps


def stepping(accuracy: Accuracy, step_control: StepControl, stop_loss: float) -> dict:
    """The fields of a `FlowIntegrator` that the step control sets: the controller,
    the step budget and where a run stops."""
    # The tolerances go in as (weakly typed) arrays, not Python floats: a float would be a
    # constant of the compiled program, and every rung of a tolerance ladder would compile
    # the solver again.
    pid = dfx.PIDController(rtol=jnp.asarray(accuracy.rtol), atol=jnp.asarray(accuracy.atol),
                            pcoeff=step_control.pcoeff, icoeff=step_control.icoeff, dtmin=step_control.dtmin or None,
                            dtmax=step_control.dtmax or None)
    return dict(controller=ProposingPID(pid=pid, rtol=pid.rtol, atol=pid.atol), max_steps=int(accuracy.max_steps),
                stop_loss=float(stop_loss))


def flow_term(learning_rate: float | None) -> dfx.ODETerm:
    """The gradient flow's field, or GD's modified flow's at `learning_rate`."""
    return dfx.ODETerm(_velocity if learning_rate is None else _modified_velocity(learning_rate))
