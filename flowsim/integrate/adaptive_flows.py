"""The stable flows of RMSProp and Adam: the ODEs whose steps, the moments updated first as the
methods update them, are the methods, in flowsim's time t = kη (docs/optimizers.md).

    RMSProp, in (w, ν):    dν/dt = (1 − β₂)/(β₂η) · (g ⊙ g − ν),   dw/dt = −g / (√ν + ε)
    Adam, in (w, m, ν):    dm/dt = (1 − β₁)/(β₁η) · (g − m),   dν/dt as RMSProp's,
                           dw/dt = −m / (√ν + ε)

g = rate·∇L(w), the gradient the discrete legs are given (`flowsim.integrate.optimizers`);
from ν(0) = g₀ ⊙ g₀ (and m(0) = g₀): ν = 0 would make the denominator ε alone. Bias correction
is left out (its factors tend to 1). With `eps_in_sqrt` RMSProp's denominator is √(ν + ε), as
the discrete kind's.

Each flow is a `flowsim.integrate.flow.StateForm` and its own field: the flow engine steps,
controls and checkpoints the whole state with any flow method (its error norm over w and the
moments alike), and the archive's weights and observables see w only.
"""

import dataclasses

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp

from ..nn.problem import Params, Problem
from .flow import FlowIntegrator, StateForm


def _gradient(problem: Problem, w: Params) -> Params:
    return jax.tree.map(lambda x: problem.rate * x, problem.grad(w))


def _denominator(nu, eps, eps_in_sqrt: bool):
    # ν ≥ 0 along the exact flow; a stage of an explicit step may undershoot by round-off
    nu = jnp.maximum(nu, 0)
    return jnp.sqrt(nu + eps) if eps_in_sqrt else jnp.sqrt(nu) + eps


class RmspropFlow(StateForm):
    """RMSProp's stable flow in {"w", "nu"}; its hyper-parameters are arrays (one compilation for
    a ladder of them)."""

    learning_rate: jax.Array
    beta2: jax.Array
    eps: jax.Array
    eps_in_sqrt: bool = eqx.field(static=True, default=False)

    start_evals = 1      # g₀

    def start(self, problem: Problem, params: Params) -> dict:
        g0 = _gradient(problem, params)
        return {"w": params, "nu": jax.tree.map(lambda g: g * g, g0)}

    def weights(self, y: dict) -> Params:
        return y["w"]

    def preconditioner(self, y: dict) -> Params:
        """√ν + ε (√(ν + ε) with `eps_in_sqrt`): the denominator of dw/dt at y."""
        eps = self.eps.astype(jax.tree.leaves(y["nu"])[0].dtype)
        return jax.tree.map(lambda n: _denominator(n, eps, self.eps_in_sqrt), y["nu"])

    def denominator_slope(self, y: dict) -> Params:
        """∂(√ν + ε)/∂ν (∂√(ν + ε)/∂ν), 0 where it is unbounded (ν = 0 with ε outside the root):
        the central flow's preconditioner moves with ν (`flowsim.integrate.central_rmsprop`)."""
        eps = self.eps.astype(jax.tree.leaves(y["nu"])[0].dtype)

        def slope(n):
            root = jnp.sqrt(jnp.maximum(n, 0) + (eps if self.eps_in_sqrt else 0))
            return jnp.where(root > 0, 0.5 / jnp.where(root > 0, root, 1.0), 0.0)
        return jax.tree.map(slope, y["nu"])

    def nu_rate(self, dtype):
        """ν's rate (1 − β₂)/(β₂η) in flowsim's time."""
        b2, eta = self.beta2.astype(dtype), self.learning_rate.astype(dtype)
        return (1 - b2) / (b2 * eta)

    def __call__(self, t, y: dict, problem: Problem) -> dict:
        g = _gradient(problem, y["w"])
        dtype = jax.tree.leaves(g)[0].dtype
        c2, eps = self.nu_rate(dtype), self.eps.astype(dtype)
        return {"w": jax.tree.map(lambda gi, n: -gi / _denominator(n, eps, self.eps_in_sqrt), g, y["nu"]),
                "nu": jax.tree.map(lambda gi, n: c2 * (gi * gi - n), g, y["nu"])}


class AdamFlow(RmspropFlow):
    """Adam's stable flow in {"w", "m", "nu"} (ε outside the root, as Adam's)."""

    beta1: jax.Array = None

    def start(self, problem: Problem, params: Params) -> dict:
        g0 = _gradient(problem, params)
        return {"w": params, "m": g0, "nu": jax.tree.map(lambda g: g * g, g0)}

    def __call__(self, t, y: dict, problem: Problem) -> dict:
        g = _gradient(problem, y["w"])
        dtype = jax.tree.leaves(g)[0].dtype
        b1, eta = self.beta1.astype(dtype), self.learning_rate.astype(dtype)
        c1, c2, eps = (1 - b1) / (b1 * eta), self.nu_rate(dtype), self.eps.astype(dtype)
        return {"w": jax.tree.map(lambda m, n: -m / _denominator(n, eps, False), y["m"], y["nu"]),
                "m": jax.tree.map(lambda gi, m: c1 * (gi - m), g, y["m"]),
                "nu": jax.tree.map(lambda gi, n: c2 * (gi * gi - n), g, y["nu"])}


def adaptive_form(kind: str, *, learning_rate: float, beta2: float, eps: float, beta1: float | None = None,
                  eps_in_sqrt: bool = False) -> RmspropFlow:
    """The stable flow of `kind` ("rmsprop-flow" or "adam-flow")."""
    arrays = {k: jnp.asarray(float(v)) for k, v in
              (("learning_rate", learning_rate), ("beta2", beta2), ("eps", eps))}
    if kind == "adam-flow":
        return AdamFlow(**arrays, beta1=jnp.asarray(float(beta1)))
    if kind == "rmsprop-flow":
        return RmspropFlow(**arrays, eps_in_sqrt=bool(eps_in_sqrt))
    raise ValueError(f"unknown adaptive flow {kind!r}; allowed: rmsprop-flow, adam-flow")


def adaptive_flow(integrator: FlowIntegrator, form: RmspropFlow) -> FlowIntegrator:
    """A flow method's integrator (built for the gradient flow) integrating `form`'s flow instead."""
    return dataclasses.replace(integrator, term=dfx.ODETerm(form), form=form)
