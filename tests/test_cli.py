"""The `flowsim` command end to end: the quick start through a real subprocess, the archive
checked with plain h5py against DESIGN.md §5 and through the Python API, bad input, the
overwrite/resume/lock rules, and list / inspect / plot."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from flowsim import archive
from flowsim.archive import ArchiveWriter
from flowsim.cli.command import main
from flowsim.run.session import InputError, run_scenario

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "scenarios" / "tiny.toml"


def flowsim(*args, cwd, check=True, **kw):
    proc = subprocess.run([sys.executable, "-m", "flowsim.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, **kw)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    """`flowsim run quickstart` in a subprocess, from an empty working directory."""
    cwd = tmp_path_factory.mktemp("qs")
    proc = flowsim("run", ROOT / "scenarios" / "quickstart.toml", cwd=cwd)
    return cwd / "runs" / "quickstart.h5", proc


@pytest.mark.slow
def test_quickstart_archive_layout_with_plain_h5py(quickstart):
    path, proc = quickstart
    assert "wrote" in proc.stderr
    with h5py.File(path, "r", swmr=True) as f:
        for key in ("flowsim_version", "created", "scenario_text", "scenario_resolved", "dtype", "provenance"):
            assert key in f.attrs, key
        resolved = json.loads(f.attrs["scenario_resolved"])
        assert resolved["name"] == "quickstart" and f.attrs["dtype"] == "float64"
        assert 'name = "quickstart"' in f.attrs["scenario_text"]
        prov = json.loads(f.attrs["provenance"])
        assert {"jax", "diffrax", "equinox", "platform", "device"} <= set(prov)
        for name in ("X_train", "y_train", "X_test", "y_test"):
            assert name in f["data"]
        assert f["data/X_train"].shape == (40, 10) and f["data/y_train"].shape == (40, 1)
        runs = f["runs"]
        assert len(runs) == 3 * 3  # three sweep points × three seeds
        for run in runs.values():
            assert {"W0", "a", "lam"} <= set(run["init"])
            assert abs(run["init/lam"][()].sum() - 1.0) < 1e-12
            for solver, discrete in (("tsit5", False), ("gd-lr1", True)):
                g = run[solver]
                assert g.attrs["status"] == "done"
                assert json.loads(g.attrs["preset"])["name"] == solver
                assert json.loads(g.attrs["stats"])["steps"] > 0
                k = g.attrs.get("index", None)
                t = g["t"][()]
                assert t[0] == 0.0 and t[-1] == pytest.approx(2000.0) and np.all(np.diff(t) > 0)
                assert ("step" in g) == discrete
                for s in ("loss", "test_loss", "ntg_eig", "ntg_change_spectral", "weight_change"):
                    assert g[s].shape[0] == t.shape[0], s
                    assert g[s].chunks is not None and g[s].compression == "gzip" and g[s].maxshape[0] is None
                assert g["weight_change"].shape[1] == 200
                assert "checkpoint" in g
                del k


@pytest.mark.slow
def test_the_command_leaves_without_the_teardown_and_loses_nothing(tmp_path):
    """`flowsim run` leaves by os._exit once its archive is closed (the interpreter's
    teardown of JAX would add 0.3 s to every run): the archive opens with plain h5py (HDF5's
    write flag is cleared), the JSON log has every batch's "finished" record, and the last
    message is printed."""
    out, log = tmp_path / "a.h5", tmp_path / "log.jsonl"
    proc = flowsim("run", TINY, "-o", out, "--log-jsonl", log, "--set", "run.checkpoints={count=3}", cwd=tmp_path)
    assert proc.stderr.splitlines()[-1] == f"flowsim: wrote {out}"
    finished = [r for r in map(json.loads, log.read_text().splitlines()) if r["event"] == "finished"]
    assert sorted(r["solver"] for r in finished) == ["gd-lr1"] * 2 + ["tsit5"] * 2     # two sweep points
    assert len({r["label"] for r in finished}) == 2
    with h5py.File(out, "r") as f:
        assert {g.attrs["status"] for run in f["runs"].values() for g in (run["tsit5"], run["gd-lr1"])} == {"done"}


@pytest.mark.slow
def test_quickstart_through_the_python_api(quickstart):
    path, _ = quickstart
    with archive.open(path) as a:
        assert a.attrs["scenario_resolved"]["name"] == "quickstart"
        runs = a.runs
        assert list(runs)[0] == "p0-seed0"
        for run in runs.values():
            flow, gd = run.solvers["tsit5"], run.solvers["gd-lr1"]
            assert flow.status == gd.status == "done"
            assert flow["loss"][0] == pytest.approx(float(run.init["loss0"]), rel=1e-12)
            # flow and GD start together and end near each other (GD η = 1 is a fine step here)
            assert gd["loss"][-1] == pytest.approx(flow["loss"][-1], rel=0.1)
            assert flow["loss"][-1] < flow["loss"][0]
            # GD rows sit at t = kη exactly, and the flow was checkpointed at each of them
            assert np.array_equal(gd.t, gd.step * 1.0)
            assert set(gd.t) <= set(flow.t)


@pytest.mark.slow
def test_xarray_reads_a_solver_group_without_flowsim(quickstart):
    import xarray as xr  # a test extra: a missing install is a failure, not a skip
    path, _ = quickstart
    with archive.open(path) as a:
        t = a.runs["p1-seed0"].solvers["tsit5"].t
    with xr.open_dataset(path, group="runs/p1-seed0/tsit5", engine="h5netcdf") as ds:
        assert ds["weight_change"].dims == ("t", "node")
        assert ds["ntg_eig"].dims[0] == "t"
        assert ds.sizes["node"] == 200
        np.testing.assert_array_equal(ds["t"].values, t)


@pytest.mark.slow
def test_list_inspect_and_plot(quickstart, tmp_path, capsys):
    path, _ = quickstart
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "quickstart" in out and "tsit5" in out and "gd-lr1" in out
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "p2-seed2" in out and "done" in out and "vf_evals" in out
    assert main(["plot", str(path), "-o", str(tmp_path / "fig")]) == 0
    files = capsys.readouterr().out.split()
    pngs = [Path(f) for f in files if f.endswith(".png")]
    assert pngs and all(p.stat().st_size > 20_000 for p in pngs)
    assert any(f.endswith(".pdf") for f in files)


def test_inspect_calls_a_run_whose_solvers_were_never_begun_interrupted(tmp_path, capsys):
    """Killed between creating a sweep point's runs and beginning their solvers, an archive
    has a run without its solver groups and nothing left `running`: inspect still says it
    was interrupted and how to resume, and `--resume` completes it."""
    out = tmp_path / "tiny.h5"
    one = ["--set", "seeds=[0]", "--set", 'run.solvers=["gd-lr1"]']
    assert main(["run", str(TINY), "-o", str(out), "-q", *one]) == 0
    with h5py.File(out, "r+") as f:
        run = sorted(f["runs"])[-1]
        del f["runs"][run]["gd-lr1"]
    with archive.open(out) as a:
        assert a.runs[run].unbegun == ["gd-lr1"] and all(not r.unbegun for k, r in a.runs.items() if k != run)
    capsys.readouterr()
    assert main(["inspect", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "not started: gd-lr1" in shown and "interrupted: resume with" in shown
    assert main(["run", str(TINY), "-o", str(out), "-q", "--resume", *one]) == 0
    capsys.readouterr()
    assert main(["inspect", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "not started" not in shown and "interrupted" not in shown


# ---------------------------------------------------------------- bad input: exit 2, nothing written

VALID = TINY.read_text()


def _bad(replace: str, by: str) -> str:
    assert replace in VALID, replace
    return VALID.replace(replace, by, 1)


MALFORMED = {
    "unknown-top-key": (VALID + "\ncolour = 3\n", "colour"),
    "misspelt-model-key": (_bad("width = 24", "widht = 24"), "widht"),
    "width-string": (_bad("width = 24", 'width = "24"'), "model.width"),
    "width-float": (_bad("width = 24", "width = 24.5"), "model.width"),
    "width-zero": (_bad("width = 24", "width = 0"), "model.width"),
    "width-negative": (_bad("width = 24", "width = -3"), "model.width"),
    "width-bool": (_bad("width = 24", "width = true"), "model.width"),
    "t-end-nan": (_bad("t_end = 30.0", "t_end = nan"), "run.t_end"),
    "t-end-inf": (_bad("t_end = 30.0", "t_end = inf"), "run.t_end"),
    "t-end-negative": (_bad("t_end = 30.0", "t_end = -1.0"), "run.t_end"),
    "gamma-above-one": (_bad("gamma = 0.2", "gamma = 1.5"), "gamma"),
    "alpha-one": (_bad("alpha = 0.5", "alpha = 1.0"), "alpha"),
    "alpha-zero": (_bad("alpha = 0.5", "alpha = 0.0"), "alpha"),
    "unknown-activation": (_bad('activation = "swish"', 'activation = "swishy"'), "model.activation"),
    "unknown-data-kind": (_bad('kind = "sphere-sine"', 'kind = "spiral"'), "data.kind"),
    "missing-data-kind": (_bad('kind = "sphere-sine"\n', ""), "data.kind"),
    "unknown-solver": (_bad('solvers = ["tsit5", "gd-lr1"]', 'solvers = ["tsit6"]'), "run.solvers"),
    "duplicate-solver": (_bad('solvers = ["tsit5", "gd-lr1"]', 'solvers = ["tsit5", "tsit5"]'), "run.solvers"),
    "unknown-observable": (_bad('observe = ["loss"', 'observe = ["los"'), "run.observe"),
    "checkpoints-two-forms": (_bad("checkpoints = { count = 12 }", "checkpoints = { count = 12, every = 1.0 }"),
                              "run.checkpoints"),
    "sweep-unknown-key": (_bad('"model.scaling" = [', '"model.scalling" = ['), "model.scalling"),
    "seeds-negative": (_bad("seeds = [0, 1]", "seeds = [-1]"), "seeds"),
    "seeds-duplicate": (_bad("seeds = [0, 1]", "seeds = [1, 1]"), "seeds"),
    "dtype-float16": (VALID.replace('name = "tiny"', 'name = "tiny"\ndtype = "float16"'), "dtype"),
    "noise-negative": (_bad("noise = 0.1", "noise = -0.1"), "data.noise"),
    "loss-unknown": (VALID + '\n[loss]\nkind = "hinge"\n', "loss.kind"),
    "invalid-toml": (_bad("width = 24", "width = = 24"), "line"),
    "n-zero": (_bad("n = 12", "n = 0"), "data.n"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_scenario_exits_2_naming_the_key_and_writes_nothing(case, tmp_path, capsys):
    text, key = MALFORMED[case]
    scenario = tmp_path / f"{case}.toml"
    scenario.write_text(text)
    out = tmp_path / "out.h5"
    assert main(["run", str(scenario), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert key in err and f"{case}.toml" in err
    assert not out.exists() and not (tmp_path / "runs").exists()


def test_bad_override_and_missing_scenario(tmp_path, capsys):
    assert main(["run", str(TINY), "-o", str(tmp_path / "o.h5"), "--set", "model.width=-5"]) == 2
    assert "model.width" in capsys.readouterr().err
    assert main(["run", "no-such-scenario", "-o", str(tmp_path / "o.h5")]) == 2
    assert "no-such-scenario" in capsys.readouterr().err


# ---------------------------------------------------------------- overwrite, resume, lock

def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
def test_existing_archive_is_refused_overwritten_only_on_request_and_locked(tmp_path, capsys):
    out = tmp_path / "tiny.h5"
    one = ["--set", "seeds=[0]", "--set", 'run.solvers=["gd-lr1"]']     # what is under test is the file
    assert main(["run", str(TINY), "-o", str(out), "-q", *one]) == 0
    before = _digest(out)
    assert main(["run", str(TINY), "-o", str(out), "-q", *one]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert _digest(out) == before
    # a scenario error with --overwrite still leaves the old archive alone
    assert main(["run", str(TINY), "-o", str(out), "--overwrite", "--set", "model.width=0"]) == 2
    assert _digest(out) == before
    # --resume of a finished archive changes no data
    assert main(["run", str(TINY), "-o", str(out), "-q", "--resume", *one]) == 0
    # a different scenario cannot resume it
    assert main(["run", str(TINY), "-o", str(out), "-q", "--resume", *one,
                 "--set", "model.width=30"]) == 2
    assert "with other values" in capsys.readouterr().err
    # another writer holds the lock: refused, with its pid
    writer = ArchiveWriter.resume(out)
    try:
        assert main(["run", str(TINY), "-o", str(out), "-q", "--overwrite", *one]) == 2
        assert str(os.getpid()) in capsys.readouterr().err
    finally:
        writer.close()
    assert main(["run", str(TINY), "-o", str(out), "-q", "--overwrite", *one,
                 "--set", "model.width=30"]) == 0
    assert archive.open(out).runs["p0-seed0"].init["W0"].shape == (30, 4)


@pytest.mark.slow
def test_an_archive_written_before_a_key_was_added_resumes(tmp_path, capsys):
    """A key that a newer flowsim adds with its default (here every flow preset's `slots`)
    is no change of scenario: an archive whose stored resolved form lacks it resumes and
    extends its horizon; a real change is still refused."""
    from flowsim.archive.format import dumps, loads

    out = tmp_path / "tiny.h5"
    one = ["--set", "seeds=[0]", "--set", 'run.solvers=["tsit5"]']
    assert main(["run", str(TINY), "-o", str(out), "-q", *one, "--set", "run.t_end=5.0"]) == 0
    with h5py.File(out, "r+") as f:         # as an earlier flowsim wrote it
        resolved = loads(f.attrs["scenario_resolved"])
        for preset in resolved["run"]["solvers"]:
            del preset["slots"]
        f.attrs["scenario_resolved"] = dumps(resolved)
    assert main(["run", str(TINY), "-o", str(out), "-q", "--resume", *one, "--set", "run.t_end=8.0"]) == 0
    assert archive.open(out).runs["p0-seed0"].solvers["tsit5"].t[-1] == 8.0
    assert main(["run", str(TINY), "-o", str(out), "-q", "--resume", *one, "--set", "run.t_end=8.0",
                 "--set", "model.width=30"]) == 2
    assert "with other values" in capsys.readouterr().err


def _arrays(path: Path) -> dict:
    """Every dataset of an archive, except wall-clock ones, as numpy arrays."""
    out = {}
    with archive.open(path) as a:
        for rname, run in a.runs.items():
            for sname, sv in run.solvers.items():
                out[(rname, sname, "t")] = sv.t
                for s in sv.series_names:
                    out[(rname, sname, s)] = sv[s]
                arrays, _ = sv.checkpoint
                for k, v in arrays.items():
                    out[(rname, sname, "checkpoint", k)] = v
    return out


@pytest.mark.slow
def test_run_scenario_is_the_command_without_the_command_line(tmp_path):
    """`flowsim.run.session.run_scenario` writes the archive `flowsim run` writes, returns the
    statuses, and refuses bad input with the command's errors."""
    sets = ["seeds=[0]", "run.checkpoints={count=3}"]
    cli_out, lib_out = tmp_path / "cli.h5", tmp_path / "lib.h5"
    assert main(["run", str(TINY), "-o", str(cli_out), "-q", *(x for s in sets for x in ("--set", s))]) == 0
    outcome = run_scenario(TINY, sets, output=lib_out, progress=False, report=lambda s: None)
    assert outcome.archive == lib_out
    assert outcome.statuses == {f"p{i}-seed0": {"tsit5": "done", "gd-lr1": "done"} for i in range(2)}
    a, b = _arrays(cli_out), _arrays(lib_out)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    with pytest.raises(InputError, match="exists; pass --resume"):
        run_scenario(TINY, sets, output=lib_out)
