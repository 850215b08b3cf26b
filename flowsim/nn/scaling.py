"""Node scalings λ_j of Caron et al. (2023), eq. (2)–(3), and the other parameterisations.

    λ_j = γ/m + (1 − γ) λ̃_j / Σ_k λ̃_k,      so Σ_j λ_j = 1.

`output_scale` turns a scaling into the per-node output multiplier c_j of

    f(x) = Σ_j c_j a_j σ(w_j·x/√d),

which is sqrt(λ_j) for the Caron families, 1/m for mean-field and 1 for the standard
(PyTorch-style) parameterisation, together with the flow rate that makes the dynamics
O(1) (m for mean-field, as in Chen et al.'s update W − mδ∂L/∂W).
"""

from dataclasses import dataclass

import numpy as np


def _check(name: str, value: float, ok: bool, allowed: str) -> None:
    if not ok:
        raise ValueError(f"node scaling parameter `{name}` = {value!r} is out of range; allowed: {allowed}")


def zipf_weights(m: int, alpha: float) -> np.ndarray:
    """Unnormalised Zipf weights λ̃_j = j^(−1/α), j = 1..m (decreasing in j)."""
    _check("alpha", alpha, 0.0 < alpha < 1.0, "a number in the open interval (0, 1)")
    return np.arange(1, m + 1, dtype=np.float64) ** (-1.0 / alpha)


def mix(tilde: np.ndarray, gamma: float) -> np.ndarray:
    """λ = γ/m + (1 − γ) λ̃/Σλ̃: a γ-share of NTK scaling plus the normalised asymmetric part."""
    _check("gamma", gamma, 0.0 <= gamma <= 1.0, "a number in [0, 1]")
    tilde = np.asarray(tilde, dtype=np.float64)
    if tilde.ndim != 1 or tilde.size == 0:
        raise ValueError(f"node scaling array must be a non-empty vector, got shape {tilde.shape}")
    if not np.all(np.isfinite(tilde)) or np.any(tilde < 0) or tilde.sum() <= 0:
        raise ValueError("node scaling array must be finite, non-negative and not all zero")
    m = tilde.size
    return gamma / m + (1.0 - gamma) * tilde / tilde.sum()


def node_scalings(kind: str, m: int, *, gamma: float = 0.0, alpha: float = 0.5, k: int = 1,
                  lam: np.ndarray | None = None) -> np.ndarray:
    """The λ vector (length m, summing to 1) of a Caron scaling family.

    `kind` is one of ntk (γ = 1), asymmetric (Zipf with exponent α), single (λ̃_1 = 1),
    finite (λ̃_j = 1/k for j ≤ k) or custom (λ̃ = `lam`).
    """
    if not (isinstance(m, int | np.integer) and m >= 1):
        raise ValueError(f"network width `m` = {m!r} is out of range; allowed: an integer ≥ 1")
    if kind == "ntk":
        return np.full(m, 1.0 / m)
    if kind == "asymmetric":
        return mix(zipf_weights(m, alpha), gamma)
    if kind == "single":
        return mix(np.eye(1, m, 0)[0], gamma)
    if kind == "finite":
        _check("k", k, 1 <= k <= m, f"an integer in [1, m = {m}]")
        return mix((np.arange(m) < k) / k, gamma)
    if kind == "custom":
        if lam is None or np.shape(lam) != (m,):
            raise ValueError(f"custom node scaling needs an array `lam` of length m = {m}, "
                             f"got shape {np.shape(lam)}")
        return mix(lam, gamma)
    raise ValueError(f"unknown node scaling kind {kind!r}; allowed: ntk, asymmetric, single, "
                     "finite, custom, mean-field, standard")


@dataclass(frozen=True)
class OutputScale:
    """Per-node output multipliers c_j, the λ_j they come from, and the flow rate."""

    c: np.ndarray      # (m,) multiplies a_j σ(·) in the network output
    lam: np.ndarray    # (m,) λ_j (= c_j² for the Caron families)
    rate: float        # dW/dt = −rate · ∇L


def output_scale(kind: str, m: int, **params) -> OutputScale:
    """Output multipliers and flow rate of a scaling kind (see module docstring)."""
    if kind == "mean-field":
        c = np.full(m, 1.0 / m)
        return OutputScale(c=c, lam=c**2, rate=float(m))
    if kind == "standard":
        c = np.ones(m)
        return OutputScale(c=c, lam=c, rate=1.0)
    lam = node_scalings(kind, m, **params)
    return OutputScale(c=np.sqrt(lam), lam=lam, rate=1.0)
