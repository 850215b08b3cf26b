"""A sweep as data (issue "sweeps as data", finding 3): `flowsim.open(path).to_xarray()`
checked value for value against the archive's own views, and `flowsim compare` summarising
each gap against each swept key, checked against its own CSV."""

import csv
import sys
from pathlib import Path

import numpy as np
import pytest

import flowsim
from flowsim.run.session import run_scenario
from helpers import call_cli

# every test reads one sweep run end to end (the module's fixture: about 25 s on 2 cores)
pytestmark = pytest.mark.slow

TINY = Path(__file__).resolve().parent / "scenarios" / "tiny.toml"

# two swept keys: a table (model.scaling) and a number (model.width) that changes the node axis
SWEEP = ["seeds=[0, 1]", "run.checkpoints={count=3}", "run.t_end=6.0",
         'sweep."model.width"=[5, 7]', 'run.observe=["loss", "weight_change"]']


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    out = tmp_path_factory.mktemp("xr") / "sweep.h5"
    run_scenario(TINY, SWEEP, output=out, progress=False, report=lambda s: None)
    return out


def test_every_value_is_the_archive_s(path):
    with flowsim.open(path) as a:
        ds = a.to_xarray()
        assert ds.sizes["sweep"] == 4 and list(ds.seed.values) == [0, 1]
        assert list(ds.solver.values) == ["tsit5", "gd-lr1"] and ds.sizes["node"] == 7
        checked = 0
        for run in a.runs.values():
            for name, view in run.solvers.items():
                cell = ds.sel(sweep=run.point, seed=run.seed, solver=name)
                rows = np.isin(ds.t.values, view.t)
                np.testing.assert_array_equal(cell.loss.values[rows], view["loss"])
                assert np.isnan(cell.loss.values[~rows]).all()
                width = view["weight_change"].shape[1]
                np.testing.assert_array_equal(cell.weight_change.values[rows, :width], view["weight_change"])
                assert np.isnan(cell.weight_change.values[:, width:]).all()
                assert cell.status.item() == view.status == "done"
                assert cell.steps.item() == view.stats["steps"]
                checked += 1
        assert checked == 16


def test_swept_keys_are_coordinates_numeric_where_numbers(path):
    with flowsim.open(path) as a:
        ds = a.to_xarray(solver="gd-lr1", series=["loss"])
        widths = {r.point: r.params["model"]["width"] for r in a.runs.values()}
    assert ds["model.width"].dtype.kind == "i"
    assert list(ds["model.width"].values) == [widths[p] for p in range(4)]
    assert set(ds["model.scaling"].values) == {'{kind="ntk"}', '{kind="asymmetric", gamma=0.2, alpha=0.5}'}
    assert "solver" not in ds.dims and list(ds.data_vars) == ["loss", "status", "wall_time", "compile_time", "steps",
                                                       "step"]
    # the gap-versus-width plot's data in one line
    final = ds.loss.isel(t=-1).groupby("model.width").mean(...)
    assert list(final["model.width"].values) == [5, 7] and np.isfinite(final.values).all()


def test_bad_choices_name_what_there_is(path, monkeypatch):
    with flowsim.open(path) as a:
        with pytest.raises(KeyError, match="no solver 'rk4'; the archive has tsit5, gd-lr1"):
            a.to_xarray(solver="rk4")
        with pytest.raises(KeyError, match=r"no series \['ntg'\]"):
            a.to_xarray(series=["ntg"])
        monkeypatch.setitem(sys.modules, "xarray", None)
        with pytest.raises(ImportError, match=r"pip install 'flowsim\[xarray\]'"):
            a.to_xarray()


def test_compare_summarises_each_gap_against_each_swept_key(path, tmp_path):
    rc, out, err = call_cli("compare", path, "--csv", tmp_path / "gaps.csv", "-o", tmp_path / "figs")
    assert rc == 0, err
    with open(tmp_path / "gaps.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["model.width"] for r in rows} == {"5", "7"}      # a column per swept key, numbers as numbers
    assert {r["model.scaling"] for r in rows} == {'{kind="ntk"}', '{kind="asymmetric", gamma=0.2, alpha=0.5}'}
    # the summary's mean of max_t |ΔL| at width 5, recomputed from the CSV
    worst: dict[str, float] = {}
    for r in rows:
        if r["model.width"] == "5":
            worst[r["run"]] = max(worst.get(r["run"], 0.0), float(r["loss_gap"]))
    assert len(worst) == 4
    lines = out.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("summary against `model.width`")))
    (row5,) = [line for line in lines[start:start + 4] if line.split()[0] == "5"]
    mean, lo, hi = np.mean(list(worst.values())), min(worst.values()), max(worst.values())
    assert row5.split()[1:6] == ["gd-lr1", "tsit5", f"{mean:.3g}", f"[{lo:.3g},", f"{hi:.3g}]"]   # |ΔL| first
    # each note once, for every run
    notes = lines[lines.index("notes:") + 1:]
    assert len(notes) == len(set(notes)) == 3 and all(n.startswith("  every run: ") for n in notes)
    assert "stability gd-lr1" not in out    # unknown stability is a note, not a line per run
    figs = sorted(p.name for p in (tmp_path / "figs").iterdir())
    assert "tiny-compare-sweep-model.width.png" in figs and "tiny-compare-sweep-model.scaling.png" in figs


def test_compare_figures_have_no_placeholder_panels(path):
    from flowsim.analysis.compare import compare_archive
    from flowsim.plots.compare import figure_run, figure_sweep

    rep = compare_archive(path)
    fig = figure_run(rep, "p0-seed0")      # loss and weight change recorded, no weights, no sharpness
    assert [ax.get_title() for ax in fig.axes] == ["(a) loss gap", "(b) weight-change gap"]
    assert all(ax.lines for ax in fig.axes)            # each panel draws the gap it names
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert not any("not recorded" in t for t in texts)
    sweep = figure_sweep(rep, "model.width")
    assert [ax.get_title() for ax in sweep.axes] == ["max_t |ΔL|", "max_t Δ‖w−w0‖"]


def test_blocks_hold_each_seed_s_rows_as_the_archive_does(path):
    """The one reader under the figures and to_xarray: per (point, solver), every seed's own
    rows back exactly, on the union of the seeds' times."""
    from flowsim.archive.dataset import blocks

    with flowsim.open(path) as a:
        found = blocks(a)
        assert [(b.point, b.solver) for b in found] == [(p, s) for p in range(4) for s in ("tsit5", "gd-lr1")]
        for b in found:
            for i, name in enumerate(b.runs):
                view = a.runs[name].solvers[b.solver]
                np.testing.assert_array_equal(b.t[b.rows[i]], view.t)
                for series in ("loss", "weight_change"):
                    np.testing.assert_array_equal(b.own(i, series), view[series])
                assert b.statuses[i] == view.status and b.seeds[i] == a.runs[name].seed
