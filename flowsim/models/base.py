"""What every model builder takes and returns (`flowsim.models.MODELS` names the builders)."""

from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ..config.typed import Config
from ..data import Dataset
from ..problem import Params, Problem


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
class Model:
    name: str                                        # `model.kind` in a scenario
    build: Callable[[Config, Dataset, int], Built]   # (run config, its data, seed) -> Built


def dtype_of(config: Config):
    return jnp.float32 if config.dtype == "float32" else jnp.float64
