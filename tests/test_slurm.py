"""A sweep on a real scheduler: the single-node Slurm of tests/slurm.py runs docs/scale.md's
cluster section as written, through bash. `flowsim submit`, one task cancelled while it
runs, the same command again: the merged archive is bit for bit one process's. The
template script, a cancelled task and the same lines again: every part finishes and
merges. (Without a scheduler: tests/test_parts.py.)"""

import os
import re
import subprocess
import sys
from pathlib import Path

import h5py
import pytest

import slurm
from archive_diff import differences
from flowsim import archive
from reliability.conftest import committed, wait_for
from test_docs import BLOCK

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
SECTION = (ROOT / "docs" / "scale.md").read_text(encoding="utf-8").split("\n## On a Slurm cluster\n", 1)[1]
SUBMIT, TEMPLATE, SUBMIT_TEMPLATE = (m.group(3) for m in BLOCK.finditer(SECTION.split("\n## ", 1)[0]))


def _bash(body: str, cwd: Path) -> subprocess.CompletedProcess:
    """A documented block, as a user's shell runs it: `flowsim` (this interpreter's) on the
    PATH, Slurm's configuration in SLURM_CONF (the fixture's)."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["bash", "-e", "-c", body], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"{body}\n{proc.stdout}\n{proc.stderr}"
    return proc


def _cancel_while_running(task: str, part: Path) -> None:
    """scancel `task` once it runs and its part holds a committed checkpoint."""
    assert wait_for(lambda: slurm.jobs().get(task) == "RUNNING" and committed(part) >= 1, 600, every=slurm.POLL), \
        slurm.jobs()
    subprocess.run(["scancel", task], check=True, timeout=60)


def _flat(merged: Path, to: Path) -> Path:
    """The merged archive with its external links copied in, for `archive_diff`."""
    with h5py.File(merged, "r") as m, h5py.File(to, "w") as f:
        for k, v in m.attrs.items():
            f.attrs[k] = v
        m.copy(m["data"], f, name="data")
        runs = f.create_group("runs")
        for name in m["runs"]:
            m.copy(m["runs"][name], runs, name=name)
    return to


def test_submit_cancel_and_submit_again_equals_one_process(tmp_path, slurm_cluster):
    one = tmp_path / "one"
    one.mkdir()
    reference = subprocess.Popen([sys.executable, "-m", "flowsim.cli", "run", "caron-fig1-quick", "-o", "one.h5",
                                  "-q"], cwd=one, stderr=subprocess.PIPE, text=True)
    try:
        first = _bash(SUBMIT, tmp_path)
        (array,) = re.findall(r"part\(s\) 0, 1, 2, 3 submitted as job (\d+)", first.stderr)
        part1 = tmp_path / "runs" / "x.part1of4.h5"
        _cancel_while_running(f"{array}_1", part1)
        slurm.wait_for_jobs([array], timeout=600)
        states = {i: slurm.job_state(f"{array}_{i}")[0] for i in range(4)}
        assert states == {0: "COMPLETED", 1: "CANCELLED", 2: "COMPLETED", 3: "COMPLETED"}, states
        done = committed(tmp_path / "runs" / "x.part0of4.h5")
        assert 0 < committed(part1) < done       # interrupted: the resubmission resumes it
        again = _bash(SUBMIT, tmp_path)
        assert "part(s) 0, 2, 3 of 4 finished; part(s) 1 submitted as job" in again.stderr, again.stderr
        (merge,) = re.findall(r"the merge into runs/x.h5 submitted as job (\d+)", again.stderr)
        slurm.wait_for_jobs([merge], timeout=600)
        assert slurm.job_state(merge) == ("COMPLETED", "0:0"), (tmp_path / "runs" / "x.merge.log").read_text()
        assert reference.wait(timeout=600) == 0, reference.stderr.read()
    finally:
        reference.kill()
    assert committed(part1) == done
    # the runs and /data bit for bit; the top level differs only by what a merge records
    found = differences(one / "one.h5", _flat(tmp_path / "runs" / "x.h5", tmp_path / "flat.h5"))
    assert found and all(d.startswith(("/: merged_from:", "/: provenance.shards:")) for d in found), found
    with archive.open(one / "one.h5") as a, archive.open(tmp_path / "runs" / "x.h5") as b:
        top_a, top_b = dict(a.attrs), dict(b.attrs)
    assert top_b.pop("merged_from") == [f"x.part{i}of4.h5" for i in range(4)]
    assert top_b["provenance"].pop("shards") == [f"{i}/4" for i in range(4)]
    top_a.pop("created"), top_b.pop("created")     # the dates the archives were begun
    assert top_a == top_b


def test_the_template_script_submits_resubmits_and_merges(tmp_path, slurm_cluster):
    (tmp_path / "parts.sh").write_text(TEMPLATE)
    first = _bash(SUBMIT_TEMPLATE, tmp_path)
    (merge,) = re.findall(r"Submitted batch job (\d+)", first.stdout)
    (array,) = {j.split("_")[0] for j in slurm.jobs(name="x-parts")}
    _cancel_while_running(f"{array}_2", tmp_path / "runs" / "x.part2of4.h5")
    slurm.wait_for_jobs([array, merge], timeout=600)
    assert slurm.job_state(f"{array}_2")[0] == "CANCELLED"
    assert slurm.job_state(merge)[0] == "CANCELLED"    # --kill-on-invalid-dep: it would never run
    again = _bash(SUBMIT_TEMPLATE, tmp_path)        # the same lines: every part again
    (merge,) = re.findall(r"Submitted batch job (\d+)", again.stdout)
    slurm.wait_for_jobs([merge], timeout=600)
    assert slurm.job_state(merge) == ("COMPLETED", "0:0"), (tmp_path / "runs" / "x.merge.log").read_text()
    logs = {i: (tmp_path / "runs" / f"x.part{i}of4.log").read_text() for i in range(4)}
    assert all("is complete (2 run(s)); nothing to do" in logs[i] for i in (0, 1, 3)), logs
    with archive.open(tmp_path / "runs" / "x.h5") as a:
        statuses = {(r, s): v.status for r, run in a.runs.items() for s, v in run.solvers.items()}
    assert len(statuses) == 8 * 2 and set(statuses.values()) == {"done"}, statuses
