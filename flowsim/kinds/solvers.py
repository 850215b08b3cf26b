"""The solver kinds and flow methods flowsim knows, declared once.

Validation, the resource estimate, the driver, compare and the plots read these tables;
no other module spells a list of kinds. No JAX, so that reading an archive or validating
a scenario does not pay for importing the integrators.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class SolverKind:
    name: str
    discrete: bool        # steps of size η, recorded at t = kη; otherwise a continuous flow
    label: str            # how figures and tables name the family
    state_copies: int     # parameter-sized arrays the integrator keeps alive (descent kinds;
                          # a flow kind's count comes from its method)
    # a flow of GD at one step η (its own `learning_rate`): compared only with `gd` at that η
    of_gd: bool = False
    # the stable flow of an adaptive method (that discrete kind's name): its state is the
    # weights and the method's moments, `state_width` parameter-sized arrays
    # (flowsim.integrate.adaptive_flows)
    flow_of: str = ""
    state_width: int = 1
    # handed a Python object by `flowsim.simulate` (an optax transformation): no file names it
    given: bool = False
    # a central flow (flowsim.integrate.central_field): it reads `CENTRAL_READS`
    central: bool = False


# ---------------------------------------------------------------- the settings a flow reads
# Each group of flow-preset keys that an integrator reads together, declared once as the
# record its factory receives: the record's fields are the keys (`flowsim.config.FlowPreset`
# declares each key's validator and meaning under the same name). A method's entry names the
# groups it reads; `flowsim show` shows a flow preset's keys of those groups only.


@dataclass(frozen=True)
class Accuracy:
    """The error tolerances and the step budget (every method)."""
    rtol: float
    atol: float
    max_steps: int


@dataclass(frozen=True)
class StepControl:
    """Diffrax's PID step-size controller (dtmin, dtmax 0: no bound)."""
    dtmin: float
    dtmax: float
    pcoeff: float
    icoeff: float


@dataclass(frozen=True)
class NewtonKrylov:
    """The matrix-free Newton–Krylov solve of an implicit method's stages."""
    newton_rtol: float
    newton_atol: float
    linear_rtol: float
    linear_atol: float
    krylov_restart: int
    krylov_max_steps: int


@dataclass(frozen=True)
class Stabilised:
    """The spectral radius estimate of a stabilised method (rock4, rkc2, auto's ROCK4 steps)."""
    rho_every: int
    rho_safety: float


@dataclass(frozen=True)
class Filippov:
    """The event-driven integrator through a shallow ReLU net's kinks."""
    slots: int


@dataclass(frozen=True)
class Central:
    """A central flow's own keys (the `central-flow` kind, whatever its method)."""
    learning_rate: float
    max_eigen: int
    track_threshold: float


SETTING_GROUPS: dict[str, type] = {
    "accuracy": Accuracy, "step_control": StepControl, "newton_krylov": NewtonKrylov,
    "stabilised": Stabilised, "filippov": Filippov, "central": Central,
}
# What a central flow's integrator reads (`flowsim.integrate.central_flow`), whatever its method
CENTRAL_READS = ("central", "accuracy", "step_control")


def group_keys(group: str) -> tuple[str, ...]:
    """The preset keys of a settings group, in their record's order."""
    return tuple(f.name for f in fields(SETTING_GROUPS[group]))


def settings_of(preset: Any, groups: tuple[str, ...]) -> dict[str, Any]:
    """The records of `groups` filled from `preset` (anything with the keys as attributes:
    a `flowsim.config.FlowPreset`), by group name: the keyword arguments of a factory."""
    return {g: SETTING_GROUPS[g](**{k: getattr(preset, k) for k in group_keys(g)}) for g in groups}


# Every Diffrax method reads the tolerances and the PID controller
_DIFFRAX = ("accuracy", "step_control")


@dataclass(frozen=True)
class FlowMethod:
    name: str
    implicit: bool
    # Copies of the parameter vector the method keeps alive (stages, error estimate, state,
    # the host copy of a checkpoint; the Diffrax methods also hold the step past the last
    # checkpoint: its stages, end, solver state and the weights at the checkpoint, stages + 3);
    # implicit methods add the Krylov basis of their GMRES.
    state_copies: int
    diffrax: str          # the Diffrax solver class (a name, so that this table needs no JAX)
    # The settings groups (`SETTING_GROUPS`) its integrator's factory reads, and that factory,
    # "package.module:function" (a name, so that this table needs no JAX): called with the
    # method's entry and one record per group, by group name
    # (`flowsim.run.integrators.flow_integrator`).
    reads: tuple[str, ...]
    integrator: str
    # Event-driven through the kinks of a shallow ReLU net (flowsim.integrate.filippov),
    # rather than a plain Diffrax solve of the raw field.
    filippov: bool = False
    # A stabilised explicit (Runge–Kutta–Chebyshev) method of flowsim's own
    # (flowsim.integrate.rock4, rkc2): its stage count follows h·ρ, so a stiff flow's step is
    # set by accuracy.
    stabilised: bool = False
    # Tsit5 while the steps are held by accuracy, ROCK4 while they are held by stability, switched
    # per step (flowsim.integrate.auto): the default flow.
    switching: bool = False
    # Can step a central flow (flowsim.integrate.central): explicit Runge–Kutta methods and
    # ROCK4, whose arithmetic the central solver calls with its own ρ.
    central: bool = True

    def keys(self) -> tuple[str, ...]:
        """The flow-preset keys its integrator reads."""
        return tuple(k for g in self.reads for k in group_keys(g))


SOLVER_KINDS: dict[str, SolverKind] = {k.name: k for k in (
    SolverKind("flow", discrete=False, label="flow", state_copies=0),
    SolverKind("modified-flow", discrete=False, label="modified flow", state_copies=0, of_gd=True),
    # GD's central flow at the edge of stability (flowsim.integrate.central_field)
    SolverKind("central-flow", discrete=False, label="central flow", state_copies=0, of_gd=True, central=True),
    # RMSProp's and Adam's stable flows (flowsim.integrate.adaptive_flows) in (w, ν) and (w, m, ν)
    SolverKind("rmsprop-flow", discrete=False, label="RMSProp flow", state_copies=0, flow_of="rmsprop",
               state_width=2),
    SolverKind("adam-flow", discrete=False, label="Adam flow", state_copies=0, flow_of="adam", state_width=3),
    # RMSProp's central flow in (w, ν) (flowsim.integrate.central_rmsprop)
    SolverKind("rmsprop-central", discrete=False, label="RMSProp central flow", state_copies=0, flow_of="rmsprop",
               state_width=2, central=True),
    SolverKind("gd", discrete=True, label="GD", state_copies=4),
    SolverKind("momentum", discrete=True, label="momentum", state_copies=5),
    SolverKind("sgd", discrete=True, label="SGD", state_copies=4),
    # optax's (flowsim.integrate.optimizers): the iterate, its gradient, the step taken and the
    # iterate it leads to, and the moments (RMSProp's ν; Adam's m and ν)
    SolverKind("rmsprop", discrete=True, label="RMSProp", state_copies=5),
    SolverKind("adam", discrete=True, label="Adam", state_copies=6),
    # any optax transformation given to flowsim.simulate (its state: assumed two moments)
    SolverKind("optax", discrete=True, label="optax", state_copies=6, given=True),
)}


def _diffrax(name: str, solver: str, state_copies: int, *, implicit: bool = False,
             integrator: str = "flowsim.integrate.runge_kutta:diffrax_integrator") -> FlowMethod:
    """A Diffrax solver stepped by the flow engine (an implicit one solves its stages by
    Newton–Krylov), or flowsim's own step of it (`integrator`)."""
    return FlowMethod(name, implicit=implicit, state_copies=state_copies, diffrax=solver,
                      reads=(*_DIFFRAX, "newton_krylov") if implicit else _DIFFRAX, integrator=integrator)


FLOW_METHODS: dict[str, FlowMethod] = {m.name: m for m in (
    # flowsim's own Tsit5 step (flowsim.integrate.tsit5: Diffrax's method, its stage sums fused);
    # the central flow steps Diffrax's (`diffrax`)
    _diffrax("tsit5", "Tsit5", 21, integrator="flowsim.integrate.tsit5:tsit5_integrator"),
    _diffrax("dopri5", "Dopri5", 21),
    _diffrax("dopri8", "Dopri8", 35),
    _diffrax("heun", "Heun", 11),
    _diffrax("bosh3", "Bosh3", 15),
    _diffrax("ralston", "Ralston", 11),
    _diffrax("kvaerno5", "Kvaerno5", 50, implicit=True),
    # the recurrence's three iterates and a stage, four finishing stages, y1, f(y0), f(y1),
    # the error, the power iteration's vector, the last try's error; and the step held ahead (+ 6)
    FlowMethod("rock4", implicit=False, state_copies=21, diffrax="", reads=(*_DIFFRAX, "stabilised"),
               integrator="flowsim.integrate.rock4:rock4_integrator", stabilised=True),
    # the recurrence's three iterates and a stage, y1, f(y0), f(y1), the error, the power
    # iteration's vector, the last try's error; and the step held ahead (+ 6)
    FlowMethod("rkc2", implicit=False, state_copies=16, diffrax="", reads=(*_DIFFRAX, "stabilised"),
               integrator="flowsim.integrate.rkc2:rkc2_integrator", stabilised=True, central=False),
    # Tsit5's (its seven stages in the step held ahead, as ROCK4's ends fill two of them), and
    # ROCK4's power-iteration vector and last error in the state (+ 2)
    FlowMethod("auto", implicit=False, state_copies=23, diffrax="", reads=(*_DIFFRAX, "stabilised"),
               integrator="flowsim.integrate.auto:auto_integrator", switching=True, central=False),
    # Dormand–Prince stages, its dense output's five coefficients, the event point
    FlowMethod("filippov", implicit=False, state_copies=18, diffrax="Dopri5", reads=("accuracy", "filippov"),
               integrator="flowsim.integrate.filippov:filippov_integrator", filippov=True),
)}



def register_flow_method(method: FlowMethod) -> None:
    """Add a flow method to `FLOW_METHODS`: a row naming its integrator's factory by import path
    (a method of one's own: its module implements `flowsim.integrate.solver.AbstractFlowSolver`
    and the factory; tests/test_plugin_method.py registers one). A name taken is refused."""
    if method.name in FLOW_METHODS:
        raise ValueError(f"flow method {method.name!r} is registered already; "
                         f"taken: {', '.join(FLOW_METHODS)}")
    FLOW_METHODS[method.name] = method


# The methods that can step a central flow: the explicit ones, Runge–Kutta and ROCK4 (its
# eigenvectors ride in the method's state: flowsim.integrate.central_field)
CENTRAL_METHODS = tuple(m for m, s in FLOW_METHODS.items() if s.central and not (s.implicit or s.filippov))
# (the kinds a file may name: a given one is `flowsim.simulate`'s)
DISCRETE_KINDS = tuple(k for k, v in SOLVER_KINDS.items() if v.discrete and not v.given)
FLOW_KINDS = tuple(k for k, v in SOLVER_KINDS.items() if not v.discrete)
GD_FLOW_KINDS = tuple(k for k, v in SOLVER_KINDS.items() if v.of_gd)
CENTRAL_KINDS = tuple(k for k, v in SOLVER_KINDS.items() if v.central)
ADAPTIVE_FLOW_KINDS = tuple(k for k, v in SOLVER_KINDS.items() if v.flow_of)
GIVEN_KINDS = tuple(k for k, v in SOLVER_KINDS.items() if v.given)


def is_discrete(kind: str) -> bool:
    return SOLVER_KINDS[kind].discrete


def state_copies(preset) -> int:
    """Parameter-sized arrays a typed solver preset (`flowsim.config.FlowPreset` or
    `DescentPreset`, which read this table: hence no import here) keeps alive, for the
    memory estimate."""
    kind = SOLVER_KINDS[preset.kind]
    return kind.state_copies if kind.discrete else kind.state_width * FLOW_METHODS[preset.method].state_copies


def steps(t: Any, learning_rate: float, xp: Any = None) -> Any:
    """The step count k of a discrete solver whose time kη is nearest to `t`, halves to even:
    the one rule by which validation checks `t_end`, the checkpoint grid places a descent's
    rows and the descent integrator counts its steps. `xp`: numpy for arrays, jax.numpy
    inside compiled code, None for a Python number (an exact int, however many steps)."""
    if xp is None:
        return round(t / learning_rate)
    return xp.round(xp.asarray(t) / learning_rate).astype(xp.int64)


def edge(kind: str, learning_rate: float, settings: Any) -> float | None:
    """The edge of stability of a leg of `kind` at step η = `learning_rate`: the value of its
    (preconditioned) sharpness above which its linearised step is unstable, in the sharpness's
    units. GD and SGD: 2/η; heavy-ball momentum: (2 + 2β)/η; RMSProp: 2/η and Adam:
    (2 + 2β₁)/((1 − β₁)η) (38/η at β₁ = 0.9), each for the preconditioned sharpness with its
    own denominator P (Cohen et al., "Adaptive gradient methods at the edge of stability",
    2022). A stable flow's is its method's at its η; a given optax transformation's is unknown
    (None), as is a gradient flow's. `settings`: the preset (its `beta`, `beta1`), a record or
    a mapping."""
    get = settings.get if isinstance(settings, dict) else lambda key: getattr(settings, key, None)
    kind = SOLVER_KINDS[kind].flow_of or kind
    if kind in ("gd", "sgd", "rmsprop"):
        return 2.0 / learning_rate
    if kind == "momentum":
        return (2.0 + 2.0 * float(get("beta"))) / learning_rate
    if kind == "adam":
        b1 = float(get("beta1"))
        return (2.0 + 2.0 * b1) / ((1.0 - b1) * learning_rate)
    return None
