"""What every data kind returns (`Dataset`) and raises (`DataError`), and the checks they
share."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Dataset:
    """Training and test arrays, all float64; `y` is always 2-D (n, k).

    `classes` is 0 for regression (k target columns) and the number of classes for
    classification (`y` one-hot, k = classes). `extra` holds other named arrays worth
    archiving: a validation split, teacher weights, standardisation statistics. `columns`
    names the inputs and the targets, in order, where a file names them (`flowsim show`
    prints them).
    """

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    classes: int
    extra: dict = field(default_factory=dict)
    columns: tuple[tuple[str, ...], tuple[str, ...]] | None = None


class DataError(ValueError):
    """Bad data input; the message names the file or the `[data]` key and what is wrong."""


# ------------------------------------------------------------------------ value checks
# Validation has checked these ranges already; a table built with `from_dict` has not.


def _count(value, key: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise DataError(f"[data] {key} = {value!r}: expected an integer >= {minimum}")
    return int(value)


def _real(value, key: str, minimum: float = -math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= minimum:
        raise DataError(f"[data] {key} = {value!r}: expected a number >= {minimum}")
    return float(value)


def one_hot(labels: np.ndarray, classes: int) -> np.ndarray:
    """(n,) integer labels in [0, classes) → (n, classes) float64 one-hot rows."""
    return np.eye(classes)[labels]
