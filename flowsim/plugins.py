"""Plug-ins: the user's own code, named in a scenario by import path "package.module:name".

A scenario may name a model factory (`[model] kind = "python"`, `factory = ...`), an
activation (`model.activation`) or a loss (`loss.kind`) this way. Such a scenario runs the
user's code: validation imports it (a path that does not import, or an object of the wrong
shape, is a scenario error naming the key, before anything is computed), and `flowsim list`
and `flowsim inspect` say so. Reading an archive never imports anything: the archive keeps
the path as a string.

The scenario's folder is searched first, so a scenario beside its `mymodel.py` can say
"mymodel:make_model".

A plug-in cannot fake success: `sys.exit` in it is an error naming its key (`RAISED`
catches SystemExit too), and the command line first rehearses the scenario's preparation
in a forked child (`rehearse`), so that one that ends the process outright (`os._exit`)
is reported, by key, with a non-zero exit status.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import signal
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

_PATH = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
FORM = '"package.module:name"'


# What user code may raise that is its failure, not the process's: SystemExit included (a
# plug-in's sys.exit(0) would otherwise end `flowsim run` with status 0, having written
# nothing); KeyboardInterrupt, a stop asked for, is left to pass.
RAISED = (Exception, SystemExit)


class PluginError(Exception):
    """An import path that does not resolve (the message says which part failed)."""


def describe(err: BaseException) -> str:
    """What user code raised, in words."""
    if isinstance(err, SystemExit):
        return f"SystemExit({err.code!r}) (sys.exit: a plug-in may not end the process)"
    return f"{type(err).__name__}: {err}"


def is_path(value: Any) -> bool:
    return isinstance(value, str) and bool(_PATH.match(value))


def load(path: str, base_dir: str | Path | None = None) -> Any:
    """The object at `path`, importing its module (from `base_dir` first)."""
    module_name, _, attr = path.partition(":")
    added = base_dir is not None and str(base_dir) not in sys.path
    if added:
        sys.path.insert(0, str(base_dir))
    try:
        module = importlib.import_module(module_name)
    except RAISED as err:  # the user's module may raise anything on import
        raise PluginError(f"does not import: module {module_name!r} raised {describe(err)}") from None
    finally:
        if added:
            sys.path.remove(str(base_dir))
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PluginError(f"does not import: module {module_name!r} has no {attr!r}")
        obj = getattr(obj, part)
    return obj


# the keys a plug-in may fill, and how to tell (a resolved or raw scenario table)
def named_in(table: Mapping) -> list[str]:
    """The plug-in paths a scenario (resolved, or raw TOML) names, sweep values included."""
    found = []
    model, loss = table.get("model") or {}, table.get("loss") or {}
    if isinstance(model, Mapping):
        found += [model.get("factory"), model.get("activation")]
    if isinstance(loss, Mapping):
        found.append(loss.get("kind"))
    sweep = table.get("sweep") or {}
    if isinstance(sweep, Mapping):
        for key in ("model.factory", "model.activation", "loss.kind"):
            values = sweep.get(key)
            found += values if isinstance(values, list) else []
    return sorted({v for v in found if is_path(v)})


# ---------------------------------------------------------------------------------------
# Rehearsal: a plug-in that ends the process (os._exit) cannot be caught in it, only seen
# from another. The command line runs the scenario's preparation (imports, probes,
# factories) once in a forked child first; the child marks each stretch of user code on a
# pipe, so the parent names the one the child died in.
# ---------------------------------------------------------------------------------------

_marks: int | None = None     # the pipe's write end, in a rehearsing child


@contextlib.contextmanager
def running(key: str, path: str, doing: str) -> Iterator[None]:
    """A stretch of the plug-in `path` (the scenario's `key`) running, `doing` what."""
    if _marks is not None:
        os.write(_marks, f"+`{key}` = {path!r} ({doing})\n".encode())
    try:
        yield
    finally:
        if _marks is not None:
            os.write(_marks, b"-\n")


def rehearse(work: Callable[[], object], started: Callable[[int], object] = lambda pid: None) -> str | None:
    """Run `work` in a forked child first. None when it returned or raised (the caller then
    does the same work and meets the same errors itself); otherwise what ended the child,
    naming the plug-in it was running. `started` is told the child's pid (a caller that may
    leave at once must take it along). Fork only in a process that has not started JAX's
    backends (the command line's, at start-up): a child of one that has may deadlock."""
    read, write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:   # the child: its output is the parent's to give, once
        global _marks
        for sig in (signal.SIGTERM, signal.SIGINT):   # a stop is the parent's to handle
            signal.signal(sig, signal.SIG_DFL)
        os.close(read)
        _marks = write
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        with contextlib.suppress(BaseException):
            work()
        os.write(write, b"=\n")
        os._exit(0)
    os.close(write)
    started(pid)
    try:
        chunks = []
        while chunk := os.read(read, 1 << 16):     # to the end: a blocked child would hang
            chunks.append(chunk)
        _, wait = os.waitpid(pid, 0)
    except BaseException:   # a stop: the child goes with the parent
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise
    finally:
        os.close(read)
    lines = b"".join(chunks).decode(errors="replace").splitlines()
    if lines and lines[-1] == "=":
        return None
    how = (f"exit status {os.waitstatus_to_exitcode(wait)}" if os.WIFEXITED(wait)
           else f"signal {os.WTERMSIG(wait)}")
    where = lines[-1][1:] if lines and lines[-1].startswith("+") else "preparing the scenario"
    return f"{where} ended the process ({how}, e.g. os._exit)"
