"""The Problem: data, network and loss — everything a solver needs, nothing about stepping.

Its trainable state `Params` is a pytree of arrays: the ODE state, the GD state and the
checkpoint alike. For the built-in networks it is a plain dict (`{"W": (m, d)}`, plus `"a"`
when the output layer is trained; `flowsim.models.ShallowNet`, with a closed-form NTG); for
a user's Equinox model it is the model's trainable leaves (`flowsim.models.ModuleNet`). The
network is an `AbstractNet` (`flowsim.nn.net`), called as `net(params, X)`. A Problem is an
Equinox module of arrays, so a batch of them (one per seed) is a pytree with a leading axis
and `eqx.filter_vmap` maps the whole simulation over seeds.
"""

from collections.abc import Callable

import equinox as eqx
import jax

from ..kinds import EIGEN_RTOL, HESSIAN_K
from .losses import LossFn, loss_entry, loss_fn
from .net import AbstractNet, Params, refuse_non_net

__all__ = ["Params", "Problem", "hessian_vector_product"]


class Problem(eqx.Module):
    net: AbstractNet
    X: jax.Array              # (n, d) training inputs
    y: jax.Array              # (n, k) training targets
    X_test: jax.Array         # (n_test, d)
    y_test: jax.Array         # (n_test, k)
    rate: float = eqx.field(static=True)       # dW/dt = −rate ∇L
    loss_kind: str = eqx.field(static=True)    # a `flowsim.nn.losses.LOSSES` name, or "callable"
    ntg_points: int = eqx.field(static=True)   # NTG on the first p training points
    # The user's loss (pred (n, k), y (n, k)) -> scalar when `loss_kind` is "callable"
    # (flowsim.simulate); static, so a run's programs are compiled for that function.
    custom_loss: Callable | None = eqx.field(static=True, default=None)
    # The Hessian observables' settings (`run.hessian_k`, `run.eigen_rtol`), beside
    # `ntg_points`: static, so that a run's programs are compiled for them.
    hessian_k: int = eqx.field(static=True, default=HESSIAN_K)
    eigen_rtol: float = eqx.field(static=True, default=EIGEN_RTOL)

    def __check_init__(self):
        refuse_non_net(self.net, "Problem.net")

    def loss_function(self) -> LossFn:
        return self.custom_loss if self.custom_loss is not None else loss_fn(self.loss_kind)

    def loss(self, params: Params, X: jax.Array | None = None, y: jax.Array | None = None) -> jax.Array:
        """Training loss (or the loss on the given X, y)."""
        X = self.X if X is None else X
        y = self.y if y is None else y
        return self.loss_function()(self.net(params, X), y)

    def test_loss(self, params: Params) -> jax.Array:
        return self.loss(params, self.X_test, self.y_test)

    def grad(self, params: Params) -> Params:
        return jax.grad(self.loss)(params)

    def velocity(self, params: Params) -> Params:
        """The gradient-flow vector field −rate ∇L(W): the gradient of −rate·L, so that the
        factor scales the backward pass's first (scalar) cotangent, not the gradient in a
        pass of its own (one per field evaluation, 2 % of the Fig. 1 flow; for rate 1 the two
        are equal bit for bit, a sign being exact)."""
        return jax.grad(lambda p: -self.rate * self.loss(p))(params)

    def batch_loss(self, params: Params, idx: jax.Array) -> jax.Array:
        """Unbiased mini-batch estimate of the full loss on the rows `idx`."""
        value = self.loss(params, self.X[idx], self.y[idx])
        # a callable loss is taken to be a mean over samples (no n/B scaling)
        if self.custom_loss is None and loss_entry(self.loss_kind).sum_over_samples:
            value = value * (self.X.shape[0] / idx.shape[0])
        return value

    def ntg(self, params: Params) -> jax.Array:
        """Closed-form NTG on the first `ntg_points` training inputs."""
        return self.net.ntg(params, self.X[: self.ntg_points])


def hessian_vector_product(problem: Problem, params: Params, v: Params) -> Params:
    """∇²L(W)·v by forward-over-reverse differentiation; no Hessian matrix is formed."""
    return jax.jvp(problem.grad, (params,), (v,))[1]
