"""Scale benchmark: float32 vs float64 flow/GD, observation cost, width and n scaling, seeds
batched vs sequential; prints tables of ratios and writes bench/results/scale.md.

    python bench/bench_scale.py [--quick]

Same problem family as bench_core (sphere-sine, swish, asymmetric γ = 0.5, α = 0.5, ½Σ loss),
at horizons shortened so that the whole suite fits a 2-core machine (see each table's title).
"""

from __future__ import annotations

import math
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from bench_core import Table, arguments, build, fmt, gd_preset, interleaved_best, pct, preset, ready, report, timed  # noqa: E402,E501
from flowsim.run import batch
from flowsim.run.integrators import descent_integrator, flow_integrator
from flowsim.status import Status
from flowsim.config import checkpoint_times

LOWERING = "/jax/core/compile/jaxpr_to_mlir_module_duration"
_lowerings = [0]
jax.monitoring.register_event_duration_secs_listener(
    lambda ev, d, **kw: _lowerings.__setitem__(0, _lowerings[0] + (ev == LOWERING)))


def flow_solve(problem, p0, t_end, spec=None):
    """A compiled one-segment flow solve from t = 0 to t_end; returns (fn, integ)."""
    integ = flow_integrator(spec or preset("tsit5"))
    adv = eqx.filter_jit(integ.advance)
    s0 = integ.init(problem, p0)
    return (lambda: adv(problem, s0, jnp.asarray(t_end, s0.t.dtype))), integ, adv, s0


def gd_solve(problem, p0, t_end):
    integ = descent_integrator(gd_preset(1.0))
    adv = eqx.filter_jit(integ.advance)
    s0 = integ.init(problem, p0, jax.random.PRNGKey(0))
    return lambda: adv(problem, s0, jnp.asarray(t_end))


# ----------------------------------------------------------------------------- float32

def case_dtype(cfg, tables, summary):
    """Flow vs GD in both dtypes to the paper's horizon. The flow is timed over the whole
    solve; GD, whose cost per step does not depend on the iterate, over a chunk of
    `dtype_gd_chunk` steps scaled to the horizon (bench_core does the same)."""
    t_end, chunk = cfg["dtype_t_end"], cfg["dtype_gd_chunk"]
    tb = Table(f"Flow (tsit5) vs GD (η = 1) by dtype (n = 100, d = 50, m = 2000, t_end = {t_end:g}, one segment)",
               ["dtype", "flow steps (rejected)", "evals / GD evals", "wall / GD wall", "final loss flow", "final loss GD",
                "status"])
    for dtype in (jnp.float64, jnp.float32):
        problem, p0 = build(100, 50, 2000, dtype=dtype)
        spec = preset("tsit5")
        if dtype == jnp.float32:   # rtol 1e-8 is below float32's resolution: use 1e-5/1e-7
            spec = spec | {"rtol": 1e-5, "atol": 1e-7}
        flow, integ, _, _ = flow_solve(problem, p0, t_end, spec)
        gd = gd_solve(problem, p0, chunk)
        best = interleaved_best({"flow": flow, "gd": gd}, cfg["reps"])
        gd_wall = best["gd"] * t_end / chunk
        st, stats = flow()
        gst, _ = gd_solve(problem, p0, t_end)()
        evals = int(stats["vf_evals"]) + integ.init_evals
        name = jnp.dtype(dtype).name
        tb.add(name + (" (rtol 1e-5)" if dtype == jnp.float32 else " (rtol 1e-8)"),
               f"{int(stats['steps'])} ({int(stats['rejected'])})", pct(evals / t_end), pct(best["flow"] / gd_wall),
               fmt(float(problem.loss(st.y))), fmt(float(problem.loss(gst.y))), Status.of(stats["status"]).label)
        summary.add(f"flow/GD wall, {name}, t_end {t_end:g}", pct(best["flow"] / gd_wall), "≤ 15 % (at t_end 50 000)",
                    ("yes" if best["flow"] / gd_wall <= 0.15 else "**no**") if t_end >= 50_000 else "(--quick)")
    tables.append(tb)


# ----------------------------------------------------------------------------- observation cost

def case_observe(cfg, tables, summary):
    """Catalog frequency: caron-fig1 records loss, test_loss, ntg_eig, ntg_change,
    weight_change at 60 log-spaced checkpoints; compare 60 observations with the solve."""
    names = ("loss", "test_loss", "ntg_eig", "ntg_change", "weight_change")
    run_cfg = {"t_end": cfg["obs_t_end"], "checkpoints": {"count": 60, "spacing": "log"}}
    times = checkpoint_times(run_cfg)
    m = cfg["obs_m"]
    problem, p0 = build(100, 50, m)
    problems, params = batch.stack_problems([problem]), batch.stack([p0])
    integ = flow_integrator(preset("tsit5"))
    refs = batch.references(problems, params)
    state0 = batch.init(integ, problems, params)

    def solve():
        s = state0
        for t in times:
            s, _ = batch.advance(integ, problems, s, jnp.asarray([t]))
        return s

    obs = lambda: batch.observe(problems, params, refs, names)  # noqa: E731
    ready(solve())
    ready(obs())
    best_solve, best_obs = math.inf, math.inf
    for _ in range(cfg["reps"]):
        best_solve = min(best_solve, timed(solve)[0])
        best_obs = min(best_obs, min(timed(obs)[0] for _ in range(5)))
    ratio = len(times) * best_obs / best_solve
    tb = Table(f"Observation cost at the catalog's checkpoint frequency (caron-fig1: 60 log-spaced checkpoints; "
               f"n = 100, d = 50, m = {m}, t_end = {cfg['obs_t_end']:g})",
               ["observables", "one observation", "60 observations / segmented solve", "target"])
    tb.add(", ".join(names), f"{best_obs * 1e3:.2f} ms", pct(ratio), "≤ 10 %")
    tables.append(tb)
    summary.add("observation cost / integration time (catalog frequency)", pct(ratio), "≤ 10 %",
                "yes" if ratio <= 0.10 else "**no**")


# ----------------------------------------------------------------------------- width / n scaling

def _solve_memory(adv, problem, s0, t_end):
    """XLA's own account of the compiled solve: arguments + outputs + temporaries (bytes)."""
    comp = adv.lower(problem, s0, jnp.asarray(t_end)).compile()
    ma = getattr(comp, "compiled", comp).memory_analysis()
    if ma is None:
        return float("nan")
    return ma.argument_size_in_bytes + ma.output_size_in_bytes + ma.temp_size_in_bytes - ma.alias_size_in_bytes


def case_width(cfg, tables, summary):
    t_end = cfg["width_t_end"]
    tb = Table(f"Width scaling: one flow solve (tsit5, n = 100, d = 50, t_end = {t_end:g})",
               ["m", "steps (rejected)", "wall", "wall per step", "solve memory (XLA)", "state W"])
    ms, walls, per_step = [], [], []
    for m in cfg["widths"]:
        problem, p0 = build(100, 50, m)
        fn, integ, adv, s0 = flow_solve(problem, p0, t_end)
        ready(fn())
        wall = min(timed(fn)[0] for _ in range(cfg["reps"]))
        _, stats = fn()
        mem = _solve_memory(adv, problem, s0, t_end)
        steps = int(stats["steps"])
        tb.add(m, f"{steps} ({int(stats['rejected'])})", f"{wall:.2f} s", f"{wall / steps * 1e3:.2f} ms",
               f"{mem / 2**20:.1f} MiB", f"{m * 50 * 8 / 2**20:.2f} MiB")
        ms.append(m), walls.append(wall), per_step.append(wall / steps)
    slope = np.polyfit(np.log(ms), np.log(walls), 1)[0]
    slope_step = np.polyfit(np.log(ms), np.log(per_step), 1)[0]
    tb.add("fit", "", f"wall ∝ m^{slope:.2f}", f"per step ∝ m^{slope_step:.2f}", "", "")
    tables.append(tb)
    summary.add(f"flow time vs width m ∈ {{{', '.join(map(str, ms))}}}: exponent", f"{slope:.2f} "
                f"(per step {slope_step:.2f})", "≤ 1", "yes" if slope <= 1.05 else "**no**")

    tb = Table(f"n scaling: one flow solve (tsit5, d = 50, m = {cfg['n_m']}, t_end = {t_end:g})",
               ["n", "steps (rejected)", "wall", "wall per step", "solve memory (XLA)"])
    ns, pst = [], []
    for n in cfg["ns"]:
        problem, p0 = build(n, 50, cfg["n_m"])
        fn, integ, adv, s0 = flow_solve(problem, p0, t_end)
        ready(fn())
        wall = min(timed(fn)[0] for _ in range(cfg["reps"]))
        _, stats = fn()
        steps = int(stats["steps"])
        tb.add(n, f"{steps} ({int(stats['rejected'])})", f"{wall:.2f} s", f"{wall / steps * 1e3:.2f} ms",
               f"{_solve_memory(adv, problem, s0, t_end) / 2**20:.1f} MiB")
        ns.append(n), pst.append(wall / steps)
    tb.add("fit", "", "", f"per step ∝ n^{np.polyfit(np.log(ns), np.log(pst), 1)[0]:.2f}", "")
    tables.append(tb)


# ----------------------------------------------------------------------------- seeds

def _seed_batch(m: int, shared: bool) -> list:
    """8 members differing in their initial weights; the data is drawn per seed, or the
    first seed's is shared by all (as in the catalog's caron-fig1, whose data.seed is fixed)."""
    built = [build(100, 50, m, seed=s) for s in range(8)]
    if not shared:
        return built
    data = built[0][0]
    return [(eqx.tree_at(lambda q: q.net, data, p.net), y) for p, y in built]


def case_seeds(cfg, tables, summary):
    k, m, t_end = 8, cfg["seed_m"], cfg["seed_t_end"]
    integ = flow_integrator(preset("tsit5"))
    adv = eqx.filter_jit(integ.advance)
    init = eqx.filter_jit(integ.init)
    tb = Table(f"8 seeds: one vmapped batch vs 8 sequential solves (tsit5, n = 100, d = 50, m = {m}, t_end = {t_end:g})",
               ["data", "batched wall", "sequential wall", "batched / sequential",
                "programs lowered, batched / sequential", "steps per member"])
    for shared in (True, False):
        built = _seed_batch(m, shared)
        problems, params = batch.stack_problems([b[0] for b in built]), batch.stack([b[1] for b in built])
        _lowerings[0] = 0
        state0 = batch.init(integ, problems, params)
        batched = lambda: batch.advance(integ, problems, state0, jnp.full((k,), t_end))  # noqa: E731
        ready(batched())
        compiles_batched = _lowerings[0]
        _lowerings[0] = 0
        s0s = [init(p, y) for p, y in built]

        def sequential():
            return [adv(p, s, jnp.asarray(t_end)) for (p, _), s in zip(built, s0s)]

        ready(sequential())
        compiles_seq = _lowerings[0]
        best = interleaved_best({"batched": batched, "sequential": sequential}, cfg["reps"])
        _, stats = batched()
        r = best["batched"] / best["sequential"]
        what = "shared by the seeds" if shared else "drawn per seed"
        tb.add(what, f"{best['batched']:.2f} s", f"{best['sequential']:.2f} s", pct(r),
               f"{compiles_batched} / {compiles_seq}", f"{int(np.min(stats['steps']))}–{int(np.max(stats['steps']))}")
        summary.add(f"8 seeds vmapped / 8 sequential, wall, data {what}", pct(r), "≤ 100 %, one compile",
                    "yes" if r <= 1.0 else "**no**")
    tables.append(tb)


def main(argv=None) -> int:
    args = arguments(__doc__, argv)
    if args.quick:
        cfg = dict(reps=1, dtype_t_end=200.0, dtype_gd_chunk=100.0, obs_t_end=2000.0, obs_m=500, width_t_end=200.0, widths=[250, 500, 1000],
                   ns=[50, 100], n_m=500, seed_m=300, seed_t_end=500.0)
    else:
        cfg = dict(reps=2, dtype_t_end=50_000.0, dtype_gd_chunk=5000.0, obs_t_end=50_000.0, obs_m=2000, width_t_end=2000.0,
                   widths=[500, 2000, 8000, 32000], ns=[100, 200, 400, 800], n_m=2000, seed_m=1000, seed_t_end=5000.0)
    summary = Table("Scale ratios" + (" (--quick)" if args.quick else ""), ["what", "measured", "target", "met?"])
    tables: list[Table] = []
    for case in (case_dtype, case_observe, case_width, case_seeds):
        print(f"-- {case.__name__}", flush=True)
        case(cfg, tables, summary)
    report("scale", "dtype, observation cost, width/n scaling, seeds", args, summary, *tables,
           context=f"{jax.device_count()} device(s); best of {cfg['reps']}, compile excluded.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
