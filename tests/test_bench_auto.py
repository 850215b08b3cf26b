"""bench/bench_auto.py's log-spaced-quadratic case on its two smallest spectra, so that the bench
cannot rot (it once unpacked three values from a quadratic that returns four): its table rows
hold the cost, an error against the closed form within 10× rtol and no advice, and the growth
exponent is that of the costs in its rows."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import bench_auto as bench  # noqa: E402


def test_the_log_quadratic_case_reports_costs_errors_and_their_growth():
    lams, rtol = [1e2, 3e2], 1e-6
    table, slope = bench.case_log_quadratic(rtol, True, lams)
    assert [row[0] for row in table.rows] == ["100", "300"]
    costs = [int(row[3]) for row in table.rows]
    assert all(c > 0 for c in costs) and costs[1] > costs[0]
    assert all(float(row[4]) <= 10 for row in table.rows)       # error / rtol
    assert [row[5] for row in table.rows] == ["none", "none"]
    assert np.isclose(slope, np.log(costs[1] / costs[0]) / np.log(lams[1] / lams[0]))
