"""bench/bench_flow_overhead.py on a small Fig. 1 problem, so that the bench cannot rot, with
oracles for what it times: `_attempt` ended on a fixed step is the engine's Tsit5 step (c′)
bit for bit, Diffrax's step (c) the same to round-off, the flow stepped by Diffrax's Tsit5 (e′)
ends where the engine's does to round-off, and the driver's
evaluations are one `advance` call's plus the start-up's (a flow's steps do not depend on its
checkpoints)."""

import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import bench_flow_overhead as bench  # noqa: E402
from bench_core import fig1_scenario, preset  # noqa: E402
from flowsim.run.integrators import flow_integrator  # noqa: E402


@pytest.mark.slow
def test_the_components_time_the_same_steps():
    cfg = dict(width=50, t_end=200.0, steps=3, gd_steps=20, grad_calls=2)
    scenario = Path(tempfile.mkdtemp()) / "fig1-overhead.toml"
    scenario.write_text(fig1_scenario("flow_overhead", cfg["width"], cfg["t_end"]))
    fns, deviation = bench.components(scenario, cfg)
    diffrax, bare, attempts = fns["c"]()[0], fns["w"]()[0], fns["d"]()[0]
    assert np.array_equal(np.asarray(bare[1]["W"]), np.asarray(attempts[1]["W"]))    # y after 3 steps
    assert float(bare[0]) == float(attempts[0]) == float(diffrax[0]) == pytest.approx(3 * bench.FIXED_STEP)
    W, W_diffrax = np.asarray(bare[1]["W"]), np.asarray(diffrax[1]["W"])
    assert np.linalg.norm(W - W_diffrax) <= 1e-14 * np.linalg.norm(W_diffrax)     # round-off
    assert deviation <= 1e-9           # the same method, other rounding, over the whole flow (rtol 1e-8)
    per, cpu, evals = bench.measure(fns, rounds=1)
    assert evals["f"] == evals["e"] + flow_integrator(preset("tsit5")).init_evals
    # GD: one gradient a step (the first is `init`'s, each step's look-ahead kept in the state)
    assert evals["b"] == cfg["gd_steps"] and evals["c"] == evals["w"] == evals["d"] == 6 * cfg["steps"]
    assert all(math.isfinite(v) and v > 0 for v in (*per.values(), *cpu.values()))
    # the measure: both legs of one run, per evaluation (each leg's integration time)
    flow, gd = bench.legs(scenario.parent, cfg)
    assert all(math.isfinite(v) and v >= 0 for v in (flow, gd))     # (a small leg is mostly observing)
