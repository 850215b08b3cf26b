"""The shipped catalog: found at the top of a source checkout, inside the package once
installed, and built into the wheel with every package of flowsim.

The wheel itself is built, installed into a fresh venv and run from an empty folder by
.ci/run (it needs the network or a filled pip cache); these tests check the pieces."""

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from flowsim import data
from flowsim.config import ScenarioError, catalog

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ("scenarios", "solvers", "data")


def test_a_source_checkout_reads_the_top_level_folders():
    assert catalog.scenarios_dir() == ROOT / "scenarios"
    assert catalog.solvers_dir() == ROOT / "solvers"
    assert catalog.data_dir() == data.DATA_DIR == ROOT / "data"
    assert catalog.find_scenario("quickstart") == ROOT / "scenarios" / "quickstart.toml"
    assert {n for n, _ in catalog.list_scenarios()} == {p.stem for p in (ROOT / "scenarios").glob("*.toml")}
    assert {n for n, _ in catalog.list_solvers()} == {p.stem for p in (ROOT / "solvers").glob("*.toml")}


def test_the_wheel_maps_the_catalog_and_names_every_package():
    """pyproject.toml lists the packages by hand (setuptools' `find` cannot add the mapped
    folders): a new subpackage of flowsim left out of the list would be missing from the
    wheel."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "flowsim").rglob("__init__.py")}
    mapped = {f"flowsim._catalog.{name}": name for name in CATALOG}
    assert set(tool["packages"]) == found | set(mapped)
    assert tool["package-dir"] == mapped
    for package, folder in mapped.items():
        shipped = {p.name for p in (ROOT / folder).iterdir() if p.is_file() and p.suffix != ".py"}
        patterns = tool["package-data"][package]
        assert all(any(Path(name).match(pat) for pat in patterns) for name in shipped), (package, shipped)


@pytest.mark.slow
def test_an_installed_package_reads_its_own_catalog(tmp_path):
    """The layout a wheel installs (flowsim/_catalog/...), in a fresh process from an empty
    folder: the catalog, a scenario's `../data/` path and the datasets all come from it."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "flowsim", site / "flowsim", ignore=shutil.ignore_patterns("__pycache__"))
    for name in CATALOG:
        shutil.copytree(ROOT / name, site / "flowsim" / "_catalog" / name)
    empty = tmp_path / "empty"
    empty.mkdir()
    code = ("from flowsim import data; from flowsim.config import catalog, load_scenario; "
            "s = load_scenario(catalog.find_scenario('caron-cifar-quick')); "
            "print(catalog.scenarios_dir(), catalog.solvers_dir(), data.DATA_DIR, s.resolved['data']['path'], "
            "len(catalog.list_scenarios()), sep='\\n')")
    out = subprocess.run([sys.executable, "-c", code], cwd=empty, capture_output=True, text=True, timeout=300,
                         check=False, env=dict(os.environ, PYTHONPATH=str(site), JAX_PLATFORMS="cpu"))
    assert out.returncode == 0, out.stderr
    inside = site / "flowsim" / "_catalog"
    assert out.stdout.split("\n")[:5] == [str(inside / "scenarios"), str(inside / "solvers"), str(inside / "data"),
                                          str(inside / "data" / "cifar_standin_features.npz"),
                                          str(len(list((ROOT / "scenarios").glob("*.toml"))))]


def test_an_unreadable_catalog_file_says_why(tmp_path, monkeypatch):
    (tmp_path / "good.toml").write_text('description = "fine"\n')
    (tmp_path / "broken.toml").write_text('description = "x\n')
    (tmp_path / "latin1.toml").write_bytes(b'description = "caf\xe9"\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(catalog, "solvers_dir", lambda: tmp_path)
    listed = dict(catalog.list_solvers())
    assert listed["good"] == "fine"
    assert listed["broken"].startswith("(unreadable: broken.toml: invalid TOML: ")
    assert listed["latin1"].startswith("(unreadable: latin1.toml: is not UTF-8 text (byte ")


def test_find_scenario_names_the_catalog_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(catalog, "scenarios_dir", lambda: tmp_path)
    with pytest.raises(ScenarioError) as e:
        catalog.find_scenario("quickstrat")
    assert f"no scenario of that name in {tmp_path}" in str(e.value) and "(the catalog is empty)" in str(e.value)
