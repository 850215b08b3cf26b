"""`auto`: Tsit5 while the steps are held by accuracy, ROCK4 while they are held by stability,
and back, switching per step as stiffness-detecting codes do (LSODA; OrdinaryDiffEq's
AutoTsit5(Rosenbrock23); Hairer's DOPRI5 stiffness detection). Error-controlled throughout: one
PID controller sees both methods' error estimates (each with its own order).

Why: the same network's flow can be non-stiff early (quickstart, all of caron-fig1: Tsit5 is
cheapest) and stiff later (cohen-eos: the sharpness rises until Tsit5's h·λ_max sits at its
stability limit and its cost grows like λ_max, where ROCK4's grows like √λ_max). A user should
not have to know which their network needs.

The switch, decided from figures the steps compute anyway:
- **Tsit5 → ROCK4** after `STIFF_STREAK` accepted Tsit5 steps in a row whose h·ρ estimate —
  Hairer's, ‖k_s − k_{s−1}‖ / ‖Y_s − Y_{s−1}‖ from the last two stages, no extra evaluation —
  reaches `stiffness.HELD_SHARE` of Tsit5's stability limit (3.5): the step is held by stability
  (counted in `stiff_steps`). ROCK4 starts from that estimate,
  the stages' difference as its power iteration's vector (the stiff directions dominate it) and
  iterates to convergence at its first step (ROCK4's retry path), so a flow that never turns
  stiff pays no Hessian-vector product.
- **ROCK4 → Tsit5** after `NONSTIFF_STREAK` accepted ROCK4 steps in a row at which Tsit5 is
  predicted cheaper per unit time: ROCK4 costs (s + 4)/h; Tsit5 would take min(κ·h, c/ρ) for 6
  evaluations, κ the ratio of Tsit5's accuracy-held step to ROCK4's at the same tolerance and
  c the h·ρ at which Tsit5 runs when held (`TSIT5_STEP_RATIO`, `TSIT5_HELD_H_RHO`: measured).

A switch happens only where a step is committed: the mode, ρ, the power iteration's vector and
the streak are solver state, which the integrator stores at checkpoints, so a resumed run
takes the same steps bit for bit, and checkpoints do not change them. The dense output covers
both: Tsit5's fourth-order interpolant, or ROCK4's cubic Hermite one, by the step's mode; a
checkpoint inside a ROCK4 step is read by ROCK4's shorter step instead (`Rock4.read`).

Under `vmap` (seeds in a batch) a mode that differs between members runs both steps for all.

Why no third mode, RKC2 where ROCK4's round-off ceiling holds its steps (h·ρ ≤ 463 at rtol
1e-6, `rock4.roundoff_bound`; there ROCK4's cost grows like λ_max): tried (branch
`auto-rkc2-mode`, traced by its `bench/trace_auto_modes.py`) on the log-spaced quadratic at
λ_max = 1e4, rtol 1e-6, PI control, where this auto costs 100 445 evaluations + HVPs.
- Handed over directly, RKC2's error estimate (12(y0 − y1) + 6h(f0 + f1))/15 reads the round-off
  that ROCK4 leaves along the top eigen-directions (up to a tenth of rtol, by the ceiling's
  design) amplified by about 0.4·h·λ, against its local tolerance rtol^(3/2): its first try at
  h·ρ = 464 and every smaller one down to h·ρ ≈ 0.5 were rejected (961 of 6 472 tries; 129 836).
- Ten Tsit5 steps at h·ρ = 2.4 in between damp that round-off (18 of 5 902 tries rejected), but
  RKC2, second order at rtol^(3/2), then steps at h·ρ ≈ 5–9 where ROCK4 held at its ceiling is
  the cheaper, and hands back (121 089).
- The bound on any switch between the two: the cheaper of pure ROCK4 and pure RKC2 in each
  stretch of time (t < 1, 1–3, 3–10, 10–30, 30–100: ROCK4 2 040, 1 981, 7 015, 20 246, 69 256;
  RKC2 27 444, 8 309, 13 672, 22 675, 42 809) sums to 74 091, 0.74× this auto's, a growth
  of λ_max^0.78 from λ_max = 1e2: short of λ^0.6 for a third mode's complexity, so not
  built. At rtol 1e-4 RKC2 alone grows like λ^0.42 (the `rkc2` preset).
"""

from collections.abc import Callable
from typing import ClassVar

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp

from ..nn.problem import Params, Problem
from .flow import FlowIntegrator, flow_term, stepping
from ..kinds.solvers import Accuracy, FlowMethod, Stabilised, StepControl
from .rock4 import RHO_SERIES, Rock4, StabilisedState, roundoff_bound
from .solver import INIT_STEP_SEARCH_EVALS, AbstractFlowSolver
from .tsit5 import Tsit5, increments
from . import stiffness
from .stiffness import HELD_SHARE, stage_h_rho, stiffness_probe

# Accepted steps in a row before a switch: Tsit5 held (AutoSwitch's maxstiffstep is 10, DOPRI5's
# 15) and ROCK4 dearer than Tsit5 would be.
STIFF_STREAK = 10
NONSTIFF_STREAK = 5
# Tsit5's evaluations per step (7 stages, first same as last).
TSIT5_EVALS = 6
# The h·ρ at which Tsit5 steps when held by stability: it spends ≈ 2 λ_max evaluations per unit
# time at every rtol from 1e-4 to 1e-9 (STIFF-FLOWS.md), 6 per step.
TSIT5_HELD_H_RHO = 3.0
# Tsit5's step where accuracy holds it, over ROCK4's at the same tolerance (fifth order against
# fourth, and a smaller error constant): ROCK4's steps over Tsit5's at rtol 1e-8, 354/271 = 1.3 on
# quickstart and 264/164 = 1.6 on caron-fig1-quick, neither flow held by stability there.
TSIT5_STEP_RATIO = 1.5


def cheaper_by_tsit5(h, h_rho, stages) -> jax.Array:
    """Whether Tsit5 would cover unit time with fewer evaluations than a ROCK4 step of length h,
    true h·ρ `h_rho` and `stages` evaluations: Tsit5's step is min(κ·h, c/ρ) (see the module's
    docstring) for `TSIT5_EVALS`."""
    tsit5_step = h * jnp.minimum(TSIT5_STEP_RATIO, TSIT5_HELD_H_RHO / jnp.maximum(h_rho, 1e-300))
    return TSIT5_EVALS * h < stages * tsit5_step


class AutoState(eqx.Module):
    stabilised: jax.Array     # the next step is ROCK4's
    stepped: jax.Array        # the try that left this state was ROCK4's (`stabilised_steps`)
    streak: jax.Array         # accepted steps in a row that voted for the other method
    switches: jax.Array       # switches so far
    rock: StabilisedState     # f0 (Tsit5's first-same-as-last evaluation too), ρ (in Tsit5's
                              # steps Hairer's estimate), the power iteration's vector, the try's cost

    @property
    def rho(self) -> jax.Array:
        return self.rock.rho

    @property
    def stages(self) -> jax.Array:
        return self.rock.stages

    @property
    def hvps(self) -> jax.Array:
        return self.rock.hvps


class _AutoInterpolation(dfx.AbstractLocalInterpolation):
    """The step's dense output: Tsit5's interpolant of its seven stages, or (a ROCK4 step, whose
    f(y0), f(y1) fill the first two rows of k) the cubic Hermite one."""

    t0: jax.Array
    t1: jax.Array
    y0: Params
    y1: Params
    k: Params
    stabilised: jax.Array

    def evaluate(self, t0, t1=None, left: bool = True):
        if t1 is not None:
            return jax.tree.map(jnp.subtract, self.evaluate(t1), self.evaluate(t0))
        ends = dict(t0=self.t0, t1=self.t1, y0=self.y0, y1=self.y1)
        tsit5 = dfx.Tsit5.interpolation_cls(**ends, k=self.k).evaluate(t0)
        hermite = dfx.ThirdOrderHermitePolynomialInterpolation.from_k(
            **ends, k=jax.tree.map(lambda x: x[:2], self.k)).evaluate(t0)
        return jax.tree.map(lambda a, b: jnp.where(self.stabilised, a, b), hermite, tsit5)


class Auto(AbstractFlowSolver):
    """Tsit5 and ROCK4 with the switch between them (see the module's docstring)."""

    rock4: Rock4
    tsit5: Tsit5 = Tsit5()      # flowsim's step of Tsit5 (flowsim.integrate.tsit5), as tsit5's

    term_structure: ClassVar = dfx.AbstractTerm
    interpolation_cls: ClassVar[Callable] = _AutoInterpolation
    # in Tsit5's steps ρ is Hairer's estimate; it is estimated only when auto turns to ROCK4
    certificate_series: ClassVar[tuple[str, ...]] = RHO_SERIES

    @property
    def init_evals(self) -> int:
        # the step-size search and `init`'s f(y0)
        return INIT_STEP_SEARCH_EVALS + 1

    def cost(self, state: AutoState) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Tsit5's six evaluations or ROCK4's stages, as the try's mode was."""
        return state.stages, state.hvps, state.stepped

    def held(self, dense: dict) -> jax.Array:
        """A Tsit5 step's h·ρ estimate reached `HELD_SHARE` of its stability limit (never a
        ROCK4 step: its dense output is not Tsit5's)."""
        return stiffness.held(self.tsit5.tableau, dense["k"]) & ~dense["stabilised"]

    def certificate(self, problem: Problem, y: Params, state: AutoState) -> dict[str, jax.Array]:
        return {"rho": state.rho, "stages": state.stages}

    def order(self, terms) -> int:
        return 4

    def error_order(self, terms) -> int:
        """The first step's (Tsit5's): the controller's initial step size."""
        return self.tsit5.error_order(terms)

    def step_error_order(self, terms, state: AutoState) -> jax.Array:
        """The error order of the step `state` is about to take, its method's."""
        return jnp.where(state.stabilised, self.rock4.error_order(terms), self.tsit5.error_order(terms))

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)

    def init(self, terms, t0, t1, y0, args) -> AutoState:
        f0 = self.func(terms, t0, y0, args)
        zero, zeros = jnp.zeros((), jnp.int32), jax.tree.map(jnp.zeros_like, y0)
        rock = StabilisedState(f0=f0, rho=jnp.zeros((), jax.tree.leaves(y0)[0].dtype), v=zeros, age=zero,
                               stages=zero, hvps=zero, error=zeros)
        false = jnp.asarray(False)
        return AutoState(stabilised=false, stepped=false, streak=zero, switches=zero, rock=rock)

    def max_step(self, state: AutoState) -> jax.Array:
        """ROCK4's ceiling while it steps; none for Tsit5 (its controller finds its limit)."""
        return jnp.where(state.stabilised, self.rock4.max_step(state.rock), jnp.inf)

    def rejected(self, committed: AutoState, tried: AutoState) -> AutoState:
        """After a rejected try: ROCK4 keeps what it learnt of ρ (`Rock4.rejected`); Tsit5
        learnt nothing that the committed state lacks."""
        rock = self.rock4.rejected(committed.rock, tried.rock)
        rock = jax.tree.map(lambda a, b: jnp.where(committed.stabilised, a, b), rock, committed.rock)
        return eqx.tree_at(lambda s: s.rock, committed, rock)

    def _explicit(self, terms, t0, t1, y0, args, state: AutoState, made_jump):
        y1, y_error, dense, f1, result = self.tsit5.step(terms, t0, t1, y0, args, state.rock.f0, made_jump)
        weights, limit = stiffness_probe(self.tsit5.tableau)
        k = increments(t0, t1, dense["f"])
        h_rho, direction = stage_h_rho(weights, k)
        streak = jnp.where(h_rho >= HELD_SHARE * limit, state.streak + 1, 0)
        switch = streak >= STIFF_STREAK
        rock = state.rock
        # to ROCK4: Hairer's h·ρ and direction start its power iteration, which runs to
        # convergence at its first step (age < 0, as after a rejection)
        rock = StabilisedState(
            f0=f1, rho=h_rho / (t1 - t0), v=jax.tree.map(lambda d, v: jnp.where(switch, d, v), direction, rock.v),
            age=jnp.where(switch, -1, rock.age).astype(jnp.int32), stages=jnp.asarray(TSIT5_EVALS, jnp.int32),
            hvps=jnp.zeros((), jnp.int32), error=y_error)
        new = AutoState(stabilised=switch, stepped=jnp.asarray(False), streak=jnp.where(switch, 0, streak),
                        switches=state.switches + switch, rock=rock)
        return y1, y_error, k, new, result

    def _stabilised(self, terms, t0, t1, y0, args, state: AutoState, made_jump):
        y1, y_error, dense, rock, result = self.rock4.step(terms, t0, t1, y0, args, state.rock, made_jump)
        h = t1 - t0
        streak = jnp.where(cheaper_by_tsit5(h, h * rock.rho / self.rock4.rho_safety, rock.stages), state.streak + 1, 0)
        back = streak >= NONSTIFF_STREAK
        new = AutoState(stabilised=~back, stepped=jnp.asarray(True), streak=jnp.where(back, 0, streak),
                        switches=state.switches + back, rock=rock)
        # f(y0), f(y1) in the first two of Tsit5's seven rows: one shape for both
        k = jax.tree.map(lambda x: jnp.concatenate([x, jnp.zeros((5, *x.shape[1:]), x.dtype)]), dense["k"])
        return y1, y_error, k, new, result

    def step(self, terms, t0, t1, y0, args, state: AutoState, made_jump):
        y1, y_error, k, new, result = jax.lax.cond(
            state.stabilised, lambda: self._stabilised(terms, t0, t1, y0, args, state, made_jump),
            lambda: self._explicit(terms, t0, t1, y0, args, state, made_jump))
        return y1, y_error, dict(y0=y0, y1=y1, k=k, stabilised=new.stepped), new, result

    def read(self, terms, t0, t, y0, args, committed: AutoState, step: AutoState, interpolated):
        """The solution at t inside the accepted step whose try left `step`: ROCK4's read (a
        shorter step from t0: `Rock4.read`, as accurate as a step end where the Hermite
        interpolant is not) inside a ROCK4 step, Tsit5's `interpolated` value, at no cost,
        inside a Tsit5 step."""
        zero = jnp.zeros((), jnp.int32)
        return jax.lax.cond(step.stepped,
                            lambda: self.rock4.read(terms, t0, t, y0, args, committed.rock, step.rock),
                            lambda: (interpolated, zero, zero))


def auto_integrator(spec: FlowMethod, *, accuracy: Accuracy, step_control: StepControl, stabilised: Stabilised,
                    learning_rate: float | None = None, stop_loss: float = 0.0) -> FlowIntegrator:
    """The factory the registry names for auto: ROCK4's steps no longer than round-off at this
    tolerance allows."""
    solver = Auto(rock4=Rock4(rho_every=stabilised.rho_every, rho_safety=stabilised.rho_safety,
                              h_rho_max=jnp.asarray(roundoff_bound(accuracy.rtol))))
    return FlowIntegrator(solver=solver, **stepping(accuracy, step_control, stop_loss), term=flow_term(learning_rate))
