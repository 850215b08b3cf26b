"""Scale: no recompilation per segment or per seed; the seed axis sharded over several
(CPU) devices gives the one-device results; `run --shard i/N` + `merge` reads like one run."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import jax
import numpy as np
import pytest

from flowsim import archive
from flowsim.archive import ArchiveWriter
from flowsim.build import build_run
from flowsim.driver import Driver
from flowsim.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "scenarios" / "tiny.toml"
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


def _drive(tmp_path, tag, sets):
    sc = load_scenario(TINY, list(sets))
    built = {r.name: build_run(r.config, r.seed) for r in sc.runs}
    w = ArchiveWriter.create(tmp_path / f"{tag}.h5", scenario_text=sc.text, resolved=sc.resolved,
                             provenance={}, dtype="float64")
    _COUNTER.n, _COUNTER.on = 0, True
    try:
        with w:
            statuses = Driver(sc, w, progress=False, report=lambda s: None).run(built)
    finally:
        _COUNTER.on = False
    assert all(s == "done" for per in statuses.values() for s in per.values()), statuses
    return _COUNTER.n


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


_SHARDED = textwrap.dedent("""
    import sys, json
    import jax, numpy as np
    import flowsim
    from flowsim.archive import ArchiveWriter
    from flowsim.build import build_run
    from flowsim.driver import Driver, _shard, _stack
    from flowsim.scenario import load_scenario

    out, = sys.argv[1:]
    sc = load_scenario(%r, ["seeds=[0, 1, 2, 3]", "run.checkpoints={count=5}"])
    built = {r.name: build_run(r.config, r.seed) for r in sc.runs}
    batch = _shard(_stack([built[r.name].params for r in sc.runs[:4]]))
    used = len(batch["W"].sharding.device_set)
    with ArchiveWriter.create(out, scenario_text=sc.text, resolved=sc.resolved, provenance={},
                              dtype="float64") as w:
        Driver(sc, w, progress=False, report=lambda s: None).run(built)
    print(json.dumps({"devices": jax.device_count(), "used": used}))
""")


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


def _cli(*args, cwd):
    proc = subprocess.run([sys.executable, "-m", "flowsim.cli", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=600)
    return proc


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


def test_shard_and_merge_refuse_bad_input(tmp_path):
    for bad in ("4/4", "x", "1/0", "-1/2"):
        p = _cli("run", TINY, "--shard", bad, "-o", tmp_path / "x.h5", cwd=tmp_path)
        assert p.returncode == 2 and "--shard" in p.stderr, (bad, p.stderr)
    p = _cli("run", TINY, "--shard", "5/9", "-o", tmp_path / "x.h5", cwd=tmp_path)
    assert p.returncode == 2 and "none of the scenario" in p.stderr
    m = _cli("merge", tmp_path / "m.h5", tmp_path / "missing.h5", cwd=tmp_path)
    assert m.returncode == 2
