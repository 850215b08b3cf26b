"""bench/bench_observe.py's end-to-end table (issue 53's own measure) on a short horizon, so
that the bench cannot rot: one row per observation and leg, each ratio the archive's
observing time over its integrating time, as `flowsim inspect` reads them."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import bench_observe as bench  # noqa: E402


@pytest.mark.slow
def test_the_end_to_end_table_holds_each_leg_s_observing_over_integrating():
    table = bench.end_to_end(rounds=1, rows=2, sets=("run.t_end=0.4",))
    assert [row[:2] for row in table.rows] == [["loss, sharpness", "auto"], ["loss, sharpness", "gd-0.04"],
                                              ["loss, hessian_top", "auto"], ["loss, hessian_top", "gd-0.04"]]
    for _, _, median, spread, target in table.rows:
        low, high = (float(x) for x in spread.split("–"))
        assert 0 < low == float(median) == high and math.isfinite(high)     # one round: its own range
        assert target in ("≤ 0.3", "≤ 1")
