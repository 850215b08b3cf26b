"""What every model builder takes and returns (`flowsim.models.MODELS` names the builders):
a builder makes the `Network` of a run, and `flowsim.run.build.build_run` assembles the run's
`Problem` from it, the same way for every kind."""

from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ..config.typed import Config
from ..data import Dataset
from ..nn.net import AbstractNet
from ..nn.problem import Params, Problem


class BuildError(ValueError):
    """A run config that validates key by key but cannot be built (e.g. mismatched shapes)."""


@dataclass(frozen=True)
class Built:
    problem: Problem
    params: Params
    dataset: Dataset
    init: dict[str, np.ndarray]   # what the archive stores under /runs/<run>/init
    key: jax.Array                # seeds the stochastic solvers (SGD batches)


@dataclass(frozen=True)
class Network:
    """A built network where its run starts: what `build_run` needs besides the data and
    the loss to assemble the `Problem`."""
    net: AbstractNet
    params: Params                # the initial trainable weights
    rate: float                   # dW/dt = −rate ∇L
    # The builder's part of the run's init record; `build_run` adds the initial loss as
    # "loss0" (at the end, or where the builder left a "loss0": None for it).
    init: dict[str, np.ndarray | None]
    key: jax.Array                # seeds the stochastic solvers (SGD batches)
    # The inputs the network sees, (n, D) and (n_test, D), where they are not the data's
    # (the embedded models' φ̃(X)); None: the dataset's X_train and X_test.
    X: np.ndarray | jax.Array | None = None
    X_test: np.ndarray | jax.Array | None = None
    # "loss0" evaluated as one compiled program (the shallow nets: fewer programs to compile
    # at start-up) or op by op (the others). The two may differ in the last bit (measured:
    # 1 ulp for a `python`-kind MLP), and each kind's archives keep the value they always had.
    compiled_loss0: bool = False


@dataclass(frozen=True)
class Model:
    name: str                                          # `model.kind` in a scenario
    build: Callable[[Config, Dataset, int], Network]   # (run config, its data, seed) -> Network


def dtype_of(config: Config):
    return jnp.float32 if config.dtype == "float32" else jnp.float64
