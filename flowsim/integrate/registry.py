"""The solver kinds and flow methods flowsim knows, declared once.

Validation, the resource estimate, the driver, compare and the plots read these tables;
no other module spells a list of kinds. No JAX, so that reading an archive or validating
a scenario does not pay for importing the integrators.
"""

from __future__ import annotations

from dataclasses import dataclass
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


SOLVER_KINDS: dict[str, SolverKind] = {k.name: k for k in (
    SolverKind("flow", discrete=False, label="flow", state_copies=0),
    SolverKind("modified-flow", discrete=False, label="modified flow", state_copies=0, of_gd=True),
    # GD's central flow at the edge of stability (flowsim.integrate.central_field)
    SolverKind("central-flow", discrete=False, label="central flow", state_copies=0, of_gd=True),
    SolverKind("gd", discrete=True, label="GD", state_copies=4),
    SolverKind("momentum", discrete=True, label="momentum", state_copies=5),
    SolverKind("sgd", discrete=True, label="SGD", state_copies=4),
)}

FLOW_METHODS: dict[str, FlowMethod] = {m.name: m for m in (
    FlowMethod("tsit5", implicit=False, state_copies=21, diffrax="Tsit5"),
    FlowMethod("dopri5", implicit=False, state_copies=21, diffrax="Dopri5"),
    FlowMethod("dopri8", implicit=False, state_copies=35, diffrax="Dopri8"),
    FlowMethod("heun", implicit=False, state_copies=11, diffrax="Heun"),
    FlowMethod("bosh3", implicit=False, state_copies=15, diffrax="Bosh3"),
    FlowMethod("ralston", implicit=False, state_copies=11, diffrax="Ralston"),
    FlowMethod("kvaerno5", implicit=True, state_copies=50, diffrax="Kvaerno5"),
    # the recurrence's three iterates and a stage, four finishing stages, y1, f(y0), f(y1),
    # the error, the power iteration's vector, the last try's error; and the step held ahead (+ 6)
    FlowMethod("rock4", implicit=False, state_copies=21, diffrax="", stabilised=True),
    # the recurrence's three iterates and a stage, y1, f(y0), f(y1), the error, the power
    # iteration's vector, the last try's error; and the step held ahead (+ 6)
    FlowMethod("rkc2", implicit=False, state_copies=16, diffrax="", stabilised=True, central=False),
    # Tsit5's (its seven stages in the step held ahead, as ROCK4's ends fill two of them), and
    # ROCK4's power-iteration vector and last error in the state (+ 2)
    FlowMethod("auto", implicit=False, state_copies=23, diffrax="", switching=True, central=False),
    # Dormand–Prince stages, its dense output's five coefficients, the event point
    FlowMethod("filippov", implicit=False, state_copies=18, diffrax="Dopri5", filippov=True),
)}

# The methods that can step a central flow: the explicit ones, Runge–Kutta and ROCK4 (its
# eigenvectors ride in the method's state: flowsim.integrate.central_field)
CENTRAL_METHODS = tuple(m for m, s in FLOW_METHODS.items() if s.central and not (s.implicit or s.filippov))
DISCRETE_KINDS = tuple(k for k, v in SOLVER_KINDS.items() if v.discrete)
FLOW_KINDS = tuple(k for k, v in SOLVER_KINDS.items() if not v.discrete)
GD_FLOW_KINDS = tuple(k for k, v in SOLVER_KINDS.items() if v.of_gd)


def is_discrete(kind: str) -> bool:
    return SOLVER_KINDS[kind].discrete


def state_copies(preset) -> int:
    """Parameter-sized arrays a typed solver preset (`flowsim.config.FlowPreset` or
    `DescentPreset`, which read this table: hence no import here) keeps alive, for the
    memory estimate."""
    kind = SOLVER_KINDS[preset.kind]
    return kind.state_copies if kind.discrete else FLOW_METHODS[preset.method].state_copies


def steps(t: Any, learning_rate: float, xp: Any = None) -> Any:
    """The step count k of a discrete solver whose time kη is nearest to `t`, halves to even:
    the one rule by which validation checks `t_end`, the checkpoint grid places a descent's
    rows and the descent integrator counts its steps. `xp`: numpy for arrays, jax.numpy
    inside compiled code, None for a Python number (an exact int, however many steps)."""
    if xp is None:
        return round(t / learning_rate)
    return xp.round(xp.asarray(t) / learning_rate).astype(xp.int64)
