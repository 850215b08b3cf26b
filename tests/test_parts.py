"""A job array's parts without a scheduler: `flowsim run --continue` (start, resume or
nothing to do: one job script for every submission), the "continue with" command an
interrupted part prints (followed as printed, it finishes that part), `flowsim merge`'s
refusals, and `flowsim submit --dry-run`'s scripts. On a real Slurm: tests/test_slurm.py."""

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import pytest

from archive_diff import differences
from helpers import call_cli
from reliability.conftest import committed, set_args, wait_for
from test_scale import _FAST_CLOCK, flowsim_after

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "scenarios" / "tiny.toml"
# values a shell would split or expand: the printed command must quote them
LONG = ["seeds=[0, 1]", "run.checkpoints={count=60}", 'run.solvers=["gd-lr0.1"]']


def _flowsim(*args) -> list[str]:
    return [sys.executable, "-m", "flowsim.cli", *map(str, args)]


def _printed(command: str) -> list[str]:
    """A printed `flowsim …` command as the shell would run it."""
    words = shlex.split(command)
    assert words[0] == "flowsim", command
    return _flowsim(*words[1:])


@pytest.mark.slow
def test_the_printed_continue_command_finishes_the_interrupted_part(tmp_path):
    """Part 1 of 2 stopped by SIGTERM prints a command carrying its --shard, -o and --set
    values; run as printed (through the shell's quoting), it finishes the part, equal to an
    uninterrupted one; `--continue` then exits 0 at once and leaves the archive alone."""
    part = ["--shard", "1/2", *set_args(LONG)]
    whole = subprocess.run(_flowsim("run", TINY, "-o", tmp_path / "whole.h5", *part, "-q"), cwd=tmp_path,
                           capture_output=True, text=True, timeout=600)
    assert whole.returncode == 0, whole.stderr
    out = tmp_path / "sub dir" / "p1.h5"      # a space: the printed -o must be quoted
    # its clock 1 000x fast: a commit after every checkpoint, so the stop lands mid-run
    proc = subprocess.Popen([*flowsim_after(_FAST_CLOCK), "run", TINY, "-o", out, *part, "--continue"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: committed(out) >= 8, 300, proc)
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=120)[1]
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    (printed,) = re.findall(r"continue with `([^`]*)`", err)
    assert "--shard 1/2" in printed and "--set 'seeds=[0, 1]'" in printed, printed
    assert 8 <= committed(out) < committed(tmp_path / "whole.h5")
    shown = call_cli("inspect", out)
    assert f"resume with `flowsim run tiny --shard 1/2 -o {out} --resume`" in shown.stdout, shown.stdout
    resumed = subprocess.run(_printed(printed), cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert differences(tmp_path / "whole.h5", out) == []
    before = out.read_bytes()
    again = subprocess.run(_flowsim("run", TINY, "-o", out, *part, "--continue"), cwd=tmp_path,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "is complete (2 run(s)); nothing to do" in again.stderr, again.stderr
    assert out.read_bytes() == before


@pytest.mark.slow
def test_continue_starts_a_missing_part_and_refuses_another_scenario(tmp_path):
    sets = ["--shard", "0/2", "--set", "run.checkpoints={count=3}", "-q"]
    first = call_cli("run", TINY, "-o", tmp_path / "p.h5", *sets, "--continue")
    # 2 runs x 2 solvers x (t = 0 and 3 checkpoints)
    assert first.returncode == 0 and committed(tmp_path / "p.h5") == 2 * 2 * 4, first.stderr
    other = call_cli("run", TINY, "-o", tmp_path / "p.h5", "--shard", "0/2", "--set", "run.checkpoints={count=4}",
                     "--continue")
    assert other.returncode == 2 and "with other values: `run.checkpoints.count`" in other.stderr, other.stderr
    both = call_cli("run", TINY, "-o", tmp_path / "p.h5", "--continue", "--resume")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def _part(tmp_path, shard, *extra) -> Path:
    out = tmp_path / f"part{shard.replace('/', 'of')}.h5"
    r = call_cli("run", TINY, "--shard", shard, "-o", out, "--set", "run.checkpoints={count=2}",
                 "--set", 'run.solvers=["gd-lr1"]', *extra, "-q")
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.slow
def test_merge_refuses_missing_overlapping_and_foreign_parts(tmp_path):
    p0, p1, p2 = _part(tmp_path, "0/3"), _part(tmp_path, "1/3"), _part(tmp_path, "2/3")
    half = _part(tmp_path, "1/2")
    other = tmp_path / "other"
    other.mkdir()
    seeds = _part(other, "2/3", "--set", "seeds=[0, 1, 2]")

    def refused(*parts) -> str:
        r = call_cli("merge", tmp_path / "m.h5", *parts)
        assert r.returncode == 2 and not (tmp_path / "m.h5").exists(), r.stderr
        return r.stderr

    assert f"shard(s) 1/3 of 3 missing" in refused(p0, p2) and str(p2) in refused(p0, p2)
    assert f"{half}: shard 1/2 overlaps {p0} (shard 0/3)" in refused(p0, half, p2)
    assert f"{p1}: shard 1/3 given twice (also {p1})" in refused(p0, p1, p1, p2)
    assert f"{seeds}: was written by a different scenario" in refused(p0, p1, seeds)
    # another version of flowsim: the parts no longer compute alike
    with h5py.File(p2, "r+") as f:
        f.attrs["provenance"] = f.attrs["provenance"].replace('"flowsim": "', '"flowsim": "9.9.9-')
    assert f"{p2}: was written by flowsim 9.9.9-" in refused(p0, p1, p2)


def test_submit_dry_run_prints_the_scripts_and_refuses_bad_input(tmp_path):
    """Nothing is submitted or written; the array's tasks are keyed by the N written in the
    script, never by SLURM_ARRAY_TASK_COUNT."""
    r = call_cli("submit", TINY, "--parts", "3", "-o", tmp_path / "runs" / "x.h5", "--set", "seeds=[0, 1, 2]",
                 "--sbatch", "--time=10 --partition=main", "--dry-run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f'--shard "$SLURM_ARRAY_TASK_ID/3" -o {tmp_path}/runs/x.part"$SLURM_ARRAY_TASK_ID"of3.h5 ' \
           "--set 'seeds=[0, 1, 2]' --continue" in r.stdout
    assert "SLURM_ARRAY_TASK_COUNT" not in r.stdout.replace("never $SLURM_ARRAY_TASK_COUNT", "")
    assert f"merge {tmp_path}/runs/x.h5 " + " ".join(f"{tmp_path}/runs/x.part{i}of3.h5" for i in range(3)) in r.stdout
    assert f"sbatch --parsable --array=0-2 --time=10 --partition=main {tmp_path}/runs/x.array.sh" in r.stdout
    assert ("sbatch --parsable --dependency=afterok:ARRAY_JOB_ID --kill-on-invalid-dep=yes --time=10 "
            f"--partition=main {tmp_path}/runs/x.merge.sh") in r.stdout
    assert not (tmp_path / "runs").exists()
    # 2 points x 3 seeds in 3 parts: both points' seeds are cut (round-off only), in 2 parts none
    assert "3 parts cut the seeds of sweep point(s) 0, 1 into separate batches" in r.stderr
    whole = call_cli("submit", TINY, "--parts", "2", "-o", tmp_path / "runs" / "x.h5", "--set", "seeds=[0, 1, 2]",
                     "--dry-run", cwd=tmp_path)
    assert whole.returncode == 0 and "cut" not in whole.stderr, whole.stderr
    for args, says in ((["--parts", "7"], "the scenario has 6 run(s); allowed: 1 ≤ N ≤ 6"),
                       (["--parts", "0"], "--parts 0: allowed: a positive integer"),
                       (["--parts", "2", "--sbatch=--array=0-3"], "--array=0-3 is set by flowsim submit"),
                       (["--parts", "2", "--set", "model.width=-1"], "model.width")):
        bad = call_cli("submit", TINY, "-o", tmp_path / "x.h5", "--set", "seeds=[0, 1, 2]", *args, "--dry-run",
                       cwd=tmp_path)
        assert bad.returncode == 2 and says in bad.stderr, (args, bad.stderr)
    bad = call_cli("submit", TINY, "--parts", "2", "-o", tmp_path / "x.txt", "--dry-run")
    assert bad.returncode == 2 and "ending in .h5" in bad.stderr
