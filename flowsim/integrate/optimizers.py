"""Discrete legs stepped by optax (the JAX optimizer library): RMSProp and Adam as scenario
kinds, and any `optax.GradientTransformation` handed to `flowsim.simulate`, full batch.

A leg is an integrator like GD's (`flowsim.integrate.descent`): step k is compared with flow
time t = kη, η its `learning_rate`; a chunk runs steps until a target step count inside one
`lax.while_loop`; a non-finite loss, or one above `divergence_factor` × the initial loss, ends
it `diverged` with the last good iterate. The optimizer's state (its moments, Adam's step
count) is part of the integrator's state, so a checkpoint stores it and a resumed run takes
the same steps bit for bit.

The gradient an optimizer is given is the gradient flow's, rate·∇L (dW/dt = −rate ∇L: the
gradient of L itself for every network but the scaled shallow ones), as GD steps by η·rate·∇L.
The scenario kinds' hyper-parameters are arrays of the integrator, not constants of the
compiled program, so a ladder of learning rates or β's shares one compilation; a transformation
given to `simulate` is a static part of its integrator (its hyper-parameters are its closures').
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

from ..status import Status
from ..nn.problem import Params, Problem
from .base import LookAhead
from .descent import AbstractDiscrete, perturbed

# How a scenario kind's transformation is built from its hyper-parameters (`OptaxIntegrator.built`)
OPTIMIZERS = ("rmsprop", "adam", "given")


class OptaxState(eqx.Module):
    y: Params                 # the iterate W_k (the last good one after a divergence)
    opt: object               # the transformation's state after k updates (a pytree of arrays)
    step: jax.Array           # k
    loss0: jax.Array          # L(W_0), the divergence reference
    code: jax.Array           # RUNNING, or DIVERGED once it has diverged
    ahead: LookAhead          # L(W_k) and rate·∇L(W_k), which step k takes


class OptaxIntegrator(AbstractDiscrete):
    """W_{k+1} = W_k + u_k, (u_k, s_{k+1}) = update(g_k, s_k, W_k), g_k = rate·∇L(W_k)."""

    learning_rate: jax.Array          # η: step k is recorded at t = kη
    beta1: jax.Array                  # adam's β₁ (0 for the others)
    beta2: jax.Array                  # rmsprop's and adam's β₂ (0 for a given transformation)
    eps: jax.Array
    divergence_factor: jax.Array
    perturbation: jax.Array           # ε: the start is W_0 + ε·z (`descent.perturbed`)
    optimizer: str = eqx.field(static=True)          # one of OPTIMIZERS
    eps_in_sqrt: bool = eqx.field(static=True)       # rmsprop: 1/√(ν + ε) rather than 1/(√ν + ε)
    nu0_grad: bool = eqx.field(static=True)          # rmsprop: ν₀ = g₀ ⊙ g₀ rather than 0
    given: optax.GradientTransformation | None = eqx.field(static=True, default=None)

    def transformation(self, dtype) -> optax.GradientTransformation:
        """The optax transformation, its hyper-parameters in the run's precision."""
        lr, b1, b2, eps = (x.astype(dtype) for x in (self.learning_rate, self.beta1, self.beta2, self.eps))
        if self.optimizer == "adam":
            return optax.adam(lr, b1=b1, b2=b2, eps=eps)
        if self.optimizer == "rmsprop":
            return optax.rmsprop(lr, decay=b2, eps=eps, eps_in_sqrt=self.eps_in_sqrt)
        return self.given

    @property
    def init_evals(self) -> int:
        return 1      # g₀: the first step's gradient (`ahead`), and ν₀'s where it is g₀ ⊙ g₀

    def _grad(self, problem: Problem, y: Params):
        loss, g = jax.value_and_grad(problem.loss)(y)
        return loss, jax.tree.map(lambda x: problem.rate * x, g)

    def init(self, problem: Problem, params: Params, key: jax.Array) -> OptaxState:
        dtype = jax.tree.leaves(params)[0].dtype
        params = perturbed(params, self.perturbation, key)
        opt = self.transformation(dtype).init(params)
        loss, g0 = self._grad(problem, params)
        if self.nu0_grad:
            opt = optax.tree_utils.tree_set(opt, nu=jax.tree.map(lambda g: g * g, g0))
        return OptaxState(y=params, opt=opt, step=jnp.asarray(0, jnp.int64),
                          loss0=problem.loss(params).astype(dtype), code=jnp.asarray(Status.RUNNING),
                          ahead=LookAhead(loss.astype(dtype), g0))

    def _loss_and_grad(self, problem: Problem, y: Params, state: OptaxState, step: jax.Array):
        return self._grad(problem, y)

    def _update(self, problem: Problem, s: OptaxState, g: Params) -> OptaxState:
        updates, opt = self.transformation(jax.tree.leaves(s.y)[0].dtype).update(g, s.opt, s.y)
        return eqx.tree_at(lambda z: (z.y, z.opt), s, (optax.apply_updates(s.y, updates), opt))

    def preconditioner(self, problem: Problem, state: OptaxState) -> Params:
        """The denominator of the last step taken, elementwise: RMSProp's √ν + ε (√(ν + ε) with
        `eps_in_sqrt`), Adam's √ν̂ + ε with ν̂ = ν/(1 − β₂ᵏ) bias-corrected as optax corrects it
        (Cohen et al. 2022's P). At step 0, where no step has been taken (and Adam's ν̂ is 0/0),
        the first step's: ν updated by g₀ first, as the methods update it. A `given`
        transformation's is unknown (validation refuses the observable for it)."""
        if self.optimizer == "given":
            raise ValueError("preconditioned_sharpness: the preconditioner of a given optax transformation is unknown")
        dtype = jax.tree.leaves(state.y)[0].dtype
        b2, eps = self.beta2.astype(dtype), self.eps.astype(dtype)
        nu = optax.tree_utils.tree_get(state.opt, "nu")
        first = state.step == 0
        nu = jax.tree.map(lambda n, g: jnp.where(first, b2 * n + (1 - b2) * g * g, n), nu, state.ahead.grad)
        k = jnp.maximum(state.step, 1).astype(dtype)
        if self.optimizer == "adam":
            nu = jax.tree.map(lambda n: n / (1 - b2 ** k), nu)
        if self.eps_in_sqrt:
            return jax.tree.map(lambda n: jnp.sqrt(n + eps), nu)
        return jax.tree.map(lambda n: jnp.sqrt(n) + eps, nu)


def _arrays(**values) -> dict:
    return {k: jnp.asarray(float(v)) for k, v in values.items()}


def make_optax_integrator(*, optimizer: str, learning_rate: float, divergence_factor: float = 1e8,
                          perturbation: float = 0.0, beta1: float = 0.0, beta2: float = 0.0, eps: float = 0.0,
                          eps_in_sqrt: bool = False, nu0_grad: bool = False,
                          given: optax.GradientTransformation | None = None) -> OptaxIntegrator:
    """RMSProp (`optimizer` "rmsprop": β₂, ε inside or outside the root, ν₀ = 0 or g₀ ⊙ g₀),
    Adam ("adam": β₁, β₂, ε, bias correction as optax does it), or a `given` transformation
    ("given"), at flow time t = k·`learning_rate`."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; allowed: {', '.join(OPTIMIZERS)}")
    if (optimizer == "given") != (given is not None):
        raise ValueError("a transformation is `given` with optimizer \"given\" only")
    return OptaxIntegrator(**_arrays(learning_rate=learning_rate, beta1=beta1, beta2=beta2, eps=eps,
                                     divergence_factor=divergence_factor, perturbation=perturbation),
                           optimizer=optimizer, eps_in_sqrt=bool(eps_in_sqrt), nu0_grad=bool(nu0_grad), given=given)
