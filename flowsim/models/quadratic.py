"""Quadratic losses whose gradient flow is known in closed form, for the tests and the
benchmarks of the stiff flow methods (tests/test_rock4.py, tests/test_rkc2.py,
bench/bench_stiff.py): a linear model θ ↦ Xθ under the ½Σ loss, L = ½‖Xθ − y‖², whose flow
from θ0 is θ(t) = θ* + e^{−t XᵀX}(θ0 − θ*)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..nn.problem import Problem
from .module import ModuleNet


class Linear(eqx.Module):
    """θ ↦ x·θ, one output."""

    w: jax.Array

    def __call__(self, x):
        return jnp.atleast_1d(x @ self.w)


def _problem(X: np.ndarray, y: np.ndarray, w0: np.ndarray) -> tuple[Problem, Linear]:
    params, frozen = eqx.partition(Linear(jnp.asarray(w0)), eqx.is_inexact_array)
    problem = Problem(net=ModuleNet(frozen=frozen), X=jnp.asarray(X), y=jnp.asarray(y), X_test=jnp.asarray(X[:1]),
                      y_test=jnp.asarray(y[:1]), rate=1.0, loss_kind="half-sse", ntg_points=1)
    return problem, params


def quadratic(lam_max: float, p: int = 16):
    """X = diag(√λ): Hessian diag(λ), p − 1 slow λ log-spaced on [1e-2, 1] and one λ_max (seed 0).
    Returns the problem, θ0 and the exact flow t ↦ θ(t)."""
    lam = np.concatenate([np.logspace(-2, 0, p - 1), [lam_max]])
    rng = np.random.default_rng(0)
    X, y, w0 = np.diag(np.sqrt(lam)), rng.normal(size=(p, 1)), rng.normal(size=p)
    problem, params = _problem(X, y, w0)
    star = y[:, 0] / np.sqrt(lam)
    return problem, params, lambda t: star + np.exp(-lam * t) * (w0 - star)


def log_spaced_quadratic(lam_max: float, d: int = 40):
    """X = diag(√λ) Qᵀ: Hessian Q diag(λ) Qᵀ, λ log-spaced on [1e-2, λ_max] (no gap, like a
    network's bulk), Q a random orthogonal basis (seed 0). Returns the problem, θ0, the exact
    flow t ↦ θ* + Q e^{−tΛ} Qᵀ (θ0 − θ*) and θ*."""
    rng = np.random.default_rng(0)
    lam = np.logspace(-2, np.log10(lam_max), d)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    X = np.sqrt(lam)[:, None] * Q.T
    y, w0 = rng.normal(size=(d, 1)), rng.normal(size=d)
    problem, params = _problem(X, y, w0)
    star = np.linalg.solve(X, y[:, 0])
    return problem, params, lambda t: star + Q @ (np.exp(-lam * t) * (Q.T @ (w0 - star))), star
