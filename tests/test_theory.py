"""flowsim.nn.theory: mean NTG (closed forms, quadrature, Monte Carlo, wide nets), κ_n, ζ, bounds."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flowsim.nn import theory
from flowsim.nn.activations import LEAKY_RELU_SLOPE, SMOOTH, derivative

# Inputs of unequal norms and assorted angles, so every entry tests a different covariance;
# pre-activation variances |x|²/d from 0.3 to 1.5, the range of sphere and standardised data.
RNG = np.random.default_rng(2024)
X_MIXED = RNG.standard_normal((6, 4))
X_MIXED *= np.sqrt(np.array([1.0, 1.5, 0.3, 0.8, 1.2, 1.0]) * 4)[:, None] / np.linalg.norm(
    X_MIXED, axis=1, keepdims=True
)
X_MIXED[5] = -0.7 * X_MIXED[0]  # an anti-parallel pair: ρ = −1

NONLINEAR_SMOOTH = sorted(SMOOTH - {"identity"})


def sphere(n, d, seed):
    g = np.random.default_rng(seed).standard_normal((n, d))
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def monte_carlo_expectation(X, name, samples=1_000_000, seed=0):
    """Mean and standard error of σ'(u_i)σ'(u_k) with u = X w/sqrt(d), w ~ N(0, I_d)."""
    d = X.shape[1]
    w = np.random.default_rng(seed).standard_normal((samples, d))
    S = np.asarray(jax.jit(derivative(name))(jnp.asarray(w @ X.T / math.sqrt(d))))  # (samples, n)
    mean = S.T @ S / samples
    variance = (S**2).T @ S**2 / samples - mean**2
    return mean, np.sqrt(np.maximum(variance, 0.0) / (samples - 1))


def expectation(X, name):
    """E[σ'(u)σ'(v)] as mean_ntg uses it (Θ* divided by the input covariance)."""
    C = theory.input_covariance(X)
    if name == "relu":
        return theory.relu_expectation(theory.correlation(C))
    if name == "leaky-relu":
        return theory.leaky_relu_expectation(theory.correlation(C))
    return theory.gauss_hermite_expectation(C, derivative(name), 48)


def test_relu_closed_form_against_gauss_hermite():
    C = theory.input_covariance(X_MIXED)
    closed = theory.relu_expectation(theory.correlation(C))
    # σ' of relu is a step, so tensor Gauss–Hermite converges only like 1/Q
    errors = [
        np.abs(theory.gauss_hermite_expectation(C, derivative("relu"), q) - closed).max()
        for q in (50, 200)
    ]
    assert errors[1] < 0.01
    assert errors[1] < errors[0] / 2.5


@pytest.mark.parametrize("name", ["relu", "leaky-relu", *NONLINEAR_SMOOTH])
def test_expectation_against_monte_carlo(name):
    mean, se = monte_carlo_expectation(X_MIXED, name)
    # 5 standard errors. The atol covers the anti-parallel relu entry, whose samples are all 0:
    # ρ = −1 is computed to about 1e-16, and arccos turns that into about 1e-8 / (2π).
    assert np.all(np.abs(expectation(X_MIXED, name) - mean) <= 5 * se + 1e-8)


def test_leaky_relu_special_values():
    s = LEAKY_RELU_SLOPE
    assert theory.leaky_relu_expectation(1.0) == pytest.approx((1 + s**2) / 2, rel=1e-15)
    assert theory.leaky_relu_expectation(-1.0) == pytest.approx(s, rel=1e-15)  # σ'(u)σ'(−u) = s
    assert theory.leaky_relu_expectation(0.3, slope=0.0) == theory.relu_expectation(0.3)


def test_quadrature_converged():
    # tanh has the narrowest σ' (poles of sech² at ±iπ/2), so it converges last of SMOOTH.
    # Caron's setting (unit sphere, d = 50: variance 1/50): the default rule is exact to rounding.
    X = sphere(20, 50, seed=0)
    coarse, fine = (theory.mean_ntg(X, "tanh", quad_points=q) for q in (48, 96))
    np.testing.assert_allclose(coarse, fine, rtol=0, atol=1e-14)
    # variances up to 1.5 (standardised data): converged to 1e-7 at 96 points
    coarse, fine = (theory.mean_ntg(X_MIXED, "tanh", quad_points=q) for q in (96, 160))
    np.testing.assert_allclose(coarse, fine, rtol=0, atol=1e-7)


@pytest.mark.parametrize("name", ["relu", "leaky-relu", "tanh", "swish", "gelu"])
def test_mean_ntg_is_the_wide_network_average(name):
    """Θ̂ = (XXᵀ/d) ⊙ (S diag(1/m) Sᵀ), S_ij = σ'(x_i·w_j/√d), at m = 200 000 (in chunks)."""
    X = X_MIXED[:5]  # no anti-parallel pair: every entry has a non-degenerate node spread
    n, d = X.shape
    m, chunk = 200_000, 50_000
    rng = np.random.default_rng(7)
    total, total_sq = np.zeros((n, n)), np.zeros((n, n))
    sigma_prime = jax.jit(derivative(name))
    for _ in range(m // chunk):
        W = rng.standard_normal((chunk, d))
        S = np.asarray(sigma_prime(jnp.asarray(X @ W.T / math.sqrt(d))))  # (n, chunk)
        total += S @ S.T
        total_sq += (S**2) @ (S**2).T
    C = X @ X.T / d
    node_mean = total / m
    node_var = total_sq / m - node_mean**2  # per-node samples C ⊙ s_j s_jᵀ have variance C² var
    se = np.abs(C) * np.sqrt(node_var * m / (m - 1) / m)
    ntg = C * node_mean
    assert np.all(np.abs(theory.mean_ntg(X, name) - ntg) <= 5 * se + 1e-12)


def test_identity_activation_gives_the_linear_kernel():
    X = X_MIXED
    np.testing.assert_allclose(
        theory.mean_ntg(X, "identity"), X @ X.T / X.shape[1], rtol=1e-13, atol=0
    )


@pytest.mark.parametrize("name", ["relu", "leaky-relu", "swish", "tanh"])
def test_kappa_positive_for_distinct_sphere_points(name):
    X = sphere(30, 5, seed=1)
    assert theory.kappa_n(X, name) > 1e-6
    K = theory.mean_ntg(X, name)
    np.testing.assert_array_equal(K, K.T)


@pytest.mark.parametrize("name", ["relu", "leaky-relu", "swish", "identity"])
def test_zero_input_row_gives_zero_row_without_nan(name):
    X = X_MIXED.copy()
    X[2] = 0.0
    K = theory.mean_ntg(X, name)
    assert np.isfinite(K).all()
    assert np.all(K[2] == 0) and np.all(K[:, 2] == 0)
    others = [0, 1, 3, 4, 5]
    np.testing.assert_allclose(
        K[np.ix_(others, others)], theory.mean_ntg(X[others], name), rtol=1e-12
    )


def test_bad_activation_and_quad_points():
    with pytest.raises(ValueError, match="unknown activation"):
        theory.mean_ntg(X_MIXED, "step")
    with pytest.raises(ValueError, match="quad_points"):
        theory.mean_ntg(X_MIXED, "tanh", quad_points=0)


# ----------------------------------------------------------------------------------- ζ


def test_zeta_known_values():
    assert theory.zeta(2) == pytest.approx(math.pi**2 / 6, rel=1e-15)
    assert theory.zeta(4) == pytest.approx(math.pi**4 / 90, rel=1e-15)
    assert theory.zeta(3) == pytest.approx(1.2020569031595942, rel=1e-15)  # Apéry's constant
    assert theory.zeta(60) - 1 == pytest.approx(2.0**-60, rel=1e-6)
    with pytest.raises(ValueError):
        theory.zeta(1.0)


@pytest.mark.parametrize("s", [1.05, 1.5, 1 / 0.7, 2.5, 7.0])
def test_zeta_against_large_sum(s):
    """Σ_{j≤M} j^{−s} + M^{1−s}/(s−1) − M^{−s}/2 leaves an error of about s M^{−s−1}/12."""
    M = 1_000_000
    j = np.arange(1, M + 1, dtype=np.float64)
    partial = math.fsum(np.sort(j**-s))
    estimate = partial + M ** (1 - s) / (s - 1) - M**-s / 2
    assert abs(estimate - theory.zeta(s)) <= s * M ** (-s - 1) + 1e-15 * theory.zeta(s)


def test_zipf_departure():
    assert theory.zipf_departure(0.5) == pytest.approx(0.4, rel=1e-14)  # (π⁴/90)/(π²/6)²
    assert theory.zipf_departure(0.25) == pytest.approx(6 / 7, rel=1e-14)  # ζ(8)/ζ(4)²
    # a finite Zipf vector of 10⁶ nodes, normalised: converges to the limit from above
    alpha = 0.4
    lam = np.arange(1, 1_000_001, dtype=np.float64) ** (-1 / alpha)
    lam /= lam.sum()
    assert np.sum(lam**2) == pytest.approx(theory.zipf_departure(alpha), rel=1e-8)
    with pytest.raises(ValueError):
        theory.zipf_departure(1.0)


# ------------------------------------------------------------------------------- bounds


def test_caron_bounds():
    t = np.array([0.0, 1.0, 10.0])
    assert theory.caron_eig_bound(0.5, 0.2) == pytest.approx(0.025)
    np.testing.assert_allclose(
        theory.caron_loss_bound(t, 3.0, 0.5, 0.2), 3.0 * np.exp(-0.05 * t), rtol=1e-15
    )


def test_chen_gram_and_bound():
    Phi = RNG.standard_normal((5, 9))
    G = theory.gram_matrix(Phi)
    assert G[1, 3] == pytest.approx(sum(Phi[1, j] * Phi[3, j] for j in range(9)) / 9, rel=1e-14)
    t = np.linspace(0, 5, 4)
    np.testing.assert_allclose(
        theory.chen_loss_bound(t, 2.0, 8.0, 0.5, 0.1), 2.0 * np.exp(-0.2 * t), rtol=1e-15
    )


def test_kappa_n_is_computed_once_per_data_and_activation(monkeypatch):
    """The runs of a sweep point share their data: κ_n (a quadrature before the first step)
    is computed for the first and read back for the others, and equals theory.kappa_n."""
    from flowsim.run.build import build_run
    from flowsim.config import load_scenario, scenarios_dir
    from flowsim.models import shallow

    calls = []
    real = theory.kappa_n
    monkeypatch.setattr(theory, "kappa_n", lambda X, a, **kw: calls.append(a) or real(X, a, **kw))
    monkeypatch.setattr(shallow, "_KAPPA_N", {})
    sc = load_scenario(scenarios_dir() / "quickstart.toml", ["data.n=6", "data.d=3", "data.n_test=4",
                                                             "model.width=8", "run.ntg_points=5"])
    built = [build_run(r.settings, r.seed) for r in sc.runs]
    assert len(sc.runs) == 9 and calls == ["swish"]
    X = np.asarray(built[0].dataset.X_train[:5])
    assert all(float(b.init["kappa_n"]) == real(X, "swish") for b in built)
    tanh = load_scenario(scenarios_dir() / "quickstart.toml", ["data.n=6", "data.d=3", "data.n_test=4",
                                                               "model.width=8", "run.ntg_points=5",
                                                               'model.activation="tanh"'])
    build_run(tanh.runs[0].settings, tanh.runs[0].seed)
    assert calls == ["swish", "tanh"]
