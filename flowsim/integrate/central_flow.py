"""The integrator of a `central-flow` or `rmsprop-central` preset: the flow engine
(`flowsim.integrate.flow`) stepping `CentralSolver` (`flowsim.integrate.central_field`), whose
certificate is the central flow's series and whose statistics hold its eigen-tracking and
third-derivative products; RMSProp's in (w, ν), the state of its stable flow
(`flowsim.integrate.adaptive_flows`), with its preconditioner (`flowsim.integrate.central_rmsprop`)."""

import diffrax as dfx
import jax

from .adaptive_flows import RmspropFlow
from .central_field import CentralField, CentralSolver, conventions
from .flow import FlowIntegrator, FlowState, stepping
from ..kinds.solvers import CENTRAL_METHODS, FLOW_METHODS, Accuracy, Central, StepControl
from .rock4 import Rock4
from .runge_kutta import runge_kutta


class CentralIntegrator(FlowIntegrator):
    """A flow whose solver is a `CentralSolver`: the engine's, with the central flow's
    conventions."""

    @property
    def conventions(self) -> str:
        return conventions(float(self.solver.field.eta), self.solver.field.form is not None)

    def certificate(self, problem, state: FlowState) -> dict[str, jax.Array]:
        # the field's point needs the whole state (RMSProp's ν beside the weights)
        return self.solver.certificate(problem, self._y(state), state.solver_state)


def make_central_integrator(method: str, *, central: Central, accuracy: Accuracy, step_control: StepControl,
                            stop_loss: float = 0.0, form: RmspropFlow | None = None) -> CentralIntegrator:
    """The central flow of GD at step `central.learning_rate`, stepped by the explicit
    Runge–Kutta `method` or rock4, tracking at most `central.max_eigen` Hessian eigen-directions
    (it reads the settings groups `registry.CENTRAL_READS`); with `form` (RMSProp's stable flow
    at that step), RMSProp's central flow in (w, ν)."""
    if method not in CENTRAL_METHODS:
        raise ValueError(f"`method` = {method!r} cannot step a central flow; "
                         f"allowed: an explicit Runge–Kutta method or rock4 ({', '.join(CENTRAL_METHODS)})")
    field = CentralField(eta=jax.numpy.asarray(central.learning_rate, jax.numpy.float64),
                         k=int(central.max_eigen), threshold=float(central.track_threshold), form=form)
    if FLOW_METHODS[method].stabilised:
        # ρ from the tracked spectrum (CentralSolver), not rock4's power iteration
        inner, evals = Rock4(), 0
    else:
        inner = runge_kutta(FLOW_METHODS[method].diffrax)
        evals = inner.evals_per_step
    return CentralIntegrator(solver=CentralSolver(inner=inner, field=field, evals_per_step=evals),
                             **stepping(accuracy, step_control, stop_loss), term=dfx.ODETerm(field),
                             **({} if form is None else {"form": form}))
