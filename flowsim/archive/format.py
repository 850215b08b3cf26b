"""The on-disk layout of an archive: its attributes (declared once, in `ATTRS`), reserved
names, JSON attributes, chunking, dimension scales.

Layout (every attribute's name, type and meaning: `ATTRS`; docs/archive.md lists them)::

    /                         the file's attributes, and each text entry of `provenance`
                              again as its own attribute
    /data/                    X_train, y_train, X_test, y_test
    /runs/<run>/              the run's attributes; `params` holds only the tables (data,
                              model, run, …) that differ from `scenario_resolved`'s: the
                              scenario is stored once, not once per run
        data/                 optional per-run dataset
        init/                 named arrays
        <solver>/             the solver's attributes
            t, step, counts, <series> (k, ...) time-indexed, chunked one row per chunk, gzip
            <axis names>      integer dimension scales ("node", "point", ...)
            checkpoint/       the latest resumable state, double-buffered (checkpoint.py)
"""

from __future__ import annotations

import copy
import datetime
import json
from importlib import metadata as _metadata
from typing import Any, Iterator, NamedTuple

import h5py
import numpy as np

from .errors import ArchiveError

RESERVED_SERIES = ("t", "step", "counts", "count", "checkpoint")
#: The columns of a solver's `counts` (the cumulative counts at each checkpoint, start-up
#: included): steps tried, accepted and rejected, field (gradient) evaluations and
#: Hessian-vector products.
COUNTS = ("steps", "accepted", "rejected", "vf_evals", "hvps")
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


# --------------------------------------------------------------------------------------
# The attributes, declared once
# --------------------------------------------------------------------------------------

FILE, RUN, SOLVER, CHECKPOINT = "/", "/runs/<run>", "/runs/<run>/<solver>", "<solver>/checkpoint"
COUNTED = "<solver>/counts"
_NOTHING = object()     # no value while the solver runs (written once, when created)

# How each type of attribute is stored and read back, and what reads for one that is absent
# (an archive written before the attribute existed, or one a crash left without it).
_KINDS = {
    "text": (str, attr_str, ""),
    "json": (dumps, loads, {}),
    "int": (int, int, -1),
    "float": (float, float, float("nan")),
    "bool": (bool, bool, False),
}


class Attr(NamedTuple):
    """One attribute of the archive: its name, the group that holds it (`where`), its type
    (a key of `_KINDS`), its meaning (docs/archive.md), and for a solver's attributes that
    change as it runs, the value it holds from its creation until the solver ends
    (`running`); `stat`: written at the end from the statistic of the same name;
    `optional`: written only where it applies."""

    name: str
    where: str
    kind: str
    meaning: str
    running: Any = _NOTHING
    stat: bool = False
    optional: bool = False
    absent: Any = _NOTHING   # what reads when it is absent (default: the kind's)

    def encode(self, value: Any) -> Any:
        return _KINDS[self.kind][0](value)

    def decode(self, raw: Any) -> Any:
        return _KINDS[self.kind][1](raw)

    def read(self, attrs) -> Any:
        """Its value in `attrs` (an h5py AttributeManager), or its `absent` value."""
        if self.name in attrs:
            return self.decode(attrs[self.name])
        return copy.deepcopy(_KINDS[self.kind][2] if self.absent is _NOTHING else self.absent)

    @property
    def changes(self) -> bool:
        """Whether a running solver's value differs from its final one (see `running`)."""
        return self.running is not _NOTHING


#: Every attribute flowsim writes, in the order it writes them. The writer, the readers and
#: the running defaults take names, types and defaults from here; docs/archive.md lists the
#: same rows (tests/test_archive_attrs.py holds them equal).
ATTRS = (
    Attr("flowsim_version", FILE, "text", "the flowsim version that wrote the archive"),
    Attr("created", FILE, "text", "when the archive was created (ISO 8601, UTC)"),
    Attr("scenario_text", FILE, "text", "the scenario file as it was read"),
    Attr("scenario_resolved", FILE, "json", "the scenario resolved: every key's value, defaults filled in"),
    Attr("dtype", FILE, "text", "the floating-point type the runs computed in"),
    Attr("provenance", FILE, "json", "versions, git commit, platform and device that wrote it, and the SHA-256 "
         "of each file the scenario names (`data_sha256`, by key: `--resume` knows a file by its content); each "
         "text entry is also a file attribute of its own"),
    Attr("t_end_history", FILE, "json", "the earlier `run.t_end`s of an archive extended by `--resume --set "
         "run.t_end=…`, oldest first", optional=True, absent=[]),
    Attr("merged_from", FILE, "json", "the part archives that `flowsim merge` linked into this one",
         optional=True, absent=None),
    Attr("params", RUN, "json", "the tables (data, model, run, …) of the run's resolved scenario that differ "
         "from `scenario_resolved`'s (with `params_changes`); an archive written before stores them all"),
    Attr("params_changes", RUN, "bool", "true: `params` holds only the changes from the scenario"),
    Attr("seed", RUN, "int", "the run's seed"),
    Attr("label", RUN, "text", "the sweep point's label (\"\" without a sweep)"),
    Attr("point", RUN, "int", "the sweep point's index"),
    Attr("preset", SOLVER, "json", "the solver's resolved preset"),
    Attr("status", SOLVER, "text", "`running` until the solver ends, then `done`, `diverged`, `max_steps`, "
         "`nonfinite`, `stopped` or `failed`", running="running"),
    Attr("stats", SOLVER, "json", "the solver's statistics when it ended: steps, accepted, rejected, vf_evals "
         "(field evaluations) and hvps (Hessian-vector products), the start-up's included; a flow's stiff_steps; "
         "wall_time, compile_time, observe_time (seconds); while it runs, those of its last commit are in its "
         "checkpoint", running={}),
    Attr("wall_time", SOLVER, "float", "seconds the solver computed, compilation left out (`compile_time`); "
         "for a batch of seeds, the batch's", running=0.0, stat=True),
    Attr("compile_time", SOLVER, "float", "seconds tracing and compiling the solver's programs (apart from "
         "`wall_time`); for a batch of seeds, the batch's", running=0.0, stat=True),
    Attr("message", SOLVER, "text", "what its status means and what to try", running=""),
    Attr("status_time", SOLVER, "float", "the time at which it ended", running=float("nan")),
    Attr("discrete", SOLVER, "bool", "a discrete method: the group has `step`"),
    Attr("series_spec", SOLVER, "json", "each series' row shape, dtype and axis names: {name: [shape, dtype, "
         "axes]}"),
    Attr("conventions", SOLVER, "text", "a central flow's: what its series mean where codes differ (Σ and the "
         "JAX package's X = Σ/η, the edge 2/η, where each sharpness is taken)", optional=True),
    Attr("columns", COUNTED, "json", "the names of the `counts` columns (`COUNTS`: steps, accepted, rejected, "
         "vf_evals, hvps)"),
    Attr("layout", CHECKPOINT, "text", "how the double-buffered checkpoint is laid out"),
    Attr("index", CHECKPOINT, "int", "advisory: the committed rows at the last clean close (the commit "
         "record is the truth)"),
    Attr("attrs", CHECKPOINT, "text", "advisory: the committed checkpoint's statistics (JSON) at the last "
         "clean close"),
)


def attrs_of(where: str) -> tuple[Attr, ...]:
    """The attributes of the group `where` (FILE, RUN, SOLVER, COUNTED, CHECKPOINT), in order."""
    return tuple(a for a in ATTRS if a.where == where)


def attr(where: str, name: str) -> Attr:
    """The attribute `name` of the group `where`, as declared."""
    for a in ATTRS:
        if a.where == where and a.name == name:
            return a
    raise KeyError(f"no attribute {name!r} is declared for {where} (flowsim.archive.format.ATTRS)")


def write_attrs(g: h5py.Group | h5py.File, where: str, values: dict) -> None:
    """Write `values` (name -> value) as attributes of `g`, a `where` group, each encoded as
    the record says, in the record's order."""
    known = attrs_of(where)
    unknown = set(values) - {a.name for a in known}
    if unknown:
        raise ArchiveError(f"{g.name}: no attribute {sorted(unknown)} is declared for {where} "
                           "(flowsim.archive.format.ATTRS)")
    for a in known:
        if a.name in values:
            g.attrs[a.name] = a.encode(values[a.name])


def read_attrs(attrs, where: str) -> dict:
    """Every attribute the record declares for `where`, decoded (absent: its `absent` value)."""
    return {a.name: a.read(attrs) for a in attrs_of(where)}


def running_values(encoded: bool = False) -> dict:
    """A solver's attributes that change as it runs, at their values while it runs (as
    stored, with `encoded`)."""
    return {a.name: a.encode(a.running) if encoded else a.running for a in attrs_of(SOLVER) if a.changes}


def decode_root_attrs(attrs) -> dict:
    """The file's attributes present, decoded: declared ones by their type, the others
    (provenance's own entries) as plain values."""
    declared = {a.name: a for a in attrs_of(FILE)}
    out = {}
    for k, v in attrs.items():
        if k in declared:
            out[k] = declared[k].decode(v)
        else:
            out[k] = attr_str(v) if isinstance(v, (bytes, str)) else (v.item() if isinstance(v, np.generic) else v)
    return out


def params_changes(params: dict, resolved: dict) -> dict:
    """A run's resolved parameters as stored: the top-level tables that differ from the
    scenario's (`run_params` puts them back)."""
    as_json = lambda x: json.loads(dumps(x))  # noqa: E731  (tuples as lists, as they read back)
    return {k: v for k, v in params.items() if as_json(resolved.get(k)) != as_json(v)}


def run_params(stored: dict, changes: bool, resolved: dict) -> dict:
    """A run's resolved parameters, from its `params` and `params_changes` attributes and the
    scenario's `resolved`."""
    if not changes:    # an archive written before: stored whole
        return stored
    return {k: v for k, v in resolved.items() if k != "sweep"} | stored


def series_spec(g: h5py.Group) -> dict:
    return attr(SOLVER, "series_spec").read(g.attrs)


def is_solver(g) -> bool:
    """Whether `g` (a member of a run group) is a solver group (it has a `series_spec`)."""
    return isinstance(g, h5py.Group) and attr(SOLVER, "series_spec").name in g.attrs


def write_root_attrs(f: h5py.File, scenario_text: str, resolved: dict, provenance: dict,
                     dtype: str) -> None:
    write_attrs(f, FILE, {"flowsim_version": _version(),
                          "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                          "scenario_text": scenario_text, "scenario_resolved": resolved, "dtype": dtype,
                          "provenance": provenance})
    declared = {a.name for a in attrs_of(FILE)}
    for key, value in provenance.items():
        if isinstance(value, str) and key not in declared:
            f.attrs[key] = value


def init_solver_attrs(g: h5py.Group, preset: dict, spec: dict, discrete: bool, conventions: str = "") -> None:
    write_attrs(g, SOLVER, running_values() | {"preset": preset, "discrete": discrete, "series_spec": spec}
                | ({"conventions": conventions} if conventions else {}))


def iter_solvers(f: h5py.File) -> Iterator[h5py.Group]:
    for run in f["runs"].values():
        for g in run.values():
            if is_solver(g):
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


def count_columns(g: h5py.Group) -> tuple[str, ...]:
    """The columns of solver group `g`'s `counts` (() for an archive written before them)."""
    return tuple(attr(COUNTED, "columns").read(g["counts"].attrs)) if "counts" in g else ()


def row_datasets(g: h5py.Group) -> list[str]:
    """The time-indexed datasets of solver group `g`: t, step and counts where it has them,
    and its series."""
    return [name for name in ("t", "step", "counts") if name in g] + list(series_spec(g))


def build_solver(g: h5py.Group, series: dict, discrete: bool, path: str, counts: tuple[str, ...] = ()) -> None:
    """Create t (+step, + `counts` with these columns), every series, and attach dimension
    scales."""
    t = g.create_dataset("t", shape=(0,), maxshape=(None,), dtype=np.float64,
                         chunks=(1,), compression="gzip", compression_opts=4, shuffle=True)
    t.make_scale("t")
    if discrete:
        step = _create_timeseries(g, "step", (), "int64")
        step.dims[0].attach_scale(t)
    if counts:
        ds = _create_timeseries(g, "counts", (len(counts),), "int64")
        ds.dims[0].attach_scale(t)
        ds.dims[1].attach_scale(_axis_scale(g, "count", len(counts), path))
        write_attrs(ds, COUNTED, {"columns": list(counts)})
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


# --------------------------------------------------------------------------------------
# The attributes' reference (docs/archive.md)
# --------------------------------------------------------------------------------------

_GROUPS = {FILE: "the file (`/`)", RUN: "each run (`/runs/<run>`)", SOLVER: "each solver (`/runs/<run>/<solver>`)",
           COUNTED: "each solver's `counts` dataset", CHECKPOINT: "each checkpoint group (`<solver>/checkpoint`)"}


def attributes_markdown() -> str:
    """The table of every attribute, as docs/archive.md holds it between its markers
    (tests/test_archive_attrs.py holds them equal)."""
    lines = ["| attribute | type | meaning | while the solver runs |", "|---|---|---|---|"]
    for where, title in _GROUPS.items():
        lines.append(f"| **{title}** | | | |")
        for a in attrs_of(where):
            running = f"`{dumps(a.running)}`" if a.changes else ""
            note = " (only where it applies)" if a.optional else ""
            lines.append(f"| `{a.name}` | {a.kind} | {a.meaning}{note} | {running} |")
    return "\n".join(lines)
