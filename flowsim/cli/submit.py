"""`flowsim submit SCENARIO --parts N -o OUT.h5`: a sweep as a Slurm job array of N parts
and a merge that waits for them.

It writes two job scripts beside OUT (`OUT.array.sh`, `OUT.merge.sh`) and submits the array
(`sbatch --array=<parts to do> OUT.array.sh`), whose task i runs `flowsim run SCENARIO
--shard i/N -o OUT.part<i>of<N>.h5 --continue`, and the merge (`sbatch
--dependency=afterok:<array> OUT.merge.sh`), which runs `flowsim merge OUT PARTS…`.
A part is keyed by the task's index and the N written in the script, never by
SLURM_ARRAY_TASK_COUNT (the tasks of one submission), so any subset can be submitted.

The same command again submits only what is not done: a finished part is not submitted,
one queued or running is waited for, and an interrupted or missing one runs (`--continue`
resumes or starts it); a merge still waiting from an earlier submission (it never runs
once a task it waits for failed) is cancelled, and a new one waits for this submission's
tasks. `--dry-run` prints the scripts and the sbatch commands and submits nothing.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
from pathlib import Path

from ..run.session import InputError

# Options that `flowsim submit` sets itself on the sbatch command line.
_OWN = ("--array", "-a", "--dependency", "-d", "--job-name", "-J", "--parsable")


def part_path(out: Path, i: int, n: int) -> Path:
    """Part i of n's archive beside the merged one (runs/x.h5 -> runs/x.part0of4.h5)."""
    return out.with_name(f"{out.stem}.part{i}of{n}.h5")


def _job_names(out: Path) -> tuple[str, str]:
    """The array's and the merge's job names: the output's stem and a hash of its absolute
    path, so that a second `submit` finds the jobs of the first (and no other output's)."""
    tag = hashlib.sha1(str(out.resolve()).encode()).hexdigest()[:8]
    return f"flowsim-{out.stem}-{tag}", f"flowsim-merge-{out.stem}-{tag}"


def _flowsim() -> str:
    """The command that runs this flowsim (its interpreter), for the job scripts."""
    return f"{shlex.quote(sys.executable)} -m flowsim.cli"


def scripts(scenario: str, sets: list[str], out: Path, n: int, folder: Path) -> tuple[str, str]:
    """The array script and the merge script."""
    array_name, merge_name = _job_names(out)
    sets_args = "".join(f" --set {shlex.quote(s)}" for s in sets)
    log = out.parent / f"{out.stem}.part%aof{n}.log"     # %a: the task's index
    part = shlex.quote(str(out.parent / f"{out.stem}.part")) + f'"$SLURM_ARRAY_TASK_ID"of{n}.h5'
    array = f"""#!/bin/bash
#SBATCH --job-name={array_name}
#SBATCH --chdir={shlex.quote(str(folder))}
#SBATCH --output={shlex.quote(str(log))}
#SBATCH --open-mode=append
# Task i runs part i of {n} (the {n} is written here, never $SLURM_ARRAY_TASK_COUNT: that is the
# count of one submission's tasks). --continue starts a part, resumes an interrupted one and
# exits 0 at once for a finished one. Submitted by `flowsim submit` with --array=<the parts to do>.
exec {_flowsim()} run {shlex.quote(scenario)} --shard "$SLURM_ARRAY_TASK_ID/{n}" -o {part}{sets_args} --continue
"""
    parts = " ".join(shlex.quote(str(part_path(out, i, n))) for i in range(n))
    merge = f"""#!/bin/bash
#SBATCH --job-name={merge_name}
#SBATCH --chdir={shlex.quote(str(folder))}
#SBATCH --output={shlex.quote(str(out.with_suffix('.merge.log')))}
#SBATCH --open-mode=append
# Run by `flowsim submit` after every task of the array ended well (--dependency=afterok).
exec {_flowsim()} merge {shlex.quote(str(out))} {parts} --overwrite
"""
    return array, merge


def _slurm(*cmd: str) -> str:
    """A Slurm command's output; its failure is an InputError with its message."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except OSError as err:
        raise InputError(f"`{cmd[0]}` cannot be run ({err.strerror or err}); allowed: a machine with Slurm's "
                         "commands (sbatch, squeue, scancel), or --dry-run to print the scripts") from None
    except subprocess.TimeoutExpired:
        raise InputError(f"`{shlex.join(cmd)}` did not answer in 120 s; is slurmctld up?") from None
    if proc.returncode != 0:
        raise InputError(f"`{shlex.join(cmd)}` failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def _queued(out: Path) -> tuple[dict[int, str], list[str]]:
    """This output's tasks still queued or running (part -> `ARRAY_TASK` job id) and its
    merge jobs still pending."""
    array_name, merge_name = _job_names(out)
    live, merges = {}, []
    text = _slurm("squeue", "-h", "-r", "--me", f"--name={array_name},{merge_name}", "-o", "%A %K %j %T")
    for line in text.splitlines():
        job, task, name, state = line.split()
        if name == array_name and task.isdigit():
            live[int(task)] = f"{job}_{task}"
        elif name == merge_name and state == "PENDING":
            merges.append(job)
    return live, merges


def cut_points(runs: list, n: int) -> list[int]:
    """The sweep points whose runs (seeds) `shard_runs` splits between two of n parts."""
    total = len(runs)
    cuts = (i * total // n for i in range(1, n))
    return sorted({runs[c].point for c in cuts if 0 < c < total and runs[c - 1].point == runs[c].point})


def _ranges(indices: list[int]) -> str:
    """0,1,2,5 -> "0-2,5" (sbatch's --array)."""
    spans, start = [], None
    for k, i in enumerate(indices):
        start = i if start is None else start
        if k + 1 == len(indices) or indices[k + 1] != i + 1:
            spans.append(f"{start}" if start == i else f"{start}-{i}")
            start = None
    return ",".join(spans)


def submit(scenario: str, sets: list[str], out: Path, n: int, sbatch: str = "", dry_run: bool = False) -> dict:
    """Submit (or with `dry_run` only print) what is left of the job; returns what was
    decided: parts finished, waited for and submitted, the array's and the merge's job ids."""
    from ..config import find_scenario, load_scenario
    from ..config.sweep import shard_runs
    from ..run.session import check_output_folder, is_finished

    if n < 1:
        raise InputError(f"--parts {n}: allowed: a positive integer")
    if out.suffix != ".h5":
        raise InputError(f"-o {out}: allowed: an archive path ending in .h5 (its parts are written beside it)")
    check_output_folder(out)
    extra = shlex.split(sbatch)
    own = [a for a in extra if a.split("=")[0] in _OWN]
    if own:
        raise InputError(f"--sbatch {sbatch!r}: {', '.join(own)} is set by flowsim submit; allowed: other sbatch "
                         "options (partition, time, memory, account, …)")
    sc = load_scenario(find_scenario(scenario), list(sets))
    if n > len(sc.runs):
        raise InputError(f"--parts {n}: the scenario has {len(sc.runs)} run(s); allowed: 1 ≤ N ≤ {len(sc.runs)}")
    cut = cut_points(sc.runs, n)
    if cut:
        print(f"flowsim: note: {n} parts cut the seeds of sweep point(s) {', '.join(map(str, cut))} into separate "
              f"batches: their runs agree with one process to round-off, not bit for bit (docs/scale.md); a "
              f"--parts that keeps whole points (one dividing the {sc.runs[-1].point + 1} points) is exact",
              file=sys.stderr)
    finished = [i for i in range(n) if part_path(out, i, n).exists()
                and is_finished(part_path(out, i, n), sc, shard_runs(sc.runs, i, n))]
    try:
        live, stale = _queued(out)
    except InputError:
        if not dry_run:
            raise
        live, stale = {}, []     # no Slurm here: the scripts are printed all the same
    todo = [i for i in range(n) if i not in finished and i not in live]
    array, merge = scripts(scenario, sets, out, n, Path.cwd())
    array_file, merge_file = out.with_suffix(".array.sh"), out.with_suffix(".merge.sh")
    array_cmd = ["sbatch", "--parsable", f"--array={_ranges(todo)}", *extra, str(array_file)]

    def merge_cmd(after: list[str]) -> list[str]:
        # --kill-on-invalid-dep: a merge waiting for a task that failed is cancelled, not kept forever
        wait = [f"--dependency=afterok:{':'.join(after)}", "--kill-on-invalid-dep=yes"] if after else []
        return ["sbatch", "--parsable", *wait, *extra, str(merge_file)]

    if dry_run:
        print(f"# {array_file}\n{array}\n# {merge_file}\n{merge}")
        print("# would run:" + (f"\n{shlex.join(array_cmd)}" if todo else "") + "\n"
              + shlex.join(merge_cmd(["ARRAY_JOB_ID"] if todo else [live[i] for i in sorted(live)])))
        return {"finished": finished, "waiting": sorted(live), "submitted": todo, "array": None, "merge": None}
    out.parent.mkdir(parents=True, exist_ok=True)
    array_file.write_text(array)
    merge_file.write_text(merge)
    if stale:   # a merge waiting for tasks that failed or were cancelled would wait forever
        _slurm("scancel", *stale)
    array_id = _slurm(*array_cmd).strip().split(";")[0] if todo else None
    after = [*([array_id] if array_id else []), *(live[i] for i in sorted(live))]
    merge_id = _slurm(*merge_cmd(after)).strip().split(";")[0]
    return {"finished": finished, "waiting": sorted(live), "submitted": todo, "array": array_id, "merge": merge_id}


def report(decided: dict, out: Path, n: int) -> str:
    """What `flowsim submit` says it did."""
    def listed(parts):
        return ", ".join(map(str, parts))

    lines = []
    if decided["finished"]:
        lines.append(f"part(s) {listed(decided['finished'])} of {n} finished")
    if decided["waiting"]:
        lines.append(f"part(s) {listed(decided['waiting'])} queued or running")
    if decided["submitted"]:
        lines.append(f"part(s) {listed(decided['submitted'])} submitted as job {decided['array']} "
                     f"({out.with_suffix('.array.sh')})")
    after = ", after them" if decided["waiting"] or decided["submitted"] else ""
    lines.append(f"the merge into {out} submitted as job {decided['merge']}{after} "
                 f"({out.with_suffix('.merge.sh')}); run the same command again to resubmit what did not finish")
    return "flowsim: " + "; ".join(lines)


def cmd_submit(args) -> int:
    out = Path(args.output)
    decided = submit(args.scenario, args.set, out, args.parts, sbatch=args.sbatch, dry_run=args.dry_run)
    if not args.dry_run:
        print(report(decided, out, args.parts), file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    """`flowsim submit`'s arguments."""
    s = sub.add_parser("submit", help="run a scenario as a Slurm job array of --parts parts and merge them "
                       "(again: resubmit what did not finish)")
    s.add_argument("scenario", help="a scenario file, or the name of one in the catalog")
    s.add_argument("--parts", type=int, required=True, metavar="N",
                   help="the number of parts (array tasks); parts aligned with sweep points give results "
                        "bit-identical to one process (docs/scale.md)")
    s.add_argument("-o", "--output", required=True,
                   help="the merged archive; its parts are written beside it (X.part<i>of<N>.h5)")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="as for `run`")
    s.add_argument("--sbatch", default="", metavar="ARGS",
                   help="more sbatch options for every job, e.g. --sbatch=\"--partition=gpu --time=2:00:00\" "
                        "(with `=`: argparse reads a value starting with - as an option)")
    s.add_argument("--dry-run", action="store_true", help="print the job scripts and sbatch commands; submit nothing")
    s.set_defaults(func=cmd_submit)
