"""The archive's attributes are declared once (`flowsim.archive.format.ATTRS`): docs/archive.md
lists exactly those, the writer writes no other, the readers read them by the record's types
and defaults, and an archive written before reads as it did."""

from __future__ import annotations

import math
import re
from pathlib import Path

import h5py
import numpy as np
import pytest
from archive_sample import SERIES, rows, state

from flowsim import archive as A
from flowsim.archive import format as F

ROOT = Path(__file__).resolve().parent.parent
BEFORE = Path(__file__).resolve().parent / "archives" / "before-counts.h5"
_TABLE = re.compile(r"<!-- attributes: generated from flowsim/archive/format.py -->\n(.*?)\n<!-- attributes: end -->",
                    re.S)


def test_docs_list_exactly_the_declared_attributes():
    (table,) = _TABLE.findall((ROOT / "docs" / "archive.md").read_text(encoding="utf-8"))
    assert table == F.attributes_markdown(), (
        "docs/archive.md's attribute table differs from flowsim/archive/format.py's ATTRS: paste the output of "
        "python -c \"from flowsim.archive.format import attributes_markdown as m; print(m())\"")


def test_the_documented_names_are_the_declared_ones():
    """(A second check, on names alone: a row added by hand to the table is caught too.)"""
    (table,) = _TABLE.findall((ROOT / "docs" / "archive.md").read_text(encoding="utf-8"))
    documented = re.findall(r"^\| `(\w+)` \|", table, re.M)
    assert documented == [a.name for a in F.ATTRS]


def test_each_declared_attribute_has_a_type_and_a_meaning():
    assert len({(a.where, a.name) for a in F.ATTRS}) == len(F.ATTRS)
    for a in F.ATTRS:
        assert a.where in (F.FILE, F.RUN, F.SOLVER, F.COUNTED, F.CHECKPOINT) and a.meaning, a
        assert a.kind in ("text", "json", "int", "float", "bool"), a
        # the running value survives its own encoding (it is what a crash's repair writes)
        if a.changes:
            back = a.decode(a.encode(a.running))
            assert back == a.running or (math.isnan(back) and math.isnan(a.running)), a


def _written(path: Path) -> None:
    """An archive through every writer call that sets attributes."""
    with A.ArchiveWriter.create(path, scenario_text="x", resolved={"run": {"t_end": 1.0}},
                                provenance={"git_commit": "abc", "versions": {"jax": "0"}}, dtype="float64") as w:
        w.create_run("r0", params={"run": {"t_end": 1.0}, "model": {"width": 3}}, seed=2, label="w=3", point=1,
                     init={"W0": np.ones(3)})
        w.create_solver("r0", "gd", preset={"eta": 0.1}, series=SERIES, discrete=True, conventions="Σ",
                        counts=F.COUNTS)
        arrays, attrs = state(0)
        w.append("r0", "gd", t=0.0, step=0, values=rows(0), checkpoint=arrays, checkpoint_attrs=attrs,
                 counts=[0, 0, 0, 1, 0])
        w.set_status("r0", "gd", status="done", stats={"steps": 4, "wall_time": 1.5}, message="ok", status_time=0.0)
        w.extend_horizon({"run": {"t_end": 2.0}})


def test_the_writer_writes_declared_attributes_only(tmp_path):
    path = tmp_path / "a.h5"
    _written(path)
    with h5py.File(path, "r") as f:
        declared = {where: {a.name for a in F.attrs_of(where)}
                    for where in (F.FILE, F.RUN, F.SOLVER, F.COUNTED, F.CHECKPOINT)}
        assert set(f.attrs) - declared[F.FILE] == {"git_commit"}     # provenance's text entry, again
        assert set(f["runs/r0"].attrs) <= declared[F.RUN]
        assert set(f["runs/r0/gd"].attrs) == declared[F.SOLVER]
        assert set(f["runs/r0/gd/checkpoint"].attrs) == declared[F.CHECKPOINT]
        assert set(f["runs/r0/gd/counts"].attrs) - {"DIMENSION_LIST"} == declared[F.COUNTED]   # (HDF5's own)
    with A.open(path) as a:
        assert a.attrs["t_end_history"] == [1.0] and a.attrs["scenario_resolved"] == {"run": {"t_end": 2.0}}
        run = a.runs["r0"]
        assert (run.seed, run.label, run.point, run.params_changes) == (2, "w=3", 1, True)
        assert run.params == {"run": {"t_end": 2.0}, "model": {"width": 3}}
        gd = run.solvers["gd"]
        # extend_horizon set it running again: its stats are the last commit's, and its wall
        # time the attribute's where the commit has none
        assert gd.status == "running" and gd.stats == state(0)[1] and gd.wall_time == 1.5
        assert (gd.preset, gd.discrete, gd.conventions, gd.message) == ({"eta": 0.1}, True, "Σ", "ok")
        assert gd.counts == dict(zip(F.COUNTS, ([0], [0], [0], [1], [0])))
        with pytest.raises(AttributeError, match="no attribute 'nope'"):
            gd.nope


def test_an_undeclared_attribute_is_refused(tmp_path):
    path = tmp_path / "a.h5"
    with A.ArchiveWriter.create(path, scenario_text="x", resolved={}, provenance={}, dtype="float64") as w:
        w.create_run("r0", params={}, seed=0, label="", point=0, init={"W0": np.ones(3)})
        w.create_solver("r0", "gd", preset={}, series=SERIES, discrete=True)
        with pytest.raises(A.ArchiveError, match=r"no attribute \['wall_tme'\] is declared"):
            w.set_status("r0", "gd", status="done", stats={}, wall_tme=1.0)


def test_a_solver_reads_its_running_values_until_it_ends(tmp_path):
    path = tmp_path / "a.h5"
    with A.ArchiveWriter.create(path, scenario_text="x", resolved={}, provenance={}, dtype="float64") as w:
        w.create_run("r0", params={}, seed=0, label="", point=0, init={"W0": np.ones(3)})
        w.create_solver("r0", "gd", preset={}, series=SERIES, discrete=True)
    with A.open(path) as a:
        gd = a.runs["r0"].solvers["gd"]
        for name, value in F.running_values().items():
            got = getattr(gd, name)
            assert got == value or (math.isnan(got) and math.isnan(value)), name


def test_an_archive_written_before_reads_as_it_did():
    """tests/archives/before-counts.h5: `flowsim run tests/scenarios/tiny.toml --set seeds=[0] --set
    run.t_end=4.0 --set run.checkpoints={count=4} --set run.solvers=["rock4","gd-lr1"] --set
    run.observe=["loss"]` written by flowsim at 48de9f7 (before the record, the start-up counts and
    the per-checkpoint counts)."""
    with A.open(BEFORE) as a:
        assert a.attrs["scenario_resolved"]["run"]["t_end"] == 4.0 and a.attrs["dtype"] == "float64"
        assert list(a.runs) == ["p0-seed0", "p1-seed0"]
        run = a.runs["p1-seed0"]
        assert (run.seed, run.point, run.label) == (0, 1, 'model.scaling={kind="asymmetric", gamma=0.2, alpha=0.5}')
        assert run.params["model"]["scaling"] == {"kind": "asymmetric", "gamma": 0.2, "alpha": 0.5}
        rock4 = run.solvers["rock4"]
        assert rock4.status == "done" and rock4.n_checkpoints == 5 and rock4.status_time == 4.0
        assert {k: rock4.stats[k] for k in ("steps", "vf_evals", "hvps")} == {"steps": 37, "vf_evals": 185, "hvps": 3}
        assert rock4.wall_time == rock4.stats["wall_time"] and rock4.conventions == "" and not rock4.discrete
        assert rock4.series_names == ["loss", "rho", "stages"]


def test_archive_diff_finds_what_differs_times_aside(tmp_path):
    """tests/archive_diff.py, the check that a change of the archive's code left its bytes as
    they were: two writings of one archive differ in their dates only."""
    from archive_diff import differences

    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    _written(a)
    _written(b)
    assert differences(a, b) == []
    with h5py.File(b, "r+") as f:
        f["runs/r0"].attrs["seed"] = 3
        f["runs/r0/gd/loss"][0] = 9.0
    # (an attribute written again moves to the end of its group's list: the order is compared too)
    assert differences(a, b) == ["runs/r0: the order of its attributes: ['params', 'params_changes', 'seed', "
                                 "'label', 'point'] != ['params', 'params_changes', 'label', 'point', 'seed']",
                                 "runs/r0: seed: 2 != 3", "runs/r0/gd/loss: values differ"]
