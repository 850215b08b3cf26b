"""The researcher's workflow: what used to go silently wrong is now said, and refused where
it cannot be what was meant (issue "sweeps as data, nothing silent")."""

import re
from pathlib import Path

import pytest

from flowsim import archive
from flowsim.config import ScenarioError, load_scenario, loads_scenario
from flowsim.config.files import display
from flowsim.run.driver import Interrupted
from flowsim.run.session import prepare, run_scenario
from flowsim.status import Status
from helpers import call_cli

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "scenarios" / "tiny.toml"     # sweeps model.scaling over two points
ONE = ["seeds=[0]", 'sweep."model.scaling"=[{kind="ntk"}]', "run.checkpoints={count=3}"]


def _sets(*sets):
    return [a for s in sets for a in ("--set", s)]


# ---- --set and [sweep] ------------------------------------------------------------------

def test_a_set_of_a_swept_key_is_refused_naming_the_sweep():
    with pytest.raises(ScenarioError) as err:
        load_scenario(TINY, ["model.scaling.kind=ntk"])
    msg = str(err.value)
    assert msg.startswith("--set: ") and err.value.key == "model.scaling.kind"
    assert "swept by [sweep]" in msg and "--set 'sweep.\"model.scaling\"=[" in msg
    # a whole table above the swept key is replaced too
    with pytest.raises(ScenarioError, match="swept by"):
        load_scenario(TINY, ['model={width=5, scaling={kind="ntk"}}'])
    # keys beside the sweep still apply
    assert {r.settings.model.width for r in load_scenario(TINY, ["model.width=7"]).runs} == {7}


def test_the_command_exits_2_on_a_swept_set(tmp_path):
    res = call_cli("run", TINY, "-o", tmp_path / "a.h5", "-q", *_sets("model.scaling.kind=ntk"))
    assert res.returncode == 2 and "swept by [sweep]" in res.stderr
    assert not (tmp_path / "a.h5").exists()


def test_an_error_in_a_sweep_list_set_on_the_command_line_names_set():
    with pytest.raises(ScenarioError) as err:
        load_scenario(TINY, ['sweep."model.scaling"=[{kind="ntk"}, {kind="asymmetric", gamma=3.0}]'])
    assert str(err.value).startswith("--set: sweep point 1") and "gamma" in str(err.value)
    with pytest.raises(ScenarioError) as err:        # the same mistake in the file names the file
        loads_scenario(TINY.read_text().replace("gamma = 0.2", "gamma = 3.0"), path=TINY)
    assert str(err.value).startswith(f"{display(TINY)}: sweep point 1") and "gamma" in str(err.value)


# ---- tolerances the run cannot honour ------------------------------------------------------

def test_float32_refuses_a_flow_tolerance_below_its_resolution():
    with pytest.raises(ScenarioError) as err:
        load_scenario(TINY, ["dtype=float32"])
    msg = str(err.value)
    assert err.value.key == "run.solvers[0]" and '"tsit5"' in msg and "rtol = 1e-08" in msg
    assert 'dtype = "float32"' in msg and "dopri5-fast" in msg
    sc = load_scenario(TINY, ["dtype=float32", 'run.solvers=["dopri5-fast", "gd-lr1"]'])
    assert sc.settings.dtype == "float32"
    # a reference tighter than float32 is refused too, under its own key
    with pytest.raises(ScenarioError) as err:
        load_scenario(TINY, ["dtype=float32", 'run.solvers=[{name="f", kind="flow", method="dopri5", '
                             'rtol=1e-5, atol=1e-7, reference="dopri8-tight"}]'])
    assert err.value.key == "run.solvers[0].reference"
    # the modified flow is a flow too (the registry's discrete flag, not its kind name)
    with pytest.raises(ScenarioError, match="rtol = 1e-08"):
        load_scenario(TINY, ["dtype=float32", 'run.solvers=[{name="m", kind="modified-flow", method="tsit5", '
                             'rtol=1e-8, atol=1e-10, learning_rate=1.0}]'])


def test_a_t_end_that_gd_would_miss_is_refused():
    with pytest.raises(ScenarioError) as err:
        load_scenario(TINY, ["run.t_end=30.4"])
    msg = str(err.value)
    assert err.value.key == "run.t_end" and '"gd-lr1"' in msg and "end at t = 30" in msg
    load_scenario(TINY, ["run.t_end=30.4", 'run.solvers=["tsit5"]'])          # flow alone: fine
    load_scenario(TINY, ["run.t_end=30.5", 'run.solvers=["gd-lr0.1"]'])      # 305 steps of 0.1


def test_a_non_smooth_activation_under_a_tight_flow_tolerance_is_warned_about(tmp_path, capsys):
    assert load_scenario(TINY).warnings == ()                     # swish: smooth
    sc = load_scenario(TINY, ["model.activation=relu"])
    assert len(sc.warnings) == 1 and '"tsit5"' in sc.warnings[0] and "bosh3-relu" in sc.warnings[0]
    assert load_scenario(TINY, ["model.activation=relu", 'run.solvers=["bosh3-relu", "gd-lr1"]']).warnings == ()
    assert "bosh3-relu" in Status.MAX_STEPS.advice
    res = call_cli("run", TINY, "-o", tmp_path / "r.h5", "-q", *_sets(*ONE, "model.activation=leaky-relu",
                                                                     'run.solvers=["gd-lr1"]'))
    assert res.returncode == 0 and "warning" not in res.stderr       # GD only: nothing to warn about
    capsys.readouterr()
    prepare(TINY, [*ONE, "model.activation=relu"], output=tmp_path / "w.h5")
    err = capsys.readouterr().err
    assert err.startswith("flowsim: warning: ") and "bosh3-relu" in err


# ---- after the run ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A tiny archive stopped after the flow's first checkpoint: GD has not started."""
    out = tmp_path_factory.mktemp("stop") / "stopped.h5"
    with pytest.raises(Interrupted):
        run_scenario(TINY, ONE, output=out, progress=False, report=lambda s: None, should_stop=lambda: True)
    return out


def test_inspect_says_interrupted_with_the_time_spent_and_how_to_resume(interrupted):
    res = call_cli("inspect", interrupted)
    assert res.returncode == 0
    flow = next(line for line in res.stdout.splitlines() if line.strip().startswith("tsit5"))
    assert "interrupted" in flow and float(re.search(r", wall ([0-9.e+-]+) s", flow).group(1)) > 0
    assert f"resume with `flowsim run tiny -o {interrupted} --resume`" in res.stdout
    with archive.open(interrupted) as a:
        sv = a.runs["p0-seed0"].solvers["tsit5"]
        assert a.writer_pid is None and sv.interrupted and sv.status == "running"
        assert sv.wall_time > 0 and sv.stats["steps"] >= 0


def test_inspect_during_a_live_write_says_running(interrupted):
    writer = archive.ArchiveWriter.resume(interrupted)
    try:
        with archive.open(interrupted) as a:
            assert a.writer_pid is not None
            assert not a.runs["p0-seed0"].solvers["tsit5"].interrupted
        res = call_cli("inspect", interrupted)
        assert "being written by pid" in res.stdout and "interrupted" not in res.stdout
    finally:
        writer.close()


def test_compare_says_why_there_is_nothing_to_compare(interrupted, tmp_path):
    res = call_cli("compare", interrupted)
    assert res.returncode == 1 and res.stdout == ""
    assert "gd-lr1" in res.stderr and "have not started" in res.stderr and len(res.stderr.splitlines()) == 1
    flow_only = tmp_path / "flow.h5"
    assert call_cli("run", TINY, "-o", flow_only, "-q", *_sets(*ONE, 'run.solvers=["tsit5"]')).returncode == 0
    res = call_cli("compare", flow_only)
    assert res.returncode == 1 and "no discrete solver" in res.stderr and res.stdout == ""


def test_resume_with_another_scenario_names_the_keys_that_differ(interrupted):
    res = call_cli("run", TINY, "-o", interrupted, "-q", "--resume", *_sets(*ONE, "model.width=30"))
    assert res.returncode == 2
    assert "`model.width`: 24 -> 30" in res.stderr


def test_analyze_refuses_an_archive_that_is_not_a_caron_experiment(interrupted, tmp_path):
    res = call_cli("analyze", interrupted)
    assert res.returncode == 2 and "no [analysis] table" in res.stderr and "--force" in res.stderr


# ---- flowsim show ------------------------------------------------------------------------------

def test_show_gives_every_key_with_its_origin_the_runs_grids_and_estimate(tmp_path):
    from flowsim.run.resources import point_estimates
    from flowsim.cli.show import _unused, leaves

    rc, out, err = call_cli("show", TINY, "--set", "model.width=7", "--set", "run.t_end=12.0", cwd=tmp_path)
    assert rc == 0, err
    rows = {line.split(" = ")[0].strip(): line.rsplit("# ", 1)[1] for line in out.splitlines() if " # " in line}
    assert rows["model.width"] == "--set model.width=7" and rows["run.t_end"] == "--set run.t_end=12.0"
    assert rows["data.n"] == "file" and rows["data.seed"] == "default" and rows["loss.kind"] == "default"
    assert rows["run.solvers[0].rtol"] == "preset 'tsit5'" and rows["model.scaling"] == "swept (see runs)"
    assert "model.scaling.kind" not in rows     # a swept table is one row: its first point is not every run's
    sc = load_scenario(TINY, ["model.width=7", "run.t_end=12.0"])
    # every resolved leaf that applies is listed once (tsit5 reads no Newton-Krylov key), a swept
    # table's leaves as one row
    swept = [p for k, p, _ in leaves(sc.resolved) if k.startswith("model.scaling.")]
    assert len(rows) == len([p for _, p, _ in leaves(sc.resolved) if not _unused(sc.resolved, p)]) - len(swept) + 1
    assert "run.solvers[0].newton_rtol" not in rows and "run.solvers[0].pcoeff" in rows
    assert "runs: 4 (2 sweep points × 2 seeds)" in out
    assert all(f"  {r.name} " in out for r in sc.runs)
    assert "  gd-lr1 (η = 1): 13 rows: 0, 1, 2, 3, …, 10, 11, 12" in out
    est = point_estimates(sc)[0][1]
    assert f"memory {est['memory'] / 2**20:.3g} MiB, archive {est['disk'] / 2**20:.3g} MiB" in out
    assert not any(tmp_path.iterdir()), "show wrote something"


def test_show_refuses_bad_input_like_run():
    rc, _, err = call_cli("show", TINY, "--set", "model.widt=3")
    assert rc == 2 and "did you mean `model.width`" in err


def test_plot_marks_an_interrupted_curve(interrupted):
    from flowsim import plots

    with archive.open(interrupted) as a:
        traces = plots.gather(a)
    (flow,) = [tr for tr in traces if tr.solver == "tsit5"]
    assert flow.statuses == ["interrupted"] and flow.early_ends == [(0, "interrupted")]
    fig = plots.figure_fig1(traces, "tiny")
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(t.startswith("tsit5") and "interrupted in 1 of 1 runs (×)" in t for t in legend)
    assert [ln for ln in fig.axes[0].lines if ln.get_marker() == "x"]


# ---- extending a finished run ------------------------------------------------------------------

EXTEND = ["seeds=[0]", 'sweep."model.scaling"=[{kind="ntk"}]', 'run.checkpoints={count=4, spacing="log"}']


def test_resume_with_a_later_t_end_extends_the_run(tmp_path):
    import shutil

    import numpy as np

    out, fresh = tmp_path / "e.h5", tmp_path / "fresh.h5"
    run_scenario(TINY, EXTEND, output=out, progress=False, report=lambda s: None)
    shutil.copy(out, tmp_path / "before.h5")
    run_scenario(TINY, [*EXTEND, "run.t_end=60.0"], output=out, resume=True, progress=False, report=lambda s: None)
    run_scenario(TINY, [*EXTEND, "run.t_end=60.0"], output=fresh, progress=False, report=lambda s: None)
    with archive.open(tmp_path / "before.h5") as b, archive.open(out) as a, archive.open(fresh) as f:
        assert a.attrs["t_end_history"] == [30.0] and a.attrs["scenario_resolved"]["run"]["t_end"] == 60.0
        for name in ("tsit5", "gd-lr1"):
            old, new, ref = (x.runs["p0-seed0"].solvers[name] for x in (b, a, f))
            n = old.n_checkpoints
            # rows already written stay bit for bit; the grid goes on past the old horizon
            assert new.status == "done" and new.t[-1] == 60.0 and new.n_checkpoints > n
            for series in ("t", "loss", "weights"):
                np.testing.assert_array_equal((new.t if series == "t" else new[series])[:n],
                                              old.t if series == "t" else old[series])
            assert (new.t[n:] > 30.0).all()
        # GD continues bit for bit as a fresh run to t = 60; the flow from its stored state
        gd, gd_fresh = a.runs["p0-seed0"].solvers["gd-lr1"], f.runs["p0-seed0"].solvers["gd-lr1"]
        np.testing.assert_array_equal(gd["weights"][-1], gd_fresh["weights"][-1])
        assert gd.stats["steps"] == gd_fresh.stats["steps"] == 60
        flow, flow_fresh = a.runs["p0-seed0"].solvers["tsit5"], f.runs["p0-seed0"].solvers["tsit5"]
        np.testing.assert_allclose(flow["loss"][-1], flow_fresh["loss"][-1], rtol=1e-6)
        assert a.runs["p0-seed0"].params["run"]["t_end"] == 60.0
    # a plain resume of the extended archive finds nothing to do and changes nothing
    run_scenario(TINY, [*EXTEND, "run.t_end=60.0"], output=out, resume=True, progress=False, report=lambda s: None)
    with archive.open(out) as a:
        assert a.runs["p0-seed0"].solvers["tsit5"].n_checkpoints == flow.n_checkpoints


def test_an_earlier_t_end_or_another_change_is_refused_naming_the_key(tmp_path):
    out = tmp_path / "e.h5"
    run_scenario(TINY, EXTEND, output=out, progress=False, report=lambda s: None)
    for sets, named in ((["run.t_end=20.0"], "`run.t_end`: 30.0 -> 20.0"),
                        (["run.t_end=60.0", "model.width=5"], "`model.width`: 24 -> 5")):
        rc, _, err = call_cli("run", TINY, "-o", out, "--resume", *_sets(*EXTEND, *sets))
        assert rc == 2 and named in err and "run.t_end may only grow" in err


def test_the_resume_disk_check_counts_only_the_rows_still_to_come(tmp_path, monkeypatch):
    """A stopped archive needs room only for its rows still to come: a disk with room for
    those, not for a whole new archive, is enough to resume on."""
    import shutil

    from flowsim.run.resources import ResourceError, point_estimates

    out = tmp_path / "a.h5"
    sets = ["seeds=[0]", 'sweep."model.scaling"=[{kind="ntk"}]']
    checks = iter(range(1000))
    with pytest.raises(Interrupted):   # after a few chunks of the flow's 13 checkpoints
        run_scenario(TINY, sets, output=out, progress=False, report=lambda s: None,
                     should_stop=lambda: next(checks) >= 2)
    with archive.open(out) as a:
        done = sum(v.n_checkpoints for run in a.runs.values() for v in run.solvers.values())
    share = 1 - done / (2 * 13)        # two solvers, 13 rows each
    assert 0 < share < 1, done
    whole = sum(e["disk"] for _, e in point_estimates(load_scenario(TINY, sets)))
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage._replace(free=int(whole * (1 + share) / 2)))
    with pytest.raises(ResourceError, match="the archive would need an estimated"):   # a new one does not fit
        prepare(TINY, sets, output=tmp_path / "new.h5")
    prepare(TINY, sets, output=out, resume=True)                                       # the rest does
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage._replace(free=1000))
    with pytest.raises(ResourceError, match="the rest of the resumed archive would need an estimated") as err:
        prepare(TINY, sets, output=out, resume=True)
    need = float(re.search(r"estimated ([\d.e+-]+) GiB", str(err.value)).group(1)) * (1 << 30)
    assert need == pytest.approx(whole * share, rel=0.01), (need, whole, share)
