"""Shallow networks with node scaling (Caron et al. 2023, eq. 2):

    f(x; W, a) = Σ_j c_j a_j σ(w_j·x / √d),     c_j = sqrt(λ_j) for the Caron scalings.

The trainable parameters are a plain dict `{"W": (m, d)}` (plus `"a": (m, k)` when the
output layer is trained); everything fixed lives in the `ShallowNet` module. Keeping the
trainable state a small dict makes it the ODE state, the GD state and the checkpoint alike.
`build_shallow` is the builder of `model.kind = "shallow"`.
"""

import dataclasses
import functools
import hashlib
import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..nn import theory
from ..nn.activations import activation, derivative
from ..config.typed import Config, CustomScaling, Scaling, ShallowModel
from ..data import Dataset
from ..kinds import SMOOTH
from ..nn.net import AbstractNet
from ..nn.problem import Params
from ..nn.scaling import OutputScale, output_scale
from .base import BuildError, Network, dtype_of


class ShallowNet(AbstractNet):
    """Fixed parts of a one-hidden-layer network; call it with the trainable `params`.

    With `zeroed`, the network subtracts a frozen copy of itself at initialisation
    (`ref`), so f ≡ 0 at t = 0 (Caron Assumption 7.7) while gradients are unchanged.
    Besides the `AbstractNet` protocol it offers the parts the exact ReLU flow
    (`flowsim.integrate.filippov`) assembles its field from: `preactivations`,
    `output_layer` and `frozen_output`.
    """

    c: jax.Array                  # (m,) output multipliers
    a: jax.Array                  # (m, k) output weights (their initial value when trained)
    lam: jax.Array                # (m,) node scalings λ_j, for importance λ_j‖w_j‖²
    ref: Params | None            # frozen initial params of the zeroed variant
    activation: str = eqx.field(static=True)
    train_output: bool = eqx.field(static=True)

    # per hidden node: its incoming weights (node, feature) and their change
    series_axes: ClassVar[dict[str, tuple[str, ...]]] = {
        "weights": ("node", "feature"), "weight_change": ("node",), "unit_change": ("unit",)}

    @property
    def width(self) -> int:
        return self.c.shape[-1]

    @property
    def smooth(self) -> bool:
        return self.activation in SMOOTH

    def output_weights(self, params: Params) -> jax.Array:
        return params["a"] if self.train_output else self.a

    def output_layer(self) -> jax.Array:
        """c_j a_j (m, k): the output layer with its multipliers, as initialised (the layer
        itself when it is fixed)."""
        return self.c[:, None] * self.a

    @staticmethod
    def preactivations(W: jax.Array, X: jax.Array) -> jax.Array:
        """s_ji = w_j·x_i/√d (m, n) of the hidden weights W (m, d) at inputs X (n, d)."""
        # Hidden units along rows, (m, n): the backward product is then ∇W = δ X, a plain
        # row-major matmul. In the (n, m) layout it is δᵀX, which XLA:CPU runs at half the
        # speed (measured: a float64 swish GD step at n = 100, d = 50, m = 2000, 2.1 → 1.5 ms).
        return W @ X.T / math.sqrt(X.shape[-1])

    def _raw(self, params: Params, X: jax.Array) -> jax.Array:
        z = self.preactivations(params["W"], X)
        return ((self.c[:, None] * self.output_weights(params)).T @ activation(self.activation)(z)).T

    def frozen_output(self, X: jax.Array) -> jax.Array | None:
        """What the zeroed variant subtracts at inputs X: its frozen initial copy's
        predictions (n, k); None when the network is not zeroed."""
        return None if self.ref is None else self._raw(jax.lax.stop_gradient(self.ref), X)

    def __call__(self, params: Params, X: jax.Array) -> jax.Array:
        """Predictions (n, k) at inputs X (n, d)."""
        out = self._raw(params, X)
        if self.ref is not None:
            out = out - self.frozen_output(X)
        return out

    def weights(self, params: Params) -> jax.Array:
        """The `weights` series: the hidden layer, (node, feature)."""
        return params["W"]

    def weight_change(self, params: Params, params0: Params) -> jax.Array:
        """‖w_j − w_j(0)‖ per hidden node."""
        return jnp.linalg.norm(params["W"] - params0["W"], axis=-1)

    unit_change = weight_change   # the hidden layer is the one dense layer that trains W

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


# Jitted, the draws are one program each; drawn eagerly, they were a dozen small programs,
# each a compilation (or a cache load) at start-up. The numbers are the same.
@functools.partial(jax.jit, static_argnames=("m", "d", "outputs", "standard", "dtype"))
def _draw(key, *, m: int, d: int, outputs: int, standard: bool, dtype):
    kw, ka = jax.random.split(key)
    if standard:
        return (jax.random.uniform(kw, (m, d), dtype, -1.0, 1.0),
                jax.random.uniform(ka, (m, outputs), dtype, -1.0, 1.0) / math.sqrt(m))
    return jax.random.normal(kw, (m, d), dtype), jax.random.rademacher(ka, (m, outputs), dtype)


@jax.jit
def _keys(seed) -> tuple[jax.Array, jax.Array]:
    return tuple(jax.random.split(jax.random.PRNGKey(seed)))


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
    if init_weights is not None:
        W = jnp.asarray(init_weights["W0"], dtype)
        a = jnp.asarray(init_weights["a"], dtype).reshape(m, -1)
        if a.shape[1] != outputs:
            a = jnp.broadcast_to(a[:, :1], (m, outputs))
    else:
        W, a = _draw(key, m=m, d=d, outputs=outputs, standard=scaling_kind == "standard", dtype=jnp.dtype(dtype))
        if scaling_kind != "standard":
            # in numpy (one rounding, as before), not in the program: XLA's product there
            # differed from the eager one in the last bit
            W = jnp.asarray(np.asarray(W) * np.asarray(init_std, W.dtype))
    params: Params = {"W": W, "a": a} if train_output else {"W": W}
    net = ShallowNet(c=jnp.asarray(scale.c, dtype), a=a, lam=jnp.asarray(scale.lam, dtype),
                     ref=dict(params) if zeroed else None, activation=activation_name,
                     train_output=train_output)
    return net, params


# ---------------------------------------------------------------------------------------
# The builder: run config and data -> network, initial weights, init record
# ---------------------------------------------------------------------------------------

def _load_npz(path: str, key: str, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    try:
        with np.load(path) as f:
            missing = [n for n in names if n not in f.files]
            if missing:
                raise BuildError(f"{path} (from `{key}`): missing array(s) {missing}; the file holds {f.files}")
            return {n: np.asarray(f[n], dtype=np.float64) for n in names}
    except (OSError, ValueError) as err:
        if isinstance(err, BuildError):
            raise
        raise BuildError(f"{path} (from `{key}`): not a readable .npz file ({str(err)[:120]}); allowed: an "
                         f".npz file (numpy.savez) holding {', '.join(names)}") from None


def _scaling_params(scaling: Scaling, m: int) -> dict:
    """The keyword arguments of `output_scale`: the scaling's numbers (gamma, alpha, k), and
    for a custom one its λ vector read from `path`."""
    params = {f.name: getattr(scaling, f.name) for f in dataclasses.fields(scaling)
              if f.name not in ("kind", "path")}
    if isinstance(scaling, CustomScaling):
        lam = _load_npz(scaling.path, "model.scaling.path", ("lam",))["lam"]
        if lam.shape != (m,):
            raise BuildError(f"{scaling.path} (from `model.scaling.path`): `lam` has shape {lam.shape}; "
                             f"allowed: a vector of length model.width = {m}")
        params["lam"] = lam
    return params


def _init_weights(model: ShallowModel, d: int) -> dict[str, np.ndarray] | None:
    if not model.init_path:
        return None
    w = _load_npz(model.init_path, "model.init_path", ("W0", "a"))
    m = model.width
    if w["W0"].shape != (m, d) or w["a"].shape[0] != m:
        raise BuildError(f"{model.init_path} (from `model.init_path`): W0 has shape {w['W0'].shape} and a "
                         f"{w['a'].shape}; allowed: W0 of shape (model.width, d) = ({m}, {d}) and a of length {m}")
    return w


def _kappa_n(X: np.ndarray, activation: str) -> float:
    """κ_n for the theory overlays; NaN when the data overflow its computation (huge but
    finite inputs): the run then records a numerical status instead of failing here.
    Computed once per data (the seeds and scalings of a sweep usually share them: a
    quadrature of a few tenths of a second each, before the first step)."""
    X = np.ascontiguousarray(X)
    key = (hashlib.sha256(X.tobytes()).hexdigest(), X.shape, X.dtype.str, activation)
    if key not in _KAPPA_N:
        _KAPPA_N[key] = _compute_kappa_n(X, activation)
    return _KAPPA_N[key]


_KAPPA_N: dict[tuple, float] = {}     # by the data's digest, shape, dtype and the activation


def _compute_kappa_n(X: np.ndarray, activation: str) -> float:
    with np.errstate(all="ignore"):
        try:
            k = float(theory.kappa_n(X, activation))
        except (np.linalg.LinAlgError, ValueError, FloatingPointError):
            return float("nan")
    return k if np.isfinite(k) else float("nan")


def build_shallow(config: Config, ds: Dataset, seed: int) -> Network:
    """Network and initial weights of one run of `model.kind = "shallow"`."""
    dtype = dtype_of(config)
    model = config.model
    n, d = ds.X_train.shape
    m = model.width
    scaling = model.scaling
    scale = output_scale(scaling.kind, m, **_scaling_params(scaling, m))
    model_key, solver_key = _keys(seed)
    net, params = init_shallow(model_key, d=d, outputs=ds.y_train.shape[1], scale=scale,
                               scaling_kind=scaling.kind, activation_name=model.activation,
                               init_std=model.init_std, train_output=model.output == "trained",
                               zeroed=model.zeroed, init_weights=_init_weights(model, d), dtype=dtype)
    p = min(config.run.ntg_points, n)
    init = {"W0": np.asarray(params["W"]), "a": np.asarray(net.a), "lam": scale.lam, "c": scale.c,
            "kappa_n": np.asarray(_kappa_n(ds.X_train[:p], model.activation))}
    return Network(net=net, params=params, rate=scale.rate, init=init, key=solver_key, compiled_loss0=True)
