"""Stiff flows at equal accuracy: tsit5 (I and PI control), rock4, kvaerno5 and GD against a
Dopri8 reference; writes bench/results/stiff.md.

    python bench/bench_stiff.py [--quick] [--log-quadratic]

[1] cohen-eos-quick (tanh MLP 64-64-10, MSE, 500 digits, seed 0): the flow's sharpness rises
past 2/η, so an explicit method's step is held by stability (h·λ_max ≲ 3.5 for Tsit5) while
ROCK4's stage count grows like √(h·λ_max). Each method solves from t = 0 to the horizon in one
compiled call after a warm-up; GD at η = 0.9 beside it. The reference is Dopri8 at rtol 1e-11
(atol 1e-13). Error = ‖θ(T) − θ_ref(T)‖ / ‖θ_ref(T) − θ0‖. Evaluations count every
vector-field call (rejected steps and `init`'s included); Hessian-vector products (ROCK4's power
iteration for ρ; one costs about one gradient) are counted apart and added in the ratio to GD's
gradients. kvaerno5 gets a time budget and is marked "capped" where it runs out.
[2] rock4's error against its rtol (1e-5 … 1e-9) on [1] at the first horizon.
[3] A quadratic L = ½ Σ_i λ_i (w_i − w*_i)² (a linear model on diagonal data): slow
eigenvalues fixed in [1e-2, 1], λ_max = 1e2, 1e3, 1e4, t_end = 20; the exact flow is
closed-form. The exponents of the evaluation counts against λ_max are least-squares fits.
[4] scenarios/stiff.toml (a shallow NTK network long after convergence, t_end = 1e6): tsit5,
kvaerno5 and rock4 to the end, costs in gradient-evaluation equivalents (wall ÷ one compiled
gradient's time in the same process: the implicit solver's Newton–Krylov work is not
counted by the engine), distances to tsit5.
[5] A quadratic without a spectral gap (SCALE.md): ½‖Xθ − y‖², d = 40, Hessian eigenvalues
log-spaced on [1e-2, λ_max] in a random orthogonal basis (seed 0), T = 100, λ_max = 1e2, 1e3,
1e4, against its closed form: the rock4 preset (rtol 1e-6), rock4 at rtol 1e-4 and the rkc2
preset (rtol 1e-4); steps, rejections, evaluations + HVPs (`init`'s included) and the exponent
of their growth. `--log-quadratic` runs this case alone.
The wall ratio of rock4 to GD on [1] is timed apart: both compiled, interleaved rounds, the
best of three each.
"""

from __future__ import annotations


import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from bench_core import ROOT, Table, arguments, flow_run, fmt, gd_preset, gd_run, interleaved_best, preset, ready, report, timed  # noqa: E402,E501
from flowsim.run.integrators import descent_integrator, flow_integrator
from flowsim.run.build import build_run
from flowsim.config import load_scenario
from flowsim.models.quadratic import log_spaced_quadratic, quadratic
from flowsim.run.precision import enable_x64

GD_ETA = 0.9


def flat(params) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(params)])


def variant(name: str, method: str, rtol: float, pi: bool = False, **more):
    return preset({"name": name, "kind": "flow", "method": method, "rtol": rtol, "atol": rtol * 1e-2,
                   **({"pcoeff": 0.3, "icoeff": 0.3} if pi else {}), **more})


def solve(problem, p0, spec, t_end: float, budget_s: float = float("inf")) -> dict:
    """One flow solve to t_end (one call after a compiling warm-up; with a budget, calls of
    200 steps until it is spent): evaluations, HVPs, wall, final weights."""
    chunk = 200 if budget_s < float("inf") else None
    run, integ = flow_run(problem, p0, spec, t_end, 1, budget_s=budget_s, chunk_steps=chunk)
    state, tot = run()
    tot["hvps"] += integ.init_hvps
    return tot | {"theta": flat(integ.params(state)), "stages": int(getattr(state.solver_state, "stages", 0))}


def eos_problem(quick: bool):
    sc = load_scenario(ROOT / "scenarios" / "cohen-eos-quick.toml")
    r = sc.runs[0]
    b = build_run(r.settings, r.seed)
    return b.problem, b.params


def reference(problem, p0, horizons, counts: list | None = None) -> dict[float, np.ndarray]:
    """Dopri8 at rtol 1e-11 to each horizon in turn (a step ends on each). `counts`, if given,
    gets each horizon's statistics appended (steps, rejected, vf_evals; `init`'s in the first)."""
    integ = flow_integrator(variant("dopri8-ref", "dopri8", 1e-11))
    advance = eqx.filter_jit(integ.advance)
    state, out = integ.init(problem, p0), {}
    for t in horizons:
        state, stats = advance(problem, state, jnp.asarray(t))
        out[t] = flat(integ.params(ready(state)))
        print(f"  reference to t = {t:g}: {int(stats['steps'])} steps", flush=True)
        if counts is not None:
            counts.append({k: int(stats[k]) + (integ.init_evals if k == "vf_evals" and not counts else 0)
                           for k in ("steps", "rejected", "vf_evals")})
    return out


def case_eos(quick: bool, tables, summary):
    problem, p0 = eos_problem(quick)
    horizons = [198.0, 495.0] if quick else [1980.0, 9999.9]   # multiples of η = 0.9
    print(f"[1] cohen-eos-quick: reference to {horizons}", flush=True)
    ref = reference(problem, p0, horizons)
    theta0 = flat(p0)
    err = lambda th, t: float(np.linalg.norm(th - ref[t]) / np.linalg.norm(ref[t] - theta0))  # noqa: E731
    variants = [variant("tsit5 I", "tsit5", 1e-8), variant("tsit5 PI", "tsit5", 1e-8, pi=True),
                variant("tsit5 I", "tsit5", 1e-6), variant("tsit5 PI", "tsit5", 1e-6, pi=True),
                variant("rock4", "rock4", 1e-6), variant("rock4", "rock4", 1e-8)]
    out = {}
    for t_end in horizons:
        state, times, steps, _ = gd_run(problem, p0, t_end, 1, eta=GD_ETA)
        gd = {"evals": steps, "wall": sum(times), "err": err(flat(state.y), t_end)}
        t = Table(f"cohen-eos-quick to t = {t_end:g} (n = 500, tanh MLP [64, 64], P = {theta0.size}); "
                  f"reference Dopri8 rtol 1e-11",
                  ["method", "rtol", "steps (rejected)", "evals", "HVPs", "(evals + HVPs) / GD's", "wall / GD's",
                   "error", "last stages"])
        t.add(f"GD η = {GD_ETA}", "—", steps, steps, 0, "1×", "1×", f"{fmt(gd['err'])} (from the flow)", "—")
        runs = list(variants) + ([variant("kvaerno5", "kvaerno5", 1e-8)] if t_end == horizons[0] else [])
        for spec in runs:
            budget = (20.0 if quick else 120.0) if spec.method == "kvaerno5" else float("inf")
            print(f"  {spec.name} rtol {spec.rtol:g} to t = {t_end:g}", flush=True)
            r = solve(problem, p0, spec, t_end, budget)
            key = (spec.name, spec.rtol, t_end)
            if r["capped"]:
                t.add(spec.name, f"{spec.rtol:g}", f"{r['steps']} ({r['rejected']})", "n/a (implicit)", "—", "—",
                      f"{fmt(r['wall'] / gd['wall'] * t_end / max(r['t_reached'], 1e-9))}× (extrapolated)",
                      f"capped at t = {r['t_reached']:.3g} after {r['wall']:.0f} s", "—")
                continue
            e = err(r["theta"], t_end)
            out[key] = r | {"err": e}
            evals = r["vf_evals"] if spec.method != "kvaerno5" else None
            t.add(spec.name, f"{spec.rtol:g}", f"{r['steps']} ({r['rejected']})",
                  evals if evals is not None else "n/a (implicit)", r["hvps"],
                  f"{fmt((r['vf_evals'] + r['hvps']) / gd['evals'])}×" if evals is not None else "—",
                  f"{fmt(r['wall'] / gd['wall'])}×", fmt(e), r["stages"] or "—")
        out[("gd", t_end)] = gd
        tables.append(t)
    first, last = horizons
    cost = lambda name, rtol, t_end: out[(name, rtol, t_end)]["vf_evals"] + out[(name, rtol, t_end)]["hvps"]  # noqa: E731
    summary.add(f"rock4 (1e-6) evals + HVPs / GD's, t ≤ {first:g}", fmt(cost("rock4", 1e-6, first) / out[("gd", first)]["evals"]),
                "≤ 1.5 (aim ≤ 1)", _met(cost("rock4", 1e-6, first) <= 1.5 * out[("gd", first)]["evals"]))
    summary.add(f"rock4 (1e-8) evals + HVPs / tsit5 I (1e-8)'s, t ≤ {first:g}",
                fmt(cost("rock4", 1e-8, first) / cost("tsit5 I", 1e-8, first)), "≤ 0.7",
                _met(cost("rock4", 1e-8, first) <= 0.7 * cost("tsit5 I", 1e-8, first)))
    summary.add(f"rock4 (1e-6) evals + HVPs / GD's, t ≤ {last:g}", fmt(cost("rock4", 1e-6, last) / out[("gd", last)]["evals"]),
                "≤ 1.0", _met(cost("rock4", 1e-6, last) <= out[("gd", last)]["evals"]))
    wall = interleaved_wall(problem, p0, first, 1 if quick else 3)
    summary.add(f"rock4 (1e-6) wall / GD's wall, t ≤ {first:g} (interleaved, best of rounds)", fmt(wall), "≤ 1.5",
                _met(wall <= 1.5))
    for rtol in (1e-8, 1e-6):
        pi, i = cost("tsit5 PI", rtol, first), cost("tsit5 I", rtol, first)
        summary.add(f"tsit5 PI / I evals at rtol {rtol:g}, t ≤ {first:g} (errors {fmt(out[('tsit5 PI', rtol, first)]['err'])}"
                    f" / {fmt(out[('tsit5 I', rtol, first)]['err'])})", fmt(pi / i), "< 1 at no loss of accuracy", "")
    return problem, p0, ref[first], first


def interleaved_wall(problem, p0, t_end: float, rounds: int) -> float:
    """rock4 (rtol 1e-6) ÷ GD (η = 0.9) wall to t_end, each one compiled call, timed in
    interleaved rounds (load from other processes hits both alike), best of `rounds`."""
    flow, gd = flow_integrator(variant("rock4", "rock4", 1e-6)), descent_integrator(gd_preset(GD_ETA))
    calls = {}
    for name, integ, state in (("rock4", flow, flow.init(problem, p0)),
                               ("gd", gd, gd.init(problem, p0, jax.random.PRNGKey(0)))):
        advance = eqx.filter_jit(integ.advance)
        ready(advance(problem, state, jnp.asarray(9.0)))     # compile (a multiple of η)
        calls[name] = lambda advance=advance, state=state: advance(problem, state, jnp.asarray(t_end))
    best = interleaved_best(calls, rounds)
    return best["rock4"] / best["gd"]


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def case_tolerance(problem, p0, ref, t_end, quick, tables, summary):
    print("[2] rock4's error against its rtol", flush=True)
    theta0 = flat(p0)
    t = Table(f"rock4 on cohen-eos-quick to t = {t_end:g}: error against rtol (atol = rtol / 100)",
              ["rtol", "steps (rejected)", "evals + HVPs", "error", "error / rtol"])
    worst = 0.0
    for rtol in ([1e-5, 1e-7] if quick else [1e-5, 1e-6, 1e-7, 1e-8, 1e-9]):
        r = solve(problem, p0, variant("rock4", "rock4", rtol), t_end)
        e = float(np.linalg.norm(r["theta"] - ref) / np.linalg.norm(ref - theta0))
        worst = max(worst, e / rtol)
        t.add(f"{rtol:g}", f"{r['steps']} ({r['rejected']})", r["vf_evals"] + r["hvps"], fmt(e), fmt(e / rtol))
    tables.append(t)
    summary.add("rock4: worst error / rtol over rtol 1e-5 … 1e-9", fmt(worst), "≤ 10", _met(worst <= 10))


def case_quadratic(quick, tables, summary):
    print("[3] quadratic, λ_max = 1e2 … 1e4", flush=True)
    t_end, lams = 20.0, [1e2, 1e3, 1e4]
    t = Table(f"quadratic, 64 parameters, slow eigenvalues in [1e-2, 1], t_end = {t_end:g}, rtol 1e-6 (atol 1e-8); "
              f"exact flow in closed form", ["λ_max", "method", "steps (rejected)", "evals + HVPs", "error", "last stages"])
    costs = {"rock4": [], "tsit5": []}
    for lam in lams:
        problem, p0, exact = quadratic(lam, p=64)
        ref = exact(t_end)
        for method in ("rock4", "tsit5"):
            r = solve(problem, p0, variant(method, method, 1e-6), t_end)
            e = float(np.linalg.norm(r["theta"] - ref) / np.linalg.norm(ref - flat(p0)))
            costs[method].append(r["vf_evals"] + r["hvps"])
            t.add(f"{lam:g}", method, f"{r['steps']} ({r['rejected']})", r["vf_evals"] + r["hvps"], fmt(e),
                  r["stages"] or "—")
    tables.append(t)
    for method, c in costs.items():
        slope = float(np.polyfit(np.log(lams), np.log(c), 1)[0])
        target = "≤ 0.6" if method == "rock4" else "≈ 1 (∝ λ_max)"
        summary.add(f"{method}: exponent of evals against λ_max (1e2 → 1e4)", fmt(slope), target,
                    _met(slope <= 0.6) if method == "rock4" else "")


def case_log_quadratic(tables, summary):
    print("[5] log-spaced quadratic, λ_max = 1e2 … 1e4", flush=True)
    t_end, lams = 100.0, [1e2, 1e3, 1e4]
    specs = [preset("rock4"), variant("rock4", "rock4", 1e-4, pi=True), preset("rkc2")]
    t = Table(f"quadratic without a spectral gap: d = 40, eigenvalues log-spaced on [1e-2, λ_max], t_end = {t_end:g}; "
              f"exact flow in closed form", ["λ_max", "preset", "rtol", "steps (rejected)", "evals + HVPs", "error",
                                             "error / rtol"])
    costs = {}
    for lam in lams:
        problem, p0, exact, _ = log_spaced_quadratic(lam)
        ref = exact(t_end)
        for spec in specs:
            r = solve(problem, p0, spec, t_end)
            e = float(np.linalg.norm(r["theta"] - ref) / np.linalg.norm(ref - flat(p0)))
            key = (spec.name, spec.rtol)
            costs.setdefault(key, []).append(r["vf_evals"] + r["hvps"])
            t.add(f"{lam:g}", spec.name, f"{spec.rtol:g}", f"{r['steps']} ({r['rejected']}, "
                  f"{100 * r['rejected'] / r['steps']:.0f} %)", r["vf_evals"] + r["hvps"], fmt(e), fmt(e / spec.rtol))
    tables.append(t)
    for (name, rtol), c in costs.items():
        slope = float(np.polyfit(np.log(lams), np.log(c), 1)[0])
        summary.add(f"log-spaced quadratic: {name} (rtol {rtol:g}) exponent of evals + HVPs against λ_max (1e2 → 1e4)",
                    fmt(slope), "≤ 0.6", _met(slope <= 0.6))


def case_stiff_scenario(quick, tables, summary):
    print("[4] scenarios/stiff.toml", flush=True)
    sets = ["model.width=200", "run.t_end=20000.0"] if quick else []
    sc = load_scenario(ROOT / "scenarios" / "stiff.toml", sets)
    r = sc.runs[0]
    b = build_run(r.settings, r.seed)
    problem, p0 = b.problem, b.params
    t_end = float(r.settings.run.t_end)
    ev = jnp.linalg.eigvalsh(problem.ntg(p0))
    lmax, lmin = float(ev[-1]) * problem.rate, float(ev[0]) * problem.rate
    grad = eqx.filter_jit(problem.grad)
    ready(grad(p0))
    t_grad = min(timed(grad, p0)[0] for _ in range(20))
    rows = {}
    for name in ("tsit5", "kvaerno5", "rock4"):
        spec = preset(name)
        budget = (30.0 if quick else 240.0)
        run, integ = flow_run(problem, p0, spec, t_end, 10, budget_s=budget, chunk_steps=200)
        state, tot = run()
        tot["hvps"] += integ.init_hvps
        rows[name] = (spec, tot, float(problem.loss(state.y)), flat(state.y))
        print(" ", name, {k: tot[k] for k in ("steps", "vf_evals", "hvps", "wall")}, flush=True)
    t = Table(f"stiff: n = {problem.X.shape[0]}, d = {problem.X.shape[1]}, m = {p0['W'].shape[0]}, "
              f"{r.settings.model.scaling.kind} scaling, t_end = {t_end:g}; NTG λ_max·rate = {lmax:.3g}, "
              f"λ_min·rate = {lmin:.3g} (stiffness ratio {lmax / lmin:.0f}, λ_min·t_end = {lmin * t_end:.3g}); "
              f"one gradient {t_grad * 1e3:.2f} ms",
              ["preset", "rtol", "horizon", "steps (rejected)", "evals + HVPs (counted)", "gradient-eval equivalents",
               "final loss", "‖W − W_tsit5‖ / ‖W_tsit5 − W0‖"])
    ref, theta0 = rows["tsit5"][3], flat(p0)
    for name, (spec, tot, loss, theta) in rows.items():
        counted = tot["vf_evals"] + tot["hvps"] if spec.method != "kvaerno5" else "n/a (implicit)"
        horizon = f"{tot['t_reached']:.6g}" + (" (capped)" if tot["capped"] else "")
        dist = fmt(float(np.linalg.norm(theta - ref) / np.linalg.norm(ref - theta0))) if name != "tsit5" else "—"
        t.add(name, f"{spec.rtol:g}", horizon, f"{tot['steps']} ({tot['rejected']})", counted,
              f"{tot['wall'] / t_grad:.0f}", fmt(loss), dist)
    tables.append(t)
    for name in ("kvaerno5", "rock4"):
        tot = rows[name][1]
        ratio = tot["wall"] / rows["tsit5"][1]["wall"]
        summary.add(f"stiff.toml: {name} / tsit5 wall" + (" (capped)" if tot["capped"] else ""), fmt(ratio), "< 1",
                    _met(ratio < 1 and not tot["capped"]))


def main(argv=None) -> int:
    args = arguments(__doc__, argv, options=lambda ap: ap.add_argument(
        "--log-quadratic", action="store_true", help="case [5] alone (printed, not published)"))
    enable_x64()
    tables: list[Table] = []
    summary = Table("Stiff ratios", ["quantity", "measured", "target", "met"])
    if args.log_quadratic:
        case_log_quadratic(tables, summary)
        print("\n".join(x.markdown() for x in [summary, *tables]))
        return 0
    problem, p0, ref, first = case_eos(args.quick, tables, summary)
    case_tolerance(problem, p0, ref, first, args.quick, tables, summary)
    case_quadratic(args.quick, tables, summary)
    case_log_quadratic(tables, summary)
    case_stiff_scenario(args.quick, tables, summary)
    report("stiff", "stiff flows at equal accuracy: tsit5, rock4, kvaerno5 and GD", args, summary, *tables,
           context="One process; evaluations are machine-independent, wall ratios are of one run.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
