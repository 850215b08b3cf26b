"""Discrete gradient methods run in compiled chunks: GD, heavy-ball momentum, mini-batch SGD.

Step k is compared with flow time t = kη (DESIGN.md §1). A chunk runs steps until a target
step count inside one `lax.while_loop`, so the number of steps per chunk is data, not
shape, and every chunk reuses one compiled program. Divergence (a non-finite loss, or a
loss above `divergence_factor` × the initial loss) ends the chunk early with status
`diverged` and the last good iterate: a result to record, never an exception.

A `perturbation` ε > 0 starts the iteration from W_0 + ε·z instead of W_0: a twin GD beside
an unperturbed one measures how far two GD runs drift apart from starts ε apart, the noise
floor of any distance to GD's iterates (GD is chaotic past the edge of stability).
"""

import abc
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from ..status import Status
from ..nn.problem import Params
from ..nn.problem import Problem
from .base import AbstractIntegrator, LookAhead
from ..kinds.solvers import steps

# The perturbation's direction z ~ N(0, I) (over the weights raveled in `ravel_pytree` order)
# is drawn from fold_in(run key, PERTURBATION_STREAM): the run's seed fixes it, so a rerun
# and a resume see the same start, and SGD's batches (fold_in(key, k) for steps k) never
# share its stream in a run of fewer than 2³² − 1 steps.
PERTURBATION_STREAM = 2**32 - 1


class DescentState(eqx.Module):
    y: Params                 # the iterate W_k (the last good one after a divergence)
    velocity: Params          # the last step W_k − W_{k−1} (heavy ball; GD and SGD leave it 0)
    step: jax.Array           # k
    loss0: jax.Array          # L(W_0), the divergence reference
    key: jax.Array            # raw uint32 key; SGD batch k is drawn from fold_in(key, k)
    code: jax.Array           # status code: RUNNING, or DIVERGED once it has diverged
    ahead: LookAhead          # L at W_k and its gradient as step k takes them (SGD: batch k's)


class AbstractDiscrete(AbstractIntegrator):
    """A discrete method in compiled chunks: step k at flow time t = kη, a chunk's steps in
    one `lax.while_loop`, ended `diverged` with the last good iterate. A method says how it
    takes the loss and gradient at an iterate (`_loss_and_grad`) and what one step makes of
    its state (`_update`); its state holds y, step, loss0, code, and the loss and gradient
    at y that the next step takes (`ahead`, a `LookAhead`: `init` computes the first,
    `complete` computes it again) beside its own fields."""

    learning_rate: eqx.AbstractVar[jax.Array]       # η
    divergence_factor: eqx.AbstractVar[jax.Array]

    discrete: ClassVar[bool] = True
    certificate_series: ClassVar[tuple[str, ...]] = ()

    @abc.abstractmethod
    def _loss_and_grad(self, problem: Problem, y: Params, state, step: jax.Array):
        """L and the gradient the method steps with, at the iterate `y` of step `step`."""

    @abc.abstractmethod
    def _update(self, problem: Problem, state, g: Params):
        """The state after one step from `state` with gradient `g`: the next iterate and the
        method's own fields (its step count and code as they were)."""

    def steps_for(self, t):
        """The step count k whose time kη is nearest to `t`."""
        return steps(t, self.learning_rate, jnp)

    def advance(self, problem: Problem, state, t_next, horizon=None) -> tuple[Any, dict]:
        """Run steps until k = round(t_next/η), or until divergence (`horizon`: unused)."""
        k_end = self.steps_for(t_next)
        k_start = state.step

        def healthy(loss):
            # A non-finite weight makes the loss non-finite, so the loss alone is checked:
            # a reduction over W every step would cost more than the step's elementwise work.
            return jnp.isfinite(loss) & (loss <= self.divergence_factor * state.loss0)

        def cond(s):
            return (s.step < k_end) & (s.code == Status.RUNNING)

        def body(s):
            # Look ahead: step to W_{k+1}, take its loss and gradient (which the next step
            # needs anyway), and keep W_{k+1} only if that loss is healthy. A bad iterate is
            # thus never committed, and no copy of the previous state is carried: carrying
            # one (with a lax.cond between the two) made a float64 GD step at n = 100,
            # d = 50, m = 2000 take 2.4 ms instead of 1.7 ms. (A field a step leaves as it
            # was, GD's velocity, selects between equal arrays: XLA drops the select.)
            # The state keeps the look-ahead, so that the next chunk starts without a
            # gradient of its own: with one before, a row every GD step cost two.
            new = self._update(problem, s, s.ahead.grad)
            loss_next, g_next = self._loss_and_grad(problem, new.y, s, s.step + 1)
            new = eqx.tree_at(lambda z: z.ahead, new, LookAhead(loss_next, g_next))
            ok = healthy(loss_next)
            s = jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, s)
            return eqx.tree_at(lambda z: (z.step, z.code), s, (s.step + ok, jnp.where(ok, s.code, Status.DIVERGED)))

        code = jnp.where((state.code == Status.RUNNING) & ~healthy(state.ahead.loss), Status.DIVERGED, state.code)
        new = jax.lax.while_loop(cond, body, eqx.tree_at(lambda z: z.code, state, code))
        taken = new.step - k_start
        stats = {"steps": taken, "accepted": taken, "rejected": jnp.zeros_like(taken),
                 "vf_evals": taken, "status": jnp.where(new.code == Status.RUNNING, Status.DONE, new.code)}
        return new, stats

    def time(self, state) -> jax.Array:
        return state.step * self.learning_rate

    def params(self, state) -> Params:
        return state.y

    def step(self, state) -> jax.Array:
        return state.step

    def certificate(self, problem: Problem, state) -> dict[str, jax.Array]:
        return {}

    def out_of_steps(self, steps: int) -> bool:
        return False        # a discrete leg runs to its step count, or diverges

    def complete(self, problem: Problem, state):
        loss, grad = self._loss_and_grad(problem, state.y, state, state.step)
        dtype = jax.tree.leaves(state.y)[0].dtype
        return eqx.tree_at(lambda z: z.ahead, state, LookAhead(loss.astype(dtype), grad))


class DescentIntegrator(AbstractDiscrete):
    """Heavy-ball iteration v ← βv − η·rate·g, W ← W + v; β = 0 is plain GD.

    With `batch_size` set, g is the gradient of an unbiased mini-batch loss estimate
    (batches drawn without replacement, independently per step).
    """

    # Arrays, not static fields: a ladder of step sizes shares one compiled program.
    learning_rate: jax.Array
    beta: jax.Array
    divergence_factor: jax.Array
    perturbation: jax.Array                          # ε: the start is W_0 + ε·z (0: W_0, bit for bit)
    batch_size: int = eqx.field(static=True)        # 0: full batch (a shape, so static)
    # the heavy-ball kind; GD and SGD skip the velocity buffer (two passes over W per step)
    momentum: bool = eqx.field(static=True)

    def init(self, problem: Problem, params: Params, key: jax.Array) -> DescentState:
        """The state at W_0 (+ ε·z); a resumed run replaces it with its checkpoint, so the
        perturbation is applied once, at the start."""
        dtype = jax.tree.leaves(params)[0].dtype
        params = perturbed(params, self.perturbation, key)
        state = DescentState(y=params, velocity=jax.tree.map(jnp.zeros_like, params),
                             step=jnp.asarray(0, jnp.int64), loss0=problem.loss(params).astype(dtype),
                             key=key, code=jnp.asarray(Status.RUNNING),
                             ahead=LookAhead(jnp.zeros((), dtype), jax.tree.map(jnp.zeros_like, params)))
        return self.complete(problem, state)

    @property
    def init_evals(self) -> int:
        return 1           # the first step's gradient (`ahead`)

    def loss_and_gradient(self, problem: Problem, state: DescentState) -> tuple[jax.Array, Params] | None:
        """The look-ahead at y, a full-batch method's (SGD's is a batch's)."""
        return None if self.batch_size else (state.ahead.loss, state.ahead.grad)

    def _loss_and_grad(self, problem: Problem, y: Params, state: DescentState, step: jax.Array):
        if self.batch_size:
            n = problem.X.shape[0]
            idx = jax.random.choice(jax.random.fold_in(state.key, step), n, (self.batch_size,), replace=False)
            return jax.value_and_grad(problem.batch_loss)(y, idx)
        return jax.value_and_grad(problem.loss)(y)

    def _update(self, problem: Problem, s: DescentState, g: Params) -> DescentState:
        dtype = jax.tree.leaves(s.y)[0].dtype  # keep float32 runs in float32
        eta = (self.learning_rate * problem.rate).astype(dtype)
        if self.momentum:
            v = jax.tree.map(lambda vi, gi: self.beta.astype(dtype) * vi - eta * gi, s.velocity, g)
            return eqx.tree_at(lambda z: (z.y, z.velocity), s, (jax.tree.map(lambda w, vi: w + vi, s.y, v), v))
        # (the same bits as the heavy ball at β = 0: w + (0·v − ηg) is w − ηg)
        return eqx.tree_at(lambda z: z.y, s, jax.tree.map(lambda w, gi: w - eta * gi, s.y, g))


def perturbed(params: Params, eps: jax.Array, key: jax.Array) -> Params:
    """W + ε·z, z ~ N(0, I) drawn from fold_in(key, PERTURBATION_STREAM); W itself where
    ε = 0 (not W + 0·z, which would turn a −0.0 weight into +0.0)."""
    flat, unravel = ravel_pytree(params)
    z = jax.random.normal(jax.random.fold_in(key, PERTURBATION_STREAM), flat.shape, flat.dtype)
    return unravel(jnp.where(eps > 0, flat + eps.astype(flat.dtype) * z, flat))


def make_descent_integrator(*, learning_rate: float, divergence_factor: float, beta: float | None = None,
                            batch_size: int | None = None, perturbation: float = 0.0) -> DescentIntegrator:
    """GD at step `learning_rate`; heavy-ball momentum with `beta`; SGD with `batch_size`;
    started from W_0 + `perturbation`·z (see `perturbed`)."""
    return DescentIntegrator(learning_rate=jnp.asarray(float(learning_rate)),
                             beta=jnp.asarray(float(beta) if beta is not None else 0.0),
                             divergence_factor=jnp.asarray(float(divergence_factor)),
                             perturbation=jnp.asarray(float(perturbation)),
                             batch_size=int(batch_size) if batch_size is not None else 0,
                             momentum=beta is not None)
