"""The exact flow through ReLU kinks: the `filippov` preset against itself at rtol 1e-12,
against GD and against `bosh3-relu`, on one seed of each sweep point of
caron-fig1-relu-quick and chen-exp2-quick; writes bench/results/relu.md.

    python bench/bench_relu.py [--quick] [--scenario NAME ...]

Per point: the relative error in W − W0 at t_end of filippov (rtol 1e-8), of bosh3-relu
and of GD against filippov at rtol 1e-12; gradient evaluations; the events (crossings,
sliding entries, exits); and wall time, each solver timed in one call after compiling
(wall ratios are to GD to the same horizon, measured in this run). GD runs at the
scenario's own step (caron: η = 1; chen-exp2-quick: η = 0.1, as η = 1 diverges there). A
solver that ends without reaching t_end (status `failed`, ...) is listed as such; where
filippov fails with the preset's slots (a node sliding on more surfaces at once), the
point is run again with twice as many.
--quick: t_end a tenth of the scenario's.
"""

from __future__ import annotations

import dataclasses
import sys

import jax.numpy as jnp
import numpy as np

from bench_core import ROOT, Table, arguments, flow_run, fmt, gd_run, preset, report  # noqa: E402
from flowsim.run.build import build_run
from flowsim.config import load_scenario


def _rel(a, b, w0) -> float:
    return float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b - w0))


def _gd_eta(sc) -> float:
    """The learning rate of the scenario's GD leg."""
    return next(p.learning_rate for p in sc.settings.run.solvers if p.kind == "gd")


def _bench(name: str, quick: bool, worst: dict) -> Table:
    sc = load_scenario(ROOT / "scenarios" / f"{name}.toml")
    if quick:
        sc = load_scenario(ROOT / "scenarios" / f"{name}.toml", [f"run.t_end={sc.settings.run.t_end / 10}"])
    eta = _gd_eta(sc)
    fil = preset("filippov")
    tight = dataclasses.replace(fil, rtol=1e-12, atol=1e-14)
    tb = Table(f"{name}, seed of each point, t_end = {sc.settings.run.t_end:g}",
               ["point", "solver", "rel. error in W − W0 (vs filippov 1e-12)", "steps", "gradient evals",
                "crossings / entries / exits", "wall", "wall / GD"])
    for point in sorted({r.point for r in sc.runs}):
        r = next(r for r in sc.runs if r.point == point)
        b = build_run(r.settings, r.seed)
        problem, p0, t_end = b.problem, b.params, float(r.settings.run.t_end)
        w0 = p0["W"]
        label = r.label or str(point)
        # the preset's slots, and twice as many where a node slides on more surfaces than that
        for slots in (fil.slots, 2 * fil.slots):
            try:
                ref_run, _ = flow_run(problem, p0, dataclasses.replace(tight, slots=slots), t_end, 1)
                ref, _ = ref_run()
                break
            except RuntimeError as err:       # the reference itself did not reach t_end
                tb.add(label, f"filippov rtol 1e-12, {slots} slots", str(err), "", "", "", "", "")
        else:
            worst["failed"].append(f"{name} {label}")
            continue
        gd_state, gd_times, gd_steps, _ = gd_run(problem, p0, t_end, 1, eta=eta)
        gd_wall = sum(gd_times)
        tb.add(label, f"gd-lr{eta:g}", fmt(_rel(gd_state.y["W"], ref.y["W"], w0)), gd_steps, gd_steps + 1, "",
               f"{gd_wall:.2f} s", "1")
        filippov = "filippov" + ("" if slots == fil.slots else f" ({slots} slots)")
        for solver, spec in ((filippov, dataclasses.replace(fil, slots=slots)), ("bosh3-relu", preset("bosh3-relu"))):
            try:
                run, _ = flow_run(problem, p0, spec, t_end, 1)
                state, tot = run()
            except RuntimeError as err:
                tb.add(label, solver, str(err), "", "", "", "", "")
                worst["failed"].append(f"{name} {label} ({solver})")
                continue
            err = _rel(state.y["W"], ref.y["W"], w0)
            events = " / ".join(str(int(x)) for x in np.asarray(state.events)) if spec.method == "filippov" else ""
            tb.add(label, solver, fmt(err), f"{tot['steps']} ({tot['rejected']})", tot["vf_evals"], events,
                   f"{tot['wall']:.2f} s", fmt(tot["wall"] / gd_wall))
            if spec.method == "filippov":
                worst["err"][name] = max(worst["err"].get(name, 0.0), err)
                worst["ratio"][name] = max(worst["ratio"].get(name, 0.0), tot["wall"] / gd_wall)
        print(name, label, "done", flush=True)
    return tb


def main(argv=None) -> int:
    args = arguments(__doc__, argv, options=lambda ap: ap.add_argument(
        "--scenario", nargs="+", default=["caron-fig1-relu-quick", "chen-exp2-quick"]))
    worst = {"err": {}, "ratio": {}, "failed": []}
    tables = [_bench(name, args.quick, worst) for name in args.scenario]
    summary = Table("ReLU ratios" + (" (--quick)" if args.quick else ""), ["what", "measured", "target", "met?"])
    for name in args.scenario:
        if name not in worst["err"]:
            continue
        err, ratio = worst["err"][name], worst["ratio"][name]
        summary.add(f"{name}: filippov rtol 1e-8, worst rel. error in W − W0 vs rtol 1e-12", fmt(err), "≤ 1e-6",
                    "yes" if err <= 1e-6 else "**no**")
        summary.add(f"{name}: filippov wall / GD wall, worst point", fmt(ratio), "≤ 3 (≤ 10 to land)",
                    "yes" if ratio <= 3 else ("land" if ratio <= 10 else "**no**"))
    for where in worst["failed"]:
        summary.add(f"{where}: filippov reaches t_end", "no (see its table)", "yes", "**no**")
    report("relu", "the exact flow through ReLU kinks", args, summary, *tables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
