"""The papers' synthetic generators (all draws from `np.random.default_rng(seed)`, training
set first, then the test set from the same distribution)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..config.data_tables import QuadraticTeacherData, RandomLabelsData, SingleReluData, SphereSineData, XorNoiseData
from .base import DataError, Dataset, _count, _real


Sampler = Callable[[int], tuple[np.ndarray, np.ndarray]]


def _synthetic(draw: Sampler, n: int, n_test: int, extra: dict | None = None) -> Dataset:
    """Training set then test set from one sampler (so the RNG order is fixed)."""
    X_train, y_train = draw(n)
    X_test, y_test = draw(n_test)
    return Dataset(X_train, y_train[:, None], X_test, y_test[:, None], 0, extra or {})


def sphere(rng: np.random.Generator, n: int, d: int, radius: float = 1.0) -> np.ndarray:
    """n points uniform on the sphere of `radius` in R^d: normalised standard Gaussians."""
    g = rng.standard_normal((n, d))
    return radius * g / np.linalg.norm(g, axis=1, keepdims=True)


def sphere_sine_target(X: np.ndarray) -> np.ndarray:
    """Noise-free Caron §6.1 target: (5/d) Σ_k sin(π x_k), one value per row."""
    return 5.0 / X.shape[1] * np.sin(np.pi * X).sum(axis=1)


def _sphere_sine(data: SphereSineData, rng: np.random.Generator) -> Dataset:
    """Caron et al. §6.1: x uniform on S^{d-1}, y = (5/d) Σ_k sin(π x_k) + ε, ε ~ N(0, noise²)."""
    d, noise = _count(data.d, "d", 1), _real(data.noise, "noise", 0.0)

    def draw(count: int):
        X = sphere(rng, count, d)
        return X, sphere_sine_target(X) + noise * rng.standard_normal(count)

    return _synthetic(draw, _count(data.n, "n", 1), _count(data.n_test, "n_test"))


def _single_relu(data: SingleReluData, rng: np.random.Generator) -> Dataset:
    """Caron et al. §8.1.2: a single-ReLU teacher, y = relu(⟨w*, x⟩) + noise·ε.

    The formula is lost in the available text of the paper; this is our reading. w* is
    uniform on the unit sphere S^{d-1}; x is uniform on the sphere of radius sqrt(d), so that
    ⟨w*, x⟩ has variance 1 whatever d (the same O(1) pre-activation scale as the student's
    w·x/sqrt(d) with w ~ N(0, I_d)). w* is returned as extra["teacher_w"].
    """
    d, noise = _count(data.d, "d", 1), _real(data.noise, "noise", 0.0)
    w_star = sphere(rng, 1, d)[0]

    def draw(count: int):
        X = sphere(rng, count, d, math.sqrt(d))
        return X, np.maximum(X @ w_star, 0.0) + noise * rng.standard_normal(count)

    n, n_test = _count(data.n, "n", 1), _count(data.n_test, "n_test")
    return _synthetic(draw, n, n_test, {"teacher_w": w_star})


def _random_labels(data: RandomLabelsData, rng: np.random.Generator) -> Dataset:
    """Chen et al. experiment 1: x ~ N(0, I_d), y ~ U[low, high] independent of x."""
    d, low, high = _count(data.d, "d", 1), _real(data.low, "low"), _real(data.high, "high")
    if not high > low:
        raise DataError(f"[data] low = {low!r}, high = {high!r}: need low < high")

    def draw(count: int):
        return rng.standard_normal((count, d)), rng.uniform(low, high, count)

    return _synthetic(draw, _count(data.n, "n", 1), _count(data.n_test, "n_test"))


# Chen et al. experiment 3: (x1, x2, y) for each of the four equally likely cases.
_XOR_CASES = np.array([[1.0, 0.0, 1.0], [-1.0, 0.0, 1.0], [0.0, 1.0, -1.0], [0.0, -1.0, -1.0]])


def _xor_noise(data: XorNoiseData, rng: np.random.Generator) -> Dataset:
    """Chen et al. experiment 3: (x1, x2, y) = (±1, 0, +1) or (0, ±1, −1), each w.p. 1/4;
    x3..xd ~ U[−1, 1] are noise coordinates."""
    d = _count(data.d, "d", 2)

    def draw(count: int):
        case = _XOR_CASES[rng.integers(len(_XOR_CASES), size=count)]
        X = rng.uniform(-1.0, 1.0, (count, d))
        X[:, :2] = case[:, :2]
        return X, case[:, 2].copy()

    return _synthetic(draw, _count(data.n, "n", 1), _count(data.n_test, "n_test"))


def quadratic_features(X: np.ndarray) -> np.ndarray:
    """φ(x) = vec(x xᵀ), row by row: (n, d) → (n, d²)."""
    return (X[:, :, None] * X[:, None, :]).reshape(len(X), -1)


def _quadratic_teacher(data: QuadraticTeacherData, rng: np.random.Generator) -> Dataset:
    """Chen et al. experiment 2: a quadratic-embedded ReLU teacher plus noise.

    f*(x) = (1/m*) Σ_i c_i relu(h_i(x)),  h_i(x) = D^{-1/2} Σ_j W_ij φ_j(x),  φ(x) = vec(x xᵀ),
    D = d², W_ij ~ N(0, 1), c_i = ±1 (Rademacher), m* = teacher_width; y = f*(x) + noise·ε.
    The input law is not in the text; we take x uniform on the sphere of radius sqrt(d): then
    |φ(x)|² = |x|⁴ = D, so every h_i(x) ~ N(0, 1) exactly over W, an O(1) teacher for all d.
    Teacher arrays: extra["teacher_W"] (m*, D) and extra["teacher_c"] (m*,).
    """
    d, width = _count(data.d, "d", 1), _count(data.teacher_width, "teacher_width", 1)
    noise = _real(data.noise, "noise", 0.0)
    W = rng.standard_normal((width, d * d))
    c = rng.choice([-1.0, 1.0], size=width)

    def draw(count: int):
        X = sphere(rng, count, d, math.sqrt(d))
        h = quadratic_features(X) @ W.T / d  # D^{-1/2} = 1/d
        return X, np.maximum(h, 0.0) @ c / width + noise * rng.standard_normal(count)

    extra = {"teacher_W": W, "teacher_c": c}
    return _synthetic(draw, _count(data.n, "n", 1), _count(data.n_test, "n_test"), extra)
