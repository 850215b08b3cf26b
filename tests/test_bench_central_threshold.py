"""bench/bench_central_threshold.py on central-mlp's leg after its onset, so that the bench
cannot rot: the same stretch from the same state at two thresholds, one of which leaves out a
free direction (ηλ/2 = 0.44: tracked and coupled at 0.4, not at 0.9). Measured: 270 and 100
third-derivative products, the weights 1.16e-5 apart relative to |W| (8.3e-5 of their
displacement), the same steps."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import bench_central_threshold as bench  # noqa: E402
from flowsim.run.precision import enable_x64  # noqa: E402


@pytest.mark.slow
def test_a_higher_threshold_pays_fewer_third_derivatives_for_nearly_the_same_weights():
    enable_x64()
    table, note = bench.measure("central-mlp", "central-0.1", 16.0, 4.0, 4.0, (0.4, 0.9))
    low, high = table.rows
    assert float(low[7]) == 0.0                                 # the reference is itself
    assert int(high[4]) < 0.5 * int(low[4])                     # third-derivative products
    assert 0.0 < float(high[7]) <= 1e-4                         # rel ‖ΔW‖ / ‖W‖
    assert "1 direction(s) held" in note
