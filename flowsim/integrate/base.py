"""What every integrator provides: the interface the batch kernels and the driver use."""

import abc
from typing import Any

import equinox as eqx
import jax

from ..nn.problem import Params
from ..nn.problem import Problem

State = Any     # an integrator's own state: an Equinox module of arrays


class Scratch(eqx.Module):
    """A part of an integrator's state that the integrator can compute again from the rest:
    it lives on the device between checkpoints but is not stored in the archive
    (`flowsim.run.state_arrays`), and a state restored from a checkpoint has it as `init` made it."""


class LookAhead(eqx.Module):
    """What a discrete method keeps of its last step: the loss and gradient at the iterate, which
    the next step takes (`flowsim.integrate.descent.AbstractDiscrete.advance`). Stored with the
    state; a checkpoint written before the states kept it lacks it, and its resume computes it
    again (`AbstractIntegrator.complete`, `flowsim.run.state_arrays.restore`)."""

    loss: jax.Array
    grad: Params


class AbstractIntegrator(eqx.Module):
    """How one member's weights move from one checkpoint time to the next.

    The integrator holds its configuration; its state holds everything that moves, so that a
    state stored at a checkpoint and restored later resumes the same computation bit for bit.
    Integrators know nothing of batches or files: `flowsim.run.batch` maps them over seeds and
    the driver loops over checkpoints.

    A member's position is its `time`: the flow time, or for a discrete method step × η (the
    flow time it is compared with, DESIGN.md §1).
    """

    # Discrete methods record their step numbers beside the times.
    discrete: eqx.AbstractClassVar[bool]
    # Scalar series the integrator certifies its result with (recorded beside the observables).
    certificate_series: eqx.AbstractClassVar[tuple[str, ...]]

    @abc.abstractmethod
    def init(self, problem: Problem, params: Params, key: jax.Array) -> State:
        """The state at t = 0. `key` seeds a stochastic method (unused by the others)."""

    @abc.abstractmethod
    def advance(self, problem: Problem, state: State, t_next, horizon=None) -> tuple[State, dict[str, jax.Array]]:
        """Go on to time `t_next`, where the member is observed. Returns the new state and the
        statistics of the stretch: steps, accepted, rejected, vf_evals and a `flowsim.status`
        code. `horizon` (≥ `t_next`): where the run ends, the one time an integrator with
        dense output must end a step on (it observes earlier times inside its steps); None
        ends a step on `t_next`."""

    @abc.abstractmethod
    def time(self, state: State) -> jax.Array:
        """Where the member is."""

    @abc.abstractmethod
    def params(self, state: State) -> Params:
        """The member's weights."""

    @abc.abstractmethod
    def step(self, state: State) -> jax.Array | None:
        """The step number of a discrete method (None for a flow)."""

    @abc.abstractmethod
    def certificate(self, problem: Problem, state: State) -> dict[str, jax.Array]:
        """The `certificate_series` at `state`."""

    def preconditioner(self, problem: Problem, state: State) -> Params | None:
        """The diagonal of the method's preconditioner P at `state` (a pytree like the weights,
        positive), whose step is W ← W − η P⁻¹ (…): the observable `preconditioned_sharpness`
        measures λ_max(P^{-1/2} ∇²L P^{-1/2}) with it. None: P = I (GD, momentum, SGD, the
        gradient flows)."""
        return None

    def complete(self, problem: Problem, state: State) -> State:
        """The state with its `LookAhead` computed again at its iterate: for a state restored
        from a checkpoint written before the states kept it (the others have none)."""
        return state

    def loss_and_gradient(self, problem: Problem, state: State) -> tuple[jax.Array, Params] | None:
        """L and ∇L (of the full training loss, unscaled) at the state's weights where the state
        holds them already, else None: the observables then take them from here instead of
        computing them again (`flowsim.observe.observables.Snapshot`)."""
        return None

    @property
    def init_evals(self) -> int:
        """Field (gradient) evaluations `init` spends, which the statistics of `advance` leave
        out (the driver counts them once, at the start)."""
        return 0

    @property
    def init_hvps(self) -> int:
        """Hessian-vector products `init` spends, left out as `init_evals` are."""
        return 0

    @property
    def conventions(self) -> str:
        """What its series mean where other codes write them differently, written as the
        solver group's attribute `conventions` ("": none, nothing written)."""
        return ""

    @abc.abstractmethod
    def out_of_steps(self, steps: int) -> bool:
        """Whether a member that has taken `steps` steps in all has spent its step budget
        (a stretch that ends in time on its last allowed step still ends `max_steps`)."""
