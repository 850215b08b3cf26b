"""The flowsim archive: one HDF5 file per scenario run (DESIGN.md §5).

This is the only module that touches HDF5; it uses numpy and h5py only (no jax).

Layout
------
Root attrs ``flowsim_version``, ``created``, ``scenario_text``, ``scenario_resolved``
(JSON), ``dtype``, ``provenance`` (JSON, and each str entry as its own attr)::

    /data/                    X_train, y_train, X_test, y_test
    /runs/<run>/              attrs params (JSON), seed, label, point
        data/                 optional per-run dataset
        init/                 named arrays
        <solver>/             attrs preset, status, stats, wall_time, status_time, message,
                              discrete, series_spec (JSON: name -> [shape, dtype, axes])
            t, step, <series> (k, ...) time-indexed, chunked one row per chunk, gzip
            <axis names>      integer dimension scales ("node", "point", ...)
            checkpoint/       the latest resumable state, double-buffered (see below)

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

2. **Commit record, written last.**  The series rows are written and flushed first; then
   the checkpoint state; then (after another flush) a tiny commit record.  Readers trust
   only the commit record: the valid row count is its ``index`` and every series is
   truncated to it, so a kill between steps leaves at most one ignored trailing row.

3. **Double-buffered checkpoint.**  Overwriting the one checkpoint in place is not atomic
   (a large write can be torn at a page boundary by SIGKILL).  ``checkpoint/<name>`` has
   shape ``(2, ...)``: two slots, the new state goes to slot ``index % 2`` (never the
   committed one), and ``checkpoint/_commit[slot] = [index, attrs_len, check]`` commits
   it.  ``check`` is a function of the other two, so a torn commit record is detected and
   the reader falls back to the other (older, intact) slot.  Checkpoint attrs are JSON
   bytes in ``checkpoint/_attrs_json`` (2, capacity), also per slot.  The arrays are
   contiguous and preallocated, so a checkpoint write changes no HDF5 metadata at all.
   After a clean close the convenience attrs ``checkpoint.attrs["index"]`` and
   ``["attrs"]`` mirror the committed slot (advisory; the commit record is the truth).

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
   recomputed, Jenkins lookup3 as HDF5 does).  ``resume()`` of an archive not closed
   cleanly *rebuilds* it: it copies every committed row and checkpoint into a fresh file
   next to it and ``os.replace``-s it over the old one (atomic), so writing never
   continues on top of possibly half-flushed metadata.

Writers are serialised with an ``fcntl.flock`` on ``<path>.lock`` (holding the pid).
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import io
import json
import os
import struct
import time
import warnings
from importlib import metadata as _metadata
from typing import Any, Iterator

import h5py
import numpy as np

__all__ = ["ArchiveError", "ArchiveLocked", "ArchiveWriter", "Archive", "RunView",
           "SolverView", "open", "STATUS_VALUES"]

STATUS_VALUES = ("running", "done", "diverged", "max_steps", "nonfinite", "stopped", "failed")
_RESERVED_ROOT = ("flowsim_version", "created", "scenario_text", "scenario_resolved",
                  "dtype", "provenance")
_RESERVED_SERIES = ("t", "step", "checkpoint")
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_CHUNK_BYTES = 1 << 20        # cap for one chunk of a time-indexed dataset
_ATTRS_CAPACITY = 4096        # initial bytes per slot for checkpoint attrs JSON
_COMMIT_MAGIC = 0x5F1C0DE5A17C4EC5
_SHORT_TAIL_MAX = 64 << 20   # a short file missing more than this is a truncated copy
_FLAG_RETRY_S = 1.0           # how long open() waits for a live writer's structure change


class ArchiveError(Exception):
    """Something is wrong with an archive file; the message names the path."""


class ArchiveLocked(ArchiveError):
    """Another process is writing this archive."""


class ArchiveFull(ArchiveError, OSError):
    """The disk (or the process's file-size limit) has no room for the next write.

    Raised *before* writing, so the file stays as its last commit left it: a write that
    HDF5 starts and cannot finish may leave metadata pointing past the end of the file."""


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


def _version() -> str:
    """The installed flowsim version (without importing the package's jax-using init)."""
    try:
        return _metadata.version("flowsim")
    except _metadata.PackageNotFoundError:  # pragma: no cover - running from a checkout
        return "0+unknown"


def _jsonable(obj: Any) -> Any:
    """json.dumps default: numpy scalars/arrays and other odd values."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, default=_jsonable, sort_keys=False)


def _loads(text: Any) -> Any:
    if isinstance(text, bytes):
        text = text.decode()
    return json.loads(text) if text else {}


def _attr_str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# --------------------------------------------------------------------------------------
# Superblock status flags (h5clear without h5clear)
# --------------------------------------------------------------------------------------

def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & 0xFFFFFFFF


def _lookup3(data: bytes, initval: int = 0) -> int:
    """Bob Jenkins' lookup3 ``hashlittle``, as HDF5's H5_checksum_lookup3 computes it."""
    m = 0xFFFFFFFF
    length = len(data)
    a = b = c = (0xDEADBEEF + length + initval) & m
    k = 0
    while length > 12:
        a = (a + int.from_bytes(data[k:k + 4], "little")) & m
        b = (b + int.from_bytes(data[k + 4:k + 8], "little")) & m
        c = (c + int.from_bytes(data[k + 8:k + 12], "little")) & m
        a = (a - c) & m; a ^= _rot(c, 4); c = (c + b) & m
        b = (b - a) & m; b ^= _rot(a, 6); a = (a + c) & m
        c = (c - b) & m; c ^= _rot(b, 8); b = (b + a) & m
        a = (a - c) & m; a ^= _rot(c, 16); c = (c + b) & m
        b = (b - a) & m; b ^= _rot(a, 19); a = (a + c) & m
        c = (c - b) & m; c ^= _rot(b, 4); b = (b + a) & m
        length -= 12
        k += 12
    if length == 0:
        return c
    tail = data[k:k + length] + b"\0" * (12 - length)
    a = (a + int.from_bytes(tail[0:4], "little")) & m
    b = (b + int.from_bytes(tail[4:8], "little")) & m
    c = (c + int.from_bytes(tail[8:12], "little")) & m
    c ^= b; c = (c - _rot(b, 14)) & m
    a ^= c; a = (a - _rot(c, 11)) & m
    b ^= a; b = (b - _rot(a, 25)) & m
    c ^= b; c = (c - _rot(b, 16)) & m
    a ^= c; a = (a - _rot(c, 4)) & m
    b ^= a; b = (b - _rot(a, 14)) & m
    c ^= b; c = (c - _rot(b, 24)) & m
    return c


def _superblock_cleared(head: bytes) -> bytes | None:
    """Return the v2/v3 superblock in ``head`` with status flags cleared, or None.

    Layout (8-byte offsets): signature 8, version 1, sizes 2, flags 1, four addresses
    32, checksum 4 = 48 bytes.  Only that case is handled (it is what we write).
    """
    if len(head) < 48 or head[:8] != _HDF5_SIGNATURE or head[8] not in (2, 3):
        return None
    if head[9] != 8 or head[11] == 0:
        return None
    body = head[:11] + b"\0" + head[12:44]
    return body + struct.pack("<I", _lookup3(body))


class _FlagClearedFile(io.RawIOBase):
    """Read-only file object presenting ``path`` with the superblock flags cleared.

    Lets h5py read an archive left by a writer killed in plain (non-SWMR) write mode
    without modifying the file on disk.
    """

    def __init__(self, path: str, patched_head: bytes, size: int | None = None):
        super().__init__()
        self._fh = io.open(path, "rb")
        self._head = patched_head
        self._pos = 0
        # A file whose last writes failed (disk full, file-size limit) can be shorter than
        # the end-of-file address its superblock records; it is presented zero-padded to
        # that size (the committed rows all lie before the failed writes).
        self._size = size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == io.SEEK_END and self._size is not None:
            self._pos = max(self._size, self._fh.seek(0, io.SEEK_END)) + offset
            return self._pos
        self._pos = self._fh.seek(offset, whence)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, buf) -> int:
        self._fh.seek(self._pos)
        n = self._fh.readinto(buf)
        view = memoryview(buf)
        if self._pos < len(self._head) and n:
            end = min(len(self._head), self._pos + n)
            view[: end - self._pos] = self._head[self._pos:end]
        self._pos += n
        return n

    def close(self) -> None:
        self._fh.close()
        super().close()


# --------------------------------------------------------------------------------------
# Opening files
# --------------------------------------------------------------------------------------

def _check_signature(path: str) -> bytes:
    """Read the first bytes; raise a clear ArchiveError unless it looks like HDF5."""
    if not os.path.exists(path):
        raise ArchiveError(f"{path}: no such archive")
    if os.path.isdir(path):
        raise ArchiveError(f"{path}: is a directory, not an archive")
    try:
        with io.open(path, "rb") as fh:
            head = fh.read(48)
    except OSError as exc:
        raise ArchiveError(f"{path}: cannot be read ({exc})") from exc
    if head[:8] != _HDF5_SIGNATURE:
        raise ArchiveError(f"{path}: not an HDF5 file (not a flowsim archive)")
    return head


def _explain(path: str, exc: Exception) -> ArchiveError:
    """Turn an h5py open failure into a readable ArchiveError."""
    msg = str(exc)
    if "truncated file" in msg:
        return ArchiveError(f"{path}: truncated HDF5 file (incomplete copy?): {msg}")
    return ArchiveError(f"{path}: cannot be opened as an HDF5 archive: {msg}")


def _open_h5_readonly(path: str) -> h5py.File:
    """Open ``path`` read-only, coping with live and killed writers; never modifies it.

    Order: plain read (clean files); SWMR read (writers live/killed in SWMR mode); if
    the flags say "open for plain write", wait briefly (a live writer's structure
    change takes milliseconds), then read through the flag-clearing file object.
    """
    _check_signature(path)
    # A plain open first: for a cleanly closed file it also checks the end-of-file
    # address (SWMR read skips that check, so it would accept a truncated copy).
    try:
        return h5py.File(path, "r", locking=False)
    except OSError as exc:
        if "truncated file" in str(exc):
            return _open_short(path, exc)
        if "already open for write" not in str(exc):
            raise _explain(path, exc) from exc
    deadline = time.monotonic() + _FLAG_RETRY_S
    while True:
        try:
            return h5py.File(path, "r", swmr=True, locking=False)
        except OSError as exc:
            msg = str(exc)
            if "not already open for SWMR" in msg or "already open for write" in msg:
                if time.monotonic() < deadline:
                    time.sleep(0.02)
                    continue
                return _open_flag_cleared(path, exc)
            if "SWMR" in msg or "superblock" in msg.lower():
                # e.g. an older-format file SWMR cannot read: try a plain open.
                try:
                    return h5py.File(path, "r", locking=False)
                except OSError as exc2:
                    raise _explain(path, exc2) from exc2
            raise _explain(path, exc) from exc


def _stored_eof(head: bytes) -> int | None:
    """The end-of-file address a v2/v3 superblock records (8-byte offsets), or None."""
    if len(head) < 48 or head[:8] != _HDF5_SIGNATURE or head[8] not in (2, 3) or head[9] != 8:
        return None
    return struct.unpack("<Q", head[28:36])[0]


def _open_short(path: str, cause: Exception) -> h5py.File:
    """Read a file shorter than its superblock says: a writer whose last writes failed
    (disk full, file-size limit). Refused (as truncated) unless it is one of ours and the
    missing tail is small, i.e. only the failed writes are missing."""
    with io.open(path, "rb") as fh:
        head = fh.read(48)
        real = fh.seek(0, io.SEEK_END)
    eof = _stored_eof(head)
    # Only a file whose writer never closed it (status flags still set) is read this way: a
    # short copy of a closed file is truncated, and its missing tail may hold committed rows.
    if eof is None or eof <= real or eof - real > _SHORT_TAIL_MAX or head[11] == 0:
        raise _explain(path, cause)
    fobj = _FlagClearedFile(path, _superblock_cleared(head) or head, size=eof)
    try:
        f = h5py.File(fobj, "r", locking=False)
    except OSError as exc:
        fobj.close()
        raise _explain(path, exc) from exc
    if "flowsim_version" not in f.attrs:
        f.close()
        raise _explain(path, cause)
    warnings.warn(f"{path}: the last {eof - real} bytes were never written (disk full or a file-size "
                  "limit?); reading the checkpoints committed before that")
    return f


def _open_flag_cleared(path: str, cause: Exception) -> h5py.File:
    """Read a file whose superblock says "open for write" (writer killed in plain mode)."""
    with io.open(path, "rb") as fh:
        patched = _superblock_cleared(fh.read(48))
    if patched is None:
        raise _explain(path, cause)
    fobj = _FlagClearedFile(path, patched)
    try:
        return h5py.File(fobj, "r", locking=False)
    except OSError as exc:
        fobj.close()
        raise _explain(path, exc) from exc


def _require_flowsim(path: str, f: h5py.File) -> None:
    if "flowsim_version" not in f.attrs:
        f.close()
        raise ArchiveError(f"{path}: not a flowsim archive (HDF5 file without a "
                           "flowsim_version attribute)")


# --------------------------------------------------------------------------------------
# Locking
# --------------------------------------------------------------------------------------

class _Lock:
    """Exclusive flock on ``<path>.lock`` for the writer's lifetime (pid inside)."""

    def __init__(self, path: str):
        self.lock_path = path + ".lock"
        self.fd: int | None = None
        for _ in range(10):
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = os.read(fd, 64).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise ArchiveLocked(f"{path} is being written by another flowsim "
                                    f"process (pid {pid})") from None
            # The previous holder may have unlinked the lock file between our open and
            # flock; then our lock is on a dead inode -- retry on the current one.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.lock_path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
                self.fd = fd
                return
            os.close(fd)
        raise ArchiveLocked(f"{path}: could not take the lock {self.lock_path}")

    def release(self) -> None:
        """Unlink while still holding the lock, then unlock (see the inode check)."""
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.lock_path)
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = None


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


def _write_arrays(g: h5py.Group, arrays: dict[str, Any]) -> None:
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


def _read_arrays(g: h5py.Group | None) -> dict[str, np.ndarray]:
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


def _build_solver(g: h5py.Group, series: dict, discrete: bool, path: str) -> None:
    """Create t (+step), every series, and attach dimension scales."""
    t = g.create_dataset("t", shape=(0,), maxshape=(None,), dtype=np.float64,
                         chunks=(1,), compression="gzip", compression_opts=4, shuffle=True)
    t.make_scale("t")
    if discrete:
        step = _create_timeseries(g, "step", (), "int64")
        step.dims[0].attach_scale(t)
    for name, (shape, dtype, axes) in series.items():
        if name in _RESERVED_SERIES or name in {a for _, _, ax in series.values() for a in ax}:
            raise ArchiveError(f"{path}: series name {name!r} is reserved or an axis name")
        if len(axes) != len(shape):
            raise ArchiveError(f"{path}: series {name!r} has shape {shape} but axes {axes}")
        ds = _create_timeseries(g, name, tuple(shape), dtype)
        ds.dims[0].attach_scale(t)
        for i, (axis, size) in enumerate(zip(axes, shape), start=1):
            if axis in _RESERVED_SERIES:
                raise ArchiveError(f"{path}: axis name {axis!r} is reserved")
            ds.dims[i].attach_scale(_axis_scale(g, axis, size, path))


def _commit_check(index: int, attrs_len: int) -> int:
    return ((index * 1_000_003 + attrs_len) ^ _COMMIT_MAGIC) & 0x7FFFFFFFFFFFFFFF


def _committed_slot(cp: h5py.Group | None) -> tuple[int, int, int] | None:
    """(slot, index, attrs_len) of the newest intact commit record, or None."""
    if cp is None or "_commit" not in cp:
        return None
    rec = cp["_commit"][()]
    best = None
    for slot in (0, 1):
        index, alen, check = (int(x) for x in rec[slot])
        if index > 0 and check == _commit_check(index, alen) and index % 2 == slot:
            if best is None or index > best[1]:
                best = (slot, index, alen)
    return best


def _build_checkpoint(g: h5py.Group, arrays: dict[str, np.ndarray], capacity: int) -> h5py.Group:
    """(Re)create the double-buffered checkpoint group, preallocated (contiguous)."""
    if "checkpoint" in g:
        del g["checkpoint"]
    cp = g.create_group("checkpoint")
    for name, arr in arrays.items():
        # Writing zeros now allocates the contiguous storage, so later SWMR writes are
        # pure in-place raw-data writes with no metadata change.
        cp.create_dataset(name, data=np.zeros((2, *arr.shape), dtype=arr.dtype))
    cp.create_dataset("_attrs_json", data=np.zeros((2, capacity), dtype=np.uint8))
    cp.create_dataset("_commit", data=np.zeros((2, 3), dtype=np.int64))
    cp.attrs["layout"] = ("double-buffered: arrays are (2, ...) slots; the valid slot and "
                          "row count are in _commit[slot] = [index, attrs_len, check]")
    cp.attrs["index"] = 0
    cp.attrs["attrs"] = "{}"
    return cp


def _checkpoint_fits(cp: h5py.Group | None, arrays: dict[str, np.ndarray], nbytes: int) -> bool:
    if cp is None or "_commit" not in cp:
        return False
    names = {k for k in cp if not k.startswith("_")}
    if names != set(arrays):
        return False
    for name, arr in arrays.items():
        ds = cp[name]
        if ds.shape[1:] != arr.shape or ds.dtype != arr.dtype:
            return False
    return cp["_attrs_json"].shape[1] >= nbytes


def _write_slot(cp: h5py.Group, slot: int, arrays: dict[str, np.ndarray], blob: bytes) -> None:
    for name, arr in arrays.items():
        cp[name][slot] = arr
    if blob:
        cp["_attrs_json"][slot, : len(blob)] = np.frombuffer(blob, dtype=np.uint8)


def _write_commit(cp: h5py.Group, slot: int, index: int, attrs_len: int) -> None:
    cp["_commit"][slot] = np.array([index, attrs_len, _commit_check(index, attrs_len)],
                                   dtype=np.int64)


def _read_checkpoint(g: h5py.Group) -> tuple[dict[str, np.ndarray], dict] | None:
    cp = g.get("checkpoint")
    found = _committed_slot(cp)
    if found is None:
        return None
    slot, _, alen = found
    arrays = {k: v[slot] for k, v in cp.items() if not k.startswith("_")}
    blob = cp["_attrs_json"][slot, :alen].tobytes()
    return arrays, _loads(blob)


def _n_committed(g: h5py.Group) -> int:
    found = _committed_slot(g.get("checkpoint"))
    return 0 if found is None else found[1]


def _series_spec(g: h5py.Group) -> dict:
    return _loads(g.attrs.get("series_spec", "{}"))


# --------------------------------------------------------------------------------------
# Writer
# --------------------------------------------------------------------------------------

class ArchiveWriter:
    """The single writer of an archive (see the module docstring for crash safety)."""

    def __init__(self, path: str, lock: _Lock):
        # Use create() or resume().
        self.path = path
        self._lock = lock
        self._f: h5py.File | None = None
        self._swmr = False
        self._pending = 0          # bytes the next structure change will add (room check)
        self.scenario_text = ""
        self.resolved: dict = {}

    # ---- construction -------------------------------------------------------------

    @classmethod
    def create(cls, path, *, scenario_text: str, resolved: dict, provenance: dict,
               dtype: str, overwrite: bool = False) -> "ArchiveWriter":
        """Create a new archive at ``path`` (refusing an existing one unless overwrite)."""
        path = os.fspath(path)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        lock = _Lock(path)
        try:
            if os.path.exists(path):
                if not overwrite:
                    raise ArchiveError(f"{path} already exists: use --overwrite to replace "
                                       "it or --resume to continue it")
                os.remove(path)
            self = cls(path, lock)
            f = h5py.File(path, "w", libver="latest", locking=False, track_order=True)
            try:
                _write_root_attrs(f, scenario_text, resolved, provenance, dtype)
                f.create_group("data", track_order=True)
                f.create_group("runs", track_order=True)
            finally:
                f.close()
        except BaseException:
            lock.release()
            raise
        self.scenario_text, self.resolved = scenario_text, dict(resolved)
        self._open_swmr()
        return self

    @classmethod
    def resume(cls, path) -> "ArchiveWriter":
        """Open an existing archive for appending, repairing it if its writer was killed."""
        path = os.fspath(path)
        lock = _Lock(path)
        try:
            _check_signature(path)
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
                raise _explain(self.path, exc) from exc
            _rebuild(self.path)
            f = h5py.File(self.path, "r+", libver="latest", locking=False)
        try:
            _require_flowsim(self.path, f)
            self.scenario_text = _attr_str(f.attrs.get("scenario_text", ""))
            self.resolved = _loads(f.attrs.get("scenario_resolved", "{}"))
            _truncate_to_commits(f)
        finally:
            if f.id.valid:
                f.close()
        self._open_swmr()

    # ---- file modes ---------------------------------------------------------------

    def _open_swmr(self) -> None:
        self._f = h5py.File(self.path, "r+", libver="latest", locking=False)
        self._f.swmr_mode = True
        self._swmr = True

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
            _write_arrays(f.require_group(where), arrays)

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
            g.attrs["params"] = _dumps(params)
            g.attrs["seed"] = int(seed)
            g.attrs["label"] = str(label)
            g.attrs["point"] = int(point)
            _write_arrays(g.create_group("init", track_order=True), init)

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
                _init_solver_attrs(g, preset, spec, discrete)
                _build_solver(g, {k: tuple(v) for k, v in spec.items()}, discrete, self.path)
            except BaseException:
                del f[f"runs/{run}"][solver]
                raise

    # ---- appending ----------------------------------------------------------------

    def append(self, run: str, solver: str, *, t: float, step: int | None,
               values: dict[str, np.ndarray], checkpoint: dict[str, np.ndarray],
               checkpoint_attrs: dict) -> None:
        """Append one checkpoint row, then the checkpoint state, then commit (see docs)."""
        g = self._solver_group(run, solver)
        spec = _series_spec(g)
        rows = self._validate_values(g, spec, values)
        n = _n_committed(g)
        arrays = {k: np.ascontiguousarray(v) for k, v in checkpoint.items()}
        growth = sum(r.nbytes for r in rows.values()) + 16
        if not _checkpoint_fits(g.get("checkpoint"), arrays, 0):
            growth += 2 * sum(a.nbytes for a in arrays.values()) + 2 * _ATTRS_CAPACITY
        _ensure_room(self.path, growth)
        blob = _dumps(checkpoint_attrs).encode()
        discrete = bool(g.attrs.get("discrete", False))
        if discrete and step is None:
            raise ArchiveError(f"{self.path}: {g.name} is discrete: append needs step")
        # 1. series rows (row n); resize to n+1 explicitly so a failed earlier append
        #    cannot shift rows.
        _append_row(g["t"], n, np.float64(t))
        if discrete:
            _append_row(g["step"], n, np.int64(step))
        for name, row in rows.items():
            _append_row(g[name], n, row)
        self._f.flush()
        # 2. checkpoint into the slot that is not the committed one.
        slot = (n + 1) % 2
        if not _checkpoint_fits(g.get("checkpoint"), arrays, len(blob)):
            self._rebuild_checkpoint(run, solver, arrays, len(blob))
            g = self._solver_group(run, solver)
        cp = g["checkpoint"]
        _write_slot(cp, slot, arrays, blob)
        self._f.flush()
        # 3. commit record, last.
        _write_commit(cp, slot, n + 1, len(blob))
        self._f.flush()

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
            capacity = _ATTRS_CAPACITY
            while capacity < nbytes:
                capacity *= 2
            cp = _build_checkpoint(g, arrays, capacity)
            if old is not None and set(old[0]) == set(arrays) and all(
                    old[0][k].shape == arrays[k].shape and old[0][k].dtype == arrays[k].dtype
                    for k in arrays):
                blob = _dumps(old[1]).encode()
                if len(blob) <= capacity:
                    _write_slot(cp, n % 2, old[0], blob)
                    _write_commit(cp, n % 2, n, len(blob))

    # ---- queries ------------------------------------------------------------------

    def n_checkpoints(self, run: str, solver: str) -> int:
        """Committed checkpoint rows of the solver (0 when none)."""
        return _n_committed(self._solver_group(run, solver))

    def read_checkpoint(self, run: str, solver: str) -> tuple[dict[str, np.ndarray], dict] | None:
        """The committed checkpoint (arrays, attrs) or None."""
        return _read_checkpoint(self._solver_group(run, solver))

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
            _write_arrays(t, arrays)
            for k, v in (attrs or {}).items():
                t.attrs[k] = v
            if name in g:
                del g[name]
            g.move(tmp, name)

    def set_status(self, run: str, solver: str, *, status: str, stats: dict,
                   wall_time: float, message: str = "", status_time: float | None = None) -> None:
        """Record the solver's status (attribute rewrite: done outside SWMR)."""
        if status not in STATUS_VALUES:
            raise ArchiveError(f"{self.path}: unknown status {status!r} "
                               f"(expected one of {', '.join(STATUS_VALUES)})")
        self._solver_group(run, solver)
        with self._structure() as f:
            g = f[f"runs/{run}/{solver}"]
            g.attrs["status"] = status
            g.attrs["stats"] = _dumps(stats)
            g.attrs["wall_time"] = float(wall_time)
            g.attrs["message"] = str(message)
            g.attrs["status_time"] = float("nan") if status_time is None else float(status_time)

    # ---- closing ------------------------------------------------------------------

    def close(self) -> None:
        """Mirror commits into advisory attrs, close the file cleanly, release the lock."""
        if self._lock.fd is None:
            return
        try:
            if self._f is not None and self._f.id.valid:
                self._f.close()
                try:
                    with h5py.File(self.path, "r+", libver="latest", locking=False) as f:
                        _mirror_checkpoint_attrs(f)
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


def _write_root_attrs(f: h5py.File, scenario_text: str, resolved: dict, provenance: dict,
                      dtype: str) -> None:
    f.attrs["flowsim_version"] = _version()
    f.attrs["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    f.attrs["scenario_text"] = str(scenario_text)
    f.attrs["scenario_resolved"] = _dumps(resolved)
    f.attrs["dtype"] = str(dtype)
    f.attrs["provenance"] = _dumps(provenance)
    for key, value in provenance.items():
        if isinstance(value, str) and key not in _RESERVED_ROOT:
            f.attrs[key] = value


def _init_solver_attrs(g: h5py.Group, preset: dict, spec: dict, discrete: bool) -> None:
    g.attrs["preset"] = _dumps(preset)
    g.attrs["status"] = "running"
    g.attrs["stats"] = "{}"
    g.attrs["wall_time"] = 0.0
    g.attrs["status_time"] = float("nan")
    g.attrs["message"] = ""
    g.attrs["discrete"] = bool(discrete)
    g.attrs["series_spec"] = _dumps(spec)


def _append_row(ds: h5py.Dataset, n: int, row: Any) -> None:
    ds.resize(n + 1, axis=0)
    ds[n] = row


def _iter_solvers(f: h5py.File) -> Iterator[h5py.Group]:
    for run in f["runs"].values():
        for name, g in run.items():
            if isinstance(g, h5py.Group) and "series_spec" in g.attrs:
                yield g


def _truncate_to_commits(f: h5py.File) -> None:
    """Drop series rows beyond the committed index (left by a kill mid-append)."""
    for g in _iter_solvers(f):
        n = _n_committed(g)
        for name in ["t", "step", *_series_spec(g)]:
            if name in g and g[name].shape[0] > n:
                g[name].resize(n, axis=0)


def _mirror_checkpoint_attrs(f: h5py.File) -> None:
    """Set the advisory checkpoint attrs ``index`` and ``attrs`` (clean close only)."""
    for g in _iter_solvers(f):
        cp = g.get("checkpoint")
        found = _committed_slot(cp)
        if found is not None:
            cp.attrs["index"] = found[1]
            cp.attrs["attrs"] = cp["_attrs_json"][found[0], : found[2]].tobytes().decode()


# --------------------------------------------------------------------------------------
# Rebuild after a kill
# --------------------------------------------------------------------------------------

def _rebuild(path: str) -> None:
    """Copy every committed row/checkpoint of ``path`` into a fresh file, then replace."""
    tmp = path + ".rebuild"
    src = _open_h5_readonly(path)
    try:
        _require_flowsim(path, src)
        with h5py.File(tmp, "w", libver="latest", locking=False, track_order=True) as dst:
            for k, v in src.attrs.items():
                dst.attrs[k] = v
            _write_arrays(dst.create_group("data", track_order=True),
                          _read_arrays(src.get("data")))
            runs = dst.create_group("runs", track_order=True)
            for name, run in src["runs"].items():
                try:
                    _copy_run(run, runs, path)
                except (OSError, KeyError, ValueError) as exc:
                    warnings.warn(f"{path}: run {name!r} unreadable after a crash, dropped: {exc}")
    finally:
        src.close()
    with io.open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _copy_run(run: h5py.Group, runs: h5py.Group, path: str) -> None:
    g = runs.create_group(run.name.rsplit("/", 1)[-1], track_order=True)
    for k, v in run.attrs.items():
        g.attrs[k] = v
    for name, child in run.items():
        if name in ("init", "data"):
            _write_arrays(g.create_group(name, track_order=True), _read_arrays(child))
        elif isinstance(child, h5py.Group) and "series_spec" in child.attrs:
            try:
                _copy_solver(child, g, path)
            except (OSError, KeyError, ValueError) as exc:
                warnings.warn(f"{path}: solver {child.name} unreadable after a crash, "
                              f"dropped: {exc}")


def _copy_solver(src: h5py.Group, run: h5py.Group, path: str) -> None:
    spec = _series_spec(src)
    discrete = bool(src.attrs.get("discrete", False))
    g = run.create_group(src.name.rsplit("/", 1)[-1], track_order=True)
    for k, v in src.attrs.items():
        g.attrs[k] = v
    _build_solver(g, {k: tuple(v) for k, v in spec.items()}, discrete, path)
    n = _n_committed(src)
    names = ["t", *(["step"] if discrete else []), *spec]
    for name in names:
        g[name].resize(n, axis=0)
        for lo in range(0, n, 256):  # blocks: weights series can be large
            hi = min(n, lo + 256)
            g[name][lo:hi] = src[name][lo:hi]
    state = _read_checkpoint(src)
    if state is not None:
        blob = _dumps(state[1]).encode()
        capacity = max(_ATTRS_CAPACITY, src["checkpoint/_attrs_json"].shape[1])
        cp = _build_checkpoint(g, state[0], capacity)
        _write_slot(cp, n % 2, state[0], blob)
        _write_commit(cp, n % 2, n, len(blob))
    if "analysis" in src:
        src.file.copy(src["analysis"], g, name="analysis")


# --------------------------------------------------------------------------------------
# Reader
# --------------------------------------------------------------------------------------

def open(path) -> "Archive":  # noqa: A001 - re-exported as flowsim.open
    """Open an archive read-only (works while it is written and after a killed writer)."""
    return Archive(path)


class Archive:
    """Read-only view of an archive; a context manager."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._f = _open_h5_readonly(self.path)
        _require_flowsim(self.path, self._f)
        self.attrs = _decode_root_attrs(self._f.attrs)
        self.scenario_text = self.attrs.get("scenario_text", "")

    @property
    def data(self) -> dict[str, np.ndarray]:
        return _read_arrays(self._f.get("data"))

    @property
    def runs(self) -> dict[str, "RunView"]:
        g = self._f.get("runs")
        if g is None:
            return {}
        # h5py yields None for a run a writer is creating this moment (a reader beside a
        # running `flowsim run`): it is not there yet
        return {name: RunView(self, run) for name, run in g.items() if run is not None}

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> "Archive":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<flowsim Archive {self.path!r}>"


def _decode_root_attrs(attrs) -> dict:
    out = {}
    for k, v in attrs.items():
        v = _attr_str(v) if isinstance(v, (bytes, str)) else (v.item() if isinstance(v, np.generic) else v)
        if k in ("scenario_resolved", "provenance"):
            v = _loads(v)
        out[k] = v
    return out


class RunView:
    """One /runs/<run> group."""

    def __init__(self, archive: Archive, g: h5py.Group):
        self._archive, self._g = archive, g
        self.name = g.name.rsplit("/", 1)[-1]
        self.seed = int(g.attrs.get("seed", -1))
        self.label = _attr_str(g.attrs.get("label", ""))
        self.point = int(g.attrs.get("point", -1))
        self.params = _loads(g.attrs.get("params", "{}"))

    @property
    def data(self) -> dict[str, np.ndarray]:
        own = self._g.get("data")
        return _read_arrays(own) if own is not None else self._archive.data

    @property
    def init(self) -> dict[str, np.ndarray]:
        return _read_arrays(self._g.get("init"))

    @property
    def solvers(self) -> dict[str, "SolverView"]:
        return {k: SolverView(v) for k, v in self._g.items()
                if isinstance(v, h5py.Group) and "series_spec" in v.attrs}

    def __repr__(self) -> str:
        return f"<RunView {self.name!r} seed={self.seed} point={self.point}>"


class SolverView:
    """One solver group; every series is truncated to the committed checkpoint count."""

    def __init__(self, g: h5py.Group):
        self._g = g
        self.name = g.name.rsplit("/", 1)[-1]
        self.preset = _loads(g.attrs.get("preset", "{}"))
        self.status = _attr_str(g.attrs.get("status", ""))
        self.stats = _loads(g.attrs.get("stats", "{}"))
        self.wall_time = float(g.attrs.get("wall_time", float("nan")))
        self.status_time = float(g.attrs.get("status_time", float("nan")))
        self.message = _attr_str(g.attrs.get("message", ""))
        self.discrete = bool(g.attrs.get("discrete", False))
        self.n_checkpoints = _n_committed(g)
        self._spec = _series_spec(g)

    @property
    def t(self) -> np.ndarray:
        return self._g["t"][: self.n_checkpoints]

    @property
    def step(self) -> np.ndarray | None:
        return self._g["step"][: self.n_checkpoints] if "step" in self._g else None

    @property
    def series_names(self) -> list[str]:
        return list(self._spec)

    @property
    def checkpoint(self) -> tuple[dict[str, np.ndarray], dict] | None:
        """The committed checkpoint (arrays, attrs) or None."""
        return _read_checkpoint(self._g)

    @property
    def analysis(self) -> dict[str, tuple[dict[str, np.ndarray], dict]]:
        """Stored analyses (name -> (arrays, attrs)), e.g. Caron pruning curves."""
        g = self._g.get("analysis")
        if g is None:
            return {}
        return {k: (_read_arrays(v), {a: _attr_str(x) if isinstance(x, (bytes, str)) else x
                                      for a, x in v.attrs.items()})
                for k, v in g.items() if not k.startswith("_tmp-")}

    def __contains__(self, name: str) -> bool:
        return name in self._spec

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._spec:
            raise KeyError(f"{self._g.file.filename}: {self._g.name} has no series {name!r}")
        return self._g[name][: self.n_checkpoints]

    def __repr__(self) -> str:
        return f"<SolverView {self.name!r} status={self.status} n={self.n_checkpoints}>"
