"""A scenario run into an archive: what `flowsim run` does, as library calls.

    job = prepare("quickstart")          # load, choose the runs, check, build: every refusal
                                         # of bad input, before any archive is touched
    writer = open_archive(job)           # create the archive (or resume it)
    statuses = drive(job, writer)        # run -> solver -> final status

or all at once, `run_scenario("quickstart")`. Bad input raises `InputError` or the loader's
own errors (`ScenarioError`, `DataError`, `BuildError`, `ArchiveError`); a stop request
honoured after a committed checkpoint raises `flowsim.run.driver.Interrupted`.

The heavy modules are imported inside the functions, so that the command line's other
commands (and `flowsim run --distributed`, which must start `jax.distributed` first) do
not pay for them.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from .build import Built
    from ..config import RunSpec, Scenario
    from .progress import Progress


class InputError(Exception):
    """Bad input found outside the scenario loader: an output path, a shard, conflicting
    options."""


@dataclass(frozen=True)
class Job:
    """A scenario prepared to run into one archive."""

    scenario: Scenario
    runs: list[RunSpec]          # the runs this archive holds: all, or a `shard`'s part
    shard: str | None            # "i/N" when the archive holds part i of N
    out: Path                    # the archive
    built: dict[str, Built]      # run name -> built run (`runs`, and the scenario's first run)
    resume: bool
    overwrite: bool
    complete: bool = False       # `continue_` found the archive finished: nothing to run


def prepare(scenario: str | Path, overrides: Sequence[str] = (), *, output: str | Path | None = None,
            shard: str | None = None, resume: bool = False, overwrite: bool = False,
            continue_: bool = False) -> Job:
    """Load the scenario (a file, or a name in the catalog) with its `--set` overrides,
    choose the runs of `shard` ("i/N"), check the output path, the memory and the disk,
    and build every run: bad data or shapes fail here, before the archive is touched.
    The archive defaults to runs/<name>.h5 (runs/<name>.part<i>of<N>.h5 for a shard).
    `continue_` (`flowsim run --continue`): start the archive where it does not exist,
    resume it where it does, and where it holds every run finished return a `complete`
    job at once (nothing built), so that one job script serves a first submission and
    every resubmission."""
    import jax

    from .build import build_run, program_signature, start_problem
    from .resources import check_resources
    from ..models import BuildError
    from .devices import is_primary, on_primary, shared
    from ..config import find_scenario, load_scenario

    if sum((overwrite, resume, continue_)) > 1:
        raise InputError("--overwrite, --resume and --continue exclude each other")
    sc = load_scenario(find_scenario(str(scenario)), list(overrides))
    for warning in sc.warnings if is_primary() else ():
        print(f"flowsim: warning: {warning}", file=sys.stderr)
    runs, part = sc.runs, None
    if shard:   # a job array's part: its own archive, joined later by `flowsim merge`
        from ..archive.merge import ShardError, parse_shard
        from ..config.sweep import shard_runs

        try:
            i, n = parse_shard(shard)
        except ShardError as err:
            raise InputError(str(err)) from None
        runs, part = shard_runs(sc.runs, i, n), f"{i}/{n}"
        if not runs:
            raise InputError(f"--shard {part}: this part holds none of the scenario's {len(sc.runs)} "
                             f"run(s); allowed: N ≤ {len(sc.runs)}")
    stem = sc.settings.name + (f".part{part.replace('/', 'of')}" if part else "")
    out = Path(output or Path("runs") / f"{stem}.h5")
    if continue_:
        resume = shared(out.exists)
        if resume and shared(lambda: is_finished(out, sc, runs)):
            return Job(scenario=sc, runs=runs, shard=part, out=out, built={}, resume=True, overwrite=False,
                       complete=True)
    # Under --distributed only process 0 touches the archive; every process raises its errors.
    on_primary(lambda: _check_output(out, resume=resume, overwrite=overwrite))
    # Refuse what would exhaust memory (or the disk) before anything is allocated.
    check_resources(sc, out_dir=next((p for p in (out.parent, *out.parents) if p.exists()), None),
                    written=_committed_rows(out) if resume else None)
    # the scenario's first run (whose data /data holds) with this process's runs, each once
    todo = {r.name: r for r in [sc.runs[0], *runs]}
    built, last = {}, None
    for name, r in todo.items():
        built[name] = build_run(r.settings, r.seed)
        why = start_problem(built[name])
        if why:
            raise BuildError(f"run {name}: the loss or its gradient is not finite at t = 0: {why}; allowed: "
                             "data and a model whose loss and gradient are finite at the initial weights "
                             "(nothing was run)")
        signature = program_signature([built[name]], r.settings)
        if last is not None and signature != last:
            jax.clear_caches()    # building compiles too: the last shape's programs go
        last = signature
    return Job(scenario=sc, runs=runs, shard=part, out=out, built=built, resume=resume, overwrite=overwrite)


def is_finished(out: Path, sc: Scenario, runs: list[RunSpec]) -> bool:
    """Whether the archive holds every solver of `runs` ended (no live writer), written
    by this scenario and these overrides (another one is refused, as a resume refuses it;
    a later run.t_end alone is not finished: the resume extends it)."""
    from ..archive import Archive, ArchiveError

    try:
        if _refuse_other_scenario(out, sc):
            return False
        with Archive(out) as a:
            if a.writer_pid is not None:
                return False     # being written: the resume's lock says by whom
            stored = a.runs
            for r in runs:
                solvers = stored[r.name].solvers if r.name in stored else {}
                if any(p.name not in solvers or solvers[p.name].status == "running" for p in r.settings.run.solvers):
                    return False
    except (ArchiveError, OSError):
        return False             # unreadable as it is: the resume repairs it or says why
    return True


def _committed_rows(out: Path) -> dict[str, dict[str, int]] | None:
    """An archive's committed rows, run -> solver -> rows (None where it cannot be read:
    resuming it then says why)."""
    from ..archive import Archive, ArchiveError

    try:
        with Archive(out) as a:    # read as it is: the repair, where needed, is the resume's
            return {name: {s: v.n_checkpoints for s, v in run.solvers.items()} for name, run in a.runs.items()}
    except (ArchiveError, OSError):
        return None


def check_output_folder(out: Path, named: str = "") -> None:
    """The archive's folder (or its nearest existing ancestor) must be a writable folder;
    `named` is how the caller's user spells the path (the CLI's `-o OUT` by default)."""
    named = named or f"-o {out}"
    folder = out.parent if str(out.parent) else Path(".")
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise InputError(f"{named}: {probe} is a file, not a folder; allowed: an archive path in a "
                         "writable folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise InputError(f"{named}: the folder {probe} is not writable; allowed: an archive path in a "
                         "writable folder")
    if out.exists() and out.is_dir():
        raise InputError(f"{named}: is a folder; allowed: an archive file path such as {out / 'run.h5'}")


def _check_output(out: Path, *, resume: bool, overwrite: bool) -> None:
    from ..archive.recovery import check_replaceable

    check_output_folder(out)
    check_replaceable(out)
    if out.exists() and not (overwrite or resume):
        raise InputError(f"{out} exists; pass --resume to continue it or --overwrite to replace it")
    if resume and not out.exists():
        raise InputError(f"{out} does not exist; nothing to resume (run without --resume)")


def _is_extension(old: dict, new: dict) -> bool:
    """Whether `new` only moves run.t_end later: every run then goes on from where it is."""
    later = new["run"]["t_end"] > old["run"]["t_end"]
    same_otherwise = {**new, "run": {**new["run"], "t_end": old["run"]["t_end"]}} == old
    return later and same_otherwise


def _in_current_schema(resolved: dict, path: Path) -> dict:
    """An archive's resolved scenario checked again by this flowsim's schema: keys added
    since it was written get their defaults (a new key's default is the behaviour before
    it, e.g. `slots` = 8 of the Filippov integrator), so that an upgrade alone does not
    read as a change of scenario. As stored where this schema refuses it."""
    from ..config.schema import SCENARIO
    from ..config.spec import Ctx

    try:
        again = SCENARIO.check(copy.deepcopy(resolved), "", Ctx(file=str(path), base_dir=path.parent,
                                                                stem=path.stem))
    except ValueError:
        return resolved
    return json.loads(json.dumps(again))


def _refuse_other_scenario(out: Path, scenario: Scenario) -> bool:
    """Whether resuming `out` extends its horizon (`--resume --set run.t_end=T` alone);
    an archive written by another scenario, other overrides or from a data file whose
    content has changed is refused here, read-only, before the writer opens it (opening for
    writing changes the file's bytes). Data files are compared by content: a project folder
    copied elsewhere resumes."""
    from ..archive import Archive
    from ..config import differences
    from .provenance import DATA_DIGESTS, by_content

    with Archive(out) as stored_archive:
        stored = _in_current_schema(stored_archive.attrs.get("scenario_resolved") or {}, out)
        recorded = (stored_archive.attrs.get("provenance") or {}).get(DATA_DIGESTS)
    now = json.loads(json.dumps(scenario.resolved))
    files, stored, now = by_content(recorded, stored, now)
    if files:
        raise InputError(f"{out} was written from other data; it was not touched\n"
                         + "\n".join(files) + "\nto run on the new data, pick another archive with -o")
    changed = differences(stored, now)
    if changed and not _is_extension(stored, now):
        raise InputError(_refusal(out, stored, now, changed))
    return bool(changed)


def _refusal(out: Path, stored: dict, now: dict, changed: list[str]) -> str:
    """A refused `--resume` in three short lines at most: whose archive it is, what differs
    (its first keys), and to pick another archive (never to replace this one)."""
    theirs, ours = stored.get("name", "?"), now.get("name", "?")
    free = Path("runs") / f"{ours}.h5"
    other = f"-o {free}" if free != out and not free.exists() else "another -o"
    if theirs != ours:
        return (f"{out} holds scenario {theirs!r}, not {ours!r}; it was not touched\n"
                f"to run {ours!r}, pick another archive: {other}")
    first = changed[0] if len(changed[0]) <= 60 else changed[0][:59] + "…"
    more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
    longer = any(c.startswith("`run.t_end`") for c in changed)
    return (f"{out} holds scenario {ours!r} with other values: {first} (archive -> now){more}\n"
            "it was not touched; to continue it: the same scenario and --set values"
            + (" (run.t_end may only grow, alone)" if longer else " (or a later run.t_end alone)") + "\n"
            f"to run these values, pick another archive: {other}")


def _open(job: Job):
    from ..archive import ArchiveWriter
    from .provenance import DATA_DIGESTS, data_digests, provenance, warn_on_device_change

    sc = job.scenario
    if not job.resume:
        return ArchiveWriter.create(job.out, scenario_text=sc.text, resolved=sc.resolved,
                                    provenance=provenance() | {DATA_DIGESTS: data_digests(sc.resolved)}
                                    | ({"shard": job.shard} if job.shard else {}),
                                    dtype=sc.settings.dtype, overwrite=job.overwrite)
    extends = _refuse_other_scenario(job.out, sc)
    writer = ArchiveWriter.resume(job.out)
    if extends:
        writer.extend_horizon(json.loads(json.dumps(sc.resolved)))  # the same runs, further
    warn_on_device_change(job.out, writer.provenance)
    return writer


def open_archive(job: Job, *, distributed: bool = False):
    """Create the job's archive (or resume it, after checking that the same scenario and
    overrides wrote it). An archive that cannot be written raises the OSError. With
    `distributed`, process 0 holds the file and every process gets a writer that asks it."""
    from .devices import SharedWriter, on_primary

    writer = on_primary(lambda: _open(job))
    return SharedWriter(writer) if distributed else writer


def drive(job: Job, writer, *, progress: Progress | bool | None = None,
          report: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
          should_stop: Callable[[], bool] = lambda: False,
          stop_now: Callable[[], bool] | None = None) -> dict[str, dict[str, str]]:
    """Run the job's runs into the open archive (closed on return); returns run -> solver
    -> final status. The scenario's `[analysis]` runs after each solver of each batch.
    `should_stop` is asked after each checkpoint, `stop_now` also while a segment computes
    (see `Driver`)."""
    from ..analysis.caron import analyze_runs
    from .driver import Driver

    with writer:
        return Driver(job.scenario, writer, progress=progress, report=report, should_stop=should_stop,
                      stop_now=stop_now,
                      runs=job.runs, hooks=(analyze_runs,)).run(job.built)


class Outcome(NamedTuple):
    archive: Path
    statuses: dict[str, dict[str, str]]     # run -> solver -> final status


def run_scenario(scenario: str | Path, overrides: Sequence[str] = (), *, output: str | Path | None = None,
                 shard: str | None = None, resume: bool = False, overwrite: bool = False,
                 progress: bool | None = None, report: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
                 should_stop: Callable[[], bool] = lambda: False) -> Outcome:
    """`prepare`, `open_archive` and `drive` in one call: the archive written and the
    final statuses (a numerical status such as `diverged` is a result, not an error)."""
    job = prepare(scenario, overrides, output=output, shard=shard, resume=resume, overwrite=overwrite)
    statuses = drive(job, open_archive(job), progress=progress, report=report, should_stop=should_stop)
    return Outcome(archive=job.out, statuses=statuses)
