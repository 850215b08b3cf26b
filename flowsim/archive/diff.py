"""What differs between two archives, object by object (`flowsim diff A B`), apart from what
differs from one run to the next by nature: the timing fields (`TIMINGS`) and the git
state that wrote them (`PROVENANCE`).

Attributes are compared in the order they are stored, a JSON attribute key by key;
datasets by dtype, shape and every byte; a checkpoint by its committed slot (the other slot
holds an earlier commit, and how many commits a run makes depends on its wall time). Two
runs of one scenario with the same seeds and software on one machine differ in `TIMINGS`
only (docs/guarantees.md, "Determinism"); it also holds a change of the archive's code to
"the archive is byte-identical"."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import h5py
import numpy as np

from .recovery import open_h5_readonly, require_flowsim

#: The fields that differ between two runs of one scenario by nature: the creation date,
#: and the seconds a solver computed, compiled and observed (solver attributes, statistics
#: and checkpoint statistics).
TIMINGS = ("created", "wall_time", "compile_time", "observe_time")
#: The git state of the checkout that wrote an archive (a provenance entry, and a file
#: attribute of its own).
PROVENANCE = ("git_commit", "git_dirty")
_REFERENCES = ("DIMENSION_LIST", "REFERENCE_LIST")   # dimension scales: object addresses


class Difference(NamedTuple):
    """One difference: the object (HDF5 path, "/" for the file), the field that differs
    (an attribute, a dotted key of a JSON attribute, "" for the object itself), and what A
    and B hold there; or, with `b` None, what `a` says of the object ("values differ")."""

    where: str
    field: str
    a: Any
    b: Any = None

    def __str__(self) -> str:
        if self.b is None:
            return f"{self.where}: {self.a}"
        return f"{self.where}: {self.field}: {_short(self.a)} != {_short(self.b)}"


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 200 else text[:199] + "…"


def _json(text: Any) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def _decoded(value: Any) -> Any:
    """An attribute as compared: JSON text parsed, arrays and numpy scalars as lists and
    numbers, object references (dimension scales) by their shape alone (what they link is
    compared apart)."""
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str):
        decoded = _json(value)
        return decoded if isinstance(decoded, (dict, list)) else value
    if isinstance(value, np.ndarray) and (value.dtype.kind == "O" or value.dtype.names):
        return value.shape
    return value.tolist() if isinstance(value, (np.ndarray, np.generic)) else value


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) or (isinstance(a, float) and np.isnan(a) and np.isnan(b))
    except (TypeError, ValueError):
        return repr(a) == repr(b)


def _values(where: str, field: str, a: Any, b: Any, aside: frozenset) -> list[Difference]:
    """The differences between two decoded values, a JSON object key by key (at any depth)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in [*a, *(k for k in b if k not in a)]:
            if k in aside:
                continue
            key = f"{field}.{k}" if field else k
            if k not in a or k not in b:
                out.append(Difference(where, key, a.get(k, "(absent)"), b.get(k, "(absent)")))
            else:
                out += _values(where, key, a[k], b[k], aside)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _values(where, f"{field}[{i}]", x, y, aside)]
    return [] if _same(a, b) else [Difference(where, field, a, b)]


def _attrs(where: str, a, b, aside: frozenset) -> list[Difference]:
    keys_a = [k for k in a.attrs if k not in aside]
    keys_b = [k for k in b.attrs if k not in aside]
    out = [Difference(where, k, a.attrs[k], "(absent)") for k in keys_a if k not in keys_b]
    out += [Difference(where, k, "(absent)", b.attrs[k]) for k in keys_b if k not in keys_a]
    if not out and keys_a != keys_b:   # (an attribute written again moves to the end of the list)
        out.append(Difference(where, "the order of its attributes", keys_a, keys_b))
    for k in (k for k in keys_a if k in keys_b):
        out += _values(where, k, _decoded(a.attrs[k]), _decoded(b.attrs[k]), aside)
    return out


def _committed(commit: np.ndarray) -> tuple[int, int, int]:
    """(slot, index, attrs length) of a checkpoint's newest commit (writer.py, point 3)."""
    slot = int(np.argmax(commit[:, 0]))
    return slot, int(commit[slot, 0]), int(commit[slot, 1])


def _checkpoint(where: str, a: h5py.Dataset, b: h5py.Dataset, aside: frozenset) -> list[Difference]:
    """A checkpoint dataset compared at its committed slot (its statistics key by key)."""
    (sa, ia, la), (sb, ib, lb) = _committed(a.parent["_commit"][()]), _committed(b.parent["_commit"][()])
    name = where.rsplit("/", 1)[-1]
    if name == "_commit":
        return [] if ia == ib else [Difference(where, "committed rows", ia, ib)]
    if name == "_attrs_json":
        x, y = (_json(ds[s, :n].tobytes()) for ds, s, n in ((a, sa, la), (b, sb, lb)))
        return _values(where, "", x, y, aside)
    return [] if a[sa].tobytes() == b[sb].tobytes() else [Difference(where, "", "committed state differs")]


def _datasets(where: str, a: h5py.Dataset, b: h5py.Dataset, aside: frozenset) -> list[Difference]:
    if a.dtype != b.dtype or a.shape != b.shape:
        return [Difference(where, "dtype and shape", f"{a.dtype}{a.shape}", f"{b.dtype}{b.shape}")]
    if a.parent.name.endswith("/checkpoint"):
        return _checkpoint(where, a, b, aside)
    same = np.asarray(a[()]).tobytes() == np.asarray(b[()]).tobytes()
    return [] if same else [Difference(where, "", "values differ")]


def _objects(g: h5py.Group, prefix: str = "") -> list[str]:
    """Every object's path under `g`, links followed (a merged archive's runs are external
    links to its parts, which h5py's `visit` does not enter); a dangling link is listed."""
    names = []
    for key in g:
        name = prefix + key
        names.append(name)
        child = g.get(key)
        if isinstance(child, h5py.Group):
            names += _objects(child, name + "/")
    return names


def differences(a, b, *, aside: tuple[str, ...] = TIMINGS + PROVENANCE) -> list[Difference]:
    """What differs between the archives `a` and `b`, the fields named in `aside` left out
    (at any depth of a JSON attribute); an unreadable or foreign file raises ArchiveError."""
    skip = frozenset(aside) | frozenset(_REFERENCES)
    fa = open_h5_readonly(str(a))
    try:
        require_flowsim(str(a), fa)
        fb = open_h5_readonly(str(b))
        try:
            require_flowsim(str(b), fb)
            names_a, names_b = _objects(fa), _objects(fb)
            in_a, in_b = set(names_a), set(names_b)
            out = [Difference(n, "", "only in A") for n in names_a if n not in in_b]
            out += [Difference(n, "", "only in B") for n in names_b if n not in in_a]
            both = [n for n in names_a if n in in_b]
            if not out and names_a != names_b:
                out.append(Difference("/", "the order of its objects", names_a, names_b))
            out += _attrs("/", fa, fb, skip)
            for name in both:
                x, y = fa.get(name), fb.get(name)
                if x is None or y is None:
                    out += [] if x is y else [Difference(name, "", f"a dangling link in {'A' if x is None else 'B'}")]
                    continue
                out += _attrs(name, x, y, skip)
                if isinstance(x, h5py.Dataset) and isinstance(y, h5py.Dataset):
                    out += _datasets(name, x, y, skip)
                elif isinstance(x, h5py.Dataset) != isinstance(y, h5py.Dataset):
                    out.append(Difference(name, "kind", type(x).__name__, type(y).__name__))
            return out
        finally:
            fb.close()
    finally:
        fa.close()
