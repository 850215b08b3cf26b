"""Training losses, declared once: `LOSSES` is the registry. The loss kind sets the time
scale of the flow, so it is always explicit.

All take predictions and targets of shape (n, k) (k = 1 for scalar regression).
"""

import functools
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from . import plugins

LossFn = Callable[[jax.Array, jax.Array], jax.Array]


def half_sse(pred: jax.Array, y: jax.Array) -> jax.Array:
    """½ Σ_i Σ_k (y_ik − f_ik)²: the papers' convention (Caron eq. 4, Chen)."""
    return 0.5 * jnp.sum((y - pred) ** 2)


def mse(pred: jax.Array, y: jax.Array) -> jax.Array:
    """Mean of (y − f)² over every entry (PyTorch `MSELoss`, Caron et al.'s public code)."""
    return jnp.mean((y - pred) ** 2)


def cross_entropy(pred: jax.Array, y: jax.Array) -> jax.Array:
    """Softmax cross-entropy averaged over samples; `y` holds one-hot (or soft) targets."""
    return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(pred, axis=-1), axis=-1))


@dataclass(frozen=True)
class Loss:
    name: str
    fn: LossFn
    # A sum over samples: a mini-batch of size B estimates it after scaling by n/B; the
    # mean-type losses need no scaling.
    sum_over_samples: bool


LOSSES: dict[str, Loss] = {loss.name: loss for loss in (
    Loss("half-sse", half_sse, sum_over_samples=True),
    Loss("mse", mse, sum_over_samples=False),
    Loss("cross-entropy", cross_entropy, sum_over_samples=False),
)}


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
