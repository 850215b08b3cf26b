"""The integrator of a `central-flow` preset: the flow engine (`flowsim.integrate.flow`)
stepping `CentralSolver` (`flowsim.integrate.central_field`), whose certificate is the central
flow's series and whose statistics hold its eigen-tracking and third-derivative products."""

import diffrax as dfx
import jax

from .central_field import CentralField, CentralSolver, conventions
from .flow import FlowIntegrator, stepping
from ..kinds.solvers import CENTRAL_METHODS, FLOW_METHODS, Accuracy, Central, StepControl
from .rock4 import Rock4
from .runge_kutta import runge_kutta


class CentralIntegrator(FlowIntegrator):
    """A flow whose solver is a `CentralSolver`: the engine's, with the central flow's
    conventions."""

    @property
    def conventions(self) -> str:
        return conventions(float(self.solver.field.eta))


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
        inner, evals = Rock4(), 0
    else:
        inner = runge_kutta(FLOW_METHODS[method].diffrax)
        evals = inner.evals_per_step
    return CentralIntegrator(solver=CentralSolver(inner=inner, field=field, evals_per_step=evals),
                             **stepping(accuracy, step_control, stop_loss), term=dfx.ODETerm(field))
