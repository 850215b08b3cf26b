"""The writer's lock: an exclusive ``fcntl.flock`` on ``<path>.lock`` holding the pid."""

from __future__ import annotations

import contextlib
import fcntl
import os

from .errors import ArchiveLocked


class Lock:
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


def writer_pid(path: str) -> int | None:
    """The pid of the live process holding `path`'s lock, else None (never locked, closed,
    or killed: a SIGKILL leaves the lock file with a dead pid). Read without taking the lock,
    so that looking never blocks a writer; a writer on another host sharing the file system
    reads as not live."""
    try:
        with open(path + ".lock", "rb") as f:
            pid = int(f.read(64).decode(errors="replace").strip() or 0)
    except (OSError, ValueError):
        return None
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:      # alive, another user's
        pass
    return pid
