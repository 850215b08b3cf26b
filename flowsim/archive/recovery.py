"""Reading an archive whatever its writer left, and repairing it for resume() (writer.py,
point 5).

``open_h5_readonly`` never modifies the file: it copes with a live writer, one killed
inside a commit (SWMR) or a structure change (plain write mode; superblock flags,
superblock.py) and one whose last writes failed (a short file). ``rebuild`` (for
``resume()`` only: reading commands never change a file's bytes) copies every committed
row and checkpoint into a fresh file and replaces the old one with it, so writing never
continues on top of possibly half-flushed metadata."""

from __future__ import annotations

import contextlib
import io
import os
import time
import warnings

import h5py

from .checkpoint import (ATTRS_CAPACITY, build_checkpoint, n_committed, read_checkpoint, write_commit,
                         write_slot)
from .errors import ArchiveError, NoSuchArchive
from .format import (HDF5_SIGNATURE, SOLVER, attr, build_solver, count_columns, dumps, is_solver, iter_solvers,
                     read_arrays, row_datasets, running_values, series_spec, write_arrays)
from .lock import writer_pid
from .superblock import FlagClearedFile, stored_eof, superblock_cleared
from .swmr import open_swmr_read

_SHORT_TAIL_MAX = 64 << 20   # a short file missing more than this is a truncated copy
_FLAG_RETRY_S = 1.0           # how long open() waits for a live writer's structure change


# --------------------------------------------------------------------------------------
# Reading, never modifying
# --------------------------------------------------------------------------------------

def check_signature(path: str) -> bytes:
    """Read the first bytes; raise a clear ArchiveError unless it looks like HDF5."""
    allowed = "allowed: an archive written by `flowsim run` or `flowsim.simulate` (runs/<name>.h5)"
    if not os.path.exists(path):
        raise NoSuchArchive(path, allowed)
    if os.path.isdir(path):
        raise ArchiveError(f"{path}: is a directory, not an archive; {allowed}")
    try:
        with io.open(path, "rb") as fh:
            head = fh.read(48)
    except OSError as exc:
        raise ArchiveError(f"{path}: cannot be read ({exc.strerror or exc}); {allowed}") from None
    if not head:
        raise ArchiveError(f"{path}: is empty, not an archive; {allowed}")
    if head[:8] != HDF5_SIGNATURE:
        what = "a scenario file (TOML)" if _is_toml(path) else "not an HDF5 file"
        hint = f"; to simulate it: `flowsim run {path}`" if what.startswith("a scenario") else ""
        raise ArchiveError(f"{path}: is {what}, not a flowsim archive{hint}; {allowed}")
    return head


def check_replaceable(path: str | os.PathLike, replace: str = "--overwrite", resume: str = "--resume") -> None:
    """Raise an ArchiveError unless writing an archive at `path` would replace nothing but an
    archive: `--overwrite` is for archives, never for a folder, a scenario or a data file
    that an `-o` mistyped names. `replace` and `resume` name the caller's options."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ArchiveError(f"{path}: is a folder; allowed: an archive file path such as "
                           f"{os.path.join(path, 'run.h5')}")
    if not os.path.exists(path):
        return
    with io.open(path, "rb") as fh:
        head = fh.read(8)
    if head and head != HDF5_SIGNATURE:
        what = "a scenario file (TOML)" if _is_toml(path) else "not an HDF5 file"
        raise ArchiveError(f"{path}: exists and is {what}, not an archive: it is not replaced; allowed: a new "
                           f"path, or an existing archive to continue ({resume}) or replace ({replace})")


def _is_toml(path: str) -> bool:
    import tomllib

    try:
        with io.open(path, "rb") as fh:
            return bool(tomllib.load(fh))
    except (OSError, ValueError):
        return False


def _plain_read(path: str) -> h5py.File:
    """`h5py.File(path, "r")` as the process's other readers hold it. HDF5 shares one open
    file among all the opens of a process and refuses one whose file-locking flag differs
    from the first ("file locking flag values don't match"): h5py, xarray and h5netcdf open
    with HDF5's default, so that comes first, leaving a user's own later open of the same
    file possible; without locking where the file is already open so (our own writer, a
    user's `locking=False`) or its file system has no locks."""
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        if "lock" not in str(exc).lower():
            raise
    return h5py.File(path, "r", locking=False)


def explain(path: str, exc: Exception) -> ArchiveError:
    """Turn an h5py open failure into a readable ArchiveError."""
    msg = str(exc)
    if "truncated file" in msg:
        return ArchiveError(f"{path}: truncated HDF5 file (incomplete copy?): {msg}")
    if "already open for read-only" in msg:   # HDF5 lets one process hold a file one way
        return ArchiveError(f"{path}: is open for reading in this process (an Archive from flowsim.open "
                            "or flowsim.simulate); close it (archive.close()) before writing to it")
    if "locking flag values don't match" in msg:
        return ArchiveError(f"{path}: is open in this process with other HDF5 file-locking flags (an "
                            "h5py.File or xarray dataset opened otherwise); close that handle (f.close(), "
                            "ds.close()) and open the archive again")
    return ArchiveError(f"{path}: cannot be opened as an HDF5 archive: {msg}")


def open_h5_readonly(path: str) -> h5py.File:
    """Open ``path`` read-only, coping with live and killed writers; never modifies it.

    Order: a plain read (a closed file, also between a live writer's commits -- unless a
    writer is live, whose next commit would change the file under a plain reader's cached
    metadata); an SWMR read (a live writer, one killed inside a commit); if the flags say
    "open for plain write", wait briefly (a live writer's structure change takes
    milliseconds), then read through the flag-clearing file object.
    """
    check_signature(path)
    # A plain open first: for a cleanly closed file it also checks the end-of-file
    # address (SWMR read skips that check, so it would accept a truncated copy). This
    # process's own lock is a resume's: it reads the file before writing any of it.
    if writer_pid(path) in (None, os.getpid()):
        try:
            return _plain_read(path)
        except OSError as exc:
            if "truncated file" in str(exc):
                return _open_short(path, exc)
            if "already open for write" not in str(exc):
                raise explain(path, exc) from exc
            if _grown_past_eof(path):      # no live writer: a killed one
                return _open_flag_cleared(path, exc, grown=True)
    deadline = time.monotonic() + _FLAG_RETRY_S
    while True:
        try:
            return open_swmr_read(path)
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
                    return _plain_read(path)
                except OSError as exc2:
                    raise explain(path, exc2) from exc2
            raise explain(path, exc) from exc


def _open_short(path: str, cause: Exception) -> h5py.File:
    """Read a file shorter than its superblock says: a writer whose last writes failed
    (disk full, file-size limit). Refused (as truncated) unless it is one of ours and the
    missing tail is small, i.e. only the failed writes are missing."""
    with io.open(path, "rb") as fh:
        head = fh.read(48)
        real = fh.seek(0, io.SEEK_END)
    eof = stored_eof(head)
    # Only a file whose writer never closed it (status flags still set) is read this way: a
    # short copy of a closed file is truncated, and its missing tail may hold committed rows.
    if eof is None or eof <= real or eof - real > _SHORT_TAIL_MAX or head[11] == 0:
        raise explain(path, cause)
    fobj = FlagClearedFile(path, superblock_cleared(head) or head, size=eof)
    try:
        f = h5py.File(fobj, "r", locking=False)
    except OSError as exc:
        fobj.close()
        raise explain(path, exc) from exc
    if "flowsim_version" not in f.attrs:
        f.close()
        raise explain(path, cause)
    warnings.warn(f"{path}: the last {eof - real} bytes were never written (disk full or a file-size "
                  "limit?); reading the checkpoints committed before that")
    return f


def _grown_past_eof(path: str) -> bool:
    """A killed writer's file (flags set) longer than the end-of-file address its superblock
    records: the writer was killed inside a commit after HDF5 had written metadata past that
    address but before the superblock recording it (measured: 1 kill in 25 of
    test_sigkill_many; an SWMR read then opens the file but fails reading it with "len not
    positive after adjustment for EOA")."""
    with io.open(path, "rb") as fh:
        head = fh.read(48)
        real = fh.seek(0, io.SEEK_END)
    eof = stored_eof(head)
    return head[11:12] not in (b"", b"\0") and eof is not None and real > eof


def _open_flag_cleared(path: str, cause: Exception, grown: bool = False) -> h5py.File:
    """Read a file whose superblock says "open for write" (writer killed in plain mode, or
    `grown` past its recorded end of file: presented with that end raised to its size)."""
    with io.open(path, "rb") as fh:
        head = fh.read(48)
        patched = superblock_cleared(head, eof=fh.seek(0, io.SEEK_END) if grown else None)
    if patched is None:
        raise explain(path, cause)
    fobj = FlagClearedFile(path, patched)
    try:
        return h5py.File(fobj, "r", locking=False)
    except OSError as exc:
        fobj.close()
        raise explain(path, exc) from exc


def require_flowsim(path: str, f: h5py.File) -> None:
    if "flowsim_version" not in f.attrs:
        f.close()
        raise ArchiveError(f"{path}: not a flowsim archive (HDF5 file without a "
                           "flowsim_version attribute)")


# --------------------------------------------------------------------------------------
# Repair for resume()
# --------------------------------------------------------------------------------------

def truncate_to_commits(f: h5py.File) -> None:
    """Drop series rows beyond the committed index (left by a kill mid-append)."""
    for g in iter_solvers(f):
        n = n_committed(g)
        for name in row_datasets(g):
            if name in g and g[name].shape[0] > n:
                g[name].resize(n, axis=0)


def flags_set(path: str) -> bool:
    """Whether the superblock says "open for write" (a live writer, or a killed one)."""
    try:
        with io.open(path, "rb") as fh:
            return superblock_cleared(fh.read(48)) is not None
    except OSError:
        return False


def damaged(path: str, exc: BaseException) -> ArchiveError:
    """The one message for a file whose HDF5 structure cannot be read (a killed writer's
    file that was also cut short, a corrupted copy)."""
    return ArchiveError(f"{path}: damaged: its HDF5 structure cannot be read ({exc}); it cannot be read or "
                        "repaired (a copy cut short, or a killed writer's file truncated afterwards?); allowed: "
                        "a complete archive, or one whose writer was stopped or killed")


@contextlib.contextmanager
def warnings_unless_failed():
    """Warnings of the block given when it ends, and dropped when it raises: opening a short
    file warns, and for a file that then proves damaged the refusal is the one message."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        yield
    for w in said:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def is_read_failure(exc: BaseException) -> bool:
    """Whether h5py failed reading a structure (rather than the OS failing a write, whose
    message carries an errno)."""
    if isinstance(exc, OSError):
        return exc.errno is None and "errno" not in str(exc)
    return isinstance(exc, (RuntimeError, KeyError, ValueError))


def rebuild(path: str) -> None:
    """Copy every committed row/checkpoint of ``path`` into a fresh file, then replace.
    A file that cannot be copied raises ArchiveError and leaves no partial copy."""
    tmp = path + ".rebuild"
    try:
        with warnings_unless_failed():
            _copy_committed(path, tmp)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        if is_read_failure(exc):
            raise damaged(path, exc) from None
        raise
    with io.open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _copy_committed(path: str, tmp: str) -> None:
    src = open_h5_readonly(path)
    try:
        require_flowsim(path, src)
        with h5py.File(tmp, "w", libver="latest", locking=False, track_order=True) as dst:
            for k, v in src.attrs.items():
                dst.attrs[k] = v
            write_arrays(dst.create_group("data", track_order=True),
                         read_arrays(src.get("data")))
            runs = dst.create_group("runs", track_order=True)
            for name, run in src["runs"].items():
                try:
                    _copy_run(run, runs, path)
                except (OSError, KeyError, ValueError) as exc:
                    warnings.warn(f"{path}: run {name!r} unreadable after a crash, dropped: {exc}")
    finally:
        src.close()


def _copy_run(run: h5py.Group, runs: h5py.Group, path: str) -> None:
    g = runs.create_group(run.name.rsplit("/", 1)[-1], track_order=True)
    _copy_attrs(run, g, {}, path)
    for name, child in run.items():
        if name in ("init", "data"):
            write_arrays(g.create_group(name, track_order=True), read_arrays(child))
        elif is_solver(child):
            try:
                _copy_solver(child, g, path)
            except (OSError, KeyError, ValueError) as exc:
                warnings.warn(f"{path}: solver {child.name} unreadable after a crash, "
                              f"dropped: {exc}")
                name = child.name.rsplit("/", 1)[-1]
                if name in g:       # not an empty group that would read as "no rows yet"
                    del g[name]


def _copy_attrs(src: h5py.Group, dst: h5py.Group, defaults: dict, path: str) -> None:
    """Copy every readable attribute; an unreadable one takes its value in `defaults`, or
    is left out (with a warning)."""
    for k in src.attrs:
        try:
            dst.attrs[k] = src.attrs[k]
        except OSError as exc:
            if k in defaults:
                dst.attrs[k] = defaults[k]
            else:
                warnings.warn(f"{path}: attribute {k!r} of {src.name} unreadable after a crash, dropped: {exc}")


def _copy_solver(src: h5py.Group, run: h5py.Group, path: str) -> None:
    spec = series_spec(src)
    discrete = attr(SOLVER, "discrete").read(src.attrs)
    g = run.create_group(src.name.rsplit("/", 1)[-1], track_order=True)
    # A kill while `set_status` rewrote them can leave attributes unreadable: they are
    # reset to a running solver's (its statistics are in the committed checkpoint).
    _copy_attrs(src, g, running_values(encoded=True), path)
    build_solver(g, {k: tuple(v) for k, v in spec.items()}, discrete, path, count_columns(src))
    n = n_committed(src)
    for name in row_datasets(src):
        g[name].resize(n, axis=0)
        for lo in range(0, n, 256):  # blocks: weights series can be large
            hi = min(n, lo + 256)
            g[name][lo:hi] = src[name][lo:hi]
    state = read_checkpoint(src)
    if state is not None:
        blob = dumps(state[1]).encode()
        capacity = max(ATTRS_CAPACITY, src["checkpoint/_attrs_json"].shape[1])
        cp = build_checkpoint(g, state[0], capacity)
        write_slot(cp, n % 2, state[0], blob)
        write_commit(cp, n % 2, n, len(blob))
    if "analysis" in src:
        src.file.copy(src["analysis"], g, name="analysis")
