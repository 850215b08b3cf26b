"""The `flowsim` command: run | submit | merge | list | show | inspect | plot | compare | analyze | diff.

Argument parsing, messages and exit codes only: the work is done by library calls
(`flowsim.run.session` for `run`, `flowsim.cli.inspection` for `inspect`); the process's stop
requests, start-up and exit are `flowsim.cli.lifecycle`'s.

Exit status: 0 when every run finished (numerical statuses such as `diverged` included),
2 for bad input (scenario, data, archive refused), 1 for an internal failure, 130 when
interrupted (the archive then holds every finished checkpoint and `--resume` goes on).
"""

import argparse
import shlex
import shutil
import sys
from pathlib import Path

from ..engine_env import set_engine_defaults
from .lifecycle import (EXIT_DIFFERENT, EXIT_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_NOTHING, EXIT_OK,
                        StopRequest, collective_failure, compilation_cache, leave, load_engine,
                        quiet_hdf5_unraisable, write_failure)
from ..run.session import InputError


def _err(msg: str) -> None:
    print(f"flowsim: error: {msg}", file=sys.stderr)


def _message(err: Exception) -> str:
    """What an input error says; a missing archive whose name is a scenario of the catalog
    (a user who typed the scenario where its archive was meant) says so."""
    from ..archive import NoSuchArchive
    from ..config import find_scenario   # (JAX-free: the catalog is a folder of TOML files)

    if isinstance(err, NoSuchArchive):
        try:
            find_scenario(err.path)
        except Exception:  # noqa: BLE001 - not a scenario is all this asks
            return str(err)
        return err.hinted(f"{err.path!r} is a scenario in the catalog: `flowsim run {err.path}` writes its "
                          f"archive runs/{err.path}.h5")
    return str(err)


def _input_errors() -> tuple:
    """The exception types that mean bad input (exit 2) rather than a bug (exit 1). Asked
    when an exception is matched, it names `BuildError` only where its module (which loads
    JAX) was imported: a command that never imported it (inspect, plot and compare read an
    archive without JAX) cannot have raised one."""
    from ..archive import ArchiveError
    from ..config import ScenarioError
    from ..data import DataError

    models = sys.modules.get("flowsim.models.base")
    return (ScenarioError, DataError, ArchiveError, InputError) + ((models.BuildError,) if models else ())


def cmd_run(args) -> int:
    if args.distributed:   # before anything starts JAX's backends
        from ..run.devices import DistributedError, initialize

        try:
            initialize()
        except DistributedError as err:
            raise InputError(str(err)) from None
        # JAX's preemption notifier took SIGTERM; take it back: a stop reaching any process
        # is then honoured by all after the same checkpoint (Driver.should_stop below).
        _STOP.install()
    from ..run import session
    from ..run.devices import any_process, is_primary

    _STOP.at_once = not args.distributed      # several processes stop after the same checkpoint
    prepare = lambda: session.prepare(args.scenario, args.set, output=args.output,  # noqa: E731
                                      shard=args.shard, resume=args.resume, overwrite=args.overwrite,
                                      continue_=args.continue_)
    _rehearse(args, prepare)
    try:
        job = prepare()
    except SystemExit as exit_:   # a plug-in's sys.exit where no key could be named (its first call)
        raise InputError(f"user code (a plug-in) raised SystemExit({exit_.code!r}) while the scenario was "
                         "prepared; a plug-in may not end the process; nothing was written") from None
    _STOP.at_once = False
    out, shard = job.out, job.shard
    if job.complete:     # --continue on a finished archive
        if is_primary() and not args.quiet:
            print(f"flowsim: {out} is complete ({len(job.runs)} run(s)); nothing to do", file=sys.stderr)
        return EXIT_OK
    # the same archive, part, overrides and options, quoted for the shell
    resume_cmd = "flowsim run " + shlex.join([args.scenario, *(["--shard", shard] if shard else []), "-o", str(out),
                                              *(x for s in args.set for x in ("--set", s)), "--resume",
                                              *(["--distributed"] if args.distributed else []),
                                              *(["--log-jsonl", args.log_jsonl] if args.log_jsonl else [])])
    if any_process(_STOP.requested):
        print("flowsim: interrupted before the archive was touched", file=sys.stderr)
        return EXIT_INTERRUPTED
    primary = is_primary()
    speak = primary and not args.quiet    # -q: errors (and the scenario's warnings) only
    from ..run.progress import Progress

    try:
        progress = Progress(None if speak else False,
                            jsonl=args.log_jsonl if primary else None)
    except OSError as err:
        raise InputError(f"--log-jsonl {args.log_jsonl}: cannot be written ({err.strerror or err}); "
                         "allowed: a file path in a writable folder") from None
    try:
        writer = session.open_archive(job, distributed=args.distributed)
    except OSError as err:   # permissions, a read-only or full disk: the archive cannot be written
        raise InputError(write_failure(out, err, resume_cmd) or f"{out}: cannot be written ({err})") from None
    if speak:
        print(f"flowsim: {job.scenario.settings.name}: {len(job.runs)} run(s)" + (f" (part {shard} of "
              f"{len(job.scenario.runs)})" if shard else "") + f" → {out}", file=sys.stderr)
    saved_hook = sys.unraisablehook
    sys.unraisablehook = quiet_hdf5_unraisable
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
            leave(EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED
    except (OSError, RuntimeError) as err:   # h5py reports failed writes as either
        msg = write_failure(out, err, resume_cmd) or (collective_failure(out, err, resume_cmd)
                                                      if args.distributed else None)
        if msg is None:
            raise
        _err(msg)
        if _COMMAND_LINE:
            # HDF5 still holds the file it could not flush and retries at interpreter exit,
            # which can crash (SIGSEGV); JAX's exit waits for processes that are gone (300 s,
            # then aborts); every commit is on disk, so leave at once.
            leave(EXIT_INTERNAL)
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
        leave(EXIT_OK)
    return EXIT_OK


def _rehearse(args, work) -> None:
    """A scenario naming plug-ins is prepared first in a forked child (`plugins.rehearse`):
    one that ends the process there is an input error naming it, instead of a silent exit
    with status 0. Only in the command's own process, whose JAX has not started yet."""
    import os
    import tomllib

    from .. import plugins
    from ..config import find_scenario

    if not _COMMAND_LINE or getattr(args, "distributed", False) or not hasattr(os, "fork"):
        return
    try:
        raw = tomllib.loads(find_scenario(args.scenario).read_text())
    except (OSError, ValueError, *_input_errors()):   # the loader says what is wrong, in the parent
        return
    values = [s.partition("=")[2].strip().strip("\"'") for s in args.set]
    if plugins.named_in(raw) or any(map(plugins.is_path, values)):
        ended = plugins.rehearse(work, started=_STOP.children.add)
        if ended:
            raise InputError(f"{args.scenario}: {ended}; a plug-in may not end the process; "
                             "allowed: plug-ins that return or raise")


def cmd_merge(args) -> int:
    from ..archive.merge import ShardError, merge

    try:
        summary = merge(args.output, args.parts, overwrite=args.overwrite)
    except ShardError as err:
        raise InputError(str(err)) from None
    print(f"flowsim: wrote {args.output}: {summary['runs']} run(s) linked from {summary['parts']} part(s)",
          file=sys.stderr)
    return EXIT_OK


def cmd_list(args) -> int:
    import textwrap

    from ..config import list_scenarios, list_solvers

    width = max(shutil.get_terminal_size((120, 24)).columns, 60)
    name_column = 31      # "  " + the name in 28 + " "

    def entries(found: list[tuple[str, str]]) -> list[str]:
        """One line each, the description cut to the terminal's width; with --long, the whole
        description wrapped beside the name column (what tells a `-quick` file from its twin)."""
        if args.long:
            return [textwrap.fill(desc, width, initial_indent=f"  {name:<28} ", subsequent_indent=" " * name_column,
                                  break_on_hyphens=False, break_long_words=False)
                    for name, desc in found]
        return [f"  {name:<28} {textwrap.shorten(desc, width - name_column, placeholder=' …')}".rstrip()
                for name, desc in found]

    print("scenarios:")
    print("\n".join(entries(list_scenarios())))
    print("solvers:")
    print("\n".join(entries(list_solvers())))
    return EXIT_OK


def cmd_show(args) -> int:
    from ..config import find_scenario, load_scenario
    from .show import show

    load = lambda: load_scenario(find_scenario(args.scenario), args.set)  # noqa: E731
    _rehearse(args, load)
    print(show(load()))
    return EXIT_OK


def cmd_inspect(args) -> int:
    from .inspection import inspect_archive

    inspect_archive(args.archive)
    return EXIT_OK


def cmd_plot(args) -> int:
    from ..plots import plot_archive

    out = Path(args.output or Path(args.archive).with_suffix(""))
    for path in plot_archive(args.archive, out):
        print(path)
    return EXIT_OK


def cmd_compare(args) -> int:
    from ..analysis.compare import compare_archive
    from ..analysis.compare_report import format_report, write_central_csv, write_csv

    if not args.factor > 0:
        raise InputError(f"--factor {args.factor}: must be a positive number")
    rep = compare_archive(args.archive, factor=args.factor)
    if rep.empty:
        print(f"flowsim: {rep.empty}", file=sys.stderr)
        return EXIT_NOTHING
    print(format_report(rep), flush=True)
    if args.csv:
        print(f"flowsim: wrote {write_csv(rep, args.csv)}", file=sys.stderr)
        if rep.central:
            print(f"flowsim: wrote {write_central_csv(rep, args.csv)}", file=sys.stderr)
    if args.output:
        from ..plots.compare import write_figures   # (matplotlib: only when figures are asked for)

        for path in write_figures(rep, args.output, formats=tuple(args.format.split(","))):
            print(f"flowsim: wrote {path}", file=sys.stderr)
    return EXIT_OK


def cmd_diff(args) -> int:
    from ..archive.diff import PROVENANCE, TIMINGS, differences

    found = differences(args.a, args.b, aside=() if args.all else TIMINGS + PROVENANCE)
    for d in found:
        print(d)
    aside = "" if args.all else f" ({', '.join(TIMINGS + PROVENANCE)} aside)"
    print(f"flowsim: {args.a} and {args.b}: " + (f"{len(found)} difference(s)" if found else
                                                  "the same datasets and attributes") + aside, file=sys.stderr)
    return EXIT_DIFFERENT if found else EXIT_OK


def cmd_analyze(args) -> int:
    from ..run.analyze import NotCaron, analyze_archive

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


ARCHIVE_HELP = "an archive written by `flowsim run` or `flowsim.simulate` (runs/<name>.h5)"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="flowsim", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Exact gradient flow of wide shallow networks, and of any Equinox network, with gradient "
                    "descent beside it, archived in HDF5.",
        epilog="your own network, from Python (the same archive, read by inspect, plot and compare):\n"
               "  import flowsim\n"
               "  flowsim.simulate(model, data=(X, y), solvers=[\"tsit5\", \"gd-lr0.1\"], t_end=100.0,\n"
               "                   output=\"runs/mine.h5\")\n"
               "  help(flowsim.simulate) for its arguments; flowsim.open(path) reads an archive")
    from ..version import __version__

    p.add_argument("--version", action="version", version=f"flowsim {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="simulate a scenario into an archive")
    r.add_argument("scenario", help="a scenario file, or the name of one in the catalog (`flowsim list`)")
    r.add_argument("-o", "--output", help="archive path (default runs/<name>.h5)")
    mode = r.add_mutually_exclusive_group()
    mode.add_argument("--overwrite", action="store_true", help="replace an existing archive")
    mode.add_argument("--resume", action="store_true", help="continue an interrupted archive")
    mode.add_argument("--continue", dest="continue_", action="store_true",
                      help="start the archive if it does not exist, resume it if interrupted, exit 0 at once if "
                      "it is finished (one job script for a first submission and every resubmission)")
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
    from .submit import add_parser as add_submit

    add_submit(sub)
    mg = sub.add_parser("merge", help="join `--shard` part archives into one (external links, no copying)")
    mg.add_argument("output", help="the merged archive to write")
    mg.add_argument("parts", nargs="+", help="the part archives (they must stay in place)")
    mg.add_argument("--overwrite", action="store_true", help="replace an existing merged archive")
    mg.set_defaults(func=cmd_merge)
    ls = sub.add_parser("list", help="the scenario catalog and solver presets, one line each")
    ls.add_argument("-v", "--long", action="store_true", help="each whole description, wrapped")
    ls.set_defaults(func=cmd_list)
    sh = sub.add_parser("show", help="a scenario's resolved keys (and where each came from), runs, checkpoint "
                        "grids and estimate; nothing is run")
    sh.add_argument("scenario", help="a scenario file, or the name of one in the catalog")
    sh.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="as for `run`")
    sh.set_defaults(func=cmd_show)
    i = sub.add_parser("inspect", help="an archive's runs, statuses and solver statistics")
    i.add_argument("archive", help=ARCHIVE_HELP)
    i.set_defaults(func=cmd_inspect)
    pl = sub.add_parser("plot", help="draw an archive's figures (PNG and PDF)")
    pl.add_argument("archive", help=ARCHIVE_HELP)
    pl.add_argument("-o", "--output", help="output folder (default: beside the archive, named after it)")
    pl.set_defaults(func=cmd_plot)
    cp = sub.add_parser("compare", help="discrete (GD) versus flow trajectories at matched times t = kη")
    cp.add_argument("archive", help=ARCHIVE_HELP)
    cp.add_argument("--csv", help="write one row per solver pair and matched time to this CSV file (and, for "
                    "GD beside a central flow, one per GD/central pair and matched time to <stem>-central.csv)")
    cp.add_argument("-o", "--output", help="write one figure per run into this folder")
    cp.add_argument("--format", default="png", help="with -o: the figures' formats, comma-separated, any "
                    "matplotlib writes (png, pdf, svg …; default png)")
    cp.add_argument("--factor", type=float, default=2.0,
                    help="certificate: a gap ≤ factor × the flow's error estimate is unresolved (default 2)")
    cp.set_defaults(func=cmd_compare)
    an = sub.add_parser("analyze", help="(re)run the Caron analyses (pruning, transfer, PCA) on an archive")
    an.add_argument("archive", help=ARCHIVE_HELP + "; the results are stored in it")
    an.add_argument("--only", metavar="LIST", help="only these analyses, comma-separated, of prune, transfer, pca "
                    "(default: all three)")
    an.add_argument("--force", action="store_true",
                    help="analyse an archive whose scenario has no [analysis] table (not a Caron experiment)")
    an.set_defaults(func=cmd_analyze)
    df = sub.add_parser("diff", help="what differs between two archives, object by object, the timing fields and "
                        "git state aside; exit 0 when none, 1 when some")
    df.add_argument("a", metavar="A", help=ARCHIVE_HELP)
    df.add_argument("b", metavar="B", help="the other archive")
    df.add_argument("--all", action="store_true", help="compare the timing fields (created, wall_time, compile_time, "
                    "observe_time) and the git state too")
    df.set_defaults(func=cmd_diff)
    return p


_STOP = StopRequest()
# The commands that import the engine (Equinox): they set its environment default first.
_ENGINE_COMMANDS = frozenset({"run", "show", "analyze", "submit"})
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
            load_engine()
        if args.command == "run":
            compilation_cache()
        return args.func(args)
    except _input_errors() as err:
        _err(_message(err))
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
