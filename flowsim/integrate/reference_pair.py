"""A flow solved beside a tighter reference flow of the same equation: the difference is
recorded at every checkpoint as the flow's global-error estimate (series `flow_error`,
`flow_loss_error`), the certificate that `flowsim compare` reads."""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp

from ..nn.problem import Params
from ..nn.problem import Problem
from .base import AbstractIntegrator
from .flow import FlowIntegrator, FlowState


class PairState(eqx.Module):
    flow: FlowState
    reference: FlowState


class ReferencePair(AbstractIntegrator):
    """The flow's own state, statistics and status, with the reference advanced to the same
    times beside it."""

    flow: FlowIntegrator
    reference: FlowIntegrator

    discrete: ClassVar[bool] = False
    certificate_series: ClassVar[tuple[str, ...]] = ("flow_error", "flow_loss_error")

    def init(self, problem: Problem, params: Params, key: jax.Array | None = None) -> PairState:
        return PairState(flow=self.flow.init(problem, params), reference=self.reference.init(problem, params))

    def advance(self, problem: Problem, state: PairState, t_next, horizon=None) -> tuple[PairState, dict[str, jax.Array]]:
        flow, stats = self.flow.advance(problem, state.flow, t_next, horizon)
        reference, _ = self.reference.advance(problem, state.reference, t_next, horizon)
        return PairState(flow=flow, reference=reference), stats

    def time(self, state: PairState) -> jax.Array:
        return self.flow.time(state.flow)

    def params(self, state: PairState) -> Params:
        return self.flow.params(state.flow)

    def step(self, state: PairState) -> None:
        return None

    def certificate(self, problem: Problem, state: PairState) -> dict[str, jax.Array]:
        """‖W − W_ref‖ and |L − L_ref|."""
        y, y_ref = self.flow.params(state.flow), self.reference.params(state.reference)
        diff = jax.tree.map(lambda a, b: jnp.sum((a - b) ** 2), y, y_ref)
        return {"flow_error": jnp.sqrt(sum(jax.tree.leaves(diff))),
                "flow_loss_error": jnp.abs(problem.loss(y) - problem.loss(y_ref))}

    def out_of_steps(self, steps: int) -> bool:
        return self.flow.out_of_steps(steps)
