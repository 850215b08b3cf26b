"""`flowsim.open(path).to_xarray()`: the archive as one Dataset, checked value for value
against the archive's own views (issue "sweeps as data", finding 3)."""

import sys
from pathlib import Path

import numpy as np
import pytest

import flowsim
from flowsim.session import run_scenario

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
    assert "solver" not in ds.dims and list(ds.data_vars) == ["loss", "status", "wall_time", "steps", "step"]
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
