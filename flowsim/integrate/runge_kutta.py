"""Diffrax's Runge–Kutta methods (tsit5, dopri5, dopri8, heun, bosh3, ralston, and the implicit
kvaerno5) as flow methods: a Diffrax solver behind the engine's interface
(`flowsim.integrate.solver`), a fixed count of evaluations per try, its steps counted as held
by stability from its own stages (`flowsim.integrate.stiffness`)."""

from typing import ClassVar

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import optimistix as optx

from . import stiffness
from .flow import FlowIntegrator, flow_term, stepping
from ..kinds.solvers import Accuracy, FlowMethod, NewtonKrylov, StepControl
from .solver import INIT_STEP_SEARCH_EVALS, AbstractFlowSolver


class RungeKutta(AbstractFlowSolver):
    """A Diffrax Runge–Kutta method (`inner`), explicit or implicit; every Diffrax call is its."""

    inner: dfx.AbstractSolver
    evals_per_step: int = eqx.field(static=True)    # 0: not countable (implicit)

    term_structure: ClassVar = dfx.AbstractTerm

    @property
    def interpolation_cls(self):
        return self.inner.interpolation_cls

    @property
    def tableau(self) -> dfx.ButcherTableau:
        return self.inner.tableau

    def order(self, terms):
        return self.inner.order(terms)

    def error_order(self, terms):
        return self.inner.error_order(terms)

    def func(self, terms, t0, y0, args):
        return self.inner.func(terms, t0, y0, args)

    def init(self, terms, t0, t1, y0, args):
        return self.inner.init(terms, t0, t1, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        return self.inner.step(terms, t0, t1, y0, args, solver_state, made_jump)

    @property
    def init_evals(self) -> int:
        # the step-size search and, for a first-same-as-last method, f(t0, y0)
        if not self.evals_per_step:
            return 0
        return INIT_STEP_SEARCH_EVALS + int(self.tableau.fsal)

    def cost(self, state) -> tuple[jax.Array, jax.Array, jax.Array]:
        return jnp.asarray(self.evals_per_step), jnp.asarray(0), jnp.asarray(False)

    def held(self, dense: dict) -> jax.Array:
        """Hairer's h·ρ from the step's stages reached `stiffness.HELD_SHARE` of the tableau's
        stability limit (an implicit method is never held)."""
        if not self.evals_per_step:
            return jnp.asarray(False)
        return stiffness.held(self.tableau, dense["k"])


def runge_kutta(name: str, newton_krylov: NewtonKrylov | None = None) -> RungeKutta:
    """The Diffrax method class `name`; an implicit one (`newton_krylov` given) solves its
    stages by matrix-free Newton–Krylov."""
    if newton_krylov is None:
        inner = getattr(dfx, name)()
        tab = inner.tableau
        return RungeKutta(inner=inner, evals_per_step=len(tab.c) + 1 - int(tab.fsal))
    # Matrix-free Newton–Krylov: Newton linearises the vector field with jax.linearize, so
    # GMRES only ever applies Hessian-vector products; the md×md Jacobian that the default
    # VeryChord root finder would build is never formed.
    nk = newton_krylov
    newton = optx.Newton(rtol=nk.newton_rtol, atol=nk.newton_atol,
                         linear_solver=lx.GMRES(rtol=nk.linear_rtol, atol=nk.linear_atol,
                                                restart=nk.krylov_restart, max_steps=nk.krylov_max_steps))
    return RungeKutta(inner=getattr(dfx, name)(root_finder=newton), evals_per_step=0)


def diffrax_integrator(spec: FlowMethod, *, accuracy: Accuracy, step_control: StepControl,
                       newton_krylov: NewtonKrylov | None = None, learning_rate: float | None = None,
                       stop_loss: float = 0.0) -> FlowIntegrator:
    """The factory the registry names for a Diffrax method (`spec.diffrax`); `learning_rate`:
    GD's step whose modified flow is solved (None: the gradient flow)."""
    solver = runge_kutta(spec.diffrax, newton_krylov if spec.implicit else None)
    return FlowIntegrator(solver=solver, **stepping(accuracy, step_control, stop_loss), term=flow_term(learning_rate))
