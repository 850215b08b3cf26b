"""Training losses: `LOSSES` is the registry (the names are declared in `flowsim.kinds`). The loss kind sets the time
scale of the flow, so it is always explicit.

All take predictions and targets of shape (n, k) (k = 1 for scalar regression).
"""

import functools
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from .. import plugins
from ..kinds import LOSSES as _KINDS

LossFn = Callable[[jax.Array, jax.Array], jax.Array]


def half_sse(pred: jax.Array, y: jax.Array) -> jax.Array:
    """½ Σ_i Σ_k (y_ik − f_ik)²: the papers' convention (Caron eq. 4, Chen)."""
    return 0.5 * jnp.sum((y - pred) ** 2)


def mse(pred: jax.Array, y: jax.Array) -> jax.Array:
    """Mean of (y − f)² over every entry (PyTorch `MSELoss`, Caron et al.'s public code)."""
    return jnp.mean((y - pred) ** 2)


def half_sse_mean(pred: jax.Array, y: jax.Array) -> jax.Array:
    """½ Σ_i Σ_k (y_ik − f_ik)² / n: Cohen et al.'s square loss (2021), a mean over samples of
    each one's ½‖f − y‖² (k times `mse` for k outputs)."""
    return 0.5 * jnp.sum((y - pred) ** 2) / pred.shape[0]


def cross_entropy(pred: jax.Array, y: jax.Array) -> jax.Array:
    """Softmax cross-entropy averaged over samples; `y` holds one-hot (or soft) targets."""
    return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(pred, axis=-1), axis=-1))


@dataclass(frozen=True)
class Loss:
    name: str
    fn: LossFn
    sum_over_samples: bool      # (see flowsim.kinds.LossKind)


_FUNCTIONS: dict[str, LossFn] = {"half-sse": half_sse, "mse": mse, "half-sse-mean": half_sse_mean,
                                 "cross-entropy": cross_entropy}
# Every loss flowsim.kinds declares, with its function.
LOSSES: dict[str, Loss] = {name: Loss(name, _FUNCTIONS[name], k.sum_over_samples) for name, k in _KINDS.items()}


@functools.cache
def loss_entry(kind: str) -> Loss:
    """The loss called `kind` (or the plug-in at the import path `kind`, taken for a mean
    over samples); raises `ValueError` listing the allowed kinds."""
    if plugins.is_path(kind):   # validated (imported once) by the scenario loader
        return Loss(kind, plugins.load(kind), sum_over_samples=False)
    try:
        return LOSSES[kind]
    except KeyError:
        raise ValueError(f"unknown loss {kind!r}; allowed: {', '.join(LOSSES)}") from None


def loss_fn(kind: str) -> LossFn:
    """The loss function called `kind`; raises `ValueError` listing the allowed kinds."""
    return loss_entry(kind).fn
