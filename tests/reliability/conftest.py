"""Helpers of the reliability suite: running `flowsim` in a subprocess or in-process, and
comparing two archives dataset by dataset and attribute by attribute."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from flowsim import archive as A
from flowsim.cli import command as cli
from flowsim.archive.checkpoint import n_committed, read_checkpoint

HERE = Path(__file__).resolve().parent
FAULT = HERE / "fault.toml"
# The quick variant: gradient descent only (compiles in about a second).
GD_ONLY = ['run.solvers=["gd-lr0.1"]']


def set_args(overrides) -> list[str]:
    return [x for o in overrides for x in ("--set", o)]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One compilation cache shared by every subprocess of the session."""
    return tmp_path_factory.mktemp("jax-cache")


def env_for(cache_dir: Path) -> dict:
    """The subprocesses' environment: this process's device (no JAX_PLATFORMS pin: runs
    compared bit for bit must share a device), one compilation cache."""
    env = dict(os.environ)
    env["FLOWSIM_CACHE_DIR"] = str(cache_dir)
    return env


def flowsim_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "flowsim.cli", *map(str, args)]


def run_sub(cache_dir, *args, timeout=300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(flowsim_cmd(*args), capture_output=True, text=True, timeout=timeout,
                          env=env_for(cache_dir), **kw)


def start_sub(cache_dir, *args, **kw) -> subprocess.Popen:
    return subprocess.Popen(flowsim_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env_for(cache_dir), **kw)


@pytest.fixture
def inproc(monkeypatch, capsys):
    """`flowsim.cli.main([...])` in this process: returns (status, stdout, stderr).
    The compilation cache stays off (it would be process-global), signal handlers are
    restored by main itself."""
    monkeypatch.setenv("FLOWSIM_CACHE_DIR", "")

    def call(*args):
        capsys.readouterr()
        saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
        code = cli.main([str(a) for a in args])
        assert {s: signal.getsignal(s) for s in saved} == saved, "cli.main left a signal handler behind"
        out = capsys.readouterr()
        return code, out.out, out.err

    return call


def committed(path) -> int:
    """Total committed checkpoint rows in an archive (0 while it does not exist yet)."""
    try:
        with A.open(path) as a:
            return sum(s.n_checkpoints for r in a.runs.values() for s in r.solvers.values())
    except A.ArchiveError:
        return 0
    except (OSError, KeyError, RuntimeError, ValueError):   # caught mid structure change
        return 0


def wait_for(pred, timeout: float, proc: subprocess.Popen | None = None, every=0.05) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        if proc is not None and proc.poll() is not None:
            return pred()
        time.sleep(every)
    return False


# ---------------------------------------------------------------------------------------
# Archive comparison
# ---------------------------------------------------------------------------------------

# Attributes that legitimately differ between two runs of the same scenario.
VOLATILE_ATTRS = {"created", "wall_time", "compile_time"}
# h5py object references (dimension scales) differ by address; the scale names are compared.
REFERENCE_ATTRS = {"DIMENSION_LIST", "REFERENCE_LIST"}


# Wall-clock figures among a solver's statistics: they differ from run to run.
WALL_STATS = ("wall_time", "observe_time", "compile_time")


def _norm_json(text) -> object:
    value = json.loads(text.decode() if isinstance(text, bytes) else text)
    if isinstance(value, dict):
        for k in WALL_STATS:
            value.pop(k, None)
    return value


def _attr(name: str, value):
    if name in ("stats", "attrs"):          # solver stats, checkpoint mirror: JSON with wall_time
        return _norm_json(value)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.generic):
        return ("scalar", value.dtype.str, value.tobytes())
    return value


def snapshot(path) -> dict[str, object]:
    """Every dataset (bytes, dtype, shape) and attribute of an archive, keyed by HDF5 path,
    with the wall times and creation time left out. A checkpoint group's commit record and
    attribute buffer are replaced by what they mean: the committed index and attrs."""
    out: dict[str, object] = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            for k, v in obj.attrs.items():
                if k in VOLATILE_ATTRS or k in REFERENCE_ATTRS:
                    continue
                out[f"{name}@{k}"] = _attr(k, v)
            if isinstance(obj, h5py.Dataset):
                if name.rsplit("/", 1)[0].endswith("checkpoint"):
                    return      # two slots: only the committed one is meaningful (below)
                data = obj[()]
                out[name] = (data.dtype.str, data.shape, np.asarray(data).tobytes())
                if obj.dims and any(len(d) for d in obj.dims):
                    out[f"{name}#dims"] = [[s.name for s in d.values()] for d in obj.dims]
            elif name.endswith("checkpoint"):
                state = read_checkpoint(obj.parent)
                n = n_committed(obj.parent)
                if state is None:
                    out[f"{name}#state"] = None
                else:
                    attrs = {k: v for k, v in state[1].items() if k not in WALL_STATS}
                    arrays = {k: (v.dtype.str, v.shape, v.tobytes()) for k, v in sorted(state[0].items())}
                    out[f"{name}#state"] = (n, attrs, arrays)

        visit("/", f)
        f.visititems(visit)
    # the provenance JSON is compared as a whole (its str entries are also root attrs)
    return out


def assert_same_archive(a, b, *, ignore=()) -> None:
    sa, sb = snapshot(a), snapshot(b)
    for key in ignore:
        sa.pop(key, None)
        sb.pop(key, None)
    missing, extra = sorted(set(sa) - set(sb)), sorted(set(sb) - set(sa))
    assert not missing and not extra, f"only in {a}: {missing[:10]}; only in {b}: {extra[:10]}"
    differ = [k for k in sa if not _equal(sa[k], sb[k])]
    assert not differ, f"{len(differ)} item(s) differ between {a} and {b}: {differ[:10]}"


def _equal(x, y) -> bool:
    return x == y if not isinstance(x, float) else (x == y or (np.isnan(x) and np.isnan(y)))


def series_rows(path) -> dict[tuple[str, str], int]:
    with A.open(path) as a:
        return {(r, s): sv.n_checkpoints for r, run in a.runs.items() for s, sv in run.solvers.items()}
