"""Images: the shipped UCI optdigits (`digits`), and the IDX format of MNIST (`load_idx`)."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np

from ..config.data_tables import DigitsData
from .base import DataError, Dataset, one_hot
from .tables import DATA_DIR, _columns, _standardize, read_csv

DIGITS_FILES = ("optdigits_train.csv", "optdigits_test.csv")
DIGITS_CLASSES = 10
DIGITS_MAX_PIXEL = 16.0  # each optdigits pixel counts the "on" bits of a 4×4 block


def _subsample(rng: np.random.Generator, table: np.ndarray, count, key: str) -> np.ndarray:
    """The first `count` rows (all if None) of a permutation of `table` drawn from `rng`."""
    if count is None:
        count = len(table)
    if (
        isinstance(count, bool)
        or not isinstance(count, int | np.integer)
        or not 1 <= count <= len(table)
    ):
        raise DataError(
            f"[data] {key} = {count!r}: expected an integer in [1, {len(table)}] or none"
        )
    return table[rng.permutation(len(table))[:count]]


def _digits(data: DigitsData, rng: np.random.Generator) -> Dataset:
    """UCI optdigits (8×8 digits, 64 pixel counts 0–16 and a `label` column), the offline
    stand-in for Caron et al.'s MNIST experiment.

    Each file is permuted with the run seed and its first n (n_test) rows kept (all when
    none). X = pixels / 16 ∈ [0, 1], then, with `standardize`, standardised per pixel with the
    statistics of the kept training rows (always-zero pixels divided by 1). y is one-hot.
    """
    tables = {}
    counts = {"n": data.n, "n_test": data.n_test}
    for split, filename, key in zip(("train", "test"), DIGITS_FILES, counts, strict=True):
        path = DATA_DIR / filename
        header, table = read_csv(path)
        (label,) = _columns(path, header, ["label"])
        if label != len(header) - 1:
            raise DataError(f"{path}: expected 'label' as the last column")
        tables[split] = _subsample(rng, table, counts[key], key)
    splits = {f"X_{s}": t[:, :-1] / DIGITS_MAX_PIXEL for s, t in tables.items()}
    stats = _standardize(splits, "X") if data.standardize else {}
    y = {s: one_hot(t[:, -1].astype(np.int64), DIGITS_CLASSES) for s, t in tables.items()}
    return Dataset(
        splits["X_train"], y["train"], splits["X_test"], y["test"], DIGITS_CLASSES, stats
    )


# ------------------------------------------------------------------------------ IDX files

# IDX type byte → big-endian numpy dtype (http://yann.lecun.com/exdb/mnist/).
_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def load_idx(path) -> np.ndarray:
    """Parse an IDX file (MNIST's format), optionally gzipped, into a native-endian array.

    Layout: magic = two zero bytes, a type byte, a byte giving the number of dimensions;
    then each dimension as a big-endian uint32; then the values, big-endian, C order.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise DataError(f"{path}: not an IDX file (magic bytes {raw[:4].hex() or 'missing'})")
    dtype, ndim = np.dtype(_IDX_TYPES[raw[2]]), raw[3]
    start = 4 + 4 * ndim
    if len(raw) < start:
        raise DataError(f"{path}: truncated IDX header ({ndim} dimensions announced)")
    shape = tuple(int(s) for s in np.frombuffer(raw, ">u4", count=ndim, offset=4))
    size = math.prod(shape) * dtype.itemsize
    if len(raw) != start + size:
        raise DataError(
            f"{path}: IDX shape {shape} needs {size} data bytes, the file has {len(raw) - start}"
        )
    return np.frombuffer(raw, dtype, offset=start).reshape(shape).astype(dtype.newbyteorder("="))
