"""The exact flow through ReLU kinks: the `filippov` preset against itself at rtol 1e-12,
against GD (η = 1) and against `bosh3-relu`, on one seed of each sweep point of
caron-fig1-relu-quick; writes bench/results/relu.md.

    python bench/bench_relu.py [--quick] [--scenario NAME]

Per point: the relative error in W − W0 at t_end of filippov (rtol 1e-8), of bosh3-relu
and of GD against filippov at rtol 1e-12; gradient evaluations; the events (crossings,
sliding entries, exits); and wall time, each solver timed in one call after compiling
(wall ratios are to GD to the same horizon, measured in this run). --quick: t_end 2 000.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time

import jax.numpy as jnp
import numpy as np

from bench_core import ROOT, Table, flow_run, fmt, gd_run, preset, publish  # noqa: E402
from flowsim.build import build_run
from flowsim.config import load_scenario


def _rel(a, b, w0) -> float:
    return float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b - w0))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--scenario", default="caron-fig1-relu-quick")
    args = ap.parse_args(argv)
    sc = load_scenario(ROOT / "scenarios" / f"{args.scenario}.toml", ["run.t_end=2000.0"] if args.quick else [])
    t0 = time.perf_counter()
    fil = preset("filippov")
    tight = dataclasses.replace(fil, rtol=1e-12, atol=1e-14)
    tb = Table(f"{args.scenario}, seed of each point, t_end = {sc.settings.run.t_end:g}",
               ["point", "solver", "rel. error in W − W0 (vs filippov 1e-12)", "steps", "gradient evals",
                "crossings / entries / exits", "wall", "wall / GD"])
    worst = {"err": 0.0, "ratio": 0.0}
    for point in sorted({r.point for r in sc.runs}):
        r = next(r for r in sc.runs if r.point == point)
        b = build_run(r.settings, r.seed)
        problem, p0, t_end = b.problem, b.params, float(r.settings.run.t_end)
        w0 = p0["W"]
        ref_run, _ = flow_run(problem, p0, tight, t_end, 1)
        ref, _ = ref_run()
        gd_state, gd_times, gd_steps, _ = gd_run(problem, p0, t_end, 1, eta=1.0)
        gd_wall = sum(gd_times)
        label = r.label or str(point)
        tb.add(label, "gd-lr1", fmt(_rel(gd_state.y["W"], ref.y["W"], w0)), gd_steps, gd_steps + 1, "",
               f"{gd_wall:.2f} s", "1")
        for name, spec in (("filippov", fil), ("bosh3-relu", preset("bosh3-relu"))):
            run, _ = flow_run(problem, p0, spec, t_end, 1)
            state, tot = run()
            err = _rel(state.y["W"], ref.y["W"], w0)
            events = " / ".join(str(int(x)) for x in np.asarray(state.events)) if name == "filippov" else ""
            tb.add(label, name, fmt(err), f"{tot['steps']} ({tot['rejected']})", tot["vf_evals"], events,
                   f"{tot['wall']:.2f} s", fmt(tot["wall"] / gd_wall))
            if name == "filippov":
                worst = {"err": max(worst["err"], err), "ratio": max(worst["ratio"], tot["wall"] / gd_wall)}
        print(label, "done", flush=True)
    summary = Table("ReLU ratios" + (" (--quick)" if args.quick else ""), ["what", "measured", "target", "met?"])
    summary.add("filippov rtol 1e-8: worst rel. error in W − W0 vs rtol 1e-12", fmt(worst["err"]), "≤ 1e-6",
                "yes" if worst["err"] <= 1e-6 else "**no**")
    summary.add("filippov wall / GD (η = 1) wall, worst point", fmt(worst["ratio"]), "≤ 3 (≤ 10 to land)",
                "yes" if worst["ratio"] <= 3 else ("land" if worst["ratio"] <= 10 else "**no**"))
    head = (f"## bench_relu — the exact flow through ReLU kinks\n\n{'--quick run. ' if args.quick else ''}"
            f"Script took {time.perf_counter() - t0:.0f} s.\n")
    publish(head + "\n" + summary.markdown() + "\n" + tb.markdown(), "relu", args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
