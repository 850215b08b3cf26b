"""The integrator of a `central-flow` preset: the flow stepping of `AbstractFlowIntegrator`
with `CentralSolver` (`flowsim.integrate.central_field`), the central flow's series as its
certificate and its eigen-tracking and third-derivative products in the statistics."""

import diffrax as dfx
import jax

from ..nn.problem import Problem
from .central_field import CentralField, CentralSolver, CentralState, certificate, certificate_names, conventions
from .auto import stiffness_probe
from .flow import AbstractFlowIntegrator, stepping
from ..kinds.solvers import CENTRAL_METHODS, FLOW_METHODS, Accuracy, Central, StepControl
from .rock4 import Rock4


class CentralIntegrator(AbstractFlowIntegrator):
    """A flow whose solver is a `CentralSolver`."""

    @property
    def certificate_series(self) -> tuple[str, ...]:
        return certificate_names(self.solver.field.k)

    def certificate(self, problem: Problem, state) -> dict[str, jax.Array]:
        return certificate(self.solver, problem, self.params(state), state.solver_state)

    @property
    def conventions(self) -> str:
        return conventions(float(self.solver.field.eta))

    @property
    def init_evals(self) -> int:
        # the first step's size (2 evaluations), the state's first point, and a Runge–Kutta
        # method's FSAL stage (ROCK4 takes f(y0) from the first point)
        return 3 if self.solver.stabilised else 4

    @property
    def init_hvps(self) -> int:
        return 0    # counted in the state's `spent` (series central_hvps)

    def _cost(self, sstate: CentralState):
        # field evaluations; "hvps" holds the try's Hessian-vector and third-derivative products
        return sstate.tried[0], sstate.tried[1] + sstate.tried[2], jax.numpy.asarray(self.solver.stabilised)


def make_central_integrator(method: str, *, central: Central, accuracy: Accuracy, step_control: StepControl,
                            stop_loss: float = 0.0) -> CentralIntegrator:
    """The central flow of GD at step `central.learning_rate`, stepped by the explicit
    Runge–Kutta `method` or rock4, tracking at most `central.max_eigen` Hessian eigen-directions
    (it reads the settings groups `registry.CENTRAL_READS`)."""
    if method not in CENTRAL_METHODS:
        raise ValueError(f"`method` = {method!r} cannot step a central flow; "
                         f"allowed: an explicit Runge–Kutta method or rock4 ({', '.join(CENTRAL_METHODS)})")
    field = CentralField(eta=jax.numpy.asarray(central.learning_rate, jax.numpy.float64),
                         k=int(central.max_eigen), threshold=float(central.track_threshold))
    if FLOW_METHODS[method].stabilised:
        # ρ from the tracked spectrum (CentralSolver), not rock4's power iteration
        inner, evals, probe = Rock4(), 0, None
    else:
        inner = getattr(dfx, FLOW_METHODS[method].diffrax)()
        tab = inner.tableau
        evals, probe = len(tab.c) + 1 - int(tab.fsal), stiffness_probe(tab)
    return CentralIntegrator(solver=CentralSolver(inner=inner, field=field, evals_per_step=evals),
                             **stepping(accuracy, step_control, stop_loss), term=dfx.ODETerm(field),
                             stiffness_probe=probe)
