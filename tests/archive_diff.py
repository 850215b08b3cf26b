"""Every difference between two archives' datasets and attributes, apart from what differs
from one run to the next by nature: dates, wall times and the git commit that wrote them.

    python tests/archive_diff.py BEFORE.h5 AFTER.h5     # prints the differences; exit 1 if any

Used to hold a refactoring of the archive's code to "the archive is byte-identical": write
an archive before and after (`flowsim run quickstart -o X.h5 -q`) and compare. Attributes
are compared in the order they are stored; datasets by dtype, shape and every byte; a
checkpoint by its committed slot (the other slot holds an earlier commit, and how many
commits a run makes depends on its wall time)."""

import json
import sys

import h5py
import numpy as np

# what differs between two runs of one scenario by nature
_TIMED = {"created", "wall_time", "observe_time", "compile_time"}
_PROVENANCE = {"git_commit", "git_dirty"}


def _json(text):
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def _without_times(value):
    """A JSON value with its timed and provenance entries left out (at any depth)."""
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k not in _TIMED | _PROVENANCE}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def _comparable(name: str, value):
    if isinstance(value, bytes):
        value = value.decode()
    decoded = _json(value) if isinstance(value, str) else None
    if isinstance(decoded, (dict, list)):
        return _without_times(decoded)
    if isinstance(value, np.ndarray) and (value.dtype.kind == "O" or value.dtype.names):
        return value.shape    # object references (dimension scales): what they link is compared apart
    return value.tolist() if isinstance(value, (np.ndarray, np.generic)) else value


def _same(a, b) -> bool:
    try:
        return bool(a == b) or (isinstance(a, float) and np.isnan(a) and np.isnan(b))
    except (TypeError, ValueError):
        return repr(a) == repr(b)


def _attrs(path: str, a, b) -> list[str]:
    out = []
    keys_a = [k for k in a.attrs if k not in _TIMED | _PROVENANCE]
    keys_b = [k for k in b.attrs if k not in _TIMED | _PROVENANCE]
    if keys_a != keys_b:
        out.append(f"{path}: attributes {keys_a} != {keys_b}")
    for k in set(keys_a) & set(keys_b):
        x, y = _comparable(k, a.attrs[k]), _comparable(k, b.attrs[k])
        if not _same(x, y):
            out.append(f"{path}: attribute {k}: {str(x)[:200]} != {str(y)[:200]}")
    return out


def _committed(commit: np.ndarray) -> tuple[int, int, int]:
    """(slot, index, attrs length) of a checkpoint's newest commit (writer.py, point 3)."""
    slot = int(np.argmax(commit[:, 0]))
    return slot, int(commit[slot, 0]), int(commit[slot, 1])


def _checkpoint(path: str, a: h5py.Dataset, b: h5py.Dataset) -> list[str]:
    """A checkpoint dataset compared at its committed slot (the statistics without times)."""
    (sa, ia, la), (sb, ib, lb) = _committed(a.parent["_commit"][()]), _committed(b.parent["_commit"][()])
    name = path.rsplit("/", 1)[-1]
    if name == "_commit":
        return [] if ia == ib else [f"{path}: committed rows {ia} != {ib}"]
    if name == "_attrs_json":
        x, y = (_without_times(_json(ds[s, :n].tobytes())) for ds, s, n in ((a, sa, la), (b, sb, lb)))
        return [] if x == y else [f"{path}: {x} != {y}"]
    return [] if a[sa].tobytes() == b[sb].tobytes() else [f"{path}: committed state differs"]


def _datasets(path: str, a: h5py.Dataset, b: h5py.Dataset) -> list[str]:
    if a.dtype != b.dtype or a.shape != b.shape:
        return [f"{path}: {a.dtype}{a.shape} != {b.dtype}{b.shape}"]
    if a.parent.name.endswith("/checkpoint"):
        return _checkpoint(path, a, b)
    x, y = a[()], b[()]
    return [] if np.asarray(x).tobytes() == np.asarray(y).tobytes() else [f"{path}: values differ"]


def differences(before: str, after: str) -> list[str]:
    """What differs between the archives `before` and `after` (see the module docstring)."""
    out = []
    with h5py.File(before, "r") as fa, h5py.File(after, "r") as fb:
        names_a, names_b = [], []
        fa.visit(names_a.append)
        fb.visit(names_b.append)
        if names_a != names_b:
            out.append(f"objects: only before {sorted(set(names_a) - set(names_b))}, "
                       f"only after {sorted(set(names_b) - set(names_a))}")
        out += _attrs("/", fa, fb)
        for name in (n for n in names_a if n in set(names_b)):
            a, b = fa[name], fb[name]
            out += _attrs(name, a, b)
            if isinstance(a, h5py.Dataset) and isinstance(b, h5py.Dataset):
                out += _datasets(name, a, b)
    return out


if __name__ == "__main__":
    found = differences(sys.argv[1], sys.argv[2])
    print("\n".join(found) if found else "the same datasets and attributes (times aside)")
    sys.exit(1 if found else 0)
