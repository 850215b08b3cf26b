"""Scale: no recompilation per segment or per seed, nor in a second identical run; the seed axis sharded over several
(CPU) devices gives the one-device results, and so does one run over two processes
(`jax.distributed`); `run --shard i/N` + `merge` reads like one run."""

import inspect
import os
import signal
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import h5py
import jax
import numpy as np
import pytest

from flowsim import archive
from flowsim.archive import ArchiveWriter
from flowsim.run.build import build_run
from flowsim.run.devices import SharedWriter
from flowsim.run.driver import STAT_KEYS, Driver, Interrupted
from flowsim.kinds.solvers import FLOW_METHODS
from flowsim.config import load_scenario
from helpers import call_cli as _cli
from reliability.conftest import committed, set_args, wait_for

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "scenarios" / "tiny.toml"
_TINY_OBSERVES = load_scenario(TINY).settings.run.observe
LOWERING = "/jax/core/compile/jaxpr_to_mlir_module_duration"


class _Count:
    """Counts lowerings to XLA (every jit compilation lowers once, persistent cache or not)."""

    def __init__(self):
        self.n = 0
        self.on = False
        jax.monitoring.register_event_duration_secs_listener(self)

    def __call__(self, event, duration, **kw):
        if self.on and event == LOWERING:
            self.n += 1


_COUNTER = _Count()


def _drive(tmp_path, tag, sets, stop_after=None):
    """Run TINY in this process; returns the number of compilations. `stop_after=k` stops
    the run (as SIGTERM would) once k checkpoints are committed."""
    sc = load_scenario(TINY, list(sets))
    built = {r.name: build_run(r.settings, r.seed) for r in sc.runs}
    w = ArchiveWriter.create(tmp_path / f"{tag}.h5", scenario_text=sc.text, resolved=sc.resolved,
                             provenance={}, dtype="float64")
    polls = iter(range(10**9))
    stop = (lambda: False) if stop_after is None else (lambda: next(polls) + 1 >= stop_after)
    _COUNTER.n, _COUNTER.on = 0, True
    try:
        with w:
            statuses = Driver(sc, w, progress=False, report=lambda s: None, should_stop=stop).run(built)
    except Interrupted:
        assert stop_after is not None
        return _COUNTER.n
    finally:
        _COUNTER.on = False
    assert all(s == "done" for per in statuses.values() for s in per.values()), statuses
    return _COUNTER.n


@pytest.mark.slow
def test_no_recompilation_per_segment_or_seed(tmp_path):
    """A warm-up run (2 seeds, 3 checkpoints, 2 sweep points) compiles everything once; the
    same shapes with 4× the segments and other seed values compile nothing; a third seed
    (a new batch shape) compiles at most what the warm-up did, independent of segments."""
    jax.clear_caches()
    one = ['run.observe=["loss", "ntg_eig", "weight_change"]']
    warm = _drive(tmp_path, "warm", ["seeds=[0, 1]", "run.checkpoints={count=3}", *one])
    assert warm > 0
    again = _drive(tmp_path, "again", ["seeds=[5, 6]", "run.checkpoints={count=12}", *one])
    assert again == 0, f"{again} compilation(s) for more segments / other seeds with unchanged shapes"
    three = _drive(tmp_path, "three", ["seeds=[0, 1, 2]", "run.checkpoints={count=12}", *one])
    assert 0 < three <= warm, f"3 seeds × 12 segments compiled {three} programs; 2 seeds × 3 segments {warm}"


@pytest.mark.slow
@pytest.mark.parametrize("method, activation", [("tsit5", "swish"), ("rock4", "swish"), ("filippov", "relu")])
def test_another_tolerance_compiles_nothing(tmp_path, method, activation):
    """The rungs of a tolerance ladder (this project's own oracle for a flow) share one
    compiled program: rtol and atol reach the step control as arrays, not as constants of
    the program, so a second and a third rtol compile nothing."""
    def rung(rtol):
        solver = f'{{name = "f", kind = "flow", method = "{method}", rtol = {rtol}, atol = {rtol}}}'
        return _drive(tmp_path, f"{method}-{rtol}", ["seeds=[0]", "run.checkpoints={count=3}", "run.t_end=5.0",
                                                      f'model.activation="{activation}"',
                                                      'run.observe=["loss"]', f"run.solvers=[{solver}]"])
    assert rung(1e-6) > 0
    assert [rung(1e-7), rung(1e-9)] == [0, 0]


_LOGGED_RUN = textwrap.dedent("""
    import logging, sys
    from flowsim import cli
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("jax._src.compiler").setLevel(logging.DEBUG)
    sys.exit(cli.main(sys.argv[1:]))
""")


@pytest.mark.slow
def test_a_second_identical_run_compiles_nothing(tmp_path):
    """Two `flowsim run` processes, one compilation cache: the second finds every program
    (each flow integrator's of the registry, the central flow's stepped by tsit5 and by
    rock4, and GD's) in the cache, per JAX's own compiler log. A host callback in a program
    (Equinox's runtime checks) would keep it out of the cache. One flow method per
    integrator (the Diffrax methods differ only in their tableau: tsit5 and the implicit
    kvaerno5 stand for them) and one sweep point: every program once, not 13 legs twice.
    The cache is the suite's (conftest): the first run compiles only what no other test has,
    and a program the cache cannot hold misses in the second run all the same."""
    # one flow method per integrator that runs on the tiny scenario's swish network
    # (filippov needs ReLU)
    family = {(spec.integrator, spec.implicit): m for m, spec in reversed(FLOW_METHODS.items()) if not spec.filippov}
    flows = [f'{{name = "{m}", kind = "flow", method = "{m}"}}' for m in family.values()]
    centrals = [f'{{name = "central-{m}", kind = "central-flow", learning_rate = 1.0, max_eigen = 2, method = "{m}"}}'
                for m in ("tsit5", "rock4")]
    solvers = ", ".join([*flows, *centrals, '"gd-lr1"'])
    scenario = tmp_path / "tiny.toml"     # without its sweep: one point
    scenario.write_text(Path(TINY).read_text().split("[sweep]")[0])
    logs = []
    for i in range(2):
        proc = subprocess.run([sys.executable, "-c", _LOGGED_RUN, "run", scenario, "-o", tmp_path / f"{i}.h5", "-q",
                               "--set", "run.checkpoints={count=3}", "--set", f"run.solvers=[{solvers}]"],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        logs.append(proc.stderr)
    assert "Persistent compilation cache hit" in logs[1]         # the log is on: the second run read the cache
    assert "host callbacks" not in logs[0], [ln for ln in logs[0].splitlines() if "host callbacks" in ln]
    misses = [ln for ln in logs[1].splitlines() if "PERSISTENT COMPILATION CACHE MISS" in ln]
    assert misses == [], misses


_SHARDED = textwrap.dedent("""
    import sys, json
    import jax, numpy as np
    import flowsim
    from flowsim.archive import ArchiveWriter
    from flowsim.run.build import build_run
    from flowsim.run.devices import shard
    from flowsim.run.batch import stack
    from flowsim.run.driver import Driver
    from flowsim.config import load_scenario

    out, = sys.argv[1:]
    sc = load_scenario(%r, ["seeds=[0, 1, 2, 3]", "run.checkpoints={count=5}"])
    built = {r.name: build_run(r.settings, r.seed) for r in sc.runs}
    batch = shard(stack([built[r.name].params for r in sc.runs[:4]]))
    used = len(batch["W"].sharding.device_set)
    with ArchiveWriter.create(out, scenario_text=sc.text, resolved=sc.resolved, provenance={},
                              dtype="float64") as w:
        Driver(sc, w, progress=False, report=lambda s: None).run(built)
    print(json.dumps({"devices": jax.device_count(), "used": used}))
""")


@pytest.mark.parametrize("given, expected", [
    ("", "--xla_cpu_enable_concurrency_optimized_scheduler=false"),
    ("--xla_force_host_platform_device_count=2",
     "--xla_force_host_platform_device_count=2 --xla_cpu_enable_concurrency_optimized_scheduler=false"),
    ("--xla_cpu_enable_concurrency_optimized_scheduler=true", "--xla_cpu_enable_concurrency_optimized_scheduler=true"),
])
def test_importing_flowsim_turns_off_the_xla_cpu_scheduler_that_deadlocks_unless_the_user_chose(given, expected):
    """The process boundary is the point: XLA reads XLA_FLAGS once, when its backend starts
    (see flowsim/__init__.py for the deadlock the flag avoids)."""
    env = dict(os.environ, XLA_FLAGS=given)
    proc = subprocess.run([sys.executable, "-c", "import flowsim, os; print(os.environ['XLA_FLAGS'])"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == expected


def _run_with_devices(tmp_path, n, tag):
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={n}", JAX_PLATFORMS="cpu")
    out = tmp_path / f"{tag}.h5"
    proc = subprocess.run([sys.executable, "-c", _SHARDED % str(TINY), str(out)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    return out, json.loads(proc.stdout.strip().splitlines()[-1])


def _series(path):
    with archive.open(path) as a:
        return {(r, s): (sv.t, sv["loss"], sv["weight_change"], sv.status)
                for r, run in a.runs.items() for s, sv in run.solvers.items()}


@pytest.mark.slow
def test_seed_axis_sharded_over_four_cpu_devices_equals_one_device(tmp_path):
    one, info1 = _run_with_devices(tmp_path, 1, "one")
    four, info4 = _run_with_devices(tmp_path, 4, "four")
    assert info1 == {"devices": 1, "used": 1}
    assert info4 == {"devices": 4, "used": 4}, info4
    a, b = _series(one), _series(four)
    assert a.keys() == b.keys() and len(a) == 2 * 4 * 2
    for k in a:
        t1, l1, w1, s1 = a[k]
        t4, l4, w4, s4 = b[k]
        assert s1 == s4 == "done", k
        np.testing.assert_array_equal(t1, t4)
        np.testing.assert_allclose(l4, l1, rtol=1e-9, atol=1e-14, err_msg=str(k))
        np.testing.assert_allclose(w4, w1, rtol=1e-9, atol=1e-14, err_msg=str(k))


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


# `python -m flowsim.cli` with a clock running 1 000× fast: its chunks look slow (size 1) and
# a commit is due after each, where the other process's chunks double and it commits once a
# second. Each process must still run the same chunks and commits, or their collectives wait
# on each other for ever (as they did, under load, before the driver took process 0's
# decisions on every process).
_FAST_CLOCK = ("import time\n"
               "for name in ('perf_counter', 'monotonic'):\n"
               "    setattr(time, name, (lambda f: lambda: 1e3 * f())(getattr(time, name)))\n")


def flowsim_after(code: str) -> list[str]:
    """The command line of `flowsim` run after `code` in its process (`_FAST_CLOCK`, `_FAILING`)."""
    return [sys.executable, "-c", code + "import sys\nfrom flowsim.cli import main\nsys.exit(main())"]


# `python -m flowsim.cli` with an error of its own as its first batch ends
_FAILING = ("from flowsim.run.driver import Driver\n"
            "def _finish(*a):\n"
            "    raise RuntimeError('an error of process 1 alone')\n"
            "Driver._finish = _finish\n")


def test_the_shared_writer_names_each_writer_method_a_question_or_a_write():
    """Off process 0 a `--distributed` run asks process 0 each question of the archive; a
    method returning a value but not listed as a question answered None there (the per-leg
    statistics of a resume did), so process 1 raised while process 0 waited in a collective
    until both aborted. Each method returning a value is a question, each returning None a
    write, and a method in neither list raises alike on every process."""
    methods = {n: typing.get_type_hints(f)["return"] for n, f in vars(ArchiveWriter).items()
               if inspect.isfunction(f) and not n.startswith("_")}
    del methods["commits"]      # the shared writer's own: one opening of the file on process 0
    assert SharedWriter.QUESTIONS == {n for n, r in methods.items() if r is not type(None)}
    assert SharedWriter.WRITES == {n for n, r in methods.items() if r is type(None)}
    off_primary = SharedWriter(None)
    assert off_primary.set_status("r", "s", status="done", stats={}) is None
    with pytest.raises(AttributeError, match="'rename_run' is neither one of its QUESTIONS"):
        off_primary.rename_run("r", "q")


def _start_distributed(tmp_path, *args, processes=2, devices=2, before=None) -> list[subprocess.Popen]:
    """`flowsim run --distributed ARGS` as `processes` processes of `devices` CPU devices each,
    joined through a local coordinator as a cluster job would be; process i runs the code
    `before[i]` first (`_FAST_CLOCK`, `_FAILING`)."""
    base = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", JAX_PLATFORMS="cpu",
                JAX_COORDINATOR_ADDRESS=f"localhost:{_free_port()}", JAX_NUM_PROCESSES=str(processes),
                FLOWSIM_CACHE_DIR=str(tmp_path / "cache"))
    before = before or {}
    command = {i: [*(flowsim_after(before[i]) if i in before else [sys.executable, "-m", "flowsim.cli"]),
                   "run", "--distributed", *map(str, args)] for i in range(processes)}
    return [subprocess.Popen(command[i], cwd=tmp_path, env=base | {"JAX_PROCESS_ID": str(i)},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(processes)]


def _finish(procs) -> list[tuple[int, str]]:
    """Each process's (returncode, stderr)."""
    try:
        errs = [p.communicate(timeout=400)[1] for p in procs]
        return [(p.returncode, err) for p, err in zip(procs, errs)]
    finally:
        for p in procs:
            p.kill()


def _distributed(tmp_path, *args, before=None):
    return _finish(_start_distributed(tmp_path, *args, before=before))


def _told(results) -> str:
    """What each process said, whole (pytest shortens a failed assertion's values, which cut
    the traceback that named this file's last regression)."""
    return "\n".join(f"process {i} exited {code}:\n{err}" for i, (code, err) in enumerate(results))


def _stats(path):
    with archive.open(path) as a:
        return {(r, s): {k: sv.stats[k] for k in STAT_KEYS} for r, run in a.runs.items()
                for s, sv in run.solvers.items()}


def _assert_same_sharpness(a, b):
    """Equal `sharpness` series (to 1e-9) and equal tracker products: a resume whose tracker
    started cold instead of from the checkpoint's vectors would take more."""
    with archive.open(a) as x, archive.open(b) as y:
        for r, run in x.runs.items():
            for s, sv in run.solvers.items():
                other = y.runs[r].solvers[s]
                assert sv.stats["observe_hvps"] == other.stats["observe_hvps"] > 0, (r, s)
                np.testing.assert_allclose(other["sharpness"], sv["sharpness"], rtol=1e-9, err_msg=f"{r} {s}")


def _assert_same_series(a, b, n):
    """Equal series (to 1e-9) and equal solver counts (a resume that restarted a member from
    its initial state instead of its checkpoint would count more steps)."""
    assert _stats(a) == _stats(b)
    a, b = _series(a), _series(b)
    assert a.keys() == b.keys() and len(a) == n
    for k in a:
        assert a[k][3] == b[k][3] == "done", k
        np.testing.assert_array_equal(a[k][0], b[k][0])
        for x, y in zip(a[k][1:3], b[k][1:3]):
            np.testing.assert_allclose(y, x, rtol=1e-9, atol=1e-14, err_msg=str(k))


@pytest.mark.slow
def test_one_run_over_two_processes_equals_one_process(tmp_path):
    """Two processes × two CPU devices, one program (jax.distributed): 3 seeds (replicated:
    gcd(3, 4) = 1), and a resume of 4 seeds (split over the 4 devices, so process 1 holds
    seeds 2 and 3 and must get their state, and the eigen-tracker's vectors, from process 0)
    from an archive another run left half done, equal the single-process results, though
    process 1's clock runs 1 000× fast (`_FAST_CLOCK`); bad input stops both processes with
    exit 2 and leaves the archive as it was."""
    three = ["seeds=[0, 1, 2]", "run.checkpoints={count=5}"]
    # eigen_rtol 1e-6: the sharpness from exact Hessian-vector products, so that one and two
    # processes agree to rounding (differenced products, taken at coarser accuracies on this
    # smooth network, turn the sharded sums' rounding into 6e-8 of the sharpness: measured)
    four = ["seeds=[0, 1, 2, 3]", "run.checkpoints={count=5}", f"run.observe={[*_TINY_OBSERVES, 'sharpness']}",
            "run.eigen_rtol=1e-6"]
    _drive(tmp_path, "one3", three)
    _drive(tmp_path, "one4", four)
    # stopped after 5 chunks: point 0 done for tsit5 (4 chunks), gd-lr1 after its first;
    # whatever the chunks' sizes were, some member is left part-way, for the resume below
    _drive(tmp_path, "half4", four, stop_after=5)
    with archive.open(tmp_path / "half4.h5") as a:
        assert any(0 < sv.n_checkpoints < 6 for run in a.runs.values() for sv in run.solvers.values())
    done = _distributed(tmp_path, TINY, "-o", tmp_path / "two3.h5", *set_args(three))
    assert [c for c, _ in done] == [0, 0], _told(done)
    assert "wrote" in done[0][1] and "wrote" not in done[1][1]     # process 0 reports
    # on CPU processes the per-step reduction costs more than a small model's step: said once
    assert "--distributed over CPU processes" in done[0][1] and "over CPU" not in done[1][1]
    _assert_same_series(tmp_path / "one3.h5", tmp_path / "two3.h5", 2 * 3 * 2)
    with archive.open(tmp_path / "two3.h5") as a:
        assert a.attrs["provenance"]["process_count"] == "2"
        assert a.attrs["provenance"]["device_count"] == "4"
    resumed = _distributed(tmp_path, TINY, "-o", tmp_path / "half4.h5", "--resume", *set_args(four),
                           before={1: _FAST_CLOCK})
    assert [c for c, _ in resumed] == [0, 0], _told(resumed)
    _assert_same_series(tmp_path / "one4.h5", tmp_path / "half4.h5", 2 * 4 * 2)
    _assert_same_sharpness(tmp_path / "one4.h5", tmp_path / "half4.h5")
    before = (tmp_path / "two3.h5").read_bytes()
    refused = _distributed(tmp_path, TINY, "-o", tmp_path / "two3.h5", *set_args(three))
    assert [c for c, _ in refused] == [2, 2], _told(refused)
    assert all("exists; pass --resume" in err for _, err in refused)
    assert (tmp_path / "two3.h5").read_bytes() == before


@pytest.mark.slow
def test_a_stop_reaching_one_process_stops_both(tmp_path):
    """SIGTERM to process 1 only: both processes stop after the same checkpoint (exit 130),
    and `--resume --distributed` completes the archive to the single-process results."""
    sets = ["seeds=[0, 1]", "run.checkpoints={count=60}", 'run.solvers=["tsit5"]']
    args = [TINY, "-o", tmp_path / "stop.h5", *set_args(sets)]
    _drive(tmp_path, "one", sets)
    procs = _start_distributed(tmp_path, *args)
    assert wait_for(lambda: committed(tmp_path / "stop.h5") >= 10, 300, procs[0])
    procs[1].send_signal(signal.SIGTERM)
    stopped = _finish(procs)
    assert [c for c, _ in stopped] == [130, 130], _told(stopped)
    assert "--resume --distributed" in stopped[0][1]
    rows = committed(tmp_path / "stop.h5")
    assert 10 <= rows < committed(tmp_path / "one.h5") and rows % 2 == 0   # both seeds stopped alike
    resumed = _distributed(tmp_path, *args, "--resume")
    assert [c for c, _ in resumed] == [0, 0], _told(resumed)
    _assert_same_series(tmp_path / "one.h5", tmp_path / "stop.h5", 2 * 2)


@pytest.mark.slow
def test_an_error_of_one_process_ends_both_at_once(tmp_path):
    """Process 1 alone raises as its first batch ends (`_FAILING`): it prints its traceback
    and leaves, and process 0's next collective fails for the lost peer, so both exit 1,
    process 0 saying how to resume (before, both waited, one in JAX's shutdown barrier and
    one in a collective, until the barrier timed out after 300 s and aborted them: -6); the
    archive holds the rows committed before."""
    sets = ["seeds=[0, 1]", "run.checkpoints={count=3}", 'run.solvers=["gd-lr1"]']
    failed = _distributed(tmp_path, TINY, "-o", tmp_path / "x.h5", *set_args(sets), before={1: _FAILING})
    assert [c for c, _ in failed] == [1, 1], _told(failed)
    assert "RuntimeError: an error of process 1 alone" in failed[1][1], _told(failed)
    assert "another process stopped first" in failed[0][1] and "--resume --distributed`" in failed[0][1], \
        _told(failed)
    assert committed(tmp_path / "x.h5") == 2 * 4


@pytest.mark.slow
def test_shard_parts_and_merge_read_like_one_run(tmp_path):
    sets = ["--set", "seeds=[0, 1, 2]", "--set", "run.checkpoints={count=4}", "-q"]
    full = _cli("run", TINY, "-o", tmp_path / "full.h5", *sets, cwd=tmp_path)
    assert full.returncode == 0, full.stderr
    parts = tmp_path / "parts"
    for i in range(4):
        p = _cli("run", TINY, "--shard", f"{i}/4", "-o", parts / f"p{i}.h5", *sets, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
    with archive.open(parts / "p1.h5") as a:     # 6 runs in 4 parts: 1, 2, 1, 2 runs
        assert list(a.runs) == ["p0-seed1", "p0-seed2"] and a.attrs["provenance"]["shard"] == "1/4"
        np.testing.assert_array_equal(a.data["X_train"], archive.open(tmp_path / "full.h5").data["X_train"])
    m = _cli("merge", tmp_path / "merged.h5", *(parts / f"p{i}.h5" for i in range(4)), cwd=tmp_path)
    assert m.returncode == 0, m.stderr
    # no copying: the merged file holds links only
    assert (tmp_path / "merged.h5").stat().st_size < 0.1 * (parts / "p1.h5").stat().st_size
    with h5py.File(tmp_path / "merged.h5", "r") as f:
        assert isinstance(f["runs"].get("p0-seed0", getlink=True), h5py.ExternalLink)
    a, b = _series(tmp_path / "full.h5"), _series(tmp_path / "merged.h5")
    assert a.keys() == b.keys() and len(a) == 12
    for k in a:
        for x, y in zip(a[k][:3], b[k][:3]):
            np.testing.assert_allclose(y, x, rtol=1e-9, atol=1e-14, err_msg=str(k))
    with archive.open(tmp_path / "merged.h5") as arc:
        assert arc.attrs["scenario_resolved"]["name"] == "tiny"
        assert arc.runs["p1-seed2"].data["X_train"].shape == (12, 4)
        assert arc.runs["p1-seed2"].init["W0"].shape == (24, 4)
    ins = _cli("inspect", tmp_path / "merged.h5", cwd=tmp_path)
    assert ins.returncode == 0, ins.stderr
    assert ins.stdout.count(" run p") == 6
    # moved together with its parts (relative links), the merged file still reads
    moved = tmp_path / "moved"
    moved.mkdir()
    (tmp_path / "merged.h5").rename(moved / "merged.h5")
    parts.rename(moved / "parts")
    ins = _cli("inspect", moved / "merged.h5", cwd=ROOT)
    assert ins.returncode == 0 and ins.stdout.count(" run p") == 6, ins.stderr


@pytest.mark.slow
def test_shard_and_merge_refuse_bad_input(tmp_path):
    for bad in ("4/4", "x", "1/0", "-1/2"):
        p = _cli("run", TINY, "--shard", bad, "-o", tmp_path / "x.h5", cwd=tmp_path)
        assert p.returncode == 2 and "--shard" in p.stderr, (bad, p.stderr)
    p = _cli("run", TINY, "--shard", "5/9", "-o", tmp_path / "x.h5", cwd=tmp_path)
    assert p.returncode == 2 and "none of the scenario" in p.stderr
    m = _cli("merge", tmp_path / "m.h5", tmp_path / "missing.h5", cwd=tmp_path)
    assert m.returncode == 2


@pytest.mark.slow
def test_distributed_outside_a_cluster_is_refused(tmp_path, monkeypatch):
    for name in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        monkeypatch.delenv(name, raising=False)
    p = _cli("run", TINY, "--distributed", "-o", tmp_path / "x.h5", cwd=tmp_path)
    assert p.returncode == 2 and "JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID" in p.stderr, p.stderr
    monkeypatch.setenv("JAX_NUM_PROCESSES", "two")
    p = _cli("run", TINY, "--distributed", "-o", tmp_path / "x.h5", cwd=tmp_path)
    assert p.returncode == 2 and "JAX_NUM_PROCESSES='two'" in p.stderr, p.stderr
    assert not (tmp_path / "x.h5").exists()


@pytest.mark.slow
def test_a_sweep_of_varied_shapes_runs_in_bounded_memory(tmp_path):
    """Each width compiles its own programs; those of finished points are released, so the
    process's memory mappings and RSS stop growing with the sweep's length (before: about
    100 mappings and 9 MiB more per point, and a 200-point sweep crashed near the system's
    limit of 65 530 mappings)."""
    from flowsim.run.session import drive, open_archive, prepare

    points = 12
    (tmp_path / "sweep.toml").write_text(textwrap.dedent(f"""\
        name = "widths"
        seeds = [0]
        [data]
        kind = "sphere-sine"
        n = 8
        d = 3
        n_test = 4
        [model]
        width = 4
        [run]
        t_end = 1.0
        checkpoints = {{ count = 2 }}
        solvers = ["gd-lr0.1"]
        observe = ["loss"]
        [sweep]
        "model.width" = {list(range(2, 2 + points))}
        """))
    seen = []

    def report(line):   # once per finished point
        maps = sum(1 for _ in open("/proc/self/maps"))
        rss = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        seen.append((maps, rss))

    job = prepare(tmp_path / "sweep.toml", output=tmp_path / "sweep.h5")
    drive(job, open_archive(job), progress=False, report=report)
    assert len(seen) == points
    (maps4, rss4), (maps_end, rss_end) = seen[3], seen[-1]
    assert maps_end <= maps4 + 150, [m for m, _ in seen]
    assert rss_end <= rss4 + 40 * 2**20, [r >> 20 for _, r in seen]
