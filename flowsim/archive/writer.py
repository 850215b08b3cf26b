"""The single writer of an archive, crash-safe by construction.

Crash-safety design (why the code looks the way it does)
--------------------------------------------------------
Requirement: SIGKILL at any moment leaves a file that ``open()`` reads with every
completed checkpoint, and that ``ArchiveWriter.resume()`` continues.

1. **SWMR for the hot path.**  With ``libver="latest"`` and SWMR write mode, HDF5 orders
   its metadata writes (flush dependencies) so that the file on disk is consistent at any
   instant a concurrent reader might look -- and a SIGKILL only freezes such an instant:
   every ``pwrite`` that returned is in the page cache and survives the process.  All
   per-checkpoint work (``append``) is therefore done in SWMR mode and consists only of
   what SWMR supports: growing chunked datasets and overwriting raw data in place.
   One row per chunk along time means an append never rewrites a chunk that holds an
   already committed row.

2. **Commit record, written last.**  Rows are appended without a flush; ``commit``
   flushes them, then writes the checkpoint state, then (after another flush) a tiny
   commit record.  Readers trust only the commit record: the valid row count is its
   ``index`` and every series is truncated to it, so a kill loses the rows appended since
   the last commit and nothing else.  The driver commits at most about once a second (and
   at every batch's end, before a stop, on a failure), so that checkpoints cost little.

3. **Double-buffered checkpoint.**  Overwriting the one checkpoint in place is not atomic
   (a large write can be torn at a page boundary by SIGKILL).  ``checkpoint/<name>`` has
   shape ``(2, ...)``: two slots, the new state goes to the slot that is not the
   committed one, and ``checkpoint/_commit[slot] = [index, attrs_len, check]`` commits
   it.  ``check`` is a function of the other two, so a torn commit record is detected and
   the reader falls back to the other (older, intact) slot.  Checkpoint attrs are JSON
   bytes in ``checkpoint/_attrs_json`` (2, capacity), also per slot.  The arrays are
   contiguous and preallocated, so a checkpoint write changes no HDF5 metadata at all.
   After a clean close the convenience attrs ``checkpoint.attrs["index"]`` and
   ``["attrs"]`` mirror the committed slot (advisory; the commit record is the truth),
   and rows never committed are dropped.

4. **Structure changes leave SWMR briefly.**  SWMR forbids creating objects and
   rewriting attributes, so ``create_run``/``create_solver``/``write_data``/
   ``set_status`` (and the first append of a solver) close the file, reopen it in plain
   write mode, change it, close it (a clean, consistent file) and go back to SWMR.  These
   are rare; the only unprotected window is the flush inside that close.

5. **Status flags after a kill.**  A killed writer leaves the superblock's "open for
   write" flags set; HDF5 then refuses normal opens ("use h5clear").  After a kill in SWMR
   mode, ``h5py.File(..., swmr=True)`` still opens it; after a kill in plain mode even that
   is refused.  ``open()`` (which must never modify the file) then reads the file through a
   Python file object that presents the superblock with the flags cleared (checksum
   recomputed, Jenkins lookup3 as HDF5 does; superblock.py).  ``resume()`` of an archive
   not closed cleanly *rebuilds* it (recovery.py): it copies every committed row and
   checkpoint into a fresh file next to it and ``os.replace``-s it over the old one
   (atomic), so writing never continues on top of possibly half-flushed metadata.

Writers are serialised with an ``fcntl.flock`` on ``<path>.lock`` (holding the pid).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any, Iterator

import h5py
import numpy as np

from ..status import LABELS as STATUS_NAMES
from .checkpoint import (ATTRS_CAPACITY, build_checkpoint, checkpoint_fits, checkpoint_layout, committed_slot,
                         mirror_checkpoint_attrs, n_committed, read_checkpoint, write_commit, write_row,
                         write_slot)
from .errors import ArchiveError, ArchiveFull
from .format import (HORIZONS_ATTR, PARAMS_CHANGES, attr_str, build_solver, dumps, init_solver_attrs, iter_solvers,
                     loads, params_changes, series_spec, write_arrays, write_root_attrs)
from .lock import Lock
from .recovery import check_signature, explain, rebuild, require_flowsim, truncate_to_commits

_HEADROOM = 64 << 10         # bytes kept free beyond a write's own size (HDF5 metadata)


def _room_left(path: str) -> float:
    """Bytes the archive at ``path`` may still grow by: free disk space for us, and the
    process's file-size limit (``ulimit -f``) minus the file's size."""
    import resource

    room = float("inf")
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(path)))
        room = float(st.f_bavail * st.f_frsize)
    except OSError:
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY:
        try:
            size = os.path.getsize(path)
        except OSError:
            size = 0
        room = min(room, float(soft - size))
    return room


def _ensure_room(path: str, nbytes: int) -> None:
    import errno

    need = nbytes + _HEADROOM
    room = _room_left(path)
    if room < need:
        raise ArchiveFull(errno.ENOSPC, f"{path}: no room for the next write (needs about {need} bytes, "
                          f"{max(0, int(room))} left on the disk or under the file-size limit)")


@dataclasses.dataclass
class _Hot:
    """One solver group's open handles for the append path. Looking them up through h5py
    on every append cost more than writing the rows (about 1 ms a lookup here), so they
    are kept while the SWMR file object that made them is open (`_open_swmr` drops them)."""
    group: h5py.Group
    spec: dict
    discrete: bool
    series: dict[str, h5py.Dataset]      # t, step (discrete solvers), then each observable
    n: int                               # committed rows
    layout: tuple | None                 # checkpoint_layout of the slots
    slots: dict[str, h5py.Dataset]       # the checkpoint group's datasets, by name


class ArchiveWriter:
    """The single writer of an archive (see the module docstring for crash safety)."""

    def __init__(self, path: str, lock: Lock):
        # Use create() or resume().
        self.path = path
        self._lock = lock
        self._f: h5py.File | None = None
        self._swmr = False
        self._hot: dict[tuple[str, str], _Hot] = {}
        # rows appended per solver, committed or not (kept across the reopenings that drop
        # `_hot`: a structure change between an append and its commit)
        self._written: dict[tuple[str, str], int] = {}
        self._pending = 0          # bytes the next structure change will add (room check)
        self.scenario_text = ""
        self.resolved: dict = {}
        self.provenance: dict = {}

    # ---- construction -------------------------------------------------------------

    @classmethod
    def create(cls, path, *, scenario_text: str, resolved: dict, provenance: dict,
               dtype: str, overwrite: bool = False) -> "ArchiveWriter":
        """Create a new archive at ``path`` (refusing an existing one unless overwrite)."""
        path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        lock = Lock(path)
        try:
            if os.path.exists(path):
                if not overwrite:
                    raise ArchiveError(f"{path} already exists: use --overwrite to replace "
                                       "it or --resume to continue it")
                os.remove(path)
            self = cls(path, lock)
            f = h5py.File(path, "w", libver="latest", locking=False, track_order=True)
            try:
                write_root_attrs(f, scenario_text, resolved, provenance, dtype)
                f.create_group("data", track_order=True)
                f.create_group("runs", track_order=True)
            finally:
                f.close()
        except BaseException:
            lock.release()
            raise
        self.scenario_text, self.resolved, self.provenance = scenario_text, dict(resolved), dict(provenance)
        self._open_swmr()
        return self

    @classmethod
    def resume(cls, path) -> "ArchiveWriter":
        """Open an existing archive for appending, repairing it if its writer was killed."""
        path = os.fspath(path)
        lock = Lock(path)
        try:
            check_signature(path)
            self = cls(path, lock)
            self._reopen_for_resume()
        except BaseException:
            lock.release()
            raise
        return self

    def _reopen_for_resume(self) -> None:
        """Clean file: open it. File left open-for-write (killed writer): rebuild it."""
        try:
            f = h5py.File(self.path, "r+", libver="latest", locking=False)
        except OSError as exc:
            if "already open for write" not in str(exc) and "truncated file" not in str(exc):
                raise explain(self.path, exc) from exc
            rebuild(self.path)
            f = h5py.File(self.path, "r+", libver="latest", locking=False)
        try:
            require_flowsim(self.path, f)
            self.scenario_text = attr_str(f.attrs.get("scenario_text", ""))
            self.resolved = loads(f.attrs.get("scenario_resolved", "{}"))
            self.provenance = loads(f.attrs.get("provenance", "{}"))
            truncate_to_commits(f)
        finally:
            if f.id.valid:
                f.close()
        self._open_swmr()

    # ---- file modes ---------------------------------------------------------------

    def _open_swmr(self) -> None:
        self._f = h5py.File(self.path, "r+", libver="latest", locking=False)
        self._f.swmr_mode = True
        self._swmr = True
        self._hot = {}

    @contextlib.contextmanager
    def _structure(self) -> Iterator[h5py.File]:
        """Leave SWMR, yield the file in plain write mode, close cleanly, back to SWMR."""
        self._require_open()
        _ensure_room(self.path, self._pending)
        self._pending = 0
        self._f.close()
        self._f = h5py.File(self.path, "r+", libver="latest", locking=False)
        self._swmr = False
        try:
            yield self._f
        finally:
            self._f.close()
            self._f = None
            self._open_swmr()

    def _require_open(self) -> None:
        if self._f is None or not self._f.id.valid:
            raise ArchiveError(f"{self.path}: archive writer is closed")

    def _solver_group(self, run: str, solver: str) -> h5py.Group:
        self._require_open()
        key = f"runs/{run}/{solver}"
        if key not in self._f:
            raise ArchiveError(f"{self.path}: no solver group /{key}")
        return self._f[key]

    # ---- structure ----------------------------------------------------------------

    def write_data(self, arrays: dict[str, np.ndarray], run: str | None = None) -> None:
        """Store the dataset in /data, or a run's own one in /runs/<run>/data."""
        self._pending = sum(np.asarray(v).nbytes for v in arrays.values())
        with self._structure() as f:
            where = "data" if run is None else f"runs/{run}/data"
            if run is not None and f"runs/{run}" not in f:
                raise ArchiveError(f"{self.path}: no run {run!r} (create_run first)")
            write_arrays(f.require_group(where), arrays)

    def has_run(self, run: str) -> bool:
        self._require_open()
        return f"runs/{run}" in self._f

    def create_run(self, run: str, *, params: dict, seed: int, label: str, point: int,
                   init: dict[str, np.ndarray]) -> None:
        """Create /runs/<run> with its attrs and init arrays (no-op if it exists)."""
        if self.has_run(run):
            return
        self._pending = sum(np.asarray(v).nbytes for v in init.values())
        with self._structure() as f:
            g = f["runs"].create_group(run, track_order=True)
            g.attrs["params"] = dumps(params_changes(params, self.resolved))
            g.attrs[PARAMS_CHANGES] = True
            g.attrs["seed"] = int(seed)
            g.attrs["label"] = str(label)
            g.attrs["point"] = int(point)
            write_arrays(g.create_group("init", track_order=True), init)

    def create_solver(self, run: str, solver: str, *, preset: dict, series: dict,
                      discrete: bool) -> None:
        """Create the solver group, its empty series and dimension scales (no-op if exists)."""
        self._require_open()
        if f"runs/{run}" not in self._f:
            raise ArchiveError(f"{self.path}: no run {run!r} (create_run first)")
        if f"runs/{run}/{solver}" in self._f:
            return
        spec = {k: [list(map(int, s)), np.dtype(d).str, list(a)] for k, (s, d, a) in series.items()}
        with self._structure() as f:
            g = f[f"runs/{run}"].create_group(solver, track_order=True)
            try:
                init_solver_attrs(g, preset, spec, discrete)
                build_solver(g, {k: tuple(v) for k, v in spec.items()}, discrete, self.path)
            except BaseException:
                del f[f"runs/{run}"][solver]
                raise

    # ---- appending ----------------------------------------------------------------

    def append(self, run: str, solver: str, *, t: float, step: int | None,
               values: dict[str, np.ndarray], checkpoint: dict[str, np.ndarray] | None = None,
               checkpoint_attrs: dict | None = None) -> None:
        """Append one checkpoint row; with `checkpoint` (the resumable state at this row)
        also commit it with every row appended before it (`commit`). A row appended without
        one is read by nobody until a later commit: a kill before that loses it."""
        hot = self._hot_group(run, solver)
        rows = self._validate_values(hot.group, hot.spec, values)
        if hot.discrete and step is None:
            raise ArchiveError(f"{self.path}: {hot.group.name} is discrete: append needs step")
        _ensure_room(self.path, sum(r.nbytes for r in rows.values()) + 16)
        # Resized to row n+1 explicitly, so a failed earlier append cannot shift rows.
        n = self._written[(run, solver)]
        _append_row(hot.series["t"], n, np.float64(t))
        if hot.discrete:
            _append_row(hot.series["step"], n, np.int64(step))
        for name, row in rows.items():
            _append_row(hot.series[name], n, row)
        self._written[(run, solver)] = n + 1
        if checkpoint is not None:
            self.commit(run, solver, checkpoint=checkpoint, checkpoint_attrs=checkpoint_attrs or {})

    def commit(self, run: str, solver: str, *, checkpoint: dict[str, np.ndarray], checkpoint_attrs: dict) -> None:
        """Make every row appended so far durable, with `checkpoint`, the resumable state at
        the last of them: the rows are flushed first, then the state goes to the slot that
        is not the committed one, then the commit record (see docs)."""
        hot = self._hot_group(run, solver)
        arrays = {k: np.ascontiguousarray(v) for k, v in checkpoint.items()}
        if not checkpoint_fits(hot.layout, arrays, 0):
            _ensure_room(self.path, 2 * sum(a.nbytes for a in arrays.values()) + 2 * ATTRS_CAPACITY)
        blob = dumps(checkpoint_attrs).encode()
        self._f.flush()
        if not checkpoint_fits(hot.layout, arrays, len(blob)):
            self._rebuild_checkpoint(run, solver, arrays, len(blob))
            hot = self._hot_group(run, solver)
        slot = 1 - committed_slot(hot.slots)
        write_slot(hot.slots, slot, arrays, blob)
        self._f.flush()
        write_commit(hot.slots, slot, self._written[(run, solver)], len(blob))
        self._f.flush()
        hot.n = self._written[(run, solver)]

    def _hot_group(self, run: str, solver: str) -> _Hot:
        hot = self._hot.get((run, solver))
        if hot is None:
            g = self._solver_group(run, solver)
            spec = series_spec(g)
            discrete = bool(g.attrs.get("discrete", False))
            names = ["t", *(["step"] if discrete else []), *spec]
            cp = g.get("checkpoint")
            hot = _Hot(g, spec, discrete, {k: g[k] for k in names}, n_committed(g),
                       checkpoint_layout(cp), {} if cp is None else dict(cp.items()))
            self._written.setdefault((run, solver), hot.n)
            self._hot[(run, solver)] = hot
        return hot

    def _validate_values(self, g: h5py.Group, spec: dict, values: dict) -> dict:
        """Check names/shapes before writing anything; return rows cast to their dtype."""
        if set(values) != set(spec):
            raise ArchiveError(f"{self.path}: {g.name}: append values {sorted(values)} do "
                               f"not match the series {sorted(spec)}")
        rows = {}
        for name, (shape, dtype, _) in spec.items():
            row = np.asarray(values[name], dtype=dtype)
            if row.shape != tuple(shape):
                raise ArchiveError(f"{self.path}: {g.name}/{name}: row shape {row.shape} "
                                   f"!= declared {tuple(shape)}")
            rows[name] = row
        return rows

    def _rebuild_checkpoint(self, run: str, solver: str, arrays: dict, nbytes: int) -> None:
        """Create (or reshape) the checkpoint group, keeping the committed slot intact."""
        old = self.read_checkpoint(run, solver)
        n = self.n_checkpoints(run, solver)
        with self._structure() as f:
            g = f[f"runs/{run}/{solver}"]
            capacity = ATTRS_CAPACITY
            while capacity < nbytes:
                capacity *= 2
            cp = build_checkpoint(g, arrays, capacity)
            if old is not None and set(old[0]) == set(arrays) and all(
                    old[0][k].shape == arrays[k].shape and old[0][k].dtype == arrays[k].dtype
                    for k in arrays):
                blob = dumps(old[1]).encode()
                if len(blob) <= capacity:
                    write_slot(cp, n % 2, old[0], blob)
                    write_commit(cp, n % 2, n, len(blob))

    # ---- queries ------------------------------------------------------------------

    def n_checkpoints(self, run: str, solver: str) -> int:
        """Committed checkpoint rows of the solver (0 when none)."""
        return n_committed(self._solver_group(run, solver))

    def read_checkpoint(self, run: str, solver: str) -> tuple[dict[str, np.ndarray], dict] | None:
        """The committed checkpoint (arrays, attrs) or None."""
        return read_checkpoint(self._solver_group(run, solver))

    def write_analysis(self, run: str, solver: str, name: str, arrays: dict[str, np.ndarray],
                       attrs: dict | None = None) -> None:
        """Store (or replace) the result ``<solver>/analysis/<name>`` (outside SWMR).

        Written under a temporary name and then moved into place, so a kill leaves the
        previous result or the new one, never a half-written one (readers skip ``_tmp-*``)."""
        self._solver_group(run, solver)
        with self._structure() as f:
            g = f[f"runs/{run}/{solver}"].require_group("analysis")
            tmp = f"_tmp-{name}"
            if tmp in g:
                del g[tmp]
            t = g.create_group(tmp, track_order=True)
            write_arrays(t, arrays)
            for k, v in (attrs or {}).items():
                t.attrs[k] = v
            if name in g:
                del g[name]
            g.move(tmp, name)

    def horizons(self) -> tuple[float, ...]:
        """The earlier t_ends of an archive extended by `extend_horizon` (oldest first)."""
        return tuple(loads(self._f.attrs.get(HORIZONS_ATTR, "[]")))

    def extend_horizon(self, resolved: dict) -> None:
        """The archive continues to `resolved`'s later run.t_end (its only difference from
        the stored scenario): the old t_end joins the horizons, the stored scenario and
        each run's parameters take the new one, and every solver is `running` again until
        the driver ends it (a crash meanwhile then reads as interrupted)."""
        old = self.resolved["run"]["t_end"]
        with self._structure() as f:
            f.attrs[HORIZONS_ATTR] = dumps([*loads(f.attrs.get(HORIZONS_ATTR, "[]")), old])
            f.attrs["scenario_resolved"] = dumps(resolved)
            for g in f["runs"].values():   # a run whose run table is the scenario's has it already
                params = loads(g.attrs.get("params", "{}"))
                if "run" in params:
                    params["run"]["t_end"] = resolved["run"]["t_end"]
                    g.attrs["params"] = dumps(params)
            for solver in iter_solvers(f):
                solver.attrs["status"] = "running"
        self.resolved = dict(resolved)

    def set_status(self, run: str, solver: str, *, status: str, stats: dict,
                   wall_time: float, message: str = "", status_time: float | None = None) -> None:
        """Record the solver's status (attribute rewrite: done outside SWMR)."""
        if status not in STATUS_NAMES:
            raise ArchiveError(f"{self.path}: unknown status {status!r} "
                               f"(expected one of {', '.join(STATUS_NAMES)})")
        self._solver_group(run, solver)
        with self._structure() as f:
            g = f[f"runs/{run}/{solver}"]
            g.attrs["status"] = status
            g.attrs["stats"] = dumps(stats)
            g.attrs["wall_time"] = float(wall_time)
            g.attrs["message"] = str(message)
            g.attrs["status_time"] = float("nan") if status_time is None else float(status_time)

    # ---- closing ------------------------------------------------------------------

    def close(self) -> None:
        """Drop rows never committed, mirror commits into advisory attrs, close the file
        cleanly, release the lock."""
        if self._lock.fd is None:
            return
        try:
            if self._f is not None and self._f.id.valid:
                self._f.close()
                try:
                    with h5py.File(self.path, "r+", libver="latest", locking=False) as f:
                        truncate_to_commits(f)    # rows appended after the last commit
                        mirror_checkpoint_attrs(f)
                except OSError:
                    # The advisory mirror only; a writer whose earlier write failed (disk
                    # full) cannot reopen the file, and the commit records are the truth.
                    pass
        finally:
            self._f = None
            self._lock.release()

    def __enter__(self) -> "ArchiveWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):  # pragma: no cover - best effort
        with contextlib.suppress(Exception):
            self.close()


def _append_row(ds: h5py.Dataset, n: int, row: Any) -> None:
    ds.id.set_extent((n + 1, *ds.shape[1:]))
    write_row(ds, n, row)
