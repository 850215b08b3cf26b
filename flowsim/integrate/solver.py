"""What the flow engine (`flowsim.integrate.flow`) asks of the method that steps it, declared
once: every flow method is an `AbstractFlowSolver`, and the engine knows no method by name.

A flow method is a Diffrax-style solver (`init`, `step`, `func`, `order`, `error_order` and an
`interpolation_cls` for its dense output), stepped one try at a time under flowsim's PID
controller. Beyond Diffrax's solver it declares, each with the default that a plain explicit
Runge–Kutta method takes:
- `max_step(state)`: the longest step it may try from `state` (ROCK4: stability and round-off);
  default None, no bound beyond the controller's;
- `step_error_order(terms, state)`: the order of the error estimate of the step it is about to
  take (auto: its mode's method's); default `error_order`;
- `rejected(committed, tried)`: the committed state after a rejected try (ROCK4 keeps what the
  try learnt of ρ, the central flow its cost); default the committed state, unchanged;
- `read(...)`: the weights at a time inside an accepted step (ROCK4: a shorter step from the
  step's start); default the step's interpolant, which costs nothing;
- `held(dense)`: whether the step was held by stability (`stiff_steps`); default no;
- `cost(state)`, `init_evals`, `init_hvps`: what a try and `init` spent (the statistics);
- `certificate_series`, `certificate(...)`: the series it certifies its steps with; default none;
- `steps_at_given_rho`: whether it can also take a step at a spectral radius ρ known otherwise
  (`step_at_rho`, `max_step_at_rho`: ROCK4, which the central flow steps at the ρ of its tracked
  spectrum); default no.
A new method implements this in its own module, with its factory, and names the factory in
its registry row (`flowsim.kinds.solvers.register_flow_method`).
"""

import abc
from typing import ClassVar

import diffrax as dfx
import jax
import jax.numpy as jnp

from ..nn.problem import Params, Problem

# Vector-field evaluations of Diffrax's initial step-size search (the first step's size),
# outside the per-step counts: `init_evals` includes them.
INIT_STEP_SEARCH_EVALS = 2


class AbstractFlowSolver(dfx.AbstractSolver):
    """A flow method as the engine steps it (see the module's docstring)."""

    certificate_series: ClassVar[tuple[str, ...]] = ()
    steps_at_given_rho: ClassVar[bool] = False

    @abc.abstractmethod
    def cost(self, state) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Field evaluations and Jacobian-vector products of the try that left `state`, and
        whether a stabilised method took it (`stabilised_steps`)."""

    @property
    @abc.abstractmethod
    def init_evals(self) -> int:
        """Field evaluations of the engine's `init` (the first step's size search and the
        method's `init`), outside the statistics."""

    @property
    def init_hvps(self) -> int:
        """Jacobian-vector products of the method's `init`, outside the statistics."""
        return 0

    def max_step(self, state) -> jax.Array | None:
        """The longest step the method may try from `state`; None: no bound of its own."""
        return None

    def step_error_order(self, terms, state):
        """The order of the error estimate of the step `state` is about to take."""
        return self.error_order(terms)

    def rejected(self, committed, tried):
        """The committed state after a try that left `tried` was rejected."""
        return committed

    def read(self, terms, t0, t, y0, args, committed, step, interpolated) -> tuple[Params, jax.Array, jax.Array]:
        """The weights at t inside the accepted step from (t0, y0) whose try left `step`
        (`committed`: the state at its start), given the step's `interpolated` value there; and
        the field evaluations and Jacobian-vector products the reading cost."""
        zero = jnp.zeros((), jnp.int32)
        return interpolated, zero, zero

    def held(self, dense: dict) -> jax.Array:
        """Whether the step whose dense output is `dense` was held by stability."""
        return jnp.asarray(False)

    def certificate(self, problem: Problem, y: Params, state) -> dict[str, jax.Array]:
        """The `certificate_series` at the weights y and the method's state there."""
        return {}

    def step_at_rho(self, field, end, t0, t1, y0: Params, f0: Params, rho, no_cost):
        """A method that `steps_at_given_rho`: one step from (t0, y0) to t1 at spectral radius ρ,
        f0 = f(y0) given. `field(t, y)` → (f(y), cost) at each stage's abscissa; `end(t1, y1)`
        → (f(y1), cost, aux) the last evaluation (None: `field`'s). Returns y1, the error
        estimate, the dense output, f(y1), the end's aux, the summed costs (from `no_cost`) and
        the step's degree."""
        raise NotImplementedError(f"{type(self).__name__} does not step at a given spectral radius")

    def max_step_at_rho(self, rho) -> jax.Array:
        """A method that `steps_at_given_rho`: the longest step it keeps stable at ρ."""
        raise NotImplementedError(f"{type(self).__name__} does not step at a given spectral radius")
