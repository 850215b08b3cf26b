"""Shallow networks with node scaling (Caron et al. 2023, eq. 2):

    f(x; W, a) = Σ_j c_j a_j σ(w_j·x / √d),     c_j = sqrt(λ_j) for the Caron scalings.

The trainable parameters are a plain dict `{"W": (m, d)}` (plus `"a": (m, k)` when the
output layer is trained); everything fixed lives in the `ShallowNet` module. Keeping the
trainable state a small dict makes it the ODE state, the GD state and the checkpoint alike.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .activations import activation, derivative
from .scaling import OutputScale

Params = dict[str, jax.Array]


class ShallowNet(eqx.Module):
    """Fixed parts of a one-hidden-layer network; call it with the trainable `params`.

    With `zeroed`, the network subtracts a frozen copy of itself at initialisation
    (`ref`), so f ≡ 0 at t = 0 (Caron Assumption 7.7) while gradients are unchanged.
    """

    c: jax.Array                  # (m,) output multipliers
    a: jax.Array                  # (m, k) output weights (their initial value when trained)
    lam: jax.Array                # (m,) node scalings λ_j, for importance λ_j‖w_j‖²
    ref: Params | None            # frozen initial params of the zeroed variant
    activation: str = eqx.field(static=True)
    train_output: bool = eqx.field(static=True)

    @property
    def width(self) -> int:
        return self.c.shape[-1]

    def output_weights(self, params: Params) -> jax.Array:
        return params["a"] if self.train_output else self.a

    def _raw(self, params: Params, X: jax.Array) -> jax.Array:
        # Hidden units along rows, (m, n): the backward product is then ∇W = δ X, a plain
        # row-major matmul. In the (n, m) layout it is δᵀX, which XLA:CPU runs at half the
        # speed (measured: a float64 swish GD step at n = 100, d = 50, m = 2000, 2.1 → 1.5 ms).
        z = params["W"] @ X.T / math.sqrt(X.shape[-1])
        return ((self.c[:, None] * self.output_weights(params)).T @ activation(self.activation)(z)).T

    def __call__(self, params: Params, X: jax.Array) -> jax.Array:
        """Predictions (n, k) at inputs X (n, d)."""
        out = self._raw(params, X)
        if self.ref is not None:
            out = out - self._raw(jax.lax.stop_gradient(self.ref), X)
        return out

    def ntg(self, params: Params, X: jax.Array) -> jax.Array:
        """Closed-form neural tangent Gram matrix of the first output (DESIGN.md §1):

            Θ̂ = (X Xᵀ/d) ⊙ (S diag(c² a²) Sᵀ)  [+ Σ diag(c²) Σᵀ when a is trained],
            S = σ'(X Wᵀ/√d),  Σ = σ(X Wᵀ/√d).      O(n² m), no Jacobian is formed.
        """
        d = X.shape[-1]
        z = X @ params["W"].T / math.sqrt(d)
        a0 = self.output_weights(params)[:, 0]
        S = derivative(self.activation)(z)
        theta = (X @ X.T / d) * ((S * (self.c * a0) ** 2) @ S.T)
        if self.train_output:
            act = activation(self.activation)(z)
            theta = theta + (act * self.c**2) @ act.T
        return theta


def init_shallow(key: jax.Array, *, d: int, outputs: int, scale: OutputScale, scaling_kind: str,
                 activation_name: str, init_std: float, train_output: bool, zeroed: bool,
                 init_weights: dict[str, np.ndarray] | None = None,
                 dtype=jnp.float64) -> tuple[ShallowNet, Params]:
    """Draw (or load) the initial weights and build the network.

    Caron kinds: w_j ~ N(0, init_std² I_d), a_j = ±1 (Rademacher, one per output).
    `standard` (PyTorch `nn.Linear` default): w̃ ~ U(±1/√d) on the raw input, i.e.
    w ~ U(−1, 1) in this √d-normalised form, and a ~ U(±1/√m) with c = 1.
    `init_weights` (arrays `W0` (m, d) and `a` (m,) or (m, k)) replaces the draw.
    """
    m = scale.c.shape[0]
    kw, ka = jax.random.split(key)
    if init_weights is not None:
        W = jnp.asarray(init_weights["W0"], dtype)
        a = jnp.asarray(init_weights["a"], dtype).reshape(m, -1)
        if a.shape[1] != outputs:
            a = jnp.broadcast_to(a[:, :1], (m, outputs))
    elif scaling_kind == "standard":
        W = jax.random.uniform(kw, (m, d), dtype, -1.0, 1.0)
        a = jax.random.uniform(ka, (m, outputs), dtype, -1.0, 1.0) / math.sqrt(m)
    else:
        W = init_std * jax.random.normal(kw, (m, d), dtype)
        a = jax.random.rademacher(ka, (m, outputs), dtype)
    params: Params = {"W": W, "a": a} if train_output else {"W": W}
    net = ShallowNet(c=jnp.asarray(scale.c, dtype), a=a, lam=jnp.asarray(scale.lam, dtype),
                     ref=dict(params) if zeroed else None, activation=activation_name,
                     train_output=train_output)
    return net, params
