"""The integrator of a `central-flow` preset: `FlowIntegrator` stepping `CentralSolver`
(`flowsim.integrate.central_field`), with the central flow's series as its certificate and its
eigen-tracking and third-derivative products in the statistics."""

import diffrax as dfx
import jax

from ..nn.problem import Problem
from .central_field import CentralField, CentralSolver, CentralState, certificate, certificate_names, conventions
from .flow import FlowIntegrator, ProposingPID, stiffness_probe
from .registry import CENTRAL_METHODS, FLOW_METHODS
from .rock4 import Rock4


class CentralIntegrator(FlowIntegrator):
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
        return sstate.tried[0], sstate.tried[1] + sstate.tried[2]


def make_central_integrator(*, method: str, learning_rate: float, max_eigen: int, track_threshold: float,
                             rtol: float, atol: float, dtmin: float, dtmax: float, max_steps: int,
                             pcoeff: float, icoeff: float, stop_loss: float = 0.0) -> CentralIntegrator:
    """The central flow of GD at step `learning_rate`, stepped by the explicit Runge–Kutta
    `method` or rock4, tracking at most `max_eigen` Hessian eigen-directions; the other fields are a
    `central-flow` preset's (`flowsim.config.FlowPreset` documents them)."""
    if method not in CENTRAL_METHODS:
        raise ValueError(f"`method` = {method!r} cannot step a central flow; "
                         f"allowed: an explicit Runge–Kutta method or rock4 ({', '.join(CENTRAL_METHODS)})")
    field = CentralField(eta=jax.numpy.asarray(learning_rate, jax.numpy.float64),
                         k=int(max_eigen), threshold=float(track_threshold))
    if FLOW_METHODS[method].stabilised:
        # ρ from the tracked spectrum (CentralSolver), not rock4's power iteration
        inner, evals, probe = Rock4(), 0, None
    else:
        inner = getattr(dfx, FLOW_METHODS[method].diffrax)()
        tab = inner.tableau
        evals, probe = len(tab.c) + 1 - int(tab.fsal), stiffness_probe(tab)
    pid = dfx.PIDController(rtol=rtol, atol=atol, pcoeff=pcoeff, icoeff=icoeff, dtmin=dtmin or None,
                            dtmax=dtmax or None)
    return CentralIntegrator(solver=CentralSolver(inner=inner, field=field, evals_per_step=evals),
                             controller=ProposingPID(pid=pid, rtol=pid.rtol, atol=pid.atol),
                             term=dfx.ODETerm(field), max_steps=int(max_steps),
                             stop_loss=float(stop_loss), evals_per_step=evals, stiffness_probe=probe)
