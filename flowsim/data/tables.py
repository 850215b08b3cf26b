"""Tables from files: the shipped UCI regression CSVs (`uci`), a user's CSV (`csv`) and a
user's .npz archive of arrays (`npz`), and the CSV reader and standardisation they share
with `digits`."""

from __future__ import annotations

import csv
import dataclasses
import math
import re
import warnings
import zipfile
from pathlib import Path

import numpy as np

from ..config.catalog import data_dir
from ..config.data_tables import CsvData, NpzData, UciData
from .base import DataError, Dataset, _count, _real, one_hot

DATA_DIR = data_dir()

# Target column of each shipped regression CSV (the one Caron et al. use), and columns that
# are neither input nor target: energy.csv's second target Y2 must not leak into the inputs.
UCI_TARGETS: dict[str, tuple[str, tuple[str, ...]]] = {
    "concrete": ("compressive_strength", ()),
    "energy": ("heating_load", ("cooling_load",)),
    "airfoil": ("scaled_sound_pressure_level", ()),
    "plant": ("net_hourly_electrical_energy_output", ()),
}


# ------------------------------------------------------------------------------ CSV files


def read_csv(path: Path) -> tuple[list[str], np.ndarray]:
    """Header names and the float64 table of a numeric CSV with one header row.

    Blank lines are skipped. Every failure is a DataError naming the file and, for a bad
    cell, its 1-based line number and column name. pandas' row index is dropped, with a
    warning (`_without_row_index`).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    with path.open(newline="", encoding="utf-8") as f:
        rows = [(line, row) for line, row in enumerate(csv.reader(f), start=1) if row]
    if not rows:
        raise DataError(f"{path}: the file is empty")
    if _unnamed(rows[0][1][0].strip()):
        rows = _without_row_index(path, rows)
    header = [name.strip() for name in rows[0][1]]
    if len(set(header)) != len(header):
        raise DataError(f"{path}: repeated column names in the header {header}")
    if len(rows) == 1:
        raise DataError(f"{path}: a header row but no data rows")
    table = np.empty((len(rows) - 1, len(header)))
    for i, (line, row) in enumerate(rows[1:]):
        if len(row) != len(header):
            raise DataError(
                f"{path}: line {line} has {len(row)} fields, the header has {len(header)}"
            )
        for j, cell in enumerate(row):
            try:
                table[i, j] = float(cell)
            except ValueError:
                raise DataError(
                    f"{path}: line {line}, column {header[j]!r}: {cell!r} is not a number"
                ) from None
            if not math.isfinite(table[i, j]):
                raise DataError(
                    f"{path}: line {line}, column {header[j]!r}: {cell!r} is not finite"
                )
    return header, table


def _unnamed(name: str) -> bool:
    """pandas' name for its row index: empty from `to_csv()`, "Unnamed: 0" once such a
    file is read back and written again."""
    return name == "" or re.fullmatch(r"Unnamed: \d+", name) is not None


def _without_row_index(path: Path, rows: list[tuple[int, list[str]]]) -> list[tuple[int, list[str]]]:
    """The rows without their first field, where that column has no name and holds 0, 1, …,
    n−1: pandas' row index (`DataFrame.to_csv()` without `index=False`), which read as an
    input would be a feature numbering the rows. Dropped and said; any other unnamed first
    column is refused."""
    name, index = rows[0][1][0].strip(), [row[0].strip() for _, row in rows[1:]]
    if index != [str(i) for i in range(len(index))]:
        raise DataError(f"{path}: the first column has no name ({name!r}) and does not hold the row numbers "
                        "0, 1, …; allowed: a header that names every column")
    warnings.warn(f"{path}: the first column has no name ({name!r}) and holds 0, 1, …, {len(index) - 1}: "
                  "pandas' row index (DataFrame.to_csv() without index=False); dropped (write the file with "
                  "to_csv(index=False) to silence this)", stacklevel=3)
    return [(line, row[1:]) for line, row in rows]


def _columns(path: Path, header: list[str], names: list[str]) -> list[int]:
    unknown = [name for name in names if name not in header]
    if unknown:
        raise DataError(
            f"{path}: no column named {', '.join(map(repr, unknown))}; columns: {header}"
        )
    return [header.index(name) for name in names]


def _split_sizes(n: int, fractions: tuple[float, ...]) -> list[int]:
    """Sizes floor(f·n) for every fraction but the last, which takes the remainder."""
    sizes = [math.floor(f * n) for f in fractions[:-1]]
    return sizes + [n - sum(sizes)]


def _scale(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column mean and population std (ddof 0); a constant column gets std 1 so that
    standardising leaves it at 0 rather than dividing by zero."""
    mean, std = A.mean(axis=0), A.std(axis=0)
    return mean, np.where(std > 0, std, 1.0)


def _standardize(splits: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """Standardise every array named `<prefix>_*` with the `<prefix>_train` statistics;
    returns the statistics as `<prefix>_mean` and `<prefix>_std`."""
    mean, std = _scale(splits[f"{prefix}_train"])
    for name in [name for name in splits if name.startswith(prefix + "_")]:
        splits[name] = (splits[name] - mean) / std
    return {f"{prefix}_mean": mean, f"{prefix}_std": std}


def _refuse_degenerate(source: str, splits: dict[str, np.ndarray], *, targets: list[str],
                       inputs: list[str] | None = None, test_asked: str | None = None) -> None:
    """Data a run cannot learn from, refused by name rather than run: one training row
    standardises to zeros (the loss is then 0 throughout and the run ends `done`), a constant
    target leaves nothing to fit, a constant input column has no scale to standardise by, and
    a test fraction that rounds to no rows gives no test loss. `source` names the file (and
    the key that made the split); `inputs`: the input columns' names, when they are
    standardised; `test_asked`: the key that asked for a test set."""
    X, y = splits["X_train"], splits["y_train"]
    if len(X) < 2:
        raise DataError(f"{source}: {len(X)} training row(s); need at least 2")
    if test_asked and len(splits["X_test"]) == 0:
        raise DataError(f"{source}: {test_asked} leaves no test rows of {len(X)}; need at least 1 (more "
                        "rows or a larger fraction), or a fraction of 0 for no test set")
    for j, name in enumerate(targets):
        if np.ptp(y[:, j]) == 0:
            raise DataError(f"{source}: target {name!r} is constant ({y[0, j]:g}) over the {len(X)} "
                            "training rows; need a target that varies")
    for j, name in enumerate(inputs or ()):
        if np.ptp(X[:, j]) == 0:
            raise DataError(f"{source}: column {name!r} is constant ({X[0, j]:g}) over the {len(X)} "
                            "training rows, so standardize = true has no scale for it (std 0); need a "
                            "column that varies there, or the file without it")


def _uci(data: UciData, rng: np.random.Generator) -> Dataset:
    """A shipped UCI regression CSV, split as in Caron et al. §8.2.1.

    Rows are permuted by np.random.default_rng(permute_seed).permutation, then cut into
    train, test and valid (in that order) with sizes floor(f_train·N), floor(f_test·N) and the
    remainder. The split is the paper's fixed permutation, so the run seed (`rng`) is NOT
    used: every seed of a scenario sees the same data. With `standardize`, X and y are
    standardised with the training mean and (population) std, constant columns divided by 1;
    the statistics and the valid split go to `extra`.
    """
    name = data.name
    if name not in UCI_TARGETS:
        raise DataError(f"[data] name = {name!r} is unknown; allowed: {', '.join(UCI_TARGETS)}")
    split = dataclasses.asdict(data.split)
    fractions = tuple(float(split[part]) for part in ("train", "test", "valid"))
    if min(fractions) < 0 or abs(sum(fractions) - 1.0) > 1e-9:
        raise DataError(f"[data] split = {split!r}: fractions must be >= 0 and sum to 1")

    path = DATA_DIR / f"{name}.csv"
    header, table = read_csv(path)
    target, dropped = UCI_TARGETS[name]
    (t,) = _columns(path, header, [target])
    inputs = [j for j, col in enumerate(header) if col != target and col not in dropped]
    table = table[np.random.default_rng(_count(data.permute_seed, "permute_seed")).permutation(len(table))]

    n_train, n_test, _ = _split_sizes(len(table), fractions)
    parts = {"train": table[:n_train], "test": table[n_train : n_train + n_test],
             "valid": table[n_train + n_test :]}  # fmt: skip
    splits = {f"X_{p}": rows[:, inputs] for p, rows in parts.items()}
    splits |= {f"y_{p}": rows[:, [t]] for p, rows in parts.items()}
    _refuse_degenerate(f"{path} ([data] split = {split})", splits, targets=[target],
                       test_asked="split.test" if fractions[1] > 0 else None)
    stats = (
        _standardize(splits, "X") | _standardize(splits, "y") if data.standardize else {}
    )
    extra = {"X_valid": splits["X_valid"], "y_valid": splits["y_valid"]} | stats
    return Dataset(splits["X_train"], splits["y_train"], splits["X_test"], splits["y_test"], 0, extra,
                   columns=(tuple(header[j] for j in inputs), (target,)))


def _csv(data: CsvData, rng: np.random.Generator) -> Dataset:
    """A user CSV with a header row: the named target column(s) are y, every other column X.

    Rows are permuted with the run seed; the last floor(test_fraction·N) rows of the
    permutation are the test set. With `standardize`, X and y are standardised with the
    training statistics (kept in `extra`). Regression only: y has one column per target.
    """
    path = Path(data.path)
    target = data.target
    targets = [target] if isinstance(target, str) else list(target)
    fraction = _real(data.test_fraction, "test_fraction", 0.0)
    if fraction >= 1.0 or not targets:
        raise DataError(f"[data] test_fraction = {fraction!r} must be < 1 and target non-empty")
    header, table = read_csv(path)
    t = _columns(path, header, targets)
    inputs = [j for j in range(len(header)) if j not in t]
    if not inputs:
        raise DataError(f"{path}: no input columns are left once the targets {targets} are removed")

    table = table[rng.permutation(len(table))]
    n_test = math.floor(fraction * len(table))
    n_train = len(table) - n_test
    splits = {"X_train": table[:n_train, inputs], "X_test": table[n_train:, inputs],
              "y_train": table[:n_train][:, t], "y_test": table[n_train:][:, t]}  # fmt: skip
    _refuse_degenerate(f"{path} ({len(table)} rows, test_fraction = {fraction:g})", splits, targets=targets,
                       inputs=[header[j] for j in inputs] if data.standardize else None,
                       test_asked=f"test_fraction = {fraction:g}" if fraction > 0 else None)
    stats = (
        _standardize(splits, "X") | _standardize(splits, "y") if data.standardize else {}
    )
    return Dataset(splits["X_train"], splits["y_train"], splits["X_test"], splits["y_test"], 0, stats,
                   columns=(tuple(header[j] for j in inputs), tuple(targets)))


# ------------------------------------------------------------------------------ npz files


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as f:
            return {key: f[key] for key in f.files}
    except (OSError, ValueError, zipfile.BadZipFile) as err:
        raise DataError(f"{path}: not a readable .npz archive ({err})") from None


def _npz_labels(path: Path, key: str, y: np.ndarray, classes: int) -> np.ndarray:
    """y as float64 (n, k): one-hot when `classes` > 0 and y holds 1-D integer labels."""
    if y.ndim not in (1, 2):
        raise DataError(f"{path}: {key} has shape {y.shape}; expected 1-D or 2-D")
    if classes and y.ndim == 1:
        if (
            not np.issubdtype(y.dtype, np.integer)
            or y.min(initial=0) < 0
            or y.max(initial=0) >= classes
        ):
            raise DataError(
                f"{path}: {key} must hold integer labels in [0, {classes}) (classes = {classes})"
            )
        return one_hot(y, classes)
    if classes and y.shape[1] != classes:
        raise DataError(f"{path}: {key} has {y.shape[1]} columns but classes = {classes}")
    return (y[:, None] if y.ndim == 1 else y).astype(np.float64)


def _npz(data: NpzData, rng: np.random.Generator) -> Dataset:
    """A user .npz with X_train, y_train and optionally X_test, y_test (both or neither).

    y may be 1-D (made (n, 1)) or 2-D. The file is classification only if it holds an integer
    scalar `classes`: then 1-D integer labels are one-hot encoded and 2-D y must have
    `classes` columns. Integer y without `classes` stays regression (labels as numbers). The
    run seed is not used: the file fixes the data. Other arrays in the file are ignored.
    """
    path = Path(data.path)
    arrays = _load_npz(path)
    required = ["X_train", "y_train"] + (
        ["X_test", "y_test"] if {"X_test", "y_test"} & arrays.keys() else []
    )
    missing = [key for key in required if key not in arrays]
    if missing:
        raise DataError(f"{path}: missing {', '.join(missing)}; the file holds {sorted(arrays)}")

    classes = arrays.get("classes", np.array(0))
    if (
        classes.ndim != 0
        or not np.issubdtype(classes.dtype, np.integer)
        or classes == 1
        or classes < 0
    ):
        raise DataError(f"{path}: classes must be an integer scalar >= 2, got {classes!r}")
    classes = int(classes)

    X_train, y_train = arrays["X_train"], arrays["y_train"]
    d = X_train.shape[1] if X_train.ndim == 2 else 0
    X_test = arrays.get("X_test", np.empty((0, d)))
    y_test = arrays.get("y_test", np.empty((0,) + y_train.shape[1:], y_train.dtype))
    for key, X in (("X_train", X_train), ("X_test", X_test)):
        if X.ndim != 2 or X.shape[1] != d:
            raise DataError(
                f"{path}: {key} has shape {X.shape}; expected (rows, {d or 'features'})"
            )
    ys = {
        key: _npz_labels(path, key, y, classes)
        for key, y in (("y_train", y_train), ("y_test", y_test))
    }
    for split, X in (("train", X_train), ("test", X_test)):
        if len(X) != len(ys[f"y_{split}"]):
            raise DataError(
                f"{path}: X_{split} has {len(X)} rows but y_{split} has {len(ys[f'y_{split}'])}"
            )
    if ys["y_train"].shape[1] != ys["y_test"].shape[1]:
        raise DataError(f"{path}: y_train and y_test have different numbers of columns")
    out = {"X_train": X_train.astype(np.float64), "X_test": X_test.astype(np.float64)} | ys
    for key, A in out.items():
        if not np.isfinite(A).all():
            raise DataError(f"{path}: {key} holds NaN or infinite values")
    _refuse_degenerate(f"{path} (X_train, y_train)", out, targets=[] if classes else
                       [f"y_train[:, {j}]" for j in range(out["y_train"].shape[1])])
    return Dataset(out["X_train"], out["y_train"], out["X_test"], out["y_test"], classes, {})
