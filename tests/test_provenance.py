"""Provenance: the commit recorded is that of flowsim's own checkout, never that of some
other repository that happens to enclose a copy of the package."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flowsim.run.provenance import git_state, provenance

ROOT = Path(__file__).resolve().parent.parent


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_this_checkout_records_its_commit():
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=ROOT, capture_output=True, text=True,
                         check=False)
    if top.returncode or Path(top.stdout.strip()).resolve() != ROOT:
        pytest.skip("not run from a git checkout of flowsim")
    commit, dirty = git_state()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    assert commit == head and len(commit) == 40 and dirty in ("true", "false")
    assert provenance()["git_commit"] == commit


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_copy_inside_another_repository_records_no_commit(tmp_path):
    """flowsim copied into an unrelated repository (as a vendored copy, or installed into a
    venv inside a project) must not report that repository's HEAD as its own commit."""
    repo = tmp_path / "project"
    site = repo / "vendor"
    shutil.copytree(ROOT / "flowsim", site / "flowsim", ignore=shutil.ignore_patterns("__pycache__"))
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "vendored")
    env = dict(os.environ, PYTHONPATH=str(site), JAX_PLATFORMS="cpu")
    code = (f"import flowsim.run.provenance as p; assert p.__file__.startswith({str(site)!r}), p.__file__; "
            "r = p.provenance(); print(repr((r['git_commit'], r['git_dirty'])))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "('', '')"
