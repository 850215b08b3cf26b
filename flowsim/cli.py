"""The `flowsim` command: run | list | inspect | plot.

Exit status: 0 when every run finished (numerical statuses such as `diverged` included),
2 for bad input (scenario, data, archive refused), 1 for an internal failure, 130 when
interrupted (the archive then holds every finished checkpoint and `--resume` goes on).
"""

import argparse
import json
import signal
import sys
from pathlib import Path

EXIT_OK, EXIT_INTERNAL, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class InputError(Exception):
    """Bad input found by the command itself (not by the scenario loader)."""


def _err(msg: str) -> None:
    print(f"flowsim: error: {msg}", file=sys.stderr)


def _input_errors():
    """The exception types that mean bad input (exit 2) rather than a bug (exit 1)."""
    from .archive import ArchiveError
    from .build import BuildError
    from .data import DataError
    from .scenario import ScenarioError

    return (ScenarioError, DataError, BuildError, ArchiveError, InputError)


def _on_sigterm(signum, frame):
    # SIGTERM (a batch scheduler's stop) ends the run like Ctrl-C: the checkpoint being
    # computed is dropped, every finished one is already committed, and the lock is released.
    raise KeyboardInterrupt


def cmd_run(args) -> int:
    from .archive import ArchiveWriter
    from .build import build_run
    from .driver import Driver, provenance
    from .scenario import find_scenario, load_scenario

    if args.overwrite and args.resume:
        raise InputError("--overwrite and --resume exclude each other")
    scenario = load_scenario(find_scenario(args.scenario), args.set)
    out = Path(args.output or Path("runs") / f"{scenario.resolved['name']}.h5")
    if out.exists() and not (args.overwrite or args.resume):
        raise InputError(f"{out} exists; pass --resume to continue it or --overwrite to replace it")
    if args.resume and not out.exists():
        raise InputError(f"{out} does not exist; nothing to resume (run without --resume)")
    # Build every run first: bad data or shapes fail here, before the archive is touched.
    built = {r.name: build_run(r.config, r.seed) for r in scenario.runs}
    if args.resume:
        writer = ArchiveWriter.resume(out)
        if writer.resolved != json.loads(json.dumps(scenario.resolved)):
            writer.close()
            raise InputError(f"{out} was written by a different scenario (or different --set values); "
                             "resume with the same scenario and overrides, or use --overwrite")
    else:
        writer = ArchiveWriter.create(out, scenario_text=scenario.text, resolved=scenario.resolved,
                                      provenance=provenance(), dtype=scenario.resolved["dtype"],
                                      overwrite=args.overwrite)
    signal.signal(signal.SIGTERM, _on_sigterm)
    print(f"flowsim: {scenario.resolved['name']}: {len(scenario.runs)} run(s) → {out}", file=sys.stderr)
    try:
        with writer:
            statuses = Driver(scenario, writer, progress=None if not args.quiet else False).run(built)
    except KeyboardInterrupt:
        print(f"flowsim: interrupted; {out} holds every finished checkpoint — continue with "
              f"`flowsim run {args.scenario} -o {out} --resume`", file=sys.stderr)
        return EXIT_INTERRUPTED
    bad = sorted({s for per in statuses.values() for s in per.values()} - {"done"})
    tail = f" (statuses: {', '.join(bad)}; see `flowsim inspect {out}`)" if bad else ""
    print(f"flowsim: wrote {out}{tail}", file=sys.stderr)
    return EXIT_OK


def cmd_list(args) -> int:
    from .scenario import list_scenarios, list_solvers

    print("scenarios:")
    for name, desc in list_scenarios():
        print(f"  {name:<28} {desc}")
    print("solvers:")
    for name, desc in list_solvers():
        print(f"  {name:<28} {desc}")
    return EXIT_OK


def cmd_inspect(args) -> int:
    from . import archive

    with archive.open(args.archive) as a:
        attrs = a.attrs
        prov = attrs.get("provenance", {})
        print(f"{args.archive}: scenario {attrs.get('scenario_resolved', {}).get('name', '?')!r}, "
              f"dtype {attrs.get('dtype')}, flowsim {attrs.get('flowsim_version')}, created {attrs.get('created')}")
        if prov:
            print("  " + ", ".join(f"{k} {v}" for k, v in prov.items() if v))
        if a.data:
            print("  /data: " + ", ".join(f"{k} {v.shape}" for k, v in a.data.items()))
        for name, run in a.runs.items():
            print(f"  run {name}: seed {run.seed}" + (f", {run.label}" if run.label else ""))
            for sname, sv in run.solvers.items():
                t = sv.t
                reach = f"t = {t[-1]:.6g}" if t.size else "no checkpoint"
                stats = ", ".join(f"{k} {v}" for k, v in sv.stats.items() if k in
                                  ("steps", "rejected", "vf_evals"))
                print(f"    {sname:<14} {sv.status:<9} {sv.n_checkpoints:>4} checkpoints, {reach}"
                      + (f", {stats}" if stats else "") + f", {sv.wall_time:.2f} s"
                      + (f"\n{'':20}{sv.message}" if sv.message else ""))
                print(f"{'':20}series: {', '.join(f'{k}{tuple(sv[k].shape)}' for k in sv.series_names)}")
    return EXIT_OK


def cmd_plot(args) -> int:
    from .plots import plot_archive

    out = Path(args.output or Path(args.archive).with_suffix(""))
    for path in plot_archive(args.archive, out):
        print(path)
    return EXIT_OK


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flowsim", description="Exact gradient flow of wide shallow networks, "
                                "with gradient descent beside it, archived in HDF5.")
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="simulate a scenario into an archive")
    r.add_argument("scenario", help="a scenario file, or the name of one in the catalog (`flowsim list`)")
    r.add_argument("-o", "--output", help="archive path (default runs/<name>.h5)")
    mode = r.add_mutually_exclusive_group()
    mode.add_argument("--overwrite", action="store_true", help="replace an existing archive")
    mode.add_argument("--resume", action="store_true", help="continue an interrupted archive")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a dotted scenario key (TOML value), e.g. --set model.width=500")
    r.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    r.set_defaults(func=cmd_run)
    sub.add_parser("list", help="the scenario catalog and solver presets").set_defaults(func=cmd_list)
    i = sub.add_parser("inspect", help="an archive's runs, statuses and solver statistics")
    i.add_argument("archive")
    i.set_defaults(func=cmd_inspect)
    pl = sub.add_parser("plot", help="draw an archive's figures (PNG and PDF)")
    pl.add_argument("archive")
    pl.add_argument("-o", "--output", help="output folder (default: beside the archive, named after it)")
    pl.set_defaults(func=cmd_plot)
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


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "run":
        _compilation_cache()
    try:
        errors = _input_errors()
        return args.func(args)
    except errors as err:
        _err(str(err))
        return EXIT_INPUT
    except KeyboardInterrupt:
        _err("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `flowsim inspect … | head`
        sys.stderr.close()
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
