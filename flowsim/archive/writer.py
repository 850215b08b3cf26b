"""The single writer of an archive, crash-safe by construction.

Crash-safety design (why the code looks the way it does)
--------------------------------------------------------
Requirements: SIGKILL at any moment leaves a file that ``open()`` reads with every
completed checkpoint, and that ``ArchiveWriter.resume()`` continues; a kill between two
of the writer's writes leaves a file that any HDF5 tool (plain h5py, xarray) opens as it
is, with nothing run first.

1. **Closed between writes.**  The file is open only while the writer writes: a commit
   (point 2) or a structure change (point 4) opens it, writes, and closes it again, so
   between them it is a clean, closed HDF5 file -- its superblock's "open for write"
   flags are clear, and readers and a SIGKILL find it consistent.  Rows appended between
   commits wait in memory (``_Solver.pending``); a kill loses them, as it loses any row
   not committed.  Commits are batched in time by the driver (about once a second, and at
   every batch's end, before a stop, on a failure; ``commits()`` shares one opening among
   a batch's members), so the opening and closing cost little (measured in the closing
   note of issue 32).  Pending rows beyond ``SPILL_BYTES`` are written out early without
   a commit record (readers truncate to the commit record; ``close`` drops them).

2. **A commit is written in SWMR mode, its record last.**  A commit opens the file with
   ``libver="latest"`` in SWMR write mode, in which HDF5 orders its metadata writes
   (flush dependencies) so that the file on disk is consistent at any instant a
   concurrent reader might look -- and a SIGKILL only freezes such an instant.  It writes
   the pending rows (growing chunked datasets, one row per chunk along time, so no chunk
   holding a committed row is rewritten), flushes, writes the checkpoint state, flushes,
   then writes a tiny commit record and closes the file.  Readers trust only the commit
   record: the valid row count is its ``index`` and every series is truncated to it.  A
   kill inside a commit leaves the SWMR flags set: flowsim's readers still read it (SWMR
   read), plain HDF5 tools refuse it until ``--resume`` repairs it (point 5).

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

4. **Structure changes in plain write mode.**  SWMR forbids creating objects and
   rewriting attributes, so ``create_run``/``create_solver``/``write_data``/
   ``set_status``/``write_analysis`` (and a solver's first commit, which creates its
   checkpoint slots) open the file in plain write mode, change it and close it.  These
   are rare; a kill inside one can leave metadata half flushed (the one unprotected
   window, as before).

5. **After a kill inside a write.**  The superblock's "open for write" flags stay set and
   HDF5 refuses normal opens ("use h5clear").  ``open()`` never modifies the file: it
   reads it in SWMR mode, or through a Python file object that presents the superblock
   with the flags cleared (checksum recomputed, Jenkins lookup3 as HDF5 does;
   superblock.py).  ``resume()`` of such a file *rebuilds* it (recovery.py): it copies
   every committed row and checkpoint into a fresh file next to it and ``os.replace``-s it
   over the old one (atomic), so writing never continues on top of possibly half-flushed
   metadata.  A file killed between writes needs nothing: it was closed cleanly.

Writers are serialised with an ``fcntl.flock`` on ``<path>.lock`` (holding the pid).
``FLOWSIM_TEST_COMMIT_PAUSE`` (seconds, tests only) makes each commit sleep twice while it
holds the file -- after its rows, and after its commit record -- so that fault tests can
aim kills at commits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Iterator

import h5py
import numpy as np

from ..status import LABELS as STATUS_NAMES
from .checkpoint import (ATTRS_CAPACITY, build_checkpoint, checkpoint_fits, checkpoint_layout, committed_slot,
                         mirror_checkpoint_attrs, n_committed, read_checkpoint, write_commit, write_rows,
                         write_slot)
from .errors import ArchiveError, ArchiveFull
from .format import (FILE, RUN, SOLVER, attr, attrs_of, build_solver, count_columns, dumps, init_solver_attrs,
                     iter_solvers, params_changes, read_attrs, series_spec, write_arrays, write_attrs, write_root_attrs)
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


SPILL_BYTES = 64 << 20       # pending rows written out early (without a commit) beyond this
_PAUSE_ENV = "FLOWSIM_TEST_COMMIT_PAUSE"


def _test_pause() -> float:
    """Seconds each commit sleeps while it holds the file (fault tests only; 0 otherwise)."""
    try:
        return max(0.0, float(os.environ.get(_PAUSE_ENV, "") or 0.0))
    except ValueError:
        return 0.0


@dataclasses.dataclass
class _Solver:
    """What the writer keeps of one solver group while the file is closed: its layout, the
    rows in the file, and the rows appended since they were written (in memory)."""
    spec: dict
    discrete: bool
    counts: tuple[str, ...]      # the columns of its `counts` (() in an archive written before them)
    written: int                 # rows in the file (committed, or spilled since the last commit)
    layout: tuple | None         # checkpoint_layout of the slots
    # (t, step, series values, counts) of each row appended since the last write
    pending: list[tuple[float, int | None, dict[str, np.ndarray], np.ndarray]] = dataclasses.field(
        default_factory=list)
    pending_bytes: int = 0


class ArchiveWriter:
    """The single writer of an archive (see the module docstring for crash safety)."""

    def __init__(self, path: str, lock: Lock):
        # Use create() or resume().
        self.path = path
        self._lock = lock
        self._f: h5py.File | None = None     # the file while a commit holds it (SWMR write)
        self._held = 0                       # depth of `commits()` blocks
        self._solvers: dict[tuple[str, str], _Solver] = {}
        self._pause = _test_pause()
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
                    raise ArchiveError(f"{path} already exists: use --resume to continue it, another "
                                       "path for a new archive, or --overwrite to replace it")
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
        return self

    @classmethod
    def resume(cls, path) -> "ArchiveWriter":
        """Open an existing archive for appending, repairing it if its writer was killed
        inside a write."""
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
        """Clean file: read it. File left open-for-write (killed inside a write): rebuild it.
        Rows written without a commit are dropped either way."""
        try:
            f = h5py.File(self.path, "r+", libver="latest", locking=False)
        except OSError as exc:
            if "already open for write" not in str(exc) and "truncated file" not in str(exc):
                raise explain(self.path, exc) from exc
            rebuild(self.path)
            f = h5py.File(self.path, "r+", libver="latest", locking=False)
        try:
            require_flowsim(self.path, f)
            root = read_attrs(f.attrs, FILE)
            self.scenario_text, self.resolved, self.provenance = (
                root["scenario_text"], root["scenario_resolved"], root["provenance"])
            truncate_to_commits(f)
        finally:
            if f.id.valid:
                f.close()

    # ---- file modes ---------------------------------------------------------------

    def _require_open(self) -> None:
        if self._lock.fd is None:
            raise ArchiveError(f"{self.path}: archive writer is closed")

    def _open_commit(self) -> h5py.File:
        """The file in SWMR write mode (module docstring, point 2), opened unless held."""
        self._require_open()
        if self._f is None:
            fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
            fapl.set_libver_bounds(h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)
            fapl.set_file_locking(False, ignore_when_disabled=False)   # locking=False, as h5py sets it
            try:
                fid = h5py.h5f.open(os.fsencode(self.path), h5py.h5f.ACC_RDWR | h5py.h5f.ACC_SWMR_WRITE, fapl=fapl)
            except OSError as exc:
                raise explain(self.path, exc) from exc
            self._f = h5py.File(fid)
        return self._f

    def _close_file(self, *, failing: bool = False) -> None:
        """Close the held file (clearing its flags); after a failed write, quietly."""
        f, self._f = self._f, None
        if f is not None and f.id.valid:
            try:
                f.close()
            except Exception:
                if not failing:
                    raise

    @contextlib.contextmanager
    def commits(self) -> Iterator[None]:
        """The commits (and appends) inside share one opening of the file: the driver
        commits a batch's members together. The file is closed when the block ends."""
        self._held += 1
        failing = True
        try:
            yield
            failing = False
        finally:
            self._held -= 1
            if not self._held:
                self._close_file(failing=failing)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[h5py.File]:
        """The file to read: the held one, else opened read-only for the block."""
        self._require_open()
        if self._f is not None:
            yield self._f
            return
        with self._opened("r") as f:
            yield f

    @contextlib.contextmanager
    def _structure(self, nbytes: int = 0) -> Iterator[h5py.File]:
        """The file in plain write mode for a structure change (point 4), closed after."""
        self._require_open()
        _ensure_room(self.path, nbytes)
        self._close_file()
        with self._opened("r+", libver="latest") as f:
            yield f

    @contextlib.contextmanager
    def _opened(self, mode: str, **kw) -> Iterator[h5py.File]:
        """The file opened in `mode` for the block (an OSError explained by path)."""
        try:
            f = h5py.File(self.path, mode, locking=False, **kw)
        except OSError as exc:
            raise explain(self.path, exc) from exc
        try:
            yield f
        finally:
            f.close()

    @staticmethod
    def _group(f: h5py.File, key: str, path: str) -> h5py.Group:
        if key not in f:
            raise ArchiveError(f"{path}: no solver group /{key}")
        return f[key]

    # ---- structure ----------------------------------------------------------------

    def write_data(self, arrays: dict[str, np.ndarray], run: str | None = None) -> None:
        """Store the dataset in /data, or a run's own one in /runs/<run>/data."""
        with self._structure(sum(np.asarray(v).nbytes for v in arrays.values())) as f:
            where = "data" if run is None else f"runs/{run}/data"
            if run is not None and f"runs/{run}" not in f:
                raise ArchiveError(f"{self.path}: no run {run!r} (create_run first)")
            write_arrays(f.require_group(where), arrays)

    def has_run(self, run: str) -> bool:
        with self._reading() as f:
            return f"runs/{run}" in f

    def create_run(self, run: str, *, params: dict, seed: int, label: str, point: int,
                   init: dict[str, np.ndarray]) -> None:
        """Create /runs/<run> with its attrs and init arrays (no-op if it exists)."""
        if self.has_run(run):
            return
        with self._structure(sum(np.asarray(v).nbytes for v in init.values())) as f:
            g = f["runs"].create_group(run, track_order=True)
            write_attrs(g, RUN, {"params": params_changes(params, self.resolved), "params_changes": True,
                                 "seed": seed, "label": label, "point": point})
            write_arrays(g.create_group("init", track_order=True), init)

    def create_solver(self, run: str, solver: str, *, preset: dict, series: dict,
                      discrete: bool, conventions: str = "", counts: tuple[str, ...] = ()) -> None:
        """Create the solver group, its empty series and dimension scales (no-op if exists);
        `conventions`: what its series mean where codes differ (an attribute, if any);
        `counts`: the columns of its cumulative counts, one row per checkpoint (`append`)."""
        with self._reading() as f:
            if f"runs/{run}" not in f:
                raise ArchiveError(f"{self.path}: no run {run!r} (create_run first)")
            if f"runs/{run}/{solver}" in f:
                return
        spec = {k: [list(map(int, s)), np.dtype(d).str, list(a)] for k, (s, d, a) in series.items()}
        with self._structure() as f:
            g = f[f"runs/{run}"].create_group(solver, track_order=True)
            try:
                init_solver_attrs(g, preset, spec, discrete, conventions)
                build_solver(g, {k: tuple(v) for k, v in spec.items()}, discrete, self.path, tuple(counts))
            except BaseException:
                del f[f"runs/{run}"][solver]
                raise

    # ---- appending ----------------------------------------------------------------

    def append(self, run: str, solver: str, *, t: float, step: int | None,
               values: dict[str, np.ndarray], checkpoint: dict[str, np.ndarray] | None = None,
               checkpoint_attrs: dict | None = None, counts=None) -> None:
        """Append one checkpoint row; with `checkpoint` (the resumable state at this row)
        also commit it with every row appended before it (`commit`). A row appended without
        one is read by nobody until a later commit: a kill before that loses it. `counts`:
        the row's cumulative counts, one per column the solver was created with (an archive
        written before them has none: they are not kept)."""
        s = self._solver(run, solver)
        key = f"/runs/{run}/{solver}"
        rows = self._validate_values(key, s.spec, values)
        if s.discrete and step is None:
            raise ArchiveError(f"{self.path}: {key} is discrete: append needs step")
        counted = np.asarray(counts if s.counts and counts is not None else [], dtype=np.int64)
        if counted.shape != (len(s.counts),):
            raise ArchiveError(f"{self.path}: {key}: append needs counts, one per column {list(s.counts)}")
        s.pending.append((float(t), None if step is None else int(step), rows, counted))
        s.pending_bytes += sum(r.nbytes for r in rows.values()) + 16 + counted.nbytes
        if checkpoint is not None:
            self.commit(run, solver, checkpoint=checkpoint, checkpoint_attrs=checkpoint_attrs or {})
        elif self._pending_bytes() > SPILL_BYTES:
            self._spill()

    def commit(self, run: str, solver: str, *, checkpoint: dict[str, np.ndarray], checkpoint_attrs: dict) -> None:
        """Make every row appended so far durable, with `checkpoint`, the resumable state at
        the last of them: the rows are written and flushed first, then the state goes to the
        slot that is not the committed one, then the commit record (see docs)."""
        s = self._solver(run, solver)
        arrays = {k: np.ascontiguousarray(v) for k, v in checkpoint.items()}
        blob = dumps(checkpoint_attrs).encode()
        if not checkpoint_fits(s.layout, arrays, len(blob)):
            self._rebuild_checkpoint(run, solver, s, arrays, len(blob))
        # Room for the rows, checked before anything is written: a full disk leaves the
        # file as its last commit left it. (Not at `append`: a run stopped by a full disk
        # in the middle of its rows would commit them with the state before them.)
        _ensure_room(self.path, s.pending_bytes)
        with self.commits():
            f = self._open_commit()
            g = f[f"runs/{run}/{solver}"]
            self._write_pending(g, s)
            f.flush()
            self._pause_for_tests()
            slots = dict(g["checkpoint"].items())
            slot = 1 - committed_slot(slots)
            write_slot(slots, slot, arrays, blob)
            f.flush()
            write_commit(slots, slot, s.written, len(blob))
            f.flush()
            self._pause_for_tests()

    def _pause_for_tests(self) -> None:
        if self._pause:
            import time

            time.sleep(self._pause)

    def _pending_bytes(self) -> int:
        return sum(s.pending_bytes for s in self._solvers.values())

    def _write_pending(self, g: h5py.Group, s: _Solver) -> None:
        """Write the solver's pending rows after those in the file, a block per series
        (resized explicitly, so rows written and never committed are overwritten)."""
        if not s.pending:
            return
        n, k = s.written, len(s.pending)
        blocks = {"t": np.array([p[0] for p in s.pending], dtype=np.float64)}
        if s.discrete:
            blocks["step"] = np.array([p[1] for p in s.pending], dtype=np.int64)
        if s.counts:
            blocks["counts"] = np.stack([p[3] for p in s.pending])
        for name in s.spec:
            blocks[name] = np.stack([p[2][name] for p in s.pending])
        for name, block in blocks.items():
            ds = g[name]
            ds.id.set_extent((n + k, *ds.shape[1:]))
            write_rows(ds, n, block)
        s.written, s.pending, s.pending_bytes = n + k, [], 0

    def _spill(self) -> None:
        """Write every solver's pending rows without a commit (bounded memory)."""
        _ensure_room(self.path, self._pending_bytes())
        with self.commits():
            f = self._open_commit()
            for (run, solver), s in self._solvers.items():
                if s.pending:
                    self._write_pending(f[f"runs/{run}/{solver}"], s)
            f.flush()

    def _solver(self, run: str, solver: str) -> _Solver:
        s = self._solvers.get((run, solver))
        if s is None:
            with self._reading() as f:
                g = self._group(f, f"runs/{run}/{solver}", self.path)
                cp = g.get("checkpoint")
                s = _Solver(series_spec(g), attr(SOLVER, "discrete").read(g.attrs), count_columns(g),
                            n_committed(g), checkpoint_layout(cp))
            self._solvers[(run, solver)] = s
        return s

    def _validate_values(self, key: str, spec: dict, values: dict) -> dict:
        """Check names/shapes before keeping anything; return rows copied to their dtype."""
        if set(values) != set(spec):
            raise ArchiveError(f"{self.path}: {key}: append values {sorted(values)} do "
                               f"not match the series {sorted(spec)}")
        rows = {}
        for name, (shape, dtype, _) in spec.items():
            row = np.array(values[name], dtype=dtype)   # a copy: kept until the next write
            if row.shape != tuple(shape):
                raise ArchiveError(f"{self.path}: {key}/{name}: row shape {row.shape} "
                                   f"!= declared {tuple(shape)}")
            rows[name] = row
        return rows

    def _rebuild_checkpoint(self, run: str, solver: str, s: _Solver, arrays: dict, nbytes: int) -> None:
        """Create (or reshape) the checkpoint group, keeping the committed slot intact."""
        old = self.read_checkpoint(run, solver)
        n = self.n_checkpoints(run, solver)
        with self._structure(2 * sum(a.nbytes for a in arrays.values()) + 2 * max(nbytes, ATTRS_CAPACITY)) as f:
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
            s.layout = checkpoint_layout(cp)

    # ---- queries ------------------------------------------------------------------

    def n_checkpoints(self, run: str, solver: str) -> int:
        """Committed checkpoint rows of the solver (0 when none)."""
        with self._reading() as f:
            return n_committed(self._group(f, f"runs/{run}/{solver}", self.path))

    def read_checkpoint(self, run: str, solver: str) -> tuple[dict[str, np.ndarray], dict] | None:
        """The committed checkpoint (arrays, attrs) or None."""
        with self._reading() as f:
            return read_checkpoint(self._group(f, f"runs/{run}/{solver}", self.path))

    def solver_stats(self, run: str, solver: str) -> dict:
        """The statistics its last `set_status` recorded ({} before any): a solver that
        ended keeps what its checkpoint lacks (`observe_time`, measured at its end)."""
        with self._reading() as f:
            return attr(SOLVER, "stats").read(self._group(f, f"runs/{run}/{solver}", self.path).attrs)

    def write_analysis(self, run: str, solver: str, name: str, arrays: dict[str, np.ndarray],
                       attrs: dict | None = None) -> None:
        """Store (or replace) the result ``<solver>/analysis/<name>`` (a structure change).

        Written under a temporary name and then moved into place, so a kill leaves the
        previous result or the new one, never a half-written one (readers skip ``_tmp-*``)."""
        with self._structure(sum(np.asarray(v).nbytes for v in arrays.values())) as f:
            g = self._group(f, f"runs/{run}/{solver}", self.path).require_group("analysis")
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
        with self._reading() as f:
            return tuple(read_attrs(f.attrs, FILE)["t_end_history"])

    def extend_horizon(self, resolved: dict) -> None:
        """The archive continues to `resolved`'s later run.t_end (its only difference from
        the stored scenario): the old t_end joins the horizons, the stored scenario and
        each run's parameters take the new one, and every solver is `running` again until
        the driver ends it (a crash meanwhile then reads as interrupted)."""
        old = self.resolved["run"]["t_end"]
        with self._structure() as f:
            history = read_attrs(f.attrs, FILE)["t_end_history"]
            write_attrs(f, FILE, {"t_end_history": [*history, old], "scenario_resolved": resolved})
            for g in f["runs"].values():   # a run whose run table is the scenario's has it already
                params = read_attrs(g.attrs, RUN)["params"]
                if "run" in params:
                    params["run"]["t_end"] = resolved["run"]["t_end"]
                    write_attrs(g, RUN, {"params": params})
            for solver in iter_solvers(f):
                write_attrs(solver, SOLVER, {"status": "running"})
        self.resolved = dict(resolved)

    def set_status(self, run: str, solver: str, *, status: str, stats: dict, message: str = "",
                   status_time: float | None = None, **stat_attrs: float) -> None:
        """Record the solver's end: its status and every attribute that changes as it runs
        (`flowsim.archive.format.ATTRS`); one mirroring a statistic (wall_time) is given in
        `stat_attrs` or taken from `stats` (an attribute rewrite: a structure change)."""
        if status not in STATUS_NAMES:
            raise ArchiveError(f"{self.path}: unknown status {status!r} "
                               f"(expected one of {', '.join(STATUS_NAMES)})")
        values = {"status": status, "stats": stats, "message": message,
                  "status_time": float("nan") if status_time is None else status_time}
        values |= {a.name: stats.get(a.name, a.running) for a in attrs_of(SOLVER) if a.stat} | stat_attrs
        with self._structure() as f:
            write_attrs(self._group(f, f"runs/{run}/{solver}", self.path), SOLVER, values)

    # ---- closing ------------------------------------------------------------------

    def close(self) -> None:
        """Drop rows never committed (in memory or written out early), mirror commits into
        advisory attrs, close the file cleanly, release the lock."""
        if self._lock.fd is None:
            return
        try:
            self._close_file(failing=True)
            self._solvers = {}
            try:
                with h5py.File(self.path, "r+", libver="latest", locking=False) as f:
                    truncate_to_commits(f)    # rows written out after the last commit
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
