"""The on-disk layout of an archive: names, JSON attributes, chunking, dimension scales.

Layout
------
Root attrs ``flowsim_version``, ``created``, ``scenario_text``, ``scenario_resolved``
(JSON), ``dtype``, ``provenance`` (JSON, and each str entry as its own attr)::

    /data/                    X_train, y_train, X_test, y_test
    /runs/<run>/              attrs params (JSON), seed, label, point; with params_changes = 1,
                              params holds only the tables (data, model, run, …) that differ
                              from scenario_resolved's: the scenario is stored once, not once
                              per run (a long checkpoint list, an inline array)
        data/                 optional per-run dataset
        init/                 named arrays
        <solver>/             attrs preset, status, stats, wall_time, status_time, message,
                              discrete, series_spec (JSON: name -> [shape, dtype, axes])
            t, step, <series> (k, ...) time-indexed, chunked one row per chunk, gzip
            <axis names>      integer dimension scales ("node", "point", ...)
            checkpoint/       the latest resumable state, double-buffered (checkpoint.py)
"""

from __future__ import annotations

import datetime
import json
from importlib import metadata as _metadata
from typing import Any, Iterator

import h5py
import numpy as np

from .errors import ArchiveError

HORIZONS_ATTR = "t_end_history"   # earlier t_ends of an extended archive (JSON list)
RESERVED_ROOT = ("flowsim_version", "created", "scenario_text", "scenario_resolved",
                 "dtype", "provenance", HORIZONS_ATTR)
RESERVED_SERIES = ("t", "step", "checkpoint")
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_CHUNK_BYTES = 1 << 20        # cap for one chunk of a time-indexed dataset


def _version() -> str:
    """The installed flowsim version (from the distribution's metadata)."""
    try:
        return _metadata.version("flowsim")
    except _metadata.PackageNotFoundError:  # pragma: no cover - running from a checkout
        return "0+unknown"


# --------------------------------------------------------------------------------------
# JSON attributes
# --------------------------------------------------------------------------------------

def _jsonable(obj: Any) -> Any:
    """json.dumps default: numpy scalars/arrays and other odd values."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)


def dumps(obj: Any) -> str:
    return json.dumps(obj, default=_jsonable, sort_keys=False)


def loads(text: Any) -> Any:
    if isinstance(text, bytes):
        text = text.decode()
    return json.loads(text) if text else {}


def attr_str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def decode_root_attrs(attrs) -> dict:
    out = {}
    for k, v in attrs.items():
        v = attr_str(v) if isinstance(v, (bytes, str)) else (v.item() if isinstance(v, np.generic) else v)
        if k in ("scenario_resolved", "provenance", HORIZONS_ATTR):
            v = loads(v)
        out[k] = v
    return out


PARAMS_CHANGES = "params_changes"


def params_changes(params: dict, resolved: dict) -> dict:
    """A run's resolved parameters as stored: the top-level tables that differ from the
    scenario's (`run_params` puts them back)."""
    as_json = lambda x: json.loads(dumps(x))  # noqa: E731  (tuples as lists, as they read back)
    return {k: v for k, v in params.items() if as_json(resolved.get(k)) != as_json(v)}


def run_params(g: h5py.Group, resolved: dict) -> dict:
    """A run's resolved parameters, from its `params` attr and the scenario's `resolved`."""
    stored = loads(g.attrs.get("params", "{}"))
    if not g.attrs.get(PARAMS_CHANGES, False):   # an archive written before: stored whole
        return stored
    return {k: v for k, v in resolved.items() if k != "sweep"} | stored


def series_spec(g: h5py.Group) -> dict:
    return loads(g.attrs.get("series_spec", "{}"))


def write_root_attrs(f: h5py.File, scenario_text: str, resolved: dict, provenance: dict,
                     dtype: str) -> None:
    f.attrs["flowsim_version"] = _version()
    f.attrs["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    f.attrs["scenario_text"] = str(scenario_text)
    f.attrs["scenario_resolved"] = dumps(resolved)
    f.attrs["dtype"] = str(dtype)
    f.attrs["provenance"] = dumps(provenance)
    for key, value in provenance.items():
        if isinstance(value, str) and key not in RESERVED_ROOT:
            f.attrs[key] = value


def init_solver_attrs(g: h5py.Group, preset: dict, spec: dict, discrete: bool, conventions: str = "") -> None:
    g.attrs["preset"] = dumps(preset)
    g.attrs["status"] = "running"
    g.attrs["stats"] = "{}"
    g.attrs["wall_time"] = 0.0
    g.attrs["status_time"] = float("nan")
    g.attrs["message"] = ""
    g.attrs["discrete"] = bool(discrete)
    g.attrs["series_spec"] = dumps(spec)
    if conventions:
        g.attrs["conventions"] = conventions


def iter_solvers(f: h5py.File) -> Iterator[h5py.Group]:
    for run in f["runs"].values():
        for name, g in run.items():
            if isinstance(g, h5py.Group) and "series_spec" in g.attrs:
                yield g


# --------------------------------------------------------------------------------------
# Structure helpers (plain write mode)
# --------------------------------------------------------------------------------------

def _row_chunks(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Chunk of one time row; halve the largest other axis until <= _CHUNK_BYTES."""
    chunk = [max(1, n) for n in shape]
    while int(np.prod(chunk)) * itemsize > _CHUNK_BYTES and max(chunk) > 1:
        i = int(np.argmax(chunk))
        chunk[i] = (chunk[i] + 1) // 2
    return (1, *chunk)


def _create_timeseries(g: h5py.Group, name: str, shape: tuple[int, ...], dtype: str) -> h5py.Dataset:
    dt = np.dtype(dtype)
    return g.create_dataset(name, shape=(0, *shape), maxshape=(None, *shape), dtype=dt,
                            chunks=_row_chunks(shape, dt.itemsize), compression="gzip",
                            compression_opts=4, shuffle=True)


def write_arrays(g: h5py.Group, arrays: dict[str, Any]) -> None:
    """Create (or replace) static named arrays in group ``g``."""
    for name, value in arrays.items():
        arr = np.asarray(value)
        if name in g:
            del g[name]
        if arr.ndim and arr.size:
            g.create_dataset(name, data=arr, compression="gzip", compression_opts=4,
                             shuffle=True)
        else:
            g.create_dataset(name, data=arr)


def read_arrays(g: h5py.Group | None) -> dict[str, np.ndarray]:
    if g is None:
        return {}
    return {k: v[()] for k, v in g.items() if isinstance(v, h5py.Dataset)}


def _axis_scale(g: h5py.Group, name: str, size: int, path: str) -> h5py.Dataset:
    """Integer index dimension scale ``name`` of length ``size`` in group ``g``."""
    if name in g:
        ds = g[name]
        if ds.shape != (size,):
            raise ArchiveError(f"{path}: axis {name!r} used with sizes {ds.shape[0]} "
                               f"and {size} in {g.name}")
        return ds
    ds = g.create_dataset(name, data=np.arange(size, dtype=np.int64))
    ds.make_scale(name)
    return ds


def build_solver(g: h5py.Group, series: dict, discrete: bool, path: str) -> None:
    """Create t (+step), every series, and attach dimension scales."""
    t = g.create_dataset("t", shape=(0,), maxshape=(None,), dtype=np.float64,
                         chunks=(1,), compression="gzip", compression_opts=4, shuffle=True)
    t.make_scale("t")
    if discrete:
        step = _create_timeseries(g, "step", (), "int64")
        step.dims[0].attach_scale(t)
    for name, (shape, dtype, axes) in series.items():
        if name in RESERVED_SERIES or name in {a for _, _, ax in series.values() for a in ax}:
            raise ArchiveError(f"{path}: series name {name!r} is reserved or an axis name")
        if len(axes) != len(shape):
            raise ArchiveError(f"{path}: series {name!r} has shape {shape} but axes {axes}")
        ds = _create_timeseries(g, name, tuple(shape), dtype)
        ds.dims[0].attach_scale(t)
        for i, (axis, size) in enumerate(zip(axes, shape), start=1):
            if axis in RESERVED_SERIES:
                raise ArchiveError(f"{path}: axis name {axis!r} is reserved")
            ds.dims[i].attach_scale(_axis_scale(g, axis, size, path))
