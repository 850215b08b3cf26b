"""Chen, Vanden-Eijnden & Bruna (ICLR 2022) embedded models, as shallow nets on φ(X).

Their model (eqs. 2-3, Table 1),

    f(x) = s_f Σ_i c_i σ(h_i(x)),   h_i(x) = s_h Σ_j W_ij φ_j(x),   c_i = ±ĉ fixed,
    dW/dt = −r ∇_W L,               L = ½ Σ_a (f(x_a) − y_a)²,

is exactly `shallow.ShallowNet` (f = Σ_i c'_i a_i σ(w_i·u/√D)) applied to the fixed
embedded inputs u = φ̃(x) ∈ R^D, with a_i = ±1 (Rademacher) and c'_i = ĉ s_f. The three
scalings of their Table 1:

    chen_scaling   s_f      s_h       rate r   φ̃            init
    theirs         1/m      1/√D      m        φ            W ~ N(0, 1)
    ntk            1/√m     1/√D      1        φ            W ~ N(0, 1), paired nodes (f₀ = 0)
    mean-field     1/m      1/D       m²       φ/√D         W ~ N(0, 1)

(mean-field's extra 1/√D is folded into φ̃ so the preactivation stays w·φ̃/√D.) GD with
step δ and `learning_rate = δ` is their update W − r δ ∂L/∂W. Because the network *is* a
ShallowNet, its closed-form NTG (DESIGN.md §1) holds on φ̃(X) unchanged.

NTK symmetrisation: their appendix I follows Chizat, Oyallon & Bach ("On lazy training"):
the m nodes are m/2 pairs with equal first-layer weights and opposite output signs, so
f₀ ≡ 0 and both members of a pair are trained. We do that (rather than `zeroed`, which
subtracts a frozen copy of m independent nodes): it is their construction, needs no frozen
reference and keeps the trainable state one (m, D) matrix. `zeroed` stays available.

Embeddings φ (D = dimension): identity (D = d, the mean-field shallow net), quadratic
vec(x xᵀ) (D = d²), random features σ(z_j·x/√d) with z_j ~ N(0, I_d) drawn once per run
from the run's seed (the partially-trained three-layer "P-3L" net), D = `features`.

Convergence overlay. Along the flow (their eqs. 11-14, any of the three scalings)

    dL/dt = −rᵀ (r_rate Θ̂) r ≤ −2 ĉ² λ_min(G) η_t · (r_rate s_f² m s̃) L,
    η_t = min_a (1/m) Σ_i σ'(h_i(x_a))²,   G = φ(X)φ(X)ᵀ/D  (the paper's G),

with s̃ = 1 except mean-field, where s̃ = 1/D (φ̃ = φ/√D). Their Theorem 1-3 constant r is
not explicit (it comes from the fraction of active neurons, kept ≥ a fraction of its
initial value by their Lemma 1). The overlay uses the initial value: L_0 exp(−r ĉ² λ_min(G) t)
with r = `chen_r` = 2 η_0 r_rate s_f² m s̃ — this is 2η_0 for theirs and NTK, and
2η_0·m/D for mean-field (2η_0 for the P-3L net, D = m). It is the rate of the paper's
PL inequality (their eq. 16 with K_σ'² replaced by η_0) at t = 0: a guide line, exact for
the first instant, not a proven bound at later times when σ' changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ..nn import theory
from ..nn.activations import activation as _activation
from ..nn.activations import derivative as _derivative
from ..config.typed import Config
from ..data import Dataset, quadratic_features
from ..nn.scaling import OutputScale
from .base import Network, dtype_of
from .shallow import ShallowNet, init_shallow

# Separates the random-features stream from every other use of the run's seed.
_FEATURE_SALT = 0x43_56_42  # "CVB"


@dataclass(frozen=True)
class ChenScale:
    """Output multiplier (per node), flow rate, input factor and pairing of one scaling."""

    c: np.ndarray          # (m,) ĉ s_f
    rate: float            # r_rate: dW/dt = −rate ∇L
    input_factor: float    # φ̃ = input_factor · φ
    paired: bool           # NTK: symmetrised initialisation by node pairs
    chen_r_factor: float   # r_rate s_f² m s̃ (multiplies 2 η_0 in `chen_r`)


def chen_scale(kind: str, m: int, D: int, c_hat: float = 1.0) -> ChenScale:
    """The Table 1 scaling `kind` (theirs | ntk | mean-field) at width m, embedding dim D."""
    if kind == "theirs":
        s_f, rate, factor = 1.0 / m, float(m), 1.0
    elif kind == "ntk":
        s_f, rate, factor = 1.0 / math.sqrt(m), 1.0, 1.0
    elif kind == "mean-field":
        s_f, rate, factor = 1.0 / m, float(m) ** 2, 1.0 / math.sqrt(D)
    else:
        raise ValueError(f"unknown chen_scaling {kind!r}; allowed: theirs, ntk, mean-field")
    return ChenScale(c=np.full(m, c_hat * s_f), rate=rate, input_factor=factor, paired=kind == "ntk",
                     chen_r_factor=rate * s_f**2 * m * factor**2)


def feature_weights(seed: int, D: int, d: int) -> np.ndarray:
    """z_j ~ N(0, I_d), j = 1..D, the fixed first layer of the P-3L net (from the run's seed)."""
    return np.random.default_rng([int(seed), _FEATURE_SALT]).standard_normal((D, d))


def embed(kind: str, X: np.ndarray, *, z: np.ndarray | None = None, activation: str = "relu") -> np.ndarray:
    """φ(X) row by row (float64 numpy): identity, vec(x xᵀ), or σ(X zᵀ/√d)."""
    X = np.asarray(X, dtype=np.float64)
    if kind == "identity":
        return X
    if kind == "quadratic":
        return quadratic_features(X)
    if kind == "random-features":
        if z is None:
            raise ValueError("the random-features embedding needs its weights z (D, d)")
        return np.asarray(_activation(activation)(jnp.asarray(X @ z.T / math.sqrt(X.shape[1]))))
    raise ValueError(f"unknown embedding {kind!r}; allowed: identity, quadratic, random-features")


def pair_nodes(W: jax.Array, a: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Chizat-style symmetrisation: nodes m/2..m−1 copy nodes 0..m/2−1 with the output sign
    flipped, so the network is identically 0 at initialisation."""
    half = W.shape[0] // 2
    return jnp.concatenate([W[:half], W[:half]]), jnp.concatenate([a[:half], -a[:half]])


def active_fraction(net: ShallowNet, params, U: jax.Array) -> float:
    """η = min_a (1/m) Σ_i σ'(h_i(x_a))² on embedded inputs U (rows)."""
    h = U @ params["W"].T / math.sqrt(U.shape[-1])
    return float(jnp.min(jnp.mean(_derivative(net.activation)(h) ** 2, axis=1)))


def build_embedded(config: Config, ds: Dataset, seed: int) -> Network:
    """The builder of `model.kind = "embedded"`: data → φ̃(X), network, init record."""
    dtype = dtype_of(config)
    model = config.model
    d = ds.X_train.shape[1]
    m = model.width
    kind = model.embedding
    z = feature_weights(seed, model.features, d) if kind == "random-features" else None
    D = model.inputs(d)   # (the config answers its own size: flowsim.config.typed)
    sc = chen_scale(model.chen_scaling, m, D, model.c_hat)
    phi = embed(kind, ds.X_train, z=z, activation=model.activation)
    phi_test = embed(kind, ds.X_test, z=z, activation=model.activation)
    G = theory.gram_matrix(phi)

    model_key, solver_key = jax.random.split(jax.random.PRNGKey(seed))
    k_w, k_a = jax.random.split(model_key)
    W = model.init_std * jax.random.normal(k_w, (m, D), dtype)
    a = jax.random.rademacher(k_a, (m, ds.y_train.shape[1]), dtype)
    if sc.paired:
        W, a = pair_nodes(W, a)
    scale = OutputScale(c=sc.c, lam=sc.c**2, rate=sc.rate)
    net, params = init_shallow(model_key, d=D, outputs=ds.y_train.shape[1], scale=scale,
                               scaling_kind="embedded", activation_name=model.activation,
                               init_std=model.init_std, train_output=False, zeroed=model.zeroed,
                               init_weights={"W0": np.asarray(W), "a": np.asarray(a)}, dtype=dtype)
    U = jnp.asarray(sc.input_factor * phi, dtype)
    eta0 = active_fraction(net, params, U)
    eig = np.linalg.eigvalsh(G)
    init = {"W0": np.asarray(params["W"]), "a": np.asarray(net.a), "lam": scale.lam, "c": scale.c,
            "loss0": None,    # build_run's; its place in the archive's init group is here
            "G_lambda_min": np.asarray(eig[0]), "G_lambda_max": np.asarray(eig[-1]),
            "c_hat": np.asarray(float(model.c_hat)), "flow_rate": np.asarray(sc.rate),
            "eta0": np.asarray(eta0), "chen_r": np.asarray(2 * eta0 * sc.chen_r_factor),
            "embedding_dim": np.asarray(D), "input_factor": np.asarray(sc.input_factor)}
    if z is not None:
        init["z"] = z
    return Network(net=net, params=params, rate=sc.rate, init=init, key=solver_key, X=U,
                   X_test=jnp.asarray(sc.input_factor * phi_test, dtype))
