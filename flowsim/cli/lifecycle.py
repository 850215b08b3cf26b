"""The `flowsim` command's process: its exit codes, how it takes stop requests (SIGTERM,
Ctrl-C), how it loads the engine and leaves, and what it says when the archive's disk fails.
The commands themselves are `flowsim.cli`'s."""

import signal
import sys
from pathlib import Path

from ..engine_env import set_engine_defaults

EXIT_OK, EXIT_INTERNAL, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_NOTHING = 1     # the command found nothing to do (compare: no discrete/flow pair)
EXIT_DIFFERENT = 1   # `diff`: the archives differ (as `diff` and `cmp` say it)


class StopRequest:
    """SIGTERM (a batch scheduler's stop) and Ctrl-C during `flowsim run`: the first one
    stops the driver within a quarter second, abandoning the segment being computed (with
    --distributed: after the checkpoint being computed, on every process); exit 130, the
    archive resumable. A second one stops at once (the archive is crash-safe anyway).
    Nothing is printed inside the handler (a write there can collide with one it interrupted)."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.requested = False
        # Before the archive is opened a stop loses nothing, so the process ends at once
        # (exit 130), also inside a plug-in's import or factory that never returns. It ends
        # rather than raising: an exception raised in the middle of an import or of JAX's
        # tracing can turn into an ImportError or a crash at exit.
        self.at_once = False
        self.children: set[int] = set()    # processes to end with this one (plugins.rehearse)
        self._saved: dict = {}

    def __call__(self) -> bool:
        return self.requested

    def _handle(self, signum, frame):
        if self.at_once:
            import os

            for pid in self.children:
                os.kill(pid, signal.SIGKILL)
            os.write(2, b"flowsim: error: interrupted\n")
            os._exit(EXIT_INTERRUPTED)
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def install(self) -> None:
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:     # a second install keeps the first's saved handlers
                self._saved.setdefault(sig, signal.signal(sig, self._handle))

    def ignore(self) -> None:
        for sig in self.SIGNALS:
            signal.signal(sig, signal.SIG_IGN)

    def restore(self) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)
        self._saved.clear()


_DISK_ERRNOS = {"ENOSPC", "EFBIG", "EDQUOT", "EROFS", "EIO"}


def write_failure(out: Path, err: OSError, resume_cmd: str) -> str | None:
    """The message for an archive write that failed because of the disk (None: not that)."""
    import errno as _errno

    code = _errno.errorcode.get(getattr(err, "errno", None) or 0, "")
    text = str(err)
    import re

    found = re.search(r"errno = (\d+), error message = '([^']*)'", text)
    if found:   # h5py wraps the OS error in HDF5's own words: keep the OS's
        code, text = _errno.errorcode.get(int(found.group(1)), code), f"{found.group(2)} (errno {found.group(1)})"
    disk = code in _DISK_ERRNOS or any(w in text for w in (
        "No space left", "File too large", "Disk quota", "Read-only file system", "file write failed"))
    if not disk:
        return None
    return (f"writing {out} failed: {text.strip() or code}. The disk is full or the file hit a size "
            f"limit. {out} keeps every checkpoint committed before the failure (see `flowsim inspect "
            f"{out}`); free space, then continue with `{resume_cmd}`")


def collective_failure(out: Path, err: RuntimeError, resume_cmd: str) -> str | None:
    """The message for a --distributed run's computation that failed in JAX (None: another
    error), most often a collective whose peer process has gone (`Connection reset by peer`)."""
    import jax

    if not isinstance(err, jax.errors.JaxRuntimeError):
        return None
    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return (f"a computation of this --distributed run failed: {first}. Where another process stopped first, its "
            f"own log says why. {out} keeps every checkpoint committed before; continue with `{resume_cmd}`")


def quiet_hdf5_unraisable(unraisable) -> None:
    """After a failed write, h5py reports every object it cannot release as an ignored
    exception with a traceback; the run reports the failure once, in words."""
    if isinstance(unraisable.exc_value, RuntimeError) and "errno" in str(unraisable.exc_value):
        return
    sys.__unraisablehook__(unraisable)


def load_engine() -> None:
    """Import JAX, Diffrax, h5py and the engine, with Python's cyclic collector off, and
    then those ~200 000 long-lived objects frozen out of its sight (`gc.freeze`): otherwise
    every full collection during a run's tracing scans them again, 0.15-0.2 s of a 1.9 s run
    (bench_e2e), and collections during the imports find little. For the command's own
    process only: a caller of main() keeps its heap."""
    import gc

    set_engine_defaults()
    gc.disable()
    try:
        from ..run import build, driver, provenance  # noqa: F401  (what a run imports later)
        from ..analysis import caron  # noqa: F401
    finally:
        gc.freeze()
        gc.enable()


def leave(code: int) -> None:
    """Exit now, without the interpreter's teardown (see the callers for why)."""
    import os

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def compilation_cache() -> None:
    """Keep compiled programs across runs (solver segments take seconds to compile).
    FLOWSIM_CACHE_DIR moves the cache; an empty value turns it off."""
    import os

    import jax

    where = os.environ.get("FLOWSIM_CACHE_DIR", str(Path.home() / ".cache" / "flowsim" / "jax"))
    if where:
        jax.config.update("jax_compilation_cache_dir", where)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
