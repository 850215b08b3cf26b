"""Transfer of learned features (Caron et al. 2023, §6.2 / §8.2.1).

The validation split is cut into a held-out train half and a test half (50/50, in order).
Each point is represented by the trained network's node outputs c_j σ(w_j·x/√d) (the
outputs of the hidden layer, m numbers); the k most important nodes (importance
λ_j‖w_tj‖², "as written", or λ_j "as run") are kept, standardised with the held-out train
half's statistics (our reading: the paper gives no preprocessing; without it GD at η = 1
diverges on un-normalised features for large k), and an external one-hidden-layer ReLU
network (`hidden` units, PyTorch default initialisation U(±1/√fan_in) with biases) is
trained on them by full-batch GD for `steps` steps with step `learning_rate` on the mean
squared error (the paper's text says η = 1.0, which diverges here for every k -- the MSE
curvature along the last layer alone is 2(1 + ‖h‖²) -- so the default is 0.1, the authors'
code's value) (PyTorch ``MSELoss``; softmax cross-entropy when the run's loss is
cross-entropy). The result is the test risk (and accuracy) as a function of k.

All k share one compiled program: the features are zero-padded to the largest k and the
first-layer weights of the padded columns are zero; a zero input column gets a zero
gradient, so each padded network is exactly the k-feature network.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from flowsim.nn import losses

from .prune import accuracy, risk


def init_external(key, k_max: int, k: jax.Array, hidden: int, outputs: int, dtype=jnp.float64):
    """PyTorch `nn.Linear` default init for k inputs, stored in k_max columns (rest zero)."""
    k1, k2, k3, k4 = jax.random.split(key, 4)
    b1 = 1.0 / jnp.sqrt(k.astype(dtype))
    b2 = 1.0 / np.sqrt(hidden)
    mask = (jnp.arange(k_max) < k).astype(dtype)
    return {"W1": jax.random.uniform(k1, (hidden, k_max), dtype, -1.0, 1.0) * b1 * mask,
            "b1": jax.random.uniform(k2, (hidden,), dtype, -1.0, 1.0) * b1,
            "W2": jax.random.uniform(k3, (outputs, hidden), dtype, -b2, b2),
            "b2": jax.random.uniform(k4, (outputs,), dtype, -b2, b2)}


def external_forward(p, F):
    return jax.nn.relu(F @ p["W1"].T + p["b1"]) @ p["W2"].T + p["b2"]


def external_loss(p, F, y, cross_entropy: bool):
    return (losses.cross_entropy if cross_entropy else losses.mse)(external_forward(p, F), y)


def train_external(p, F, y, *, steps: int, learning_rate: float, cross_entropy: bool):
    """Full-batch GD; returns the final parameters (NaN once it diverges).

    Its own few lines rather than `flowsim.descent`: that integrates a `Problem` (the
    trained network's model and data), with divergence checks and checkpoints this
    external network, trained to the end inside one vmapped program, has no use for.
    """
    grad = jax.grad(external_loss)

    def body(_, p):
        g = grad(p, F, y, cross_entropy)
        return jax.tree.map(lambda w, gi: w - learning_rate * gi, p, g)

    return jax.lax.fori_loop(0, steps, body, p)


def _standardise(F_train, F_test):
    mu = F_train.mean(axis=0)
    sd = F_train.std(axis=0)
    sd = np.where(sd > 1e-12 * max(1.0, float(np.abs(F_train).max(initial=0.0))), sd, 1.0)
    return (F_train - mu) / sd, (F_test - mu) / sd


def split_halves(X, y):
    """The validation split cut in two, in order: (X_tr, y_tr), (X_te, y_te)."""
    h = len(X) // 2
    return (X[:h], y[:h]), (X[h:], y[h:])


@functools.partial(jax.jit, static_argnames=("hidden", "steps", "learning_rate", "cross_entropy"))
def _fit_all(F_tr, y_tr, F_te, y_te, ks, keys, *, hidden, steps, learning_rate, cross_entropy):
    """Train one external network per k (vmapped); final train/test risk and test accuracy."""
    k_max = F_tr.shape[1]
    loss_kind = "cross-entropy" if cross_entropy else "mse"

    def one(k, key):
        mask = (jnp.arange(k_max) < k).astype(F_tr.dtype)
        p = init_external(key, k_max, k, hidden, y_tr.shape[1], F_tr.dtype)
        p = train_external(p, F_tr * mask, y_tr, steps=steps, learning_rate=learning_rate,
                           cross_entropy=cross_entropy)
        tr = external_forward(p, F_tr * mask)
        te = external_forward(p, F_te * mask)
        return risk(tr, y_tr, loss_kind), risk(te, y_te, loss_kind), accuracy(te, y_te)

    return jax.vmap(one)(ks, keys)


def transfer_curve(F, y, score, ks, *, hidden: int = 64, steps: int = 5000,
                   learning_rate: float = 0.1, cross_entropy: bool = False,
                   seed: int = 0, standardise: bool = True) -> dict[str, np.ndarray]:
    """Risk of the external network trained on the top-k features, for each k in `ks`.

    `F` (N, m): node outputs of the validation points; `y` (N, q) targets; `score` (m,)
    node importance (largest first are kept). Returns ``k``, ``train_risk``,
    ``test_risk`` (and ``test_accuracy`` for one-hot targets).
    """
    F, y = np.asarray(F, float), np.asarray(y, float)
    (F_tr, y_tr), (F_te, y_te) = split_halves(F, y)
    ks = np.unique(np.clip(np.asarray(ks, dtype=np.int64), 1, F.shape[1]))
    order = np.argsort(-np.asarray(score), kind="stable")[: ks.max()]
    F_tr, F_te = F_tr[:, order], F_te[:, order]
    if standardise:
        F_tr, F_te = _standardise(F_tr, F_te)
    keys = jax.random.split(jax.random.PRNGKey(seed), len(ks))
    tr, te, acc = _fit_all(jnp.asarray(F_tr), jnp.asarray(y_tr), jnp.asarray(F_te), jnp.asarray(y_te),
                           jnp.asarray(ks), keys, hidden=hidden, steps=steps,
                           learning_rate=float(learning_rate), cross_entropy=cross_entropy)
    out = {"k": ks, "train_risk": np.asarray(tr), "test_risk": np.asarray(te)}
    if y.shape[1] > 1:
        out["test_accuracy"] = np.asarray(acc)
    return out
