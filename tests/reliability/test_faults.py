"""Faults during a run: SIGTERM, SIGKILL, a full disk, an unwritable folder, two writers.

Every test ends the same way: `flowsim inspect` opens what is left and reports it, and
`flowsim run --resume` completes it into an archive equal, dataset by dataset, to an
uninterrupted run (wall times and the creation time aside).

The faulted runs and the reference runs are real `flowsim run` subprocesses; the resumes,
`inspect` and the refused second writers go through `flowsim.cli.main` in this process
(one compilation for all of them). Both sides run on this process's default device
(`env_for` pins none): results agree across devices only to the last bits.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import pytest

from flowsim import archive as A
from flowsim.archive.checkpoint import n_committed
from flowsim.archive.format import iter_solvers, series_spec

from .conftest import (FAULT, GD_ONLY, assert_same_archive, committed, env_for, run_sub,
                       series_rows, set_args, start_sub, wait_for)

QUICK = set_args(GD_ONLY)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, cache_dir):
    """An uninterrupted GD-only run of the fault scenario (read, never written, by the tests)."""
    path = tmp_path_factory.mktemp("reference") / "reference.h5"
    proc = run_sub(cache_dir, "run", FAULT, "-o", path, "-q", *QUICK)
    assert proc.returncode == 0, proc.stderr
    return path


def resume(inproc, out, *args) -> None:
    """`flowsim run --resume` completes `out`, on the device that began it."""
    code, _, err = inproc("run", FAULT, "-o", out, "-q", "--resume", *args)
    assert code == 0, err
    assert "bit-identical" not in err, err


def _begun_unfinished(path) -> bool:
    """The archive shows work begun and not finished: a solver still `running`, or a run
    without all its solvers (what `flowsim inspect` calls interrupted once no writer is
    live)."""
    try:
        with A.open(path) as a:
            return any(r.unbegun or any(s.status == "running" for s in r.solvers.values())
                       for r in a.runs.values())
    except (A.ArchiveError, OSError, KeyError, RuntimeError, ValueError):   # caught mid change
        return False


def check_inspect(inproc, path, *, expect_interrupted: bool):
    code, out, err = inproc("inspect", path)
    assert code == 0, err
    assert "run p0-seed0" in out and "checkpoints" in out
    if expect_interrupted:   # no writer is live: a solver left "running" was interrupted
        assert "interrupted" in out and "--resume" in out
    return out


def test_a_finished_command_line_run_ignores_late_stops(tmp_path, monkeypatch):
    """Python's finalisation resets every signal that has a Python handler to the default
    (death by signal): a scheduler's SIGTERM landing while a finished `flowsim run` process
    tears down turned exit 0 into -15 (a CI failure of the random-signal test). The command
    ignores the stop signals once its run is over, before its exit handlers run and it
    leaves (`leave`, here recorded instead of leaving this process)."""
    import atexit
    import gc
    import warnings

    from flowsim.cli import command as cli

    left = []

    def leave(code):
        left.append((code, signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)))
        raise SystemExit(code)

    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)
    monkeypatch.setattr(sys, "argv", ["flowsim", "run", str(FAULT), "-o", str(tmp_path / "a.h5"), "-q", *QUICK])
    monkeypatch.setattr(cli, "leave", leave)
    monkeypatch.setattr(atexit, "_run_exitfuncs", lambda: None)    # this process's handlers are pytest's
    monkeypatch.setattr(gc, "freeze", lambda: None)                # and so is its heap
    try:
        with pytest.raises(SystemExit):
            cli.main()
        assert left == [(0, signal.SIG_IGN, signal.SIG_IGN)]
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
        cli._COMMAND_LINE = False


def test_the_command_takes_sigterm_before_loading_h5py():
    """`flowsim` must reach its SIGTERM handler fast: whatever its module imports before
    `main` runs is a window in which a stop kills. h5py (a second to import on a busy
    machine) and JAX load only after."""
    code = "import sys, flowsim.cli; print(sorted(m for m in ('h5py', 'jax', 'numpy') if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout


@pytest.mark.slow
def test_sigterm_stops_cleanly_and_resumes(tmp_path, cache_dir, inproc, reference):
    # The GD-only run takes a fraction of a second: a stop sent after 6 committed rows can
    # land when every row is done (the run then leaves 0, or 130 complete). Up to five
    # tries for one that lands mid-run, which is what the checks below are about.
    for attempt in range(5):
        out = tmp_path / f"term{attempt}.h5"
        proc = start_sub(cache_dir, "run", FAULT, "-o", out, "-q", *QUICK)
        assert wait_for(lambda: committed(out) >= 6, 240, proc), proc.communicate()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        if proc.returncode == 0:       # it finished before the stop landed
            continue
        assert proc.returncode == 130, err
        assert "interrupted" in err and "--resume" in err and "Traceback" not in err
        if sum(series_rows(out).values()) < sum(series_rows(reference).values()):
            break
    # Stopped between checkpoints: the file was closed cleanly (a plain open works, no
    # SWMR or flag clearing needed), every seed of the batch has the same row count.
    with h5py.File(out, "r"):
        pass
    rows = series_rows(out)
    assert 0 < sum(rows.values()) < sum(series_rows(reference).values())
    by_point: dict[str, set[int]] = {}
    for (run, solver), n in rows.items():
        by_point.setdefault(run.split("-")[0] + solver, set()).add(n)
    assert all(len(v) == 1 for v in by_point.values()), rows
    check_inspect(inproc, out, expect_interrupted=True)
    resume(inproc, out, *QUICK)
    assert_same_archive(reference, out)


@pytest.mark.slow
def test_sigkill_with_a_second_writer_refused_then_resume(tmp_path, cache_dir, inproc, reference):
    # Frozen (SIGSTOP) mid-run, the writer keeps its lock. The GD-only run takes a fraction
    # of a second: the freeze can land after its last row, or between two sweep points with
    # every run so far finished (two CI failures), so up to five tries for one that lands
    # with work begun and unfinished.
    total = sum(series_rows(reference).values())
    for attempt in range(5):
        out = tmp_path / f"kill{attempt}.h5"
        proc = start_sub(cache_dir, "run", FAULT, "-o", out, "-q", *QUICK)
        assert wait_for(lambda: committed(out) >= 2, 240, proc), proc.communicate()
        proc.send_signal(signal.SIGSTOP)
        if proc.poll() is None and committed(out) < total and _begun_unfinished(out):
            break
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    else:
        pytest.fail("the writer finished before it could be frozen, 5 times; lengthen fault.toml")
    try:
        # Two processes on one archive: the second is refused (exit 2), naming the first.
        for mode in ("--resume", "--overwrite"):
            code, _, err = inproc("run", FAULT, "-o", out, "-q", mode, *QUICK)
            assert code == 2, err
            assert f"being written by another flowsim process (pid {proc.pid})" in err
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert committed(out) >= 2                      # opens, and holds what was committed
    check_inspect(inproc, out, expect_interrupted=True)
    resume(inproc, out, *QUICK)
    assert_same_archive(reference, out)


# A small launcher instead of preexec_fn (fork in a threaded JAX process can deadlock):
# SIGXFSZ ignored and RLIMIT_FSIZE set survive exec, so the archive's writes fail with
# EFBIG once the file reaches the limit, as on a full disk.
LIMITED = ("import os, resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
           "limit = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)); "
           "os.execv(sys.executable, [sys.executable, '-m', 'flowsim.cli', *sys.argv[2:]])")


@pytest.mark.slow
@pytest.mark.parametrize("fraction", [0.5])
def test_disk_full_mid_run(tmp_path, cache_dir, inproc, reference, fraction):
    out = tmp_path / "full.h5"
    limit = int(os.path.getsize(reference) * fraction)
    proc = subprocess.run([sys.executable, "-c", LIMITED, str(limit), "run", FAULT, "-o", out, "-q", *QUICK],
                          capture_output=True, text=True, timeout=300, env=env_for(cache_dir))
    assert proc.returncode == 1, proc.stderr
    assert os.path.getsize(out) <= limit
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("flowsim: error: writing") and "--resume" in last
    assert "no room for the next write" in last or "File too large" in last
    assert "Traceback" not in proc.stderr
    # Every checkpoint committed before the failure is intact and equal to the reference's.
    with A.open(reference) as ref, A.open(out) as got:
        total = 0
        for name, run in got.runs.items():
            for sname, sv in run.solvers.items():
                rv = ref.runs[name].solvers[sname]
                total += sv.n_checkpoints
                for key in ("t", *sv.series_names):
                    assert (sv[key] == rv[key][: sv.n_checkpoints]).all() if key != "t" else \
                        (sv.t == rv.t[: sv.n_checkpoints]).all()
        assert total > 0
    check_inspect(inproc, out, expect_interrupted=True)
    resume(inproc, out, *QUICK)
    assert_same_archive(reference, out)


def test_output_folder_that_is_a_file(tmp_path, inproc):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    code, _, err = inproc("run", FAULT, "-o", blocker / "out.h5", "-q", *QUICK)
    assert code == 2
    assert "is a file, not a folder" in err and "allowed:" in err and err.count("\n") == 1
    assert blocker.read_text() == "x"


def test_unwritable_output_folder(tmp_path, inproc, monkeypatch):
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        if os.geteuid() == 0:
            # root ignores permission bits: the kernel's answer for an ordinary user is
            # simulated (access(2) is what the command asks).
            real = os.access
            monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if Path(p) == folder
                                else real(p, mode, **kw))
        code, _, err = inproc("run", FAULT, "-o", folder / "out.h5", "-q", *QUICK)
        assert code == 2, err
        assert "is not writable" in err and str(folder) in err and "allowed:" in err
        assert list(folder.iterdir()) == []
    finally:
        folder.chmod(0o755)


# ---------------------------------------------------------------------------------------
# Random moments (slow): SIGKILL and SIGTERM anywhere in a run with GD and a flow
# ---------------------------------------------------------------------------------------

TRIALS = int(os.environ.get("FLOWSIM_FAULT_TRIALS", "20"))


@pytest.mark.slow
def test_random_kills_and_terms_then_resume_bit_for_bit(tmp_path, cache_dir, inproc):
    """≥ 20 interrupted runs, SIGKILL and SIGTERM alternately, each at a random moment of a
    real run (start-up included). After each: the archive (if any) opens, `inspect` reports it,
    `--resume` (or a fresh run when nothing was written) completes it, and the result
    equals the uninterrupted run bit for bit."""
    reference = tmp_path / "reference.h5"
    t0 = time.monotonic()
    proc = run_sub(cache_dir, "run", FAULT, "-o", reference, "-q")
    duration = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    # Before the interpreter has started and imported flowsim.cli no Python handler can
    # exist, so a SIGTERM landing then ends the process by the default action (-15); measured
    # here, under this machine's load, and doubled.
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "import flowsim.cli"], check=True, env=env_for(cache_dir))
    startup = 2 * (time.monotonic() - t0)
    rng = random.Random(int(os.environ.get("FLOWSIM_FAULT_SEED", "7")))
    outcomes = []
    attempt = 0
    # Until TRIALS runs were really interrupted (a signal that lands after the run ended
    # proves nothing): the window shrinks to the fastest full run seen.
    while sum(o[2] != 0 for o in outcomes) < TRIALS and attempt < 3 * TRIALS:
        sig = signal.SIGKILL if attempt % 2 == 0 else signal.SIGTERM
        out = tmp_path / f"trial{attempt}.h5"
        delay = rng.uniform(0.05, 0.95) * duration
        attempt += 1
        started = time.monotonic()
        p = start_sub(cache_dir, "run", FAULT, "-o", out, "-q")
        try:
            p.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            p.send_signal(sig)
        _, err = p.communicate(timeout=300)
        rc = p.returncode
        if rc == 0:
            duration = min(duration, time.monotonic() - started)
        if sig == signal.SIGTERM:
            # graceful, whenever it lands after start-up
            assert rc in (0, 130) or (rc == -signal.SIGTERM and delay < startup), (attempt, rc, delay, err)
            assert "Traceback" not in err, err
        else:
            assert rc in (0, -signal.SIGKILL), (attempt, rc, err)
        if out.exists():
            n = committed(out)                              # opens (or raises: test fails)
            code, text, e = inproc("inspect", out)
            assert code == 0, e
            resume(inproc, out)
        else:
            n = 0
            code, _, e = inproc("run", FAULT, "-o", out, "-q")
            assert code == 0, (attempt, e)
        assert_same_archive(reference, out)
        outcomes.append((sig.name, round(delay, 1), rc, n))
        out.unlink()
    print(f"\n{attempt} attempts (signal, delay s, exit, committed rows at the fault):", outcomes)
    faulted = [o for o in outcomes if o[2] != 0]
    assert len(faulted) >= TRIALS, outcomes
    assert {o[0] for o in faulted} == {"SIGKILL", "SIGTERM"}


# ---------------------------------------------------------------------------------------
# Issue 32 item 6: killed archives open in plain h5py and xarray as they are (slow)
# ---------------------------------------------------------------------------------------

KILLS = int(os.environ.get("FLOWSIM_KILL_TRIALS", "20"))
PAUSE = 0.15     # FLOWSIM_TEST_COMMIT_PAUSE of the runs whose kill is aimed at a commit
IN_COMMIT, IN_STRUCTURE = 0x05, 0x01     # superblock flags: SWMR write (a commit), plain write


def _flags(path: Path) -> int | None:
    try:
        with open(path, "rb") as fh:
            head = fh.read(12)
    except OSError:
        return None
    return head[11] if len(head) == 12 else None


def _same_prefix_as(reference: h5py.File, f: h5py.File) -> int:
    """Every committed row of `f` (a killed run's archive read by plain h5py) equals the
    reference's row, byte for byte; every series holds exactly the committed rows. Returns
    the committed rows in all."""
    total = 0
    for g in iter_solvers(f):
        n, ref = n_committed(g), reference[g.name]
        for name in ["t", *(["step"] if "step" in g else []), *series_spec(g)]:
            assert g[name].shape[0] == n, (g.name, name, g[name].shape, n)
            assert g[name][()].tobytes() == ref[name][:n].tobytes(), (g.name, name)
        total += n
    return total


@pytest.mark.slow
def test_random_kills_leave_archives_plain_hdf5_tools_open(tmp_path, cache_dir, inproc):
    """Issue 32 item 6: KILLS SIGKILLs at random moments of a real run (GD and a flow, two
    seeds, two sweep points), at least a third of them inside a commit (aimed there by the
    writer's test pause, FLOWSIM_TEST_COMMIT_PAUSE). Each killed archive: plain h5py and
    xarray (h5netcdf) open it with nothing run first, holding exactly the committed rows,
    each equal to the uninterrupted run's -- unless the kill landed inside one of the
    writer's own writes (flags left set: counted, and then plain HDF5 refuses it until
    `--resume`); every committed checkpoint seen before the kill is there; `inspect` leaves
    its bytes unchanged; `--resume` completes it bit for bit."""
    import hashlib

    import xarray as xr     # test extras: a missing install is a failure, not a skip

    reference = tmp_path / "reference.h5"
    t0 = time.monotonic()
    proc = run_sub(cache_dir, "run", FAULT, "-o", reference, "-q")
    duration = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    rng = random.Random(int(os.environ.get("FLOWSIM_FAULT_SEED", "32")))
    landed = {"between writes": 0, "inside a commit": 0, "inside a structure change": 0}
    outcomes, attempt = [], 0
    ref = h5py.File(reference, "r")
    try:
        while (sum(landed.values()) < KILLS or 3 * landed["inside a commit"] < KILLS) and attempt < 3 * KILLS:
            aim = 3 * landed["inside a commit"] < KILLS and attempt % 2 == 0
            out = tmp_path / f"kill{attempt}.h5"
            attempt += 1
            started = time.monotonic()
            env = env_for(cache_dir) | {"FLOWSIM_TEST_COMMIT_PAUSE": str(PAUSE if aim else 0)}
            p = subprocess.Popen([sys.executable, "-m", "flowsim.cli", "run", str(FAULT), "-o", str(out), "-q"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
            try:
                seen = 0
                if aim:    # into a commit at a random point of the run, at a random moment of it
                    wait_for(lambda: committed(out) > 0, 240, p, every=0.01)
                    time.sleep(rng.uniform(0, 0.5) * duration)
                    seen = committed(out)
                    wait_for(lambda: _flags(out) == IN_COMMIT, 60, p, every=0.002)
                    time.sleep(rng.uniform(0, 1.8 * PAUSE))
                else:      # at a random moment of the run once its archive exists
                    wait_for(out.exists, 240, p, every=0.01)
                    delay = rng.uniform(0.0, 0.9) * max(duration - (time.monotonic() - started), 0.2)
                    try:
                        p.wait(timeout=delay)
                    except subprocess.TimeoutExpired:
                        seen = committed(out)
                p.send_signal(signal.SIGKILL)
            finally:
                _, err = p.communicate(timeout=300)
            if p.returncode == 0:     # it finished first: not a kill (the window shrinks to it)
                if not aim:
                    duration = min(duration, time.monotonic() - started)
                out.unlink()
                continue
            assert p.returncode == -signal.SIGKILL, (attempt, p.returncode, err)
            if not out.exists():      # killed before the archive was created
                continue
            flags = _flags(out)
            where = {0: "between writes", IN_COMMIT: "inside a commit", IN_STRUCTURE: "inside a structure change"}[flags]
            landed[where] += 1
            digest = hashlib.md5(out.read_bytes()).hexdigest()
            if flags == 0:     # plain HDF5 tools, nothing run first
                with h5py.File(out, "r") as f:
                    plain = _same_prefix_as(ref, f)
                    solvers = [g.name for g in iter_solvers(f)]
                for group in solvers:
                    with xr.open_dataset(out, group=group, engine="h5netcdf") as ds:
                        n = ds.sizes["t"]
                        assert ds["loss"].values.tobytes() == ref[group]["loss"][:n].tobytes(), group
            else:              # the kill's own write: plain HDF5 refuses it until --resume
                with pytest.raises(OSError, match="already open for write"):
                    h5py.File(out, "r")
            rows = committed(out)      # flowsim's reader, whatever the kill left
            assert rows >= seen and (flags or rows == plain), (attempt, where, rows, seen)
            code, text, e = inproc("inspect", out)
            assert code == 0, e
            assert ("killed inside a write" in text) == bool(flags), text
            assert hashlib.md5(out.read_bytes()).hexdigest() == digest, (attempt, where, "inspect changed the file")
            resume(inproc, out)
            assert _flags(out) == 0
            assert_same_archive(reference, out)
            outcomes.append((where, "aimed" if aim else "random", rows))
            out.unlink()
    finally:
        ref.close()
    print(f"\n{attempt} runs, {len(outcomes)} killed with an archive; where the kills landed: {landed}; "
          f"(where, aimed/random, committed rows):", outcomes)
    assert sum(landed.values()) >= KILLS and 3 * landed["inside a commit"] >= KILLS, landed
