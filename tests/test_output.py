"""What the commands print and write tells the truth: `-q` is quiet, a missing archive
leaves nothing behind, and the reports say what they can and cannot show."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import call_cli, run_cli

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "scenarios" / "tiny.toml"
ONE = ["--set", "seeds=[0]", "--set", 'run.solvers=["gd-lr1"]', "--set", 'run.observe=["loss"]']


def test_quiet_run_prints_nothing(tmp_path):
    out = tmp_path / "tiny.h5"
    rc, stdout, stderr = call_cli("run", TINY, "-o", out, "-q", *ONE)
    assert rc == 0 and out.exists()
    assert stdout == "" and stderr == "", (stdout, stderr)


def test_plot_of_a_missing_archive_creates_nothing(tmp_path):
    rc, _, err = call_cli("plot", tmp_path / "nope.h5", "-o", tmp_path / "figs")
    assert rc == 2 and "nope.h5" in err
    rc, _, err = call_cli("plot", "runs/nope.h5", cwd=tmp_path)     # the default folder, runs/nope
    assert rc == 2
    assert list(tmp_path.iterdir()) == []
