"""Stiff horizons: explicit (tsit5) vs implicit matrix-free (kvaerno5 Newton–GMRES) on
scenarios/stiff.toml; writes bench/results/stiff.md.

    python bench/bench_stiff.py [--quick] [--preset NAME ...]

The scenario's problem (first sweep point, first seed) is solved from t = 0 to t_end in 10
segments by each preset. An explicit solver's step is bounded by stability, h ≲ 3.3/λ_max of
the flow's Jacobian (≈ the NTG's largest eigenvalue × rate), long after the solution has
converged; the implicit solver's step is bounded by accuracy only. The implicit solver's work
is Newton iterations × GMRES Hessian-vector products, which the engine does not count: its
cost is reported in *gradient-evaluation equivalents* (wall ÷ the time of one compiled
gradient evaluation, measured in the same process), and so is the explicit solver's, so the
two columns compare like with like. Presets that pass their time budget are stopped at the
end of the chunk that crosses it and marked "capped".
"""

from __future__ import annotations

import argparse
import sys
import time

import equinox as eqx
import jax.numpy as jnp

from bench_core import ROOT, Table, flow_run, fmt, pct, preset, ready, timed, publish  # noqa: E402
from flowsim.build import build_run
from flowsim.config import load_scenario


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--preset", action="append", help="flow presets to compare (default tsit5, kvaerno5)")
    args = ap.parse_args(argv)
    names = args.preset or ["tsit5", "kvaerno5"]
    sets = ["model.width=200", "run.t_end=20000.0"] if args.quick else []
    sc = load_scenario(ROOT / "scenarios" / "stiff.toml", sets)
    r = sc.runs[0]
    b = build_run(r.settings, r.seed)
    problem, p0 = b.problem, b.params
    t_end = float(r.settings.run.t_end)
    budget = 30.0 if args.quick else 240.0
    t0 = time.perf_counter()
    ev = jnp.linalg.eigvalsh(problem.ntg(p0))
    lmax, lmin = float(ev[-1]) * problem.rate, float(ev[0]) * problem.rate
    grad = eqx.filter_jit(problem.grad)
    ready(grad(p0))
    t_grad = min(timed(grad, p0)[0] for _ in range(20))
    rows = {}
    for name in names:
        spec = preset(name)
        run, integ = flow_run(problem, p0, spec, t_end, 10, budget_s=budget,
                              chunk_steps=None if spec.method != "kvaerno5" else 20)
        state, tot = run()   # flow_run compiled it already: this call is timed
        rows[name] = (spec, tot, float(problem.loss(state.y)), state)
        print(name, tot, flush=True)
    tb = Table(f"{sc.settings.name}: n = {problem.X.shape[0]}, d = {problem.X.shape[1]}, m = {p0['W'].shape[0]}, "
               f"{r.settings.model.scaling.kind} scaling, t_end = {t_end:g}; NTG λ_max·rate = {lmax:.3g}, "
               f"λ_min·rate = {lmin:.3g} (stiffness ratio {lmax / lmin:.0f}, λ_min·t_end = {lmin * t_end:.3g})",
               ["preset", "horizon", "steps (rejected)", "vf evals (counted)", "wall", "gradient-eval equivalents",
                "final loss", "note"])
    ref = rows.get("tsit5")
    for name, (spec, tot, loss, state) in rows.items():
        counted = tot["vf_evals"] if spec.method != "kvaerno5" else "n/a (implicit)"
        horizon = f"{tot['t_reached']:.6g}" + (" (capped)" if tot["capped"] else "")
        note = spec.description
        tb.add(name, horizon, f"{tot['steps']} ({tot['rejected']})", counted, f"{tot['wall']:.2f} s",
               f"{tot['wall'] / t_grad:.0f}", fmt(loss), note)
    summary = Table("Stiff ratios" + (" (--quick)" if args.quick else ""), ["what", "measured", "target", "met?"])
    if ref is not None and "kvaerno5" in rows:
        k = rows["kvaerno5"][1]
        full = not k["capped"]
        r_wall = k["wall"] / ref[1]["wall"]
        r_eval = (k["wall"] / t_grad) / ref[1]["vf_evals"]
        summary.add("kvaerno5 / tsit5 wall" + ("" if full else f" (kvaerno5 capped at t = {k['t_reached']:.4g})"),
                    pct(r_wall), "< 100 %", "yes" if full and r_wall < 1 else "**no**")
        summary.add("kvaerno5 gradient-eval equivalents / tsit5 evals", pct(r_eval), "< 100 %",
                    "yes" if full and r_eval < 1 else "**no**")
        if full:
            d = jnp.linalg.norm(rows["kvaerno5"][3].y["W"] - ref[3].y["W"]) / jnp.linalg.norm(ref[3].y["W"] - p0["W"])
            summary.add("‖W_kvaerno5 − W_tsit5‖ / ‖W_tsit5 − W0‖", fmt(float(d)), "≲ 1e-6", "")
    head = (f"## bench_stiff — explicit vs implicit on a stability-limited horizon\n\n"
            f"{'--quick run. ' if args.quick else ''}One gradient evaluation: {t_grad * 1e3:.2f} ms. "
            f"Budget {budget:.0f} s per preset; one timed call after compiling; script took "
            f"{time.perf_counter() - t0:.0f} s.\n")
    text = head + "\n" + summary.markdown() + "\n" + tb.markdown()
    publish(text, "stiff", args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
