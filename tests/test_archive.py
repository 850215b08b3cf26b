"""Tests of flowsim.archive: layout, API round trips, locking, foreign files, crash safety."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from archive_sample import COMMIT_EVERY, SERIES, rows, state

from flowsim import archive as A

SAMPLE_WRITER = Path(__file__).resolve().parent / "archive_sample.py"


def make(path, **kw) -> A.ArchiveWriter:
    return A.ArchiveWriter.create(path, scenario_text="name: test\n", resolved={"m": 200},
                                  provenance={"git_commit": "abc123", "versions": {"jax": "0"}},
                                  dtype="float64", **kw)


def add_solver(w: A.ArchiveWriter, run="r0", solver="gd", discrete=True) -> None:
    w.create_run(run, params={"m": 200, "eta": 0.1}, seed=3, label="m=200", point=1,
                 init={"W0": np.ones((200, 20)), "lam": np.float64(0.5)})
    w.create_solver(run, solver, preset={"eta": 0.1}, series=SERIES, discrete=discrete)


def append_k(w: A.ArchiveWriter, k: int, run="r0", solver="gd") -> None:
    arrays, attrs = state(k)
    w.append(run, solver, t=0.1 * k, step=10 * k, values=rows(k), checkpoint=arrays,
             checkpoint_attrs=attrs)


def check_rows(sv: A.SolverView, n: int) -> None:
    """Every series has n rows, each equal to what was written."""
    assert sv.n_checkpoints == n
    np.testing.assert_allclose(sv.t, 0.1 * np.arange(n))
    np.testing.assert_array_equal(sv.step, 10 * np.arange(n))
    for name in SERIES:
        got = sv[name]
        assert got.shape[0] == n, name
        for k in range(n):
            np.testing.assert_array_equal(got[k], np.asarray(rows(k)[name], dtype=got.dtype))
    if n:
        arrays, attrs = sv.checkpoint
        want_arrays, want_attrs = state(n - 1)
        assert attrs == want_attrs
        for key, value in want_arrays.items():
            np.testing.assert_array_equal(arrays[key], value)


def test_import_loads_no_jax():
    """Reading archives needs no JAX: importing flowsim and flowsim.archive loads no jax
    module and leaves jax_enable_x64 as it was."""
    code = textwrap.dedent("""
        import sys
        import flowsim, flowsim.archive, flowsim.archive.merge
        print(sorted(m for m in sys.modules if m == "jax" or m.startswith("jax.")))
        import jax
        print(jax.config.jax_enable_x64)
    """)
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[]", "False"], proc.stdout


# ----------------------------------------------------------------------------------------
# create / refuse / overwrite / lock
# ----------------------------------------------------------------------------------------

def test_create_refuses_existing_and_overwrites(tmp_path):
    path = tmp_path / "sub" / "a.h5"
    make(path).close()
    with pytest.raises(A.ArchiveError, match="--resume.*another path.*--overwrite"):
        make(path)
    with make(path, overwrite=True) as w:
        assert not w.has_run("r0")
    assert not Path(str(path) + ".lock").exists()


def test_second_writer_is_refused_same_process(tmp_path):
    path = tmp_path / "a.h5"
    with make(path):
        with pytest.raises(A.ArchiveLocked, match=f"another flowsim process \\(pid {os.getpid()}\\)"):
            A.ArchiveWriter.resume(path)
        with pytest.raises(A.ArchiveLocked):
            make(path, overwrite=True)
        assert path.exists()          # overwrite did not touch the file without the lock
    A.ArchiveWriter.resume(path).close()


def test_second_writer_is_refused_other_process(tmp_path):
    path = tmp_path / "a.h5"
    code = textwrap.dedent(f"""
        from flowsim import archive as A
        try:
            A.ArchiveWriter.resume({str(path)!r})
        except A.ArchiveLocked as e:
            print("LOCKED", e)
    """)
    with make(path):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60).stdout
    assert "LOCKED" in out and f"pid {os.getpid()}" in out


# ----------------------------------------------------------------------------------------
# round trips
# ----------------------------------------------------------------------------------------

def test_round_trip(tmp_path):
    path = tmp_path / "a.h5"
    data = {"X_train": np.random.default_rng(0).normal(size=(30, 5)),
            "y_train": np.arange(30.0), "X_test": np.zeros((4, 5), np.float32),
            "y_test": np.array([1, 2, 3, 4])}
    with make(path) as w:
        w.write_data(data)
        add_solver(w)
        add_solver(w, run="r1", solver="flow", discrete=False)
        w.write_data({"X_train": np.ones((2, 5))}, run="r1")
        assert w.has_run("r0") and not w.has_run("zz")
        assert w.read_checkpoint("r0", "gd") is None and w.n_checkpoints("r0", "gd") == 0
        for k in range(4):
            append_k(w, k)
        w.append("r1", "flow", t=0.5, step=None, values=rows(0), checkpoint={"y": np.ones(3)},
                 checkpoint_attrs={"dt": 0.01})
        assert w.n_checkpoints("r0", "gd") == 4
        assert w.read_checkpoint("r0", "gd")[1] == state(3)[1]
        w.set_status("r0", "gd", status="done", stats={"nfev": 12, "rejected": [1, 2]},
                     wall_time=3.5, message="converged", status_time=0.3)
        with pytest.raises(A.ArchiveError, match="unknown status"):
            w.set_status("r0", "gd", status="weird", stats={}, wall_time=0)
        with pytest.raises(A.ArchiveError, match="row shape"):
            w.append("r0", "gd", t=1, step=1, values={**rows(0), "ntg": np.ones(3)},
                     checkpoint={}, checkpoint_attrs={})
        assert w.n_checkpoints("r0", "gd") == 4
    with A.open(path) as a:
        assert a.scenario_text == "name: test\n"
        assert a.attrs["scenario_resolved"] == {"m": 200}
        assert a.attrs["provenance"]["versions"] == {"jax": "0"}
        assert a.attrs["git_commit"] == "abc123" and a.attrs["dtype"] == "float64"
        assert "created" in a.attrs and "flowsim_version" in a.attrs
        for key, value in data.items():
            np.testing.assert_array_equal(a.data[key], value)
            assert a.data[key].dtype == value.dtype
        assert list(a.runs) == ["r0", "r1"]
        r0, r1 = a.runs["r0"], a.runs["r1"]
        assert (r0.seed, r0.label, r0.point, r0.params) == (3, "m=200", 1, {"m": 200, "eta": 0.1})
        np.testing.assert_array_equal(r0.init["W0"], np.ones((200, 20)))
        assert r0.init["lam"] == 0.5
        np.testing.assert_array_equal(r0.data["X_train"], data["X_train"])
        np.testing.assert_array_equal(r1.data["X_train"], np.ones((2, 5)))
        gd = r0.solvers["gd"]
        assert gd.discrete and gd.status == "done" and gd.message == "converged"
        assert gd.stats == {"nfev": 12, "rejected": [1, 2]} and gd.wall_time == 3.5
        assert gd.preset == {"eta": 0.1} and gd.series_names == list(SERIES)
        assert "ntg" in gd and "nope" not in gd
        check_rows(gd, 4)
        flow = r1.solvers["flow"]
        assert not flow.discrete and flow.step is None and flow.status == "running"
        assert flow.n_checkpoints == 1 and flow.t.tolist() == [0.5]
    with h5py.File(path, "r") as f:   # clean close: advisory attrs mirror the commit
        assert f["runs/r0/gd/checkpoint"].attrs["index"] == 4
        ds = f["runs/r0/gd/weights"]
        assert ds.maxshape[0] is None and ds.chunks[0] == 1 and ds.compression == "gzip"


def test_dimension_scales_via_xarray(tmp_path):
    import h5netcdf  # noqa: F401  (test extras: missing is a failure, not a skip)
    import xarray as xr
    path = tmp_path / "a.h5"
    with make(path) as w:
        add_solver(w)
        for k in range(3):
            append_k(w, k)
    ds = xr.open_dataset(path, group="runs/r0/gd", engine="h5netcdf")
    try:
        assert ds["ntg"].dims == ("t", "point", "point_b")
        assert ds["weights"].dims == ("t", "node", "feature")
        assert ds["eig"].dims == ("t", "point") and ds["loss"].dims == ("t",)
        assert ds.sizes["t"] == 3 and ds.sizes["node"] == 200
        np.testing.assert_allclose(ds["t"].values, [0.0, 0.1, 0.2])
        np.testing.assert_array_equal(ds["ntg"].values[2], rows(2)["ntg"])
    finally:
        ds.close()


# ----------------------------------------------------------------------------------------
# foreign files
# ----------------------------------------------------------------------------------------

def test_foreign_files(tmp_path):
    text = tmp_path / "a.txt"
    text.write_text("hello\n" * 100)
    with pytest.raises(A.ArchiveError, match="not an HDF5 file"):
        A.open(text)
    with pytest.raises(A.ArchiveError, match="not an HDF5 file"):
        A.ArchiveWriter.resume(text)
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = 1
    with pytest.raises(A.ArchiveError, match="not a flowsim archive"):
        A.open(plain)
    with pytest.raises(A.ArchiveError, match="not a flowsim archive"):
        A.ArchiveWriter.resume(plain)
    with pytest.raises(A.ArchiveError, match="no such archive"):
        A.open(tmp_path / "missing.h5")
    real = tmp_path / "real.h5"
    with make(real) as w:
        add_solver(w)
        for k in range(5):
            append_k(w, k)
    cut = tmp_path / "cut.h5"
    cut.write_bytes(real.read_bytes()[: real.stat().st_size // 2])
    with pytest.raises(A.ArchiveError, match=str(cut)):
        A.open(cut)
    with pytest.raises(A.ArchiveError, match=str(cut)):
        A.ArchiveWriter.resume(cut)


# ----------------------------------------------------------------------------------------
# resume
# ----------------------------------------------------------------------------------------

def test_resume_truncates_half_written_row(tmp_path):
    path = tmp_path / "a.h5"
    with make(path) as w:
        add_solver(w)
        for k in range(3):
            append_k(w, k)
    # Simulate a kill between the series rows and the commit: rows grow, no commit.
    with h5py.File(path, "r+", libver="latest") as f:
        g = f["runs/r0/gd"]
        for name in ["t", "step", *SERIES]:
            g[name].resize(4, axis=0)
            g[name][3] = 999
    with A.open(path) as a:
        check_rows(a.runs["r0"].solvers["gd"], 3)
    with A.ArchiveWriter.resume(path) as w:
        assert w.scenario_text == "name: test\n" and w.resolved == {"m": 200}
        assert w.n_checkpoints("r0", "gd") == 3
        add_solver(w)                       # no-ops on resume
        append_k(w, 3)
    with h5py.File(path, "r") as f:
        assert f["runs/r0/gd/ntg"].shape[0] == 4
    with A.open(path) as a:
        check_rows(a.runs["r0"].solvers["gd"], 4)


def test_checkpoint_shape_change_and_large_attrs(tmp_path):
    path = tmp_path / "a.h5"
    with make(path) as w:
        add_solver(w)
        append_k(w, 0)
        w.append("r0", "gd", t=0.1, step=10, values=rows(1), checkpoint={"W": np.ones(7)},
                 checkpoint_attrs={"big": "y" * 10000})
        arrays, attrs = w.read_checkpoint("r0", "gd")
        assert arrays["W"].shape == (7,) and attrs["big"] == "y" * 10000


# ----------------------------------------------------------------------------------------
# crash safety: SIGKILL a writer at random moments
# ----------------------------------------------------------------------------------------

def _kill_trial(tmp_path: Path, trial: int, delay: float) -> tuple[int, int]:
    """Run the writer, SIGKILL it `delay` s after it is ready, check open() and resume()."""
    path = tmp_path / f"kill{trial}.h5"
    proc = subprocess.Popen([sys.executable, str(SAMPLE_WRITER), str(path)], stdout=subprocess.PIPE,
                            text=True)
    lines: list[str] = []
    ready = threading.Event()

    def reader():
        for line in proc.stdout:
            lines.append(line.strip())
            ready.set()
    th = threading.Thread(target=reader, daemon=True)
    th.start()
    assert ready.wait(30), "writer did not start"
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    th.join(5)
    # A line cut by the kill is ignored (it can only under-count completed rows).
    done = [int(x.split()[1]) for x in lines if re.fullmatch(r"done \d+", x)]
    printed = done[-1] + 1 if done else 0      # rows the writer knew were complete
    with A.open(path) as a:
        sv = a.runs["r0"].solvers["gd"]
        n = sv.n_checkpoints
        # committed three rows at a time: what was printed, or the commit after it
        assert n in (printed, printed + COMMIT_EVERY), (printed, n)
        check_rows(sv, n)
    with A.ArchiveWriter.resume(path) as w:
        assert w.n_checkpoints("r0", "gd") == n
        for k in range(n, n + 2):
            append_k(w, k)
    with A.open(path) as a:
        check_rows(a.runs["r0"].solvers["gd"], n + 2)
    path.unlink()
    return printed, n


def _kill_trials(tmp_path: Path, n_trials: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [_kill_trial(tmp_path, i, rng.uniform(0.0, 0.4)) for i in range(n_trials)]


@pytest.mark.slow
def test_sigkill_fast(tmp_path):
    results = _kill_trials(tmp_path, 5, seed=1234)
    assert any(p > 0 for p, _ in results)


@pytest.mark.slow
def test_sigkill_many(tmp_path):
    results = _kill_trials(tmp_path, 25, seed=98765)
    assert sum(p > 0 for p, _ in results) >= 20


def test_a_torn_metadata_block_fails_a_swmr_read_instead_of_hanging(tmp_path):
    """HDF5's SWMR reader retries a block whose checksum fails 100 times, doubling its sleep
    each time: for a block torn for good (a kill in the middle of a flush) that is about
    2^100 ns. flowsim's SWMR reader (`archive.swmr`) bounds the tries, so the read fails
    like a plain one. In a child process: the failure this guards against is a hang."""
    from flowsim.archive import swmr

    assert swmr._set_attempts() is not None        # h5py's libhdf5 was found
    path = tmp_path / "torn.h5"
    with h5py.File(path, "w", libver="latest") as f:
        f["good"] = np.arange(10.0)
        f["torn"] = np.arange(5.0)
    raw = bytearray(path.read_bytes())
    headers = [m.start() for m in re.finditer(b"OHDR", raw)]
    raw[headers[-1] + 8] ^= 0xFF         # inside the last object header: its checksum fails
    path.write_bytes(bytes(raw))
    child = textwrap.dedent(f"""
        from flowsim.archive.swmr import open_swmr_read
        with open_swmr_read({str(path)!r}) as f:
            print(f.swmr_mode, list(f["good"][()]))
            try:
                f["torn"]
            except KeyError as err:
                print("error:", err)
    """)
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == f"True {list(np.arange(10.0))}"
    assert "incorrect metadata checksum after all read attempts" in out.stdout


def _sample_writer(path: Path, *args, pause: float = 0.0) -> subprocess.Popen:
    env = {**os.environ, "FLOWSIM_TEST_COMMIT_PAUSE": str(pause)}
    return subprocess.Popen([sys.executable, str(SAMPLE_WRITER), str(path), *map(str, args)],
                            stdout=subprocess.PIPE, text=True, env=env)


def _wait_line(proc: subprocess.Popen, line: str) -> None:
    for got in proc.stdout:
        if got.strip() == line:
            return
    raise AssertionError(f"the sample writer ended before printing {line!r}")


def _write_flags(path: Path) -> int:
    """The superblock's status flags: 0 for a closed file, 0x05 while a commit holds it
    (write and SWMR-write access), 0x01 while a structure change does."""
    return path.read_bytes()[11]


def test_a_writer_killed_between_writes_leaves_a_file_plain_h5py_and_xarray_open(tmp_path):
    """Issue 32 item 6: the file is closed between the writer's writes, so one killed there
    opens in any HDF5 tool as it is, with nothing run first, holding every committed row."""
    import xarray as xr  # a test extra: a missing install is a failure, not a skip
    path = tmp_path / "killed.h5"
    proc = _sample_writer(path, 5)          # stops after committing row 5
    _wait_line(proc, "done 5")
    with h5py.File(path, "r") as f:         # the writer lives: between its writes, the file is closed
        assert f["runs/r0/gd/t"].shape == (6,)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _write_flags(path) == 0
    before = path.read_bytes()
    with h5py.File(path, "r") as f:
        assert f["runs/r0/gd/loss"].shape == (6,)      # exactly the committed rows
        for k in range(6):
            np.testing.assert_array_equal(f["runs/r0/gd/weights"][k], rows(k)["weights"])
    with xr.open_dataset(path, group="runs/r0/gd", engine="h5netcdf") as ds:
        assert ds.sizes["t"] == 6 and ds["ntg"].dims == ("t", "point", "point_b")
        np.testing.assert_array_equal(ds["ntg"].values[5], rows(5)["ntg"])
    with A.open(path) as a:
        check_rows(a.runs["r0"].solvers["gd"], 6)
        assert a.runs["r0"].solvers["gd"].interrupted and not a.killed_inside_write
    assert path.read_bytes() == before
    with A.ArchiveWriter.resume(path) as w:       # and it resumes as before
        assert w.n_checkpoints("r0", "gd") == 6
        for k in range(6, 8):
            append_k(w, k)
    with A.open(path) as a:
        check_rows(a.runs["r0"].solvers["gd"], 8)


@pytest.mark.slow
def test_a_writer_killed_inside_a_commit_is_read_as_it_is_and_repaired_by_resume(tmp_path):
    """A kill inside a commit leaves the SWMR flags set: plain HDF5 tools refuse the file,
    flowsim's readers read it without changing a byte, `resume` repairs it. The commit's
    test pause (FLOWSIM_TEST_COMMIT_PAUSE) holds the writer inside its commit for the kill:
    after its rows (the commit not yet recorded) or after its record (not yet closed)."""
    for trial, delay in enumerate((0.1, 0.7)):   # 1st or 2nd pause of the commit of row 8
        path = tmp_path / f"killed{trial}.h5"
        proc = _sample_writer(path, pause=0.6)
        _wait_line(proc, "done 5")
        assert wait_until(lambda: _write_flags(path) == 0x05, 30)    # inside the next commit
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert _write_flags(path) == 0x05
        with pytest.raises(OSError, match="already open for write"):
            h5py.File(path, "r")
        before = path.read_bytes()
        with A.open(path) as a:
            assert a.killed_inside_write
            n = a.runs["r0"].solvers["gd"].n_checkpoints
            assert n == (6 if delay < 0.6 else 9)
            check_rows(a.runs["r0"].solvers["gd"], n)
        assert path.read_bytes() == before
        with A.ArchiveWriter.resume(path) as w:
            assert w.n_checkpoints("r0", "gd") == n
        assert _write_flags(path) == 0 and not os.path.exists(str(path) + ".rebuild")
        with h5py.File(path, "r") as f:
            assert f["runs/r0/gd/loss"].shape == (n,)


def test_rows_beyond_spill_bytes_are_written_early_and_read_only_once_committed(tmp_path, monkeypatch):
    """Rows wait in memory until a commit; beyond SPILL_BYTES they are written out without
    a commit record: readers still see only the committed rows, the next commit takes
    them, and a close drops those never committed."""
    from flowsim.archive import writer as W

    row = sum(np.asarray(v).nbytes for v in rows(0).values()) + 16    # with t and step
    monkeypatch.setattr(W, "SPILL_BYTES", int(3.5 * row))
    path = tmp_path / "a.h5"
    with make(path) as w:
        add_solver(w)
        append_k(w, 0)
        for k in range(1, 5):      # the 4th row passes SPILL_BYTES: rows 1-4 go to the file
            w.append("r0", "gd", t=0.1 * k, step=10 * k, values=rows(k))
        assert _write_flags(path) == 0
        with h5py.File(path, "r") as f:
            assert f["runs/r0/gd/loss"].shape == (5,)
        with A.open(path) as a:
            check_rows(a.runs["r0"].solvers["gd"], 1)
        append_k(w, 5)
        with A.open(path) as a:
            check_rows(a.runs["r0"].solvers["gd"], 6)
        w.append("r0", "gd", t=0.6, step=60, values=rows(6))
        w.append("r0", "gd", t=0.7, step=70, values=rows(7))
        w.append("r0", "gd", t=0.8, step=80, values=rows(8))
        w.append("r0", "gd", t=0.9, step=90, values=rows(9))    # spilled, never committed
    with h5py.File(path, "r") as f:
        assert f["runs/r0/gd/loss"].shape == (6,)
    with A.open(path) as a:
        check_rows(a.runs["r0"].solvers["gd"], 6)


def test_commits_in_one_block_share_one_opening(tmp_path):
    """`commits()` holds the file in SWMR write mode for every commit inside it (the
    driver's batch of members) and closes it at the end; a commit outside closes it itself."""
    path = tmp_path / "a.h5"
    with make(path) as w:
        add_solver(w, run="r0")
        add_solver(w, run="r1")
        with w.commits():
            append_k(w, 0, run="r0")
            assert _write_flags(path) == 0x05
            append_k(w, 0, run="r1")
            assert w.n_checkpoints("r0", "gd") == 1 and w.n_checkpoints("r1", "gd") == 1
        assert _write_flags(path) == 0
        append_k(w, 1, run="r0")
        assert _write_flags(path) == 0
    with A.open(path) as a:
        check_rows(a.runs["r0"].solvers["gd"], 2)
        check_rows(a.runs["r1"].solvers["gd"], 1)


def wait_until(pred, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.005)
    return False


def test_a_kill_inside_set_status_keeps_the_solvers_rows(tmp_path, monkeypatch):
    """A kill while `set_status` rewrote a solver's attributes can leave one unreadable
    ("len not positive after adjustment for EOA"); the rebuild (by --resume or by
    flowsim.open) used to drop the whole solver, rows and all."""
    from flowsim.archive import recovery

    path = tmp_path / "a.h5"
    with make(path) as w:
        add_solver(w)
        for k in range(3):
            append_k(w, k)
    real = h5py.AttributeManager.__getitem__

    def torn(self, name):
        if name == "status" and h5py.h5i.get_name(self._id) == b"/runs/r0/gd":
            raise OSError("Can't synchronously read data (len not positive after adjustment for EOA)")
        return real(self, name)

    monkeypatch.setattr(h5py.AttributeManager, "__getitem__", torn)
    recovery.rebuild(str(path))
    monkeypatch.undo()
    with A.open(path) as a:
        sv = a.runs["r0"].solvers["gd"]
        assert sv.n_checkpoints == 3 and sv.status == "running"
        check_rows(sv, 3)


# ----------------------------------------------------------------------------------------
# damaged files: one message and exit 2 from every command that reads them, no stray file
# ----------------------------------------------------------------------------------------

# A `flowsim run tests/scenarios/tiny.toml --set run.checkpoints={count=3000} --set
# run.t_end=3000 --set seeds=[0]` SIGKILLed 4 s in, then cut by 1000 bytes: its metadata
# checksums fail (HDF5 1.14, h5py 3), so it can be neither read nor rebuilt.
KILLED_THEN_TRUNCATED = Path(__file__).resolve().parent / "archives" / "killed-then-truncated.h5"


def _damaged(kind: str, path: Path) -> str:
    """Write a damaged archive of `kind` at `path`; the words its refusal must hold."""
    if kind == "killed then truncated":
        path.write_bytes(KILLED_THEN_TRUNCATED.read_bytes())
        return "damaged: its HDF5 structure cannot be read"
    if kind == "truncated":
        with A.ArchiveWriter.create(str(path), scenario_text="x", resolved={}, provenance={}, dtype="float64") as w:
            w.create_run("r0", params={}, seed=0, label="", point=0, init={"W0": np.ones(3)})
            w.create_solver("r0", "gd", preset={}, series=SERIES, discrete=True)
            for k in range(3):
                w.append("r0", "gd", t=0.1 * k, step=k, values=rows(k), checkpoint=state(k)[0])
        path.write_bytes(path.read_bytes()[:-1000])
        return "truncated HDF5 file"
    if kind == "zero bytes":
        path.write_bytes(b"")
        return "is empty, not an archive"
    if kind == "another HDF5 file":
        with h5py.File(path, "w") as f:
            f["x"] = [1, 2, 3]
        return "not a flowsim archive"
    path.write_text("a,b\n1,2\n")
    return "not an HDF5 file"


@pytest.mark.parametrize("kind", ["killed then truncated", "truncated", "zero bytes", "another HDF5 file",
                                  "not HDF5"])
def test_a_damaged_archive_is_one_message_and_exit_2_from_every_reader(tmp_path, kind):
    from helpers import call_cli

    path = tmp_path / "a.h5"
    words = _damaged(kind, path)
    before = path.read_bytes()
    tiny = Path(__file__).resolve().parent / "scenarios" / "tiny.toml"
    for command in (["inspect", path], ["plot", path, "-o", tmp_path / "figs"], ["compare", path],
                    ["run", tiny, "-o", path, "--resume", "-q"]):
        code, _, err = call_cli(*command)
        assert code == 2, (command, err)
        assert err.count("\n") == 1 and err.startswith("flowsim: error: ") and words in err, (command, err)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["a.h5"], command   # no stray file
        assert path.read_bytes() == before, command


def test_a_run_stores_only_the_tables_its_sweep_point_changes(tmp_path):
    """A long scenario (10 000 checkpoint times) is stored in the text and the resolved
    scenario, not again in each run's parameters, which still read back whole."""
    import json

    from flowsim.run.session import prepare

    times = ", ".join(f"{(i + 1) / 1000:.9f}" for i in range(10_000))
    tiny = (Path(__file__).resolve().parent / "scenarios" / "tiny.toml").read_text()
    path = tmp_path / "long.toml"
    path.write_text(tiny.replace("checkpoints = { count = 12 }", f"checkpoints = {{ times = [{times}] }}")
                    .replace("t_end = 30.0", "t_end = 10.0"))
    job = prepare(path, ["seeds=[0]"], output=tmp_path / "a.h5")
    sc = job.scenario
    with A.ArchiveWriter.create(str(job.out), scenario_text=sc.text, resolved=sc.resolved, provenance={},
                                dtype="float64") as w:
        for r in sc.runs:
            w.create_run(r.name, params=r.config, seed=r.seed, label=r.label, point=r.point,
                         init={"W0": np.ones(3)})
        extend = json.loads(json.dumps(sc.resolved))
        extend["run"]["t_end"] = 20.0
        w.extend_horizon(extend)
    with h5py.File(job.out, "r") as f:
        text = len(f.attrs["scenario_text"])
        assert text > 100_000
        assert all(len(run.attrs["params"]) < 1000 for run in f["runs"].values())
    with A.open(job.out) as a:
        for r in sc.runs:
            want = json.loads(json.dumps(r.config))
            want["run"]["t_end"] = 20.0
            assert a.runs[r.name].params == want


def test_a_reader_beside_a_live_writer_reads_again_after_a_failed_read(tmp_path, monkeypatch):
    """A live writer's structure change can change the file under a reader that opened it
    a moment before (1 'damaged' in 35 opens beside a quick-start run): with a writer live
    the reader reads again (for up to a second); with none the failure is the one message."""
    from flowsim.archive import reader

    path = tmp_path / "a.h5"
    with make(path) as w:
        add_solver(w)
        append_k(w, 0)
    real, fails = reader.decode_root_attrs, [1]

    def torn_once(attrs):
        if fails:
            fails.pop()
            raise RuntimeError("Unable to get group info (incorrect metadata checksum after all read attempts)")
        return real(attrs)

    monkeypatch.setattr(reader, "decode_root_attrs", torn_once)
    with make(tmp_path / "b.h5"):      # a writer of another file: none is live for `path`
        with pytest.raises(A.ArchiveError, match="damaged"):
            A.open(path)
    fails.append(1)
    with A.ArchiveWriter.resume(path):      # this process writes it: a live writer
        with A.open(path) as a:
            check_rows(a.runs["r0"].solvers["gd"], 1)
    assert not fails


def test_a_file_killed_after_metadata_past_its_recorded_end_reads_and_resumes(tmp_path):
    """A kill inside a commit can land after HDF5 wrote metadata past the end-of-file address
    its superblock records, and before the superblock recording the new end (test_sigkill_many
    met it once in 25 kills: an SWMR read opened the file, then failed reading it, "len not
    positive after adjustment for EOA"). Made here from a closed file: flags set as a killed
    SWMR writer leaves them, end of file recorded before its last global heap. flowsim reads every committed
    row without changing a byte, and resume continues it."""
    import struct

    from flowsim.archive.superblock import _lookup3

    path = tmp_path / "grown.h5"
    proc = _sample_writer(path, 5)          # stops after committing row 5
    _wait_line(proc, "done 5")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    raw = bytearray(path.read_bytes())
    raw[11] = 0x05                           # write access + SWMR write: a writer killed in SWMR mode
    # the end recorded just before the file's last global heap (the block such a kill left
    # past the recorded end: its variable-length attributes)
    raw[28:36] = struct.pack("<Q", raw.rindex(b"GCOL"))
    raw[44:48] = struct.pack("<I", _lookup3(bytes(raw[:44])))
    path.write_bytes(bytes(raw))
    before = path.read_bytes()
    with A.open(path) as a:
        check_rows(a.runs["r0"].solvers["gd"], 6)
        assert a.killed_inside_write
    assert path.read_bytes() == before
    with A.ArchiveWriter.resume(path) as w:
        assert w.n_checkpoints("r0", "gd") == 6
        for k in range(6, 8):
            append_k(w, k)
    with A.open(path) as a:
        check_rows(a.runs["r0"].solvers["gd"], 8)
