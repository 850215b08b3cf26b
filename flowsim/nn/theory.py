"""Theory numbers to overlay on simulations (float64 numpy; σ' evaluated with JAX).

JAX is imported only where σ' is evaluated (the smooth activations' quadrature): the plots
draw these bounds from an archive, and reading an archive imports no JAX.

Caron, Ayed, Jung, Lee, Lee, Yang (2023), *Over-parameterised shallow neural networks with
asymmetrical node scaling*:

- the mean NTG at initialisation Θ* (their eq. 8) and κ_n = eig_min Θ*;
- Theorems 4.1/5.1: under gradient flow on the ½Σ loss, eig_min Θ̂_t ≥ γκ_n/4 and
  L_t ≤ exp(−γκ_n t/2) L_0;
- the departure from the kernel regime of Zipf node scalings, Σ_j λ̃_j² = ζ(2/α)/ζ(1/α)²
  (appendix, Fig. S.1).

Chen, Vanden-Eijnden, Bruna (ICLR 2022), *On feature learning in neural networks with global
convergence guarantees*: the embedding Gram matrix G = φ(X)φ(X)ᵀ/D and their rate
L_t ≤ L_0 exp(−r ĉ² λ_min(G) t).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from flowsim.kinds import LEAKY_RELU_SLOPE, SMOOTH

# Entries of the (rows, n, Q, Q) quadrature block evaluated at once: 2**22 float64 = 32 MiB.
_QUADRATURE_BLOCK = 2**22
_MAX_QUAD_POINTS = 256


# ------------------------------------------------------------------------- Caron: Θ*, κ_n


def input_covariance(X) -> np.ndarray:
    """C = X Xᵀ / d: the covariance of u_i = w·x_i/sqrt(d) over w ~ N(0, I_d)."""
    X = np.asarray(X, dtype=np.float64)
    return X @ X.T / X.shape[1]


def correlation(C: np.ndarray) -> np.ndarray:
    """ρ_ik = C_ik / sqrt(C_ii C_kk), clipped to [−1, 1] against rounding; 0 where a point is
    the origin (its pre-activation is identically 0, so any ρ gives the same Θ* entry: 0)."""
    norms = np.sqrt(np.diag(C))
    denom = np.outer(norms, norms)
    rho = np.divide(C, denom, out=np.zeros_like(C), where=denom > 0)
    return np.clip(rho, -1.0, 1.0)


def relu_expectation(rho) -> np.ndarray:
    """E[1(u>0) 1(v>0)] = (π − arccos ρ)/(2π) for a centred Gaussian pair with correlation ρ
    (the orthant probability; the arc-cosine kernel of degree 0)."""
    return (np.pi - np.arccos(rho)) / (2 * np.pi)


def leaky_relu_expectation(rho, slope: float = LEAKY_RELU_SLOPE) -> np.ndarray:
    """E[σ'(u)σ'(v)] for leaky-relu with negative slope s.

    σ'(z) = s + (1−s)·1(z>0), so
    σ'(u)σ'(v) = s² + s(1−s)(1(u>0) + 1(v>0)) + (1−s)²·1(u>0)1(v>0), and with P(u>0) = ½:
    E = s² + s(1−s) + (1−s)² P(u>0, v>0) = s + (1−s)² (π − arccos ρ)/(2π).
    Checks: s = 0 gives relu, s = 1 gives 1, ρ = 1 gives E[σ'(u)²] = (1+s²)/2.
    """
    return slope + (1 - slope) ** 2 * relu_expectation(rho)


def gauss_hermite_rule(quad_points: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights with Σ_q w_q g(z_q) ≈ E[g(Z)], Z ~ N(0, 1) (probabilists' Hermite)."""
    if not 1 <= quad_points <= _MAX_QUAD_POINTS:
        # numpy's weights overflow to NaN beyond a few hundred points
        raise ValueError(f"quad_points must lie in [1, {_MAX_QUAD_POINTS}], got {quad_points!r}")
    z, w = np.polynomial.hermite_e.hermegauss(quad_points)
    return z, w / math.sqrt(2 * math.pi)


@functools.cache
def _quadrature_block():
    """The compiled block sum, built at its first use (JAX is imported then, see above)."""
    import jax
    import jax.numpy as jnp

    @functools.partial(jax.jit, static_argnums=0)
    def block(sigma_prime, L11, L21, L22, z, w):
        """Σ_a Σ_b w_a w_b σ'(L11_p z_a) σ'(L21_p z_a + L22_p z_b) for a block of pairs p."""
        inner = sigma_prime(L21[:, None, None] * z[:, None] + L22[:, None, None] * z[None, :]) @ w   # (pairs, Q)
        return jnp.sum(sigma_prime(L11[:, None] * z) * w * inner, axis=-1)

    return block


def gauss_hermite_expectation(C: np.ndarray, sigma_prime, quad_points: int = 48) -> np.ndarray:
    """E[σ'(u_i)σ'(u_k)] for the centred Gaussian vector u with covariance C, pair by pair.

    Tensor-product Gauss–Hermite rule through the Cholesky factor of each 2×2 covariance:
    u = L11 z1, v = L21 z1 + L22 z2 with z1, z2 ~ N(0, 1) independent,
    L11 = sqrt(C_ii), L21 = C_ik/L11, L22 = sqrt(C_kk − L21²). A zero-variance point
    (x = 0) gets L11 = L21 = 0: u ≡ 0 exactly, no division by zero.

    Accuracy: exact for polynomial σ'σ' up to degree 2Q−1 in each z. For analytic σ' the
    error falls fast while the variances C_ii are O(1), and grows as they grow (σ'(L z)
    narrows relative to the Gaussian). At Q = 48 and variance 1 the worst activation, tanh,
    is off by ~2e-6 (the others ≤ 1e-13); at variance 2, tanh ~2e-4, swish ~1e-9; at variance
    4, tanh ~3e-3. Inputs of large norm (|x|²/d ≫ 1) therefore need more `quad_points`.
    For step-like σ' (relu) the error falls only like 1/Q; use the closed forms there.
    """
    C = np.asarray(C, dtype=np.float64)
    n = len(C)
    i, k = np.triu_indices(n)   # E is symmetric: each pair once
    L11 = np.sqrt(np.maximum(np.diag(C), 0.0))[i]
    L21 = np.divide(C[i, k], L11, out=np.zeros(len(i)), where=L11 > 0)
    L22 = np.sqrt(np.maximum(np.diag(C)[k] - L21**2, 0.0))
    z, w = gauss_hermite_rule(quad_points)
    size = min(len(i), max(1, _QUADRATURE_BLOCK // quad_points**2))
    # every block the same shape (the last padded with zero-variance pairs, dropped after):
    # one compiled program, where a shorter last block would trace and compile a second
    pad = -len(i) % size
    L11, L21, L22 = (np.concatenate([A, np.zeros(pad)]) for A in (L11, L21, L22))
    pairs = np.concatenate([np.asarray(_quadrature_block()(sigma_prime, L11[j : j + size], L21[j : j + size],
                                                         L22[j : j + size], z, w))
                            for j in range(0, len(L11), size)])[: len(i)]
    E = np.empty((n, n))
    E[i, k] = E[k, i] = pairs
    return E


@functools.lru_cache
def _sigma_prime(name: str):
    # One callable per name, so the jitted quadrature (σ' is a static argument) compiles once.
    from flowsim.nn import activations

    return activations.derivative(name)


def mean_ntg(X, activation: str, *, quad_points: int = 48) -> np.ndarray:
    """The mean NTG at initialisation (Caron et al. eq. 8), an (n, n) matrix:

        Θ*(x, x') = (x·x'/d) E[σ'(u) σ'(v)],
        (u, v) ~ N(0, [[|x|², x·x'], [x·x', |x'|²]] / d),

    i.e. the expectation of Θ̂ = (XXᵀ/d) ⊙ (S diag(λ) Sᵀ) over w_j ~ N(0, I_d) (Σλ_j = 1).
    relu and leaky-relu use closed forms in the correlation ρ; smooth activations use a
    `quad_points`² Gauss–Hermite rule (cost O(n² Q²) σ' evaluations; accurate to rounding
    for unit-sphere inputs, see `gauss_hermite_expectation` for larger |x|²/d). Rows with
    x = 0 give zero rows and columns, never NaN.
    """
    from flowsim.nn import activations

    activations.activation(activation)  # a ValueError listing the names if unknown
    C = input_covariance(X)
    if activation == "relu":
        E = relu_expectation(correlation(C))
    elif activation == "leaky-relu":
        E = leaky_relu_expectation(correlation(C))
    elif activation in SMOOTH:
        E = gauss_hermite_expectation(C, _sigma_prime(activation), quad_points)
    else:
        raise ValueError(f"no mean-NTG formula for activation {activation!r}")
    return C * E


def kappa_n(X, activation: str, *, quad_points: int = 48) -> float:
    """κ_n = eig_min Θ*(X): positive for distinct non-parallel inputs (Du et al. 2019)."""
    return float(np.linalg.eigvalsh(mean_ntg(X, activation, quad_points=quad_points))[0])


def caron_eig_bound(gamma: float, kappa: float) -> float:
    """Caron Thm 4.1/5.1: with high probability eig_min Θ̂_t ≥ γ κ_n / 4 for all t."""
    return gamma * kappa / 4


def caron_loss_bound(t, L0: float, gamma: float, kappa: float) -> np.ndarray:
    """Caron Thm 4.1/5.1: L_t ≤ L_0 exp(−γ κ_n t / 2), gradient flow on L = ½Σ(y − f)²."""
    return L0 * np.exp(-gamma * kappa * np.asarray(t, dtype=np.float64) / 2)


# --------------------------------------------------------------- Caron: Zipf departure


def zeta(s: float) -> float:
    """Riemann ζ(s) = Σ_{j≥1} j^{−s} for real s > 1 (`scipy.special.zeta`)."""
    import scipy.special    # here, not at the top: 0.1 s of every run's start-up otherwise

    if not s > 1:
        raise ValueError(f"zeta needs s > 1, got {s!r}")
    return float(scipy.special.zeta(s))


def zipf_departure(alpha: float) -> float:
    """Σ_j λ̃_j² for infinite-width Zipf weights λ̃_j = j^{−1/α}/ζ(1/α), α ∈ (0, 1):
    ζ(2/α)/ζ(1/α)². Uniform (NTK) weights give Σ_j (1/m)² → 0; a positive value measures how
    far the asymmetric part stays from the kernel regime (Caron et al., appendix Fig. S.1)."""
    if not 0 < alpha < 1:
        raise ValueError(f"Zipf exponent alpha must lie in (0, 1), got {alpha!r}")
    return zeta(2 / alpha) / zeta(1 / alpha) ** 2


# --------------------------------------------------------------------------------- Chen


def gram_matrix(Phi) -> np.ndarray:
    """Chen et al.'s embedding Gram matrix G = Φ Φᵀ / D for features Φ = φ(X), (n, D)."""
    Phi = np.asarray(Phi, dtype=np.float64)
    return Phi @ Phi.T / Phi.shape[1]


def chen_loss_bound(t, L0: float, rate: float, c_hat: float, lam_min: float) -> np.ndarray:
    """Chen et al.'s convergence guide line L_0 exp(−r ĉ² λ_min(G) t), with ĉ the output
    weight magnitude and r their PL constant: the overlays pass `chen_r` = 2η_0 r_rate s_f² m s̃
    (embedding.py's module docstring derives it; for their scaling it is 2η_0, not the flow
    rate m). It is exact at t = 0 and a guide afterwards, not a proven bound."""
    return L0 * np.exp(-rate * c_hat**2 * lam_min * np.asarray(t, dtype=np.float64))
