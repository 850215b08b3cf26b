"""Numerical failures are results: GD that diverges and a flow that hits `max_steps` are
recorded with their status, the time they happened and the last good state; `inspect` and
`plot` show them; the other seeds and solvers complete. (A start whose loss or gradient is
not finite is refused before anything runs: tests/test_early_end.py; a flow that turns
non-finite ends `nonfinite` where it is: tests/test_engine.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from flowsim import archive as A

SCENARIO = """\
name = "numerical"
seeds = [0, 1]

[data]
kind = "csv"
path = "ok.csv"
target = "y"
standardize = false
test_fraction = 0.25

[model]
width = 12
activation = "swish"

[run]
t_end = 20.0
checkpoints = { count = 4 }
observe = ["loss", "weights"]
solvers = [
  "gd-lr1",
  { name = "gd-diverge", kind = "gd", learning_rate = 4.0, divergence_factor = 100.0 },
  { name = "flow-short", kind = "flow", method = "tsit5", max_steps = 8 },
]

[sweep]
"data.path" = ["ok.csv", "big.csv"]     # big.csv: inputs 30× larger, GD at η = 1 diverges
"""


@pytest.fixture(scope="module")
def numerical(tmp_path_factory):
    d = tmp_path_factory.mktemp("numerical")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(12, 3))
    y = np.sin(X.sum(1))
    for name, scale in (("ok.csv", 1.0), ("big.csv", 30.0)):
        np.savetxt(d / name, np.c_[X * scale, y], delimiter=",", header="a,b,c,y", comments="")
    (d / "numerical.toml").write_text(SCENARIO)
    return d


@pytest.fixture(scope="module")
def result(numerical):
    """Run once through the command (in this process); (exit status, stderr, archive)."""
    import signal

    from flowsim.cli import command as cli

    out = numerical / "numerical.h5"
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    import io
    import contextlib
    import os

    err = io.StringIO()
    old = os.environ.get("FLOWSIM_CACHE_DIR")
    os.environ["FLOWSIM_CACHE_DIR"] = ""
    try:
        with contextlib.redirect_stderr(err):
            code = cli.main(["run", str(numerical / "numerical.toml"), "-o", str(out), "-q"])
    finally:
        if old is None:
            os.environ.pop("FLOWSIM_CACHE_DIR", None)
        else:
            os.environ["FLOWSIM_CACHE_DIR"] = old
    assert {s: signal.getsignal(s) for s in saved} == saved
    return code, err.getvalue(), out


def statuses(path):
    with A.open(path) as a:
        return {(r.label.split("=")[-1].strip('"'), s.name): s.status
                for r in a.runs.values() for s in r.solvers.values()}


@pytest.mark.slow
def test_failures_are_recorded_and_the_rest_completes(result):
    code, err, out = result
    assert code == 0, err                       # numerical statuses are results, not errors
    got = statuses(out)
    assert got[("ok.csv", "gd-lr1")] == "done"
    assert got[("ok.csv", "gd-diverge")] == "diverged"
    assert got[("ok.csv", "flow-short")] == "max_steps"
    assert got[("big.csv", "flow-short")] == "max_steps"
    assert got[("big.csv", "gd-lr1")] == "diverged"
    with A.open(out) as a:
        for run in a.runs.values():
            for sv in run.solvers.values():
                assert sv.n_checkpoints >= 1 and sv.t[-1] == sv.status_time, (run.name, sv.name)
                state, attrs = sv.checkpoint
                assert attrs["code"] != 0 or sv.status == "done"
                if sv.status == "done":
                    assert sv.t[-1] == 20.0
                    continue
                assert sv.message                           # advice for the user
                # the last good state: finite weights and loss, before t_end (GD at η = 4 on
                # big.csv diverges at its first step: its last good state is the start)
                assert 0 < sv.status_time < 20.0 or (sv.status_time == 0.0 and "big.csv" in run.label)
                assert np.isfinite(sv["weights"][-1]).all() and np.isfinite(sv["loss"][-1])
                assert all(np.isfinite(v).all() for v in state.values())


@pytest.mark.slow
def test_diverged_gd_keeps_its_last_good_step(result):
    _, _, out = result
    with A.open(out) as a:
        sv = next(r for r in a.runs.values() if "ok.csv" in r.label).solvers["gd-diverge"]
        assert sv.status == "diverged"
        assert sv.step[-1] * 4.0 == sv.t[-1] == sv.status_time < 20.0
        # the last state recorded is the last one GD reached before its divergence check
        # failed: finite, and resumable from the checkpoint
        assert np.isfinite(sv["weights"][-1]).all()
        state, attrs = sv.checkpoint
        assert attrs["steps"] == sv.step[-1] and all(np.isfinite(v).all() for v in state.values())


@pytest.mark.slow
def test_inspect_and_plot_show_the_statuses(result, inproc, tmp_path):
    _, _, out = result
    code, text, err = inproc("inspect", out)
    assert code == 0, err
    for word in ("diverged at t = ", "max_steps at t = "):
        assert word in text, text
    code, files, err = inproc("plot", out, "-o", tmp_path / "figs")
    assert code == 0, err
    pngs = list((tmp_path / "figs").glob("*.png"))
    assert pngs and all(p.stat().st_size > 10_000 for p in pngs)
    from flowsim import plots

    with A.open(out) as a:
        traces = plots.gather(a)
    ends = {s for tr in traces for _, s in tr.early_ends}
    assert {"diverged", "max_steps"} <= ends
