"""The Problem: data, network and loss — everything a solver needs, nothing about stepping.

Its trainable state `Params` is a plain dict of arrays (`{"W": (m, d)}`, plus `"a"` when
the output layer is trained): the ODE state, the GD state and the checkpoint alike. The
network is any module called as `net(params, X)` with a closed-form `ntg(params, X)`
(`flowsim.models.ShallowNet`). A Problem is an Equinox module of arrays, so a batch of
them (one per seed) is a pytree with a leading axis and `eqx.filter_vmap` maps the whole
simulation over seeds.
"""

import equinox as eqx
import jax

from .losses import loss_entry, loss_fn

Params = dict[str, jax.Array]


class Problem(eqx.Module):
    net: eqx.Module
    X: jax.Array              # (n, d) training inputs
    y: jax.Array              # (n, k) training targets
    X_test: jax.Array         # (n_test, d)
    y_test: jax.Array         # (n_test, k)
    rate: float = eqx.field(static=True)       # dW/dt = −rate ∇L
    loss_kind: str = eqx.field(static=True)
    ntg_points: int = eqx.field(static=True)   # NTG on the first p training points

    def loss(self, params: Params, X: jax.Array | None = None, y: jax.Array | None = None) -> jax.Array:
        """Training loss (or the loss on the given X, y)."""
        X = self.X if X is None else X
        y = self.y if y is None else y
        return loss_fn(self.loss_kind)(self.net(params, X), y)

    def test_loss(self, params: Params) -> jax.Array:
        return self.loss(params, self.X_test, self.y_test)

    def grad(self, params: Params) -> Params:
        return jax.grad(self.loss)(params)

    def velocity(self, params: Params) -> Params:
        """The gradient-flow vector field −rate ∇L(W)."""
        return jax.tree.map(lambda g: -self.rate * g, self.grad(params))

    def batch_loss(self, params: Params, idx: jax.Array) -> jax.Array:
        """Unbiased mini-batch estimate of the full loss on the rows `idx`."""
        value = self.loss(params, self.X[idx], self.y[idx])
        if loss_entry(self.loss_kind).sum_over_samples:
            value = value * (self.X.shape[0] / idx.shape[0])
        return value

    def ntg(self, params: Params) -> jax.Array:
        """Closed-form NTG on the first `ntg_points` training inputs."""
        return self.net.ntg(params, self.X[: self.ntg_points])


def hessian_vector_product(problem: Problem, params: Params, v: Params) -> Params:
    """∇²L(W)·v by forward-over-reverse differentiation; no Hessian matrix is formed."""
    return jax.jvp(problem.grad, (params,), (v,))[1]
