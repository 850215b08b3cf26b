"""The Filippov integrator: Dormand–Prince 5(4) within a mode, each step truncated at its
first event, the mode resolved there, every segment in `lax.while_loop`s (the package's
docstring describes the whole method)."""

import functools
import math
from typing import ClassVar

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp

from ...nn.problem import Params, Problem
from ...status import Status
from ..base import AbstractIntegrator
from ...kinds.solvers import Accuracy, Filippov, FlowMethod
from .events import crossed, first_crossing, first_exit, first_pole, horner
from .modes import (TINY, Mode, exit_excess, initial_mode, loss_gradient, low_slope, mode_field,
                    output_layer, preactivations, predictions, projected_ntg, resolve, sliding_mask, slopes,
                    velocity_and_control_at, whole)

EVENT_KINDS = ("crossings", "entries", "exits")


class FilippovState(eqx.Module):
    t: jax.Array
    y: Params
    mode: Mode
    h: jax.Array          # the next step's proposal
    solver_state: object  # Dormand–Prince's first-same-as-last stage
    jumped: jax.Array     # the mode changed since the last step: its stored stage is stale
    events: jax.Array     # (3,) crossings, sliding entries, sliding exits since t = 0


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

    # arrays, not static fields: another tolerance runs the same compiled program
    rtol: jax.Array
    atol: jax.Array
    max_steps: int = eqx.field(static=True)
    stop_loss: float = eqx.field(static=True)
    slots: int = eqx.field(static=True)
    # a segment's first pass holds this many sliders per node (see `advance`)
    few_slots: int = eqx.field(static=True, default=4)

    discrete: ClassVar[bool] = False
    certificate_series: ClassVar[tuple[str, ...]] = ("active_pairs", "sliding_pairs", *EVENT_KINDS,
                                                     "projected_ntg_eig_min")
    solver: ClassVar[dfx.Dopri5] = dfx.Dopri5()
    term: ClassVar[dfx.ODETerm] = dfx.ODETerm(mode_field)

    def init(self, problem: Problem, params: Params, key: jax.Array | None = None) -> FilippovState:
        W = params["W"]
        t0 = jnp.asarray(0.0, W.dtype)
        mode = initial_mode(problem, W, self.slots)
        v = mode_field(t0, params, (problem, mode))["W"]
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
            err_w = jnp.sqrt(whole(jnp.sum, jnp.square(y_err["W"] / scale)) / scale.size)
            # The loss gradient (the residual, for a squared loss) must be as accurate, relative
            # to its size, down to its round-off. Near a minimum it is a difference of order-1
            # predictions that W's tolerances alone leave unresolved (at a loss of 1e-21 and
            # rtol 1e-8, the step's error in it was 1e3 times its size): the loss decayed at
            # a wrong rate and the sliders' controls, ratios of its entries, were noise.
            D = slopes(problem, mode.active, y1["W"].dtype)
            pred, roundoff = predictions(problem, preactivations(problem, y1["W"]), D)
            g, linear = loss_gradient(problem, pred)
            ca, terms = output_layer(problem), D * preactivations(problem, y_err["W"])
            err_g = (jnp.linalg.norm(linear((ca.T @ terms).T))
                     / (self.rtol * jnp.linalg.norm(g) + jnp.linalg.norm(linear(roundoff)) + TINY))
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
            free = ~sliding_mask(s.mode.slide, X.shape[0])
            sign = jnp.where(s.mode.active, 1.0, -1.0)
            theta_cross = first_crossing(sc, sign, free)

            def excess(th):
                _, delta, weight, slack = velocity_and_control_at(problem, horner(sc, th) / root_d, s.mode)
                return exit_excess(delta, weight, slack, low), delta > 1.0

            # the exits are looked for up to the first crossing, or the step's end or, where a
            # slider's b changes sign within the step, up to the first sample after
            # (`first_pole`); the step ends there if no exit is found before it
            pole = first_pole(problem, sc, s.mode)
            end = jnp.minimum(pole, theta_cross)
            at0, at1 = excess(0.0), excess(end)
            f0, e1 = whole(jnp.max, at0[0]), whole(jnp.max, at1[0])
            exit_found = ok & (e1 > 0) & (f0 <= 0)
            theta_exit, at_exit, iters = first_exit(excess, at0, end, at1, exit_found)
            theta = jnp.where(ok & (f0 > 0), 0.0,
                              jnp.where(exit_found, theta_exit, jnp.where(pole < 1.0, end, theta_cross)))
            event = ok & (theta <= 1.0)
            theta = jnp.minimum(theta, 1.0)
            # the sliders whose exit is the event, and the side each leaves to (none where the
            # event is a crossing or the pole: the excess is ≤ 0 up to there)
            v, above = jax.tree.map(lambda a, b, c: jnp.where(f0 > 0, a, jnp.where(exit_found, b, c)),
                                    at0, at_exit, at1)
            leaving = jnp.where(v > 0, jnp.where(above, 2, 1), 0)
            touching = crossed(sc, sign, free, theta)
            Wstar = horner(coeffs, theta)

            def resolution(c):
                return False, *resolve(problem, Wstar, s.mode, touching, leaving)

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
            fits = whole(jnp.all, state.mode.slide[:, k:] >= n)
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
        on = sliding_mask(state.mode.slide, problem.X.shape[0])
        counts = {"active_pairs": (state.mode.active & ~on).sum(), "sliding_pairs": on.sum()}
        eig = jnp.linalg.eigvalsh(projected_ntg(problem, state.y["W"], state.mode))[0]
        return counts | dict(zip(EVENT_KINDS, state.events)) | {"projected_ntg_eig_min": eig}

    def out_of_steps(self, steps: int) -> bool:
        return steps >= self.max_steps


def filippov_integrator(spec: FlowMethod, *, accuracy: Accuracy, filippov: Filippov,
                        learning_rate: float | None = None, stop_loss: float = 0.0) -> FilippovIntegrator:
    """The factory the registry names for `filippov` (`flowsim.integrate.flow` says what a
    factory receives)."""
    if learning_rate is not None:
        raise ValueError("the filippov method integrates the gradient flow itself, not GD's modified flow "
                         f"(learning_rate = {learning_rate!r}); use a `flow` preset")
    return FilippovIntegrator(rtol=jnp.asarray(accuracy.rtol), atol=jnp.asarray(accuracy.atol),
                              max_steps=int(accuracy.max_steps), stop_loss=float(stop_loss), slots=filippov.slots)
