"""`flowsim inspect`: an archive's runs, statuses and solver statistics, printed as they are
read (`show` is its twin for a scenario, before anything is run)."""


def _written_by_simulate(resolved) -> bool:
    """Whether `flowsim.simulate` wrote the archive (its model came from Python, not a file)."""
    return isinstance(resolved, dict) and isinstance(resolved.get("model"), dict) and \
        resolved["model"].get("kind") == "module"


def _split(sv) -> str:
    """Where a solver's wall time went: observing and integrating, and compiling apart (an
    archive written before `compile_time` has it inside the wall time)."""
    observing = sv.stats.get("observe_time")
    compiling = sv.stats.get("compile_time")
    if observing is None:
        return ""
    if compiling is None:
        return f" (observing ≈ {observing:.3g} s, integrating and compiling ≈ {sv.wall_time - observing:.3g} s)"
    return (f" (observing ≈ {observing:.3g} s, integrating ≈ {sv.wall_time - observing:.3g} s), "
            f"compiling {compiling:.3g} s")


_SHOWN = ("steps", "vf_evals", "hvps")   # of a solver's per-checkpoint counts (accepted, rejected: `stats`)


def _counts(sv, ends: int = 2) -> str:
    """A solver's cumulative counts at its first and last `ends` checkpoints."""
    counts, t = sv.counts, sv.t
    shown = [c for c in _SHOWN if c in counts]
    rows = [f"t = {t[i]:.6g}: " + ", ".join(str(counts[c][i]) for c in shown) for i in range(t.size)]
    if len(rows) > 2 * ends:
        rows = [*rows[:ends], "…", *rows[-ends:]]
    return f"cumulative {', '.join(shown)} at its checkpoints (start-up included): {' · '.join(rows)}"


def inspect_archive(path) -> None:
    """Print what `flowsim inspect PATH` prints."""
    import numpy as np

    from .. import archive, plugins
    from ..run.advice import advise

    with archive.open(path) as a:
        attrs = a.attrs
        # inspect reads any archive, a recovered or partial one too: its attributes may be missing
        prov = attrs.get("provenance", {})
        print(f"{path}: scenario {attrs.get('scenario_resolved', {}).get('name', '?')!r}, "
              f"dtype {attrs.get('dtype')}, flowsim {attrs.get('flowsim_version')}, created {attrs.get('created')}")
        if prov:
            print("  " + ", ".join(f"{k} {v}" for k, v in prov.items() if v and not isinstance(v, dict)))
            for k, v in ((k, v) for k, v in prov.items() if v and isinstance(v, dict)):   # data_sha256
                print(f"  {k}: " + ", ".join(f"{key} {value}" for key, value in v.items()))
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
                                  or (k in ("hvps", "observe_hvps") and v))
                interrupted |= sv.interrupted
                loss = f", loss {float(np.asarray(sv['loss'])[-1]):.6g}" if "loss" in sv.series_names and t.size \
                    else ""
                wall = "" if name != together[0] else f", wall {sv.wall_time:.3g} s" + (
                    f" for its {len(together)} seeds together" if len(together) > 1 else "") + _split(sv)
                advice = advise(sv.preset.get("method", ""), sv.stats, sname, sv.preset.get("kind", "flow"))
                print(f"    {sname:<14} {sv.state:<11} {sv.n_checkpoints:>4} checkpoints, {reach}{loss}"
                      + (f", {stats}" if stats else "") + wall
                      + (f"\n{'':20}{sv.status} at t = {sv.status_time:.6g}: {sv.message}" if sv.message else "")
                      + (f"\n{'':20}interrupted at {reach}" if sv.interrupted else "")
                      + (f"\n{'':20}advice: {advice}" if advice else ""))
                print(f"{'':20}series: {', '.join(f'{k}{tuple(sv[k].shape)}' for k in sv.series_names)}")
                if sv.counts and sv.t.size:    # (a solver interrupted before its first checkpoint has none)
                    print(f"{'':20}{_counts(sv)}")
                if sv.conventions:      # (a central flow's: Σ, the edge, where the sharpness is taken)
                    print(f"{'':20}conventions:\n" + "\n".join(f"{'':22}{x}" for x in sv.conventions.splitlines()))
        if interrupted and _written_by_simulate(resolved):
            print(f"  interrupted: resume with `flowsim.simulate(..., output={str(path)!r}, resume=True)` "
                  "(the model, data and arguments it was run with)")
        elif interrupted:
            name = attrs.get("scenario_resolved", {}).get("name", "SCENARIO")
            shard = (attrs.get("provenance") or {}).get("shard")    # a job array's part: the same part
            part = f" --shard {shard}" if shard else ""
            print(f"  interrupted: resume with `flowsim run {name}{part} -o {path} --resume` "
                  "(the scenario file and --set values it was run with)")
