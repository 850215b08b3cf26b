"""Observables: pure functions from (problem, params, reference) to named arrays.

A scenario's `run.observe` list picks observables; each observable yields one or more
archive series. `Reference` holds what the feature-learning measures compare against
(the initial weights and NTG), computed once per run.
"""

import equinox as eqx
import jax
import jax.numpy as jnp

from .models import Params
from .problem import Problem
from .stability import gn_sharpness, sharpness


class Reference(eqx.Module):
    W0: jax.Array       # (m, d)
    ntg0: jax.Array     # (p, p)


def reference(problem: Problem, params: Params) -> Reference:
    return Reference(W0=params["W"], ntg0=problem.ntg(params))


def _accuracy(pred: jax.Array, y: jax.Array) -> jax.Array:
    if y.shape[-1] == 1:  # binary labels coded by sign
        return jnp.mean(jnp.sign(pred[:, 0]) == jnp.sign(y[:, 0]))
    return jnp.mean(jnp.argmax(pred, -1) == jnp.argmax(y, -1))


# Observable name → the series it writes and the axis names of one checkpoint's value.
SERIES: dict[str, dict[str, tuple[str, ...]]] = {
    "loss": {"loss": ()},
    "test_loss": {"test_loss": ()},
    "accuracy": {"accuracy": ()},
    "test_accuracy": {"test_accuracy": ()},
    "ntg": {"ntg": ("point", "point_b")},
    "ntg_eig": {"ntg_eig": ("eig",)},
    "ntg_change": {"ntg_change_spectral": (), "ntg_change_frobenius": ()},
    "weight_change": {"weight_change": ("node",)},
    "importance": {"importance": ("node",)},
    "weights": {"weights": ("node", "feature")},
    # preactivations h_i(x) = w_i·x/√d at two probes: the first training and first test point
    "hidden": {"hidden": ("node", "probe")},
    # rate·λ_max of the loss Hessian (Lanczos) and of its Gauss–Newton part: GD with step η
    # is linearly stable iff η·sharpness < 2 (flowsim/stability.py)
    "sharpness": {"sharpness": (), "sharpness_residual": ()},
    "gn_sharpness": {"gn_sharpness": ()},
}


def observe(problem: Problem, params: Params, ref: Reference | None, names: tuple[str, ...]) -> dict[str, jax.Array]:
    """The series of the observables `names` at `params` (one checkpoint, one seed).
    `ref` is needed only by the change measures (ntg_change, weight_change)."""
    out: dict[str, jax.Array] = {}
    want = set(names)
    if "loss" in want:
        out["loss"] = problem.loss(params)
    if "test_loss" in want:
        out["test_loss"] = problem.test_loss(params)
    if "accuracy" in want:
        out["accuracy"] = _accuracy(problem.net(params, problem.X), problem.y)
    if "test_accuracy" in want:
        out["test_accuracy"] = _accuracy(problem.net(params, problem.X_test), problem.y_test)
    if want & {"ntg", "ntg_eig", "ntg_change"}:
        theta = problem.ntg(params)
        if "ntg" in want:
            out["ntg"] = theta
        if "ntg_eig" in want:
            out["ntg_eig"] = jnp.linalg.eigvalsh(theta)  # ascending: ntg_eig[..., 0] is eig_min
        if "ntg_change" in want:
            delta = theta - ref.ntg0
            out["ntg_change_spectral"] = jnp.max(jnp.abs(jnp.linalg.eigvalsh(delta)))
            out["ntg_change_frobenius"] = jnp.linalg.norm(delta)
    W = params["W"]
    if "weight_change" in want:
        out["weight_change"] = jnp.linalg.norm(W - ref.W0, axis=-1)
    if "importance" in want:
        out["importance"] = problem.net.lam * jnp.sum(W**2, axis=-1)
    if "weights" in want:
        out["weights"] = W
    if "hidden" in want:  # Chen et al. Fig. 4 scatter (x₂ = a training point when no test set)
        probes = jnp.concatenate([problem.X[:1], problem.X_test[:1] if problem.X_test.shape[0] else problem.X[1:2]])
        out["hidden"] = (probes @ W.T).T / jnp.sqrt(probes.shape[-1])
    if "sharpness" in want:
        out["sharpness"], out["sharpness_residual"] = sharpness(problem, params)
    if "gn_sharpness" in want:
        out["gn_sharpness"] = gn_sharpness(problem, params)
    return out


def series_axes(names: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Series name → axis names, for the observables `names`."""
    return {s: axes for n in names for s, axes in SERIES[n].items()}
