"""bench/bench_sharpness.py on one point of central-scale's network, so that the bench cannot
rot, and an oracle for the stopped Lanczos on a real network: the value it stops at equals
the 32-step value to rounding, with the residual it promises, in fewer steps."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import bench_sharpness as bench  # noqa: E402
from bench_core import ROOT  # noqa: E402
from flowsim.config import load_scenario  # noqa: E402
from flowsim.observe.stability import LANCZOS_RTOL, LANCZOS_STEPS  # noqa: E402
from flowsim.run.build import build_run  # noqa: E402
from flowsim.run.precision import enable_x64  # noqa: E402


@pytest.mark.slow
def test_the_stopped_lanczos_matches_32_steps_on_central_scale():
    enable_x64()
    sc = load_scenario(ROOT / "scenarios" / "central-scale.toml")
    b = build_run(sc.runs[0].settings, sc.runs[0].seed)
    table, steps, walls = bench.measure(b.problem, b.params, [(0.05, 300)], rounds=1)
    (row,) = table.rows
    assert steps[0] < LANCZOS_STEPS and int(row[3]) == steps[0]
    assert float(row[4]) <= 1e-12                   # |θ − θ₃₂| / θ₃₂
    assert float(row[5]) <= LANCZOS_RTOL            # residual / θ
    assert 40 < float(row[1]) < 50 and walls[0] > 0   # GD η = 0.05 at t = 15: past its 2/η = 40
