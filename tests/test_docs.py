"""The README and the docs/ pages: every fenced code block is well formed (Python compiles,
TOML parses, shell passes `bash -n`), and every relative link points at a file that exists.
The annotated scenario of docs/scenarios.md loads, and the Python blocks of
docs/python-api.md, docs/archive.md and the README's Python API section run (on the quick
start's archive where they read one). Run elsewhere: the
walkthrough and the archive's sweep snippet (tests/test_walkthrough.py), the simulate and
classifier examples (tests/test_simulate.py)."""

from __future__ import annotations

import re
import subprocess
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^( *)```(\w+)\n(.*?)^ *```", re.S | re.M)


def page_blocks(page: Path) -> list[tuple[str, str]]:
    """(language, body) of each fenced block, a list item's indented ones dedented."""
    return [(m.group(2), textwrap.dedent(m.group(3)) if m.group(1) else m.group(3))
            for m in BLOCK.finditer(page.read_text(encoding="utf-8"))]


def blocks():
    for page in PAGES:
        for i, (lang, body) in enumerate(page_blocks(page)):
            yield pytest.param(lang, body, id=f"{page.name}-{i}-{lang}")


@pytest.mark.parametrize("lang, body", list(blocks()))
def test_every_code_block_is_well_formed(lang, body):
    if lang == "python":
        compile(body, "<block>", "exec")
    elif lang == "toml":
        tomllib.loads(body)
    elif lang in ("sh", "bash"):
        proc = subprocess.run(["bash", "-n"], input=body, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    else:
        pytest.fail(f"a {lang!r} block: tag it python, toml, sh or bash")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_point_at_files(page):
    text = page.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", text):
        if not target.startswith(("http://", "https://", "mailto:")):
            assert (page.parent / target).exists(), f"{page.name}: {target}"


def test_the_annotated_scenario_loads(tmp_path):
    from tests.helpers import call_cli

    lang, body = page_blocks(ROOT / "docs" / "scenarios.md")[0]
    assert lang == "toml" and body.startswith("name = ")
    (tmp_path / "annotated.toml").write_text(body)
    rc, out, err = call_cli("show", tmp_path / "annotated.toml")
    assert rc == 0 and "runs: 6 (2 sweep points × 3 seeds)" in out, err


@pytest.mark.slow
def test_the_python_api_and_archive_blocks_run_on_the_quick_start(tmp_path):
    import os
    import sys

    env = {**os.environ, "MPLBACKEND": "Agg"}   # (the suite's compilation cache: conftest)
    run = subprocess.run([sys.executable, "-m", "flowsim.cli", "run", "quickstart", "-q"], cwd=tmp_path, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    api = [b for lang, b in page_blocks(ROOT / "docs" / "python-api.md") if lang == "python"]
    archive = [b for lang, b in page_blocks(ROOT / "docs" / "archive.md") if lang == "python"]
    readme = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    (engine,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    # reading runs/quickstart.h5 from the folder it was run in; the engine blocks name the
    # catalog file by its path in the repository
    for body, cwd in ((api[0], tmp_path), (archive[0], tmp_path), (api[1], ROOT), (engine, ROOT)):
        proc = subprocess.run([sys.executable, "-c", body], cwd=cwd, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, f"{body}\n{proc.stderr[-3000:]}"
        assert proc.stdout or "xr.open_dataset" in body


# docs/optimizers.md's blocks are [run] tables: each is given this small network to run on
NETWORK = ('name = "doc"\n[data]\nkind = "random-labels"\nn = 16\nd = 4\nn_test = 8\n'
           '[model]\nkind = "mlp"\nwidths = [8]\n[loss]\nkind = "mse"\n')


def _optimizer_blocks(lang: str) -> list[str]:
    return [b for lg, b in page_blocks(ROOT / "docs" / "optimizers.md") if lg == lang]


def test_the_optimizers_pages_run_tables_load(tmp_path):
    from tests.helpers import call_cli

    tables = _optimizer_blocks("toml")
    assert len(tables) == 3
    for i, body in enumerate(tables):
        (tmp_path / f"block{i}.toml").write_text(NETWORK + body)
        rc, out, err = call_cli("show", tmp_path / f"block{i}.toml")
        assert rc == 0 and "runs: 1" in out, err


@pytest.mark.slow
def test_the_optimizers_pages_blocks_run(tmp_path):
    """Each [run] table of docs/optimizers.md on a small network, to t = 0.02 (2 steps of its
    η = 0.01 legs, 20 of η = 0.001), and its Python block's optax leg through `simulate`:
    every leg done, its loss finite."""
    import equinox as eqx
    import jax
    import numpy as np

    import flowsim
    from tests.helpers import call_cli

    for i, body in enumerate(_optimizer_blocks("toml")):
        (tmp_path / f"block{i}.toml").write_text(NETWORK + body)
        rc, _, err = call_cli("run", tmp_path / f"block{i}.toml", "-o", tmp_path / f"block{i}.h5", "-q",
                              "--set", "run.t_end=0.02")
        assert rc == 0, err[-3000:]
        with flowsim.open(tmp_path / f"block{i}.h5") as a:
            legs = a.runs["seed0"].solvers
            assert len(legs) == body.count("name =")
            assert all(v.status == "done" and np.isfinite(np.asarray(v["loss"])).all() for v in legs.values())
    (python,) = _optimizer_blocks("python")
    scope: dict = {}
    exec(python, scope)
    rng = np.random.default_rng(0)
    data = (rng.normal(size=(16, 4)), rng.normal(size=(16, 1)))
    model = eqx.nn.MLP(4, 1, 8, 1, key=jax.random.PRNGKey(0))
    with flowsim.simulate(model, data, solvers=scope["solvers"], t_end=0.02, observe=("loss",),
                          output=tmp_path / "optax.h5", progress=False, report=lambda s: None) as a:
        legs = a.runs["seed0"].solvers
        assert set(legs) == {"auto", "clipped-adam"} and all(v.status == "done" for v in legs.values())
