"""issue 55's figures for RMSProp's central flow on central-rmsprop, over its first 300 steps
(the onset at step 166), through bench/bench_central_rmsprop.py, so that the bench cannot rot:
the central flow against the package's algorithm corrected and Richardson-extrapolated from
its own forward Euler at 4/8/16 substeps per step (independent of flowsim's field), the
predicted loss against RMSProp's smoothed loss, and the cost per step. The whole run (1 000
steps, step 600) is the bench's: 8.1e-6, 2.7 %, 12.8 (bench/results/central-rmsprop.md)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import bench_central_rmsprop as bench  # noqa: E402
import flowsim  # noqa: E402
from flowsim.analysis import compare_central as central  # noqa: E402
from flowsim.run.precision import enable_x64  # noqa: E402


@pytest.mark.slow
def test_rmsprops_central_flow_meets_the_issues_figures(tmp_path):
    enable_x64()
    out = str(tmp_path / "central-rmsprop.h5")
    bench.run_scenario(out, bench.QUICK_STEPS)
    _, fig, _ = bench.measure(out, bench.QUICK_STEPS)
    assert fig["onset"] is not None and fig["onset"] < bench.QUICK_STEPS - 100
    assert 1.8 <= fig["order"] <= 2.2                    # the reference's Euler is first order
    assert fig["second_held"] == 0                       # one direction at the edge: its closed form holds
    assert fig["rel_theta"] <= 1e-3                      # the issue's target
    assert fig["loss_mean"] <= 0.05
    assert fig["per_step"] <= 20
    # `flowsim compare`'s central section pairs RMSProp with its central flow, its stable flow
    # and its twin, and reads the preconditioned sharpness as the sharpness
    (track,) = central.archive_tracks(flowsim.open(out))
    assert (track.gd, track.central, track.flow, track.twin) == ("rmsprop", "rmsprop-central", "rmsprop-flow",
                                                                 "rmsprop-twin")
    solvers = flowsim.open(out).runs["seed0"].solvers
    assert np.array_equal(track.sharp_gd, solvers["rmsprop"]["preconditioned_sharpness"][: len(track.t)])
    after = slice(track.onset + 100, None)
    assert track.onset == fig["onset"] and np.all(track.d_flow[after] > track.d_central[after])
