"""The `flowsim` command: run | merge | list | show | inspect | plot | compare | analyze.

Argument parsing, messages and exit codes only: the work is done by library calls
(`flowsim.session` for `run`).

Exit status: 0 when every run finished (numerical statuses such as `diverged` included),
2 for bad input (scenario, data, archive refused), 1 for an internal failure, 130 when
interrupted (the archive then holds every finished checkpoint and `--resume` goes on).
"""

import argparse
import shutil
import signal
import sys
from pathlib import Path

from .engine_env import set_engine_defaults
from .session import InputError

EXIT_OK, EXIT_INTERNAL, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_NOTHING = 1     # the command found nothing to do (compare: no discrete/flow pair)


def _err(msg: str) -> None:
    print(f"flowsim: error: {msg}", file=sys.stderr)


def _input_errors() -> tuple:
    """The exception types that mean bad input (exit 2) rather than a bug (exit 1). Asked
    when an exception is matched, it names `BuildError` only where its module (which loads
    JAX) was imported: a command that never imported it (inspect, plot and compare read an
    archive without JAX) cannot have raised one."""
    from .archive import ArchiveError
    from .config import ScenarioError
    from .data import DataError

    models = sys.modules.get("flowsim.models.base")
    return (ScenarioError, DataError, ArchiveError, InputError) + ((models.BuildError,) if models else ())


class _StopRequest:
    """SIGTERM (a batch scheduler's stop) and Ctrl-C during `flowsim run`: the first one
    stops the driver within a quarter second, abandoning the segment being computed (with
    --distributed: after the checkpoint being computed, on every process); exit 130, the
    archive resumable. A second one stops at once (the archive is crash-safe anyway).
    Nothing is printed inside the handler (a write there can collide with one it interrupted)."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.requested = False
        # Before the archive is opened a stop loses nothing, so the process ends at once
        # (exit 130), also inside a plug-in's import or factory that never returns. It ends
        # rather than raising: an exception raised in the middle of an import or of JAX's
        # tracing can turn into an ImportError or a crash at exit.
        self.at_once = False
        self.children: set[int] = set()    # processes to end with this one (plugins.rehearse)
        self._saved: dict = {}

    def __call__(self) -> bool:
        return self.requested

    def _handle(self, signum, frame):
        if self.at_once:
            import os

            for pid in self.children:
                os.kill(pid, signal.SIGKILL)
            os.write(2, b"flowsim: error: interrupted\n")
            os._exit(EXIT_INTERRUPTED)
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def install(self) -> None:
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:     # a second install keeps the first's saved handlers
                self._saved.setdefault(sig, signal.signal(sig, self._handle))

    def ignore(self) -> None:
        for sig in self.SIGNALS:
            signal.signal(sig, signal.SIG_IGN)

    def restore(self) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)
        self._saved.clear()


_DISK_ERRNOS = {"ENOSPC", "EFBIG", "EDQUOT", "EROFS", "EIO"}


def _write_failure(out: Path, err: OSError, resume_cmd: str) -> str | None:
    """The message for an archive write that failed because of the disk (None: not that)."""
    import errno as _errno

    code = _errno.errorcode.get(getattr(err, "errno", None) or 0, "")
    text = str(err)
    import re

    found = re.search(r"errno = (\d+), error message = '([^']*)'", text)
    if found:   # h5py wraps the OS error in HDF5's own words: keep the OS's
        code, text = _errno.errorcode.get(int(found.group(1)), code), f"{found.group(2)} (errno {found.group(1)})"
    disk = code in _DISK_ERRNOS or any(w in text for w in (
        "No space left", "File too large", "Disk quota", "Read-only file system", "file write failed"))
    if not disk:
        return None
    return (f"writing {out} failed: {text.strip() or code}. The disk is full or the file hit a size "
            f"limit. {out} keeps every checkpoint committed before the failure (see `flowsim inspect "
            f"{out}`); free space, then continue with `{resume_cmd}`")


def _quiet_hdf5_unraisable(unraisable) -> None:
    """After a failed write, h5py reports every object it cannot release as an ignored
    exception with a traceback; the run reports the failure once, in words."""
    if isinstance(unraisable.exc_value, RuntimeError) and "errno" in str(unraisable.exc_value):
        return
    sys.__unraisablehook__(unraisable)


def _load_engine() -> None:
    """Import JAX, Diffrax, h5py and the engine, with Python's cyclic collector off, and
    then those ~200 000 long-lived objects frozen out of its sight (`gc.freeze`): otherwise
    every full collection during a run's tracing scans them again, 0.15-0.2 s of a 1.9 s run
    (bench_e2e), and collections during the imports find little. For the command's own
    process only: a caller of main() keeps its heap."""
    import gc

    set_engine_defaults()
    gc.disable()
    try:
        from . import build, driver, provenance  # noqa: F401  (what a run imports later)
        from .analysis import caron  # noqa: F401
    finally:
        gc.freeze()
        gc.enable()


def _leave(code: int) -> None:
    """Exit now, without the interpreter's teardown (see the callers for why)."""
    import os

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def cmd_run(args) -> int:
    if args.distributed:   # before anything starts JAX's backends
        from .devices import DistributedError, initialize

        try:
            initialize()
        except DistributedError as err:
            raise InputError(str(err)) from None
        # JAX's preemption notifier took SIGTERM; take it back: a stop reaching any process
        # is then honoured by all after the same checkpoint (Driver.should_stop below).
        _STOP.install()
    from . import session
    from .devices import any_process, is_primary

    _STOP.at_once = not args.distributed      # several processes stop after the same checkpoint
    prepare = lambda: session.prepare(args.scenario, args.set, output=args.output,  # noqa: E731
                                      shard=args.shard, resume=args.resume, overwrite=args.overwrite)
    _rehearse(args, prepare)
    try:
        job = prepare()
    except SystemExit as exit_:   # a plug-in's sys.exit where no key could be named (its first call)
        raise InputError(f"user code (a plug-in) raised SystemExit({exit_.code!r}) while the scenario was "
                         "prepared; a plug-in may not end the process; nothing was written") from None
    _STOP.at_once = False
    out, shard = job.out, job.shard
    resume_cmd = " ".join(["flowsim run", args.scenario, "-o", str(out), *(f"--set {s}" for s in args.set),
                           "--resume", *(["--distributed"] if args.distributed else []),
                           *([f"--log-jsonl {args.log_jsonl}"] if args.log_jsonl else [])])
    if any_process(_STOP.requested):
        print("flowsim: interrupted before the archive was touched", file=sys.stderr)
        return EXIT_INTERRUPTED
    primary = is_primary()
    speak = primary and not args.quiet    # -q: errors (and the scenario's warnings) only
    from .progress import Progress

    try:
        progress = Progress(None if speak else False,
                            jsonl=args.log_jsonl if primary else None)
    except OSError as err:
        raise InputError(f"--log-jsonl {args.log_jsonl}: cannot be written ({err.strerror or err}); "
                         "allowed: a file path in a writable folder") from None
    try:
        writer = session.open_archive(job, distributed=args.distributed)
    except OSError as err:   # permissions, a read-only or full disk: the archive cannot be written
        raise InputError(_write_failure(out, err, resume_cmd) or f"{out}: cannot be written ({err})") from None
    if speak:
        print(f"flowsim: {job.scenario.settings.name}: {len(job.runs)} run(s)" + (f" (part {shard} of "
              f"{len(job.scenario.runs)})" if shard else "") + f" → {out}", file=sys.stderr)
    saved_hook = sys.unraisablehook
    sys.unraisablehook = _quiet_hdf5_unraisable
    try:
        # One process alone can stop during a segment; several must stop after the same checkpoint.
        statuses = session.drive(job, writer, progress=progress,
                                 report=(lambda s: print(s, file=sys.stderr)) if speak else (lambda s: None),
                                 should_stop=lambda: any_process(_STOP()),
                                 stop_now=None if args.distributed else _STOP)
    except SystemExit as exit_:   # a plug-in's sys.exit while the run traces or calls it
        raise InputError(f"user code (a plug-in) raised SystemExit({exit_.code!r}) during the run; a plug-in "
                         f"may not end the process; {out} holds every finished checkpoint") from None
    except KeyboardInterrupt:
        if primary:
            print(f"flowsim: interrupted; {out} holds every finished checkpoint — continue with "
                  f"`{resume_cmd}`", file=sys.stderr)
        if _COMMAND_LINE:
            # The abandoned segment may still be computing on its thread, and the interpreter's
            # teardown aborts under it; the archive is closed, so leave at once.
            _leave(EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED
    except (OSError, RuntimeError) as err:   # h5py reports failed writes as either
        msg = _write_failure(out, err, resume_cmd)
        if msg is None:
            raise
        _err(msg)
        if _COMMAND_LINE:
            # HDF5 still holds the file it could not flush and retries at interpreter exit,
            # which can crash (SIGSEGV); every commit is on disk, so leave at once.
            _leave(EXIT_INTERNAL)
        return EXIT_INTERNAL
    finally:
        sys.unraisablehook = saved_hook
    bad = sorted({s for per in statuses.values() for s in per.values()} - {"done"})
    tail = f" (statuses: {', '.join(bad)}; see `flowsim inspect {out}`)" if bad else ""
    if speak:
        print(f"flowsim: wrote {out}{tail}", file=sys.stderr)
    if _COMMAND_LINE:
        # The archive is closed and the JSON log is written line by line; the interpreter's
        # teardown of JAX, XLA and Diffrax would add 0.3 s to every run (bench_e2e). Run
        # the exit handlers (logging, JAX's own clean-up, lock files), a late stop ignored
        # as in `main`, then leave.
        import atexit

        _STOP.ignore()
        atexit._run_exitfuncs()
        _leave(EXIT_OK)
    return EXIT_OK


def _rehearse(args, work) -> None:
    """A scenario naming plug-ins is prepared first in a forked child (`plugins.rehearse`):
    one that ends the process there is an input error naming it, instead of a silent exit
    with status 0. Only in the command's own process, whose JAX has not started yet."""
    import os
    import tomllib

    from . import plugins
    from .config import find_scenario

    if not _COMMAND_LINE or getattr(args, "distributed", False) or not hasattr(os, "fork"):
        return
    try:
        raw = tomllib.loads(find_scenario(args.scenario).read_text())
    except (OSError, ValueError, _input_errors()):   # the loader says what is wrong, in the parent
        return
    values = [s.partition("=")[2].strip().strip("\"'") for s in args.set]
    if plugins.named_in(raw) or any(map(plugins.is_path, values)):
        ended = plugins.rehearse(work, started=_STOP.children.add)
        if ended:
            raise InputError(f"{args.scenario}: {ended}; a plug-in may not end the process; "
                             "allowed: plug-ins that return or raise")


def cmd_merge(args) -> int:
    from .archive.merge import ShardError, merge

    try:
        summary = merge(args.output, args.parts, overwrite=args.overwrite)
    except ShardError as err:
        raise InputError(str(err)) from None
    print(f"flowsim: wrote {args.output}: {summary['runs']} run(s) linked from {summary['parts']} part(s)"
          + (f"; missing shard(s) {', '.join(summary['missing_shards'])}" if summary["missing_shards"] else ""),
          file=sys.stderr)
    return EXIT_OK


def cmd_list(args) -> int:
    import os

    from .config import list_scenarios, list_solvers

    width = max(shutil.get_terminal_size((120, 24)).columns, 60)
    room = width - 31     # for the description, after the name column

    def cut(text: str, indent: str) -> str:
        text = indent + text
        return text if len(text) <= width else text[: width - 1] + "…"

    def entries(found: list[tuple[str, str]]) -> list[str]:
        """One line each, cut to the terminal's width; where that hides what tells an entry
        from another (a `-quick` file and its paper-scale twin), a second line from the
        clause where their descriptions part."""
        out = []
        for name, desc in found:
            out.append(cut(desc, f"  {name:<28} "))
            twins = [d for n, d in found if n != name and d[:room] == desc[:room]]
            if twins:
                part = min(len(os.path.commonprefix([desc, d])) for d in twins)
                start = max(desc.rfind(sep, 0, part) for sep in (". ", "; ", ", ", ": ", " (")) + 2
                out.append(cut("…" + desc[start:], " " * 31))
        return out

    print("scenarios:")
    print("\n".join(entries(list_scenarios())))
    print("solvers:")
    print("\n".join(entries(list_solvers())))
    return EXIT_OK


def cmd_show(args) -> int:
    from .config import find_scenario, load_scenario
    from .show import show

    load = lambda: load_scenario(find_scenario(args.scenario), args.set)  # noqa: E731
    _rehearse(args, load)
    print(show(load()))
    return EXIT_OK


def _written_by_simulate(resolved) -> bool:
    """Whether `flowsim.simulate` wrote the archive (its model came from Python, not a file)."""
    return isinstance(resolved, dict) and isinstance(resolved.get("model"), dict) and \
        resolved["model"].get("kind") == "module"


def cmd_inspect(args) -> int:
    import numpy as np

    from . import archive, plugins
    from .advice import advise

    with archive.open(args.archive) as a:
        attrs = a.attrs
        # inspect reads any archive, a recovered or partial one too: its attributes may be missing
        prov = attrs.get("provenance", {})
        print(f"{args.archive}: scenario {attrs.get('scenario_resolved', {}).get('name', '?')!r}, "
              f"dtype {attrs.get('dtype')}, flowsim {attrs.get('flowsim_version')}, created {attrs.get('created')}")
        if prov:
            print("  " + ", ".join(f"{k} {v}" for k, v in prov.items() if v))
        resolved = attrs.get("scenario_resolved")
        history = attrs.get("t_end_history")
        if history and isinstance(resolved, dict):
            print(f"  extended: t_end {' → '.join(f'{t:g}' for t in [*history, resolved['run']['t_end']])} "
                  "(--resume --set run.t_end)")
        found = plugins.named_in(resolved) if isinstance(resolved, dict) else []
        if found:   # named, never imported: reading an archive runs nothing
            print(f"  ran user code (plug-ins): {', '.join(found)}")
        if a.data:
            print("  /data: " + ", ".join(f"{k} {v.shape}" for k, v in a.data.items()))
        if a.writer_pid is not None:
            print(f"  being written by pid {a.writer_pid}")
        elif a.killed_inside_write:
            print("  its writer was killed inside a write: HDF5 tools other than flowsim refuse the file until "
                  "`--resume` repairs it")
        interrupted = False
        # The seeds of a sweep point run together, as one batch: its wall time is shown once,
        # on the point's first run (each run records the whole batch's)
        batch = {}
        for name, run in a.runs.items():
            batch.setdefault(run.point, []).append(name)
        for name, run in a.runs.items():
            print(f"  run {name}: seed {run.seed}" + (f", {run.label}" if run.label else ""))
            together = batch[run.point]
            # solvers not begun and no writer live: killed before it got to them
            never = run.unbegun if a.writer_pid is None else []
            if never:
                interrupted = True
                print(f"    not started: {', '.join(never)}")
            for sname, sv in run.solvers.items():
                t = sv.t
                reach = f"t = {t[-1]:.6g}" if t.size else "no checkpoint"
                stats = ", ".join(f"{k} {v}" for k, v in sv.stats.items() if k in ("steps", "rejected", "vf_evals")
                                  or (k == "hvps" and v))
                interrupted |= sv.interrupted
                loss = f", loss {float(np.asarray(sv['loss'])[-1]):.6g}" if "loss" in sv.series_names and t.size \
                    else ""
                observing = sv.stats.get("observe_time")
                split = "" if observing is None else \
                    f" (observing ≈ {observing:.3g} s, integrating and compiling ≈ {sv.wall_time - observing:.3g} s)"
                wall = "" if name != together[0] else f", wall {sv.wall_time:.3g} s" + (
                    f" for its {len(together)} seeds together" if len(together) > 1 else "") + split
                advice = advise(sv.preset.get("method", ""), sv.stats)
                print(f"    {sname:<14} {sv.state:<11} {sv.n_checkpoints:>4} checkpoints, {reach}{loss}"
                      + (f", {stats}" if stats else "") + wall
                      + (f"\n{'':20}{sv.status} at t = {sv.status_time:.6g}: {sv.message}" if sv.message else "")
                      + (f"\n{'':20}interrupted at {reach}" if sv.interrupted else "")
                      + (f"\n{'':20}advice: {advice}" if advice else ""))
                print(f"{'':20}series: {', '.join(f'{k}{tuple(sv[k].shape)}' for k in sv.series_names)}")
        if interrupted and _written_by_simulate(resolved):
            print(f"  interrupted: resume with `flowsim.simulate(..., output={str(args.archive)!r}, resume=True)` "
                  "(the model, data and arguments it was run with)")
        elif interrupted:
            name = attrs.get("scenario_resolved", {}).get("name", "SCENARIO")
            print(f"  interrupted: resume with `flowsim run {name} -o {args.archive} --resume` "
                  "(the scenario file and --set values it was run with)")
    return EXIT_OK


def cmd_plot(args) -> int:
    from .plots import plot_archive

    out = Path(args.output or Path(args.archive).with_suffix(""))
    for path in plot_archive(args.archive, out):
        print(path)
    return EXIT_OK


def cmd_compare(args) -> int:
    from .analysis.compare import compare_archive
    from .analysis.compare_report import format_report, write_csv

    if not args.factor > 0:
        raise InputError(f"--factor {args.factor}: must be a positive number")
    rep = compare_archive(args.archive, factor=args.factor)
    if rep.empty:
        print(f"flowsim: {rep.empty}", file=sys.stderr)
        return EXIT_NOTHING
    print(format_report(rep), flush=True)
    if args.csv:
        print(f"flowsim: wrote {write_csv(rep, args.csv)}", file=sys.stderr)
    if args.output:
        from .plots.compare import write_figures   # (matplotlib: only when figures are asked for)

        for path in write_figures(rep, args.output, formats=tuple(args.format.split(","))):
            print(f"flowsim: wrote {path}", file=sys.stderr)
    return EXIT_OK


def cmd_analyze(args) -> int:
    from .analysis.caron import NotCaron, analyze_archive

    only = [x for x in (args.only or "").split(",") if x]
    bad = sorted(set(only) - {"prune", "transfer", "pca"})
    if bad:
        raise InputError(f"--only {args.only!r}: unknown analysis {', '.join(bad)}; allowed: prune, transfer, pca")
    try:
        count = analyze_archive(args.archive, only=only or None, force=args.force)
    except NotCaron as err:
        raise InputError(str(err)) from None
    print(f"flowsim: {count} analysis result(s) stored in {args.archive}", file=sys.stderr)
    return EXIT_OK


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flowsim", description="Exact gradient flow of wide shallow networks, "
                                "with gradient descent beside it, archived in HDF5.")
    from .version import __version__

    p.add_argument("--version", action="version", version=f"flowsim {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="simulate a scenario into an archive")
    r.add_argument("scenario", help="a scenario file, or the name of one in the catalog (`flowsim list`)")
    r.add_argument("-o", "--output", help="archive path (default runs/<name>.h5)")
    mode = r.add_mutually_exclusive_group()
    mode.add_argument("--overwrite", action="store_true", help="replace an existing archive")
    mode.add_argument("--resume", action="store_true", help="continue an interrupted archive")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a dotted scenario key (TOML value), e.g. --set model.width=500")
    r.add_argument("-q", "--quiet", action="store_true",
                   help="print nothing but errors and the scenario's warnings (no progress, no summaries)")
    r.add_argument("--log-jsonl", metavar="PATH",
                   help="append one JSON object per checkpoint and per finished batch to PATH (for dashboards)")
    r.add_argument("--distributed", action="store_true", help="one run over the devices of several processes "
                   "(jax.distributed; start the same command in each, see docs/scale.md)")
    r.add_argument("--shard", metavar="i/N", help="run only the i-th (0 ≤ i < N) of N parts of the scenario's "
                   "runs into its own archive (default runs/<name>.part<i>of<N>.h5); join with `flowsim merge`")
    r.set_defaults(func=cmd_run)
    mg = sub.add_parser("merge", help="join `--shard` part archives into one (external links, no copying)")
    mg.add_argument("output", help="the merged archive to write")
    mg.add_argument("parts", nargs="+", help="the part archives (they must stay in place)")
    mg.add_argument("--overwrite", action="store_true", help="replace an existing merged archive")
    mg.set_defaults(func=cmd_merge)
    sub.add_parser("list", help="the scenario catalog and solver presets").set_defaults(func=cmd_list)
    sh = sub.add_parser("show", help="a scenario's resolved keys (and where each came from), runs, checkpoint "
                        "grids and estimate; nothing is run")
    sh.add_argument("scenario", help="a scenario file, or the name of one in the catalog")
    sh.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="as for `run`")
    sh.set_defaults(func=cmd_show)
    i = sub.add_parser("inspect", help="an archive's runs, statuses and solver statistics")
    i.add_argument("archive")
    i.set_defaults(func=cmd_inspect)
    pl = sub.add_parser("plot", help="draw an archive's figures (PNG and PDF)")
    pl.add_argument("archive")
    pl.add_argument("-o", "--output", help="output folder (default: beside the archive, named after it)")
    pl.set_defaults(func=cmd_plot)
    cp = sub.add_parser("compare", help="discrete (GD) versus flow trajectories at matched times t = kη")
    cp.add_argument("archive")
    cp.add_argument("--csv", help="write one row per solver pair and matched time to this CSV file")
    cp.add_argument("-o", "--output", help="write one figure per run into this folder")
    cp.add_argument("--format", default="png", help="figure formats, comma-separated (default png)")
    cp.add_argument("--factor", type=float, default=2.0,
                    help="certificate: a gap ≤ factor × the flow's error estimate is unresolved (default 2)")
    cp.set_defaults(func=cmd_compare)
    an = sub.add_parser("analyze", help="(re)run the Caron analyses (pruning, transfer, PCA) on an archive")
    an.add_argument("archive")
    an.add_argument("--only", help="comma-separated subset of prune,transfer,pca")
    an.add_argument("--force", action="store_true",
                    help="analyse an archive whose scenario has no [analysis] table (not a Caron experiment)")
    an.set_defaults(func=cmd_analyze)
    return p


def _compilation_cache() -> None:
    """Keep compiled programs across runs (solver segments take seconds to compile).
    FLOWSIM_CACHE_DIR moves the cache; an empty value turns it off."""
    import os

    import jax

    where = os.environ.get("FLOWSIM_CACHE_DIR", str(Path.home() / ".cache" / "flowsim" / "jax"))
    if where:
        jax.config.update("jax_compilation_cache_dir", where)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


_STOP = _StopRequest()
# The commands that import the engine (Equinox): they set its environment default first.
_ENGINE_COMMANDS = frozenset({"run", "show", "analyze"})
_COMMAND_LINE = False      # main() called as the `flowsim` command (not with an argv list)


def main(argv: list[str] | None = None) -> int:
    global _COMMAND_LINE
    _COMMAND_LINE = argv is None
    if _COMMAND_LINE:
        import warnings

        warnings.formatwarning = lambda message, category, *a, **k: f"flowsim: warning: {message}\n"
    args = parser().parse_args(argv)
    if args.command == "run":
        _STOP.requested, _STOP.at_once = False, not args.distributed
        _STOP.install()          # first, so that a stop during start-up is honoured too
    if args.command in _ENGINE_COMMANDS:
        set_engine_defaults()    # before anything imports Equinox
    try:
        if _COMMAND_LINE and args.command == "run":
            _load_engine()
        if args.command == "run":
            _compilation_cache()
        return args.func(args)
    except _input_errors() as err:
        _err(str(err))
        return EXIT_INPUT
    except KeyboardInterrupt:
        _err("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `flowsim inspect … | head`
        sys.stderr.close()
        return EXIT_OK
    finally:
        if not _COMMAND_LINE:
            _STOP.restore()
        elif args.command == "run":
            # The process ends here and its archive is complete (or resumable). Python's
            # finalisation puts every signal with a Python handler back to the default
            # (death by signal) but leaves ignored ones alone, so a stop landing during the
            # teardown would turn a finished run into exit -15; ignored, it changes nothing.
            _STOP.ignore()


if __name__ == "__main__":
    sys.exit(main())
