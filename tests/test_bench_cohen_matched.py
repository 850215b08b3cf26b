"""bench/bench_cohen_matched.py end to end on bench_scale_flow's small student (--quick), so that
it cannot rot: one row for Cohen et al.'s scheme and one per `auto` rtol, each ratio the
scheme's cost over the row's, and the equal-error mark agreeing with the errors in the row."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import bench_cohen_matched as bench  # noqa: E402
import bench_core  # noqa: E402


@pytest.mark.slow
def test_the_quick_table_sets_the_scheme_beside_auto(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_core, "ROOT", tmp_path)       # publish names the file relative to it
    monkeypatch.setattr(bench_core, "RESULTS", tmp_path / "results")
    assert bench.main(["--quick", "--rtols", "1e-6", "1e-3", "--cache", str(tmp_path / "cache")]) == 0
    rows = [line.split(" | ") for line in (tmp_path / "results" / "quick" / "cohen_matched.md").read_text().splitlines()
            if line.startswith("| Cohen") or line.startswith("| auto")]
    assert [r[0] for r in rows][1:] == ["| auto, rtol 1e-06", "| auto, rtol 0.001"]
    cohen_cost, cohen_worst = float(rows[0][2]), float(rows[0][3])
    for r in rows[1:]:
        cost, worst, ratio, mark = float(r[2]), float(r[3]), float(r[5]), r[6]
        assert ratio == pytest.approx(cohen_cost / cost, rel=2e-2)      # both printed to 3 digits
        assert mark.startswith("yes") == (worst <= cohen_worst)
    assert float(rows[1][3]) <= 10 * 1e-6       # auto at 1e-6 within 10× its rtol
