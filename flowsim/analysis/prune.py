"""Pruning curves (Caron et al. 2023, §6.2 / §8.2.2).

Nodes are removed in increasing order of an importance score and the train and test risk
(and accuracy, for one-hot targets) of the pruned network are recomputed after each
removal count. Two importance scores:

- ``"weight"`` -- λ_j ‖w_tj‖², the paper's text ("as written");
- ``"lambda"`` -- λ_j ‖a_j‖², which is λ_j for fixed a_j = ±1: what the authors' public
  code computes ("as run", λ_j a_j²).

Vectorised: the node outputs H (n, m) are computed once; the prediction of the network
without the r least important nodes is H @ (keep_r ⊙ a) for every r at once, so a whole
curve costs one (n, m) × (m, R·k) product, not R forward passes.

Risk = mean over points of Σ_k (y − f)² for squared losses (so train and test, of any
size, are comparable), and the mean softmax cross-entropy for ``cross-entropy``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ..nn.activations import activation

IMPORTANCES = ("weight", "lambda")


def node_outputs(net, params, X) -> jax.Array:
    """(n, m) scaled node outputs c_j σ(w_j·x/√d) (minus the frozen copy of a zeroed net),
    so that the network output is ``node_outputs(...) @ a`` with a (m, k)."""
    X = jnp.asarray(X)
    sigma = activation(net.activation)

    def raw(p):
        return sigma(X @ p["W"].T / math.sqrt(X.shape[-1])) * net.c

    H = raw(params)
    if net.ref is not None:
        H = H - raw(net.ref)
    return H


def importance(net, params, kind: str) -> np.ndarray:
    """Importance of each node: ``weight`` λ_j‖w_j‖², ``lambda`` λ_j‖a_j‖²."""
    lam = np.asarray(net.lam)
    if kind == "weight":
        return lam * np.sum(np.asarray(params["W"]) ** 2, axis=-1)
    if kind == "lambda":
        return lam * np.sum(np.asarray(net.output_weights(params)) ** 2, axis=-1)
    raise ValueError(f"unknown importance {kind!r}; allowed: {', '.join(IMPORTANCES)}")


def risk(pred: jax.Array, y: jax.Array, loss_kind: str) -> jax.Array:
    """Per-point risk averaged over points (last two axes: points, outputs)."""
    if loss_kind == "cross-entropy":
        return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(pred, axis=-1), axis=-1), axis=-1)
    return jnp.mean(jnp.sum((y - pred) ** 2, axis=-1), axis=-1)


def accuracy(pred: jax.Array, y: jax.Array) -> jax.Array:
    if y.shape[-1] == 1:
        return jnp.mean(jnp.sign(pred[..., 0]) == jnp.sign(y[..., 0]), axis=-1)
    return jnp.mean(jnp.argmax(pred, -1) == jnp.argmax(y, -1), axis=-1)


def prune_counts(m: int, points: int) -> np.ndarray:
    """`points` removal counts from 0 to m (all nodes), distinct integers."""
    return np.unique(np.round(np.linspace(0, m, max(points, 2))).astype(np.int64))


@jax.jit
def _keep_masks(score, counts):
    rank = jnp.empty_like(score, dtype=jnp.int64).at[jnp.argsort(score, stable=True)].set(
        jnp.arange(score.shape[0]))
    return rank[None, :] >= counts[:, None]        # (R, m): node kept after removing r


def pruned_predictions(H: jax.Array, a: jax.Array, score, counts) -> jax.Array:
    """(R, n, k) predictions after removing the counts[r] nodes of lowest `score`."""
    keep = _keep_masks(jnp.asarray(score), jnp.asarray(counts))
    A = keep[:, :, None] * a[None]                 # (R, m, k): tiny next to H
    return jnp.einsum("nj,rjk->rnk", H, A)


def prune_curve(net, params, X, y, X_test, y_test, *, loss_kind: str, counts,
                importances=IMPORTANCES) -> dict[str, np.ndarray]:
    """Train/test risk (and accuracy for one-hot targets) vs number of nodes removed.

    Returns ``counts`` (R,) and ``train_risk``, ``test_risk`` (I, R) [``train_accuracy``,
    ``test_accuracy`` (I, R)], one row per importance in `importances`.
    """
    a = jnp.asarray(net.output_weights(params))
    counts = np.asarray(counts, dtype=np.int64)
    out: dict[str, list] = {}
    splits = [("train", X, y)] + ([("test", X_test, y_test)] if len(X_test) else [])
    for kind in importances:
        score = importance(net, params, kind)
        for split, Xs, ys in splits:
            ys = jnp.asarray(ys)
            pred = pruned_predictions(node_outputs(net, params, Xs), a, score, counts)
            out.setdefault(f"{split}_risk", []).append(np.asarray(risk(pred, ys, loss_kind)))
            if ys.shape[-1] > 1:
                out.setdefault(f"{split}_accuracy", []).append(np.asarray(accuracy(pred, ys)))
    return {"counts": counts, **{k: np.stack(v) for k, v in out.items()}}
