"""Core engine benchmark on the Caron et al. Fig. 1 problem; prints a table of ratios.

    python bench/bench_core.py [--quick]

Problem: sphere-sine data (n = 100, d = 50, noise 1.0), shallow swish network of width
m = 2000, asymmetric node scaling (γ = 0.5, α = 0.5), ½Σ loss, float64.

1. Exact flow (solvers/tsit5.toml) against GD with η = 1 to t_end = 50 000, both advanced
   in the same 10 compiled segments (as the driver runs a flow, a step ends on t_end only):
   vector-field evaluations / GD gradient evaluations and
   wall time / wall time, compile excluded. The other flow presets in a second table.
2. Closed-form NTG against the autodiff Jacobian contraction (the test oracle).
3. GD's FLOP rate against the matrix-multiply rate of the same machine, same process.

Everything is a ratio measured inside this one process; absolute times are printed only as
context. The machine is shared and noisy: every timing is the best of several repeats after
a warm-up call that compiles, and the things compared are timed in interleaved rounds so
that a burst of load from elsewhere hits both sides.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from flowsim.status import Status
from flowsim.data import make_dataset
from flowsim.run.integrators import descent_integrator, flow_integrator
from flowsim.models import init_shallow
from flowsim.nn.ntg import jacobian_ntg
from flowsim.run.precision import enable_x64
from flowsim.nn.problem import Problem
from flowsim.nn.scaling import output_scale
from flowsim.config import DescentPreset, Preset, SphereSineData, from_dict, load_solver

enable_x64()   # the benchmarks build Problems directly, not through build_run

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"


# ----------------------------------------------------------------------------- helpers

def build(n: int, d: int, m: int, dtype=jnp.float64, seed: int = 0) -> tuple[Problem, dict]:
    """The Caron Fig. 1 problem (asymmetric γ = 0.5, α = 0.5, swish, ½Σ loss)."""
    ds = make_dataset(SphereSineData(seed=seed, n=n, d=d, noise=1.0, n_test=100), seed)
    scale = output_scale("asymmetric", m, gamma=0.5, alpha=0.5)
    net, p0 = init_shallow(jax.random.PRNGKey(seed), d=d, outputs=1, scale=scale, scaling_kind="asymmetric",
                           activation_name="swish", init_std=1.0, train_output=False, zeroed=False,
                           dtype=dtype)
    arr = lambda x: jnp.asarray(x, dtype)  # noqa: E731
    problem = Problem(net=net, X=arr(ds.X_train), y=arr(ds.y_train), X_test=arr(ds.X_test),
                      y_test=arr(ds.y_test), rate=scale.rate, loss_kind="half-sse", ntg_points=n)
    return problem, p0


def fig1_scenario(bench: str, width: int, t_end: float, *, noise: float = 1.0, init_std: float = 1.0,
                  loss: str = "half-sse", solvers: str = '["tsit5"]') -> str:
    """A scenario file's text for the Caron et al. Fig. 1 problem with one seed (sphere-sine
    data n = 100, d = 50; swish network of width `width`, asymmetric γ = α = 0.5), 60
    log-spaced checkpoints to `t_end`, the loss observed; `bench`: the script that runs it."""
    return f"""name = "fig1-{bench}"
description = "Caron et al. Fig. 1 problem, one seed (bench/bench_{bench}.py)"
seeds = {{ count = 1 }}
[data]
kind = "sphere-sine"
n = 100
d = 50
noise = {noise!r}
n_test = 100
[model]
width = {width}
activation = "swish"
init_std = {init_std!r}
scaling = {{ kind = "asymmetric", gamma = 0.5, alpha = 0.5 }}
[loss]
kind = "{loss}"
[run]
t_end = {float(t_end)!r}
checkpoints = {{ count = 60, spacing = "log" }}
solvers = {solvers}
observe = ["loss"]
"""


def preset(spec: str | dict) -> Preset:
    """A typed solver preset (as the integrator factories take it): a file of solvers/ by
    name, or an inline table with a `name`."""
    return from_dict(Preset, load_solver(spec))


def gd_preset(eta: float) -> DescentPreset:
    return preset({"name": f"gd-lr{eta:g}", "kind": "gd", "learning_rate": eta})


def ready(x):
    return jax.block_until_ready(x)


def timed(fn, *args):
    t = time.perf_counter()
    out = ready(fn(*args))
    return time.perf_counter() - t, out


def interleaved_best(fns: dict, rounds: int) -> dict:
    """Best wall time of each zero-argument callable; one call of each per round (after a
    warm-up call of each), so that load from elsewhere hits every contender alike."""
    for fn in fns.values():
        ready(fn())
    best = {k: math.inf for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            best[k] = min(best[k], timed(fn)[0])
    return best


def fmt(x: float, digits: int = 3) -> str:
    if x == 0 or not math.isfinite(x):
        return str(x)
    if abs(x) >= 1e4 or abs(x) < 1e-3:
        return f"{x:.2e}"
    return f"{x:.{digits}g}"


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


class Table:
    def __init__(self, title: str, header: list[str]):
        self.title, self.header, self.rows = title, header, []

    def add(self, *cells):
        self.rows.append([str(c) for c in cells])

    def markdown(self) -> str:
        out = [f"### {self.title}", "", "| " + " | ".join(self.header) + " |",
               "|" + "|".join("---" for _ in self.header) + "|"]
        out += ["| " + " | ".join(r) + " |" for r in self.rows]
        return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- 1. flow vs GD

def arguments(doc: str, argv=None, *, quick: str = "small sizes: a smoke test, never published",
              options: Callable[[argparse.ArgumentParser], None] = lambda ap: None) -> argparse.Namespace:
    """A bench script's arguments: `--quick` (`quick`: what it does there) and the script's own
    (`options` adds them), described by the first line of its docstring `doc`; `started`
    holds the time they were read, which `report` counts the script's time from."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=quick)
    options(ap)
    args = ap.parse_args(argv)
    args.started = time.perf_counter()
    return args


def report(name: str, title: str, args: argparse.Namespace, *parts: "Table | str", context: str = "",
           result: str | None = None) -> None:
    """Publish a bench script's tables (`parts`: Tables or markdown) under the run header every
    bench writes: `## bench_<name> — <title>`, then whether it was a --quick run, JAX and its
    device, the script's time (from `arguments`) and the machine's load at its end, the command
    that runs it again, and `context` (what the tables assume). `result`: the file's name in
    results/ (default: `name`)."""
    command = f"python bench/bench_{name}.py" + (" --quick" if args.quick else "")
    head = (f"## bench_{name} — {title}\n\n{'--quick run. ' if args.quick else ''}JAX {jax.__version__}, "
            f"{jax.devices()[0].platform}; script took {time.perf_counter() - args.started:.0f} s, load average "
            f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at its end. `{command}`."
            + (f" {context}" if context else "") + "\n")
    body = "\n".join(p.markdown() if isinstance(p, Table) else p for p in parts)
    publish(head + "\n" + body, result or name, args.quick)


def publish(text: str, name: str, quick: bool) -> None:
    """Print a script's tables and write them to results/<name>.md (results/gpu/ for
    `--device gpu`; quick/ below either for --quick runs, which bench/run never publishes)."""
    print()
    print(text)
    # `bench/run --device gpu` sets FLOWSIM_BENCH_DEVICE: GPU tables go to results/gpu/
    where = RESULTS / "gpu" if os.environ.get("FLOWSIM_BENCH_DEVICE") == "gpu" else RESULTS
    out = (where / "quick" if quick else where) / f"{name}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"written to {out.relative_to(ROOT)}")


def gd_run(problem, p0, t_end, segments, eta=1.0):
    """GD over `segments` equal compiled chunks; returns final state and per-segment times."""
    integ = descent_integrator(gd_preset(eta))
    advance = eqx.filter_jit(integ.advance)
    state0 = integ.init(problem, p0, jax.random.PRNGKey(0))
    seg_len = t_end / segments
    ready(advance(problem, state0, jnp.asarray(seg_len / 10)))  # compile (same shapes, short horizon)
    state, times, steps = state0, [], 0
    for k in range(1, segments + 1):
        dt, (state, stats) = timed(advance, problem, state, jnp.asarray(k * seg_len))
        assert int(stats["status"]) == Status.DONE, stats
        times.append(dt)
        steps += int(stats["steps"])
    one_segment = lambda: advance(problem, state0, jnp.asarray(seg_len))  # noqa: E731
    return state, times, steps, one_segment


# A flow's statistics that its runs sum besides steps and evaluations (flowsim.integrate.flow)
_MORE_STATS = ("stiff_steps", "stabilised_steps", "stiff_rejections")


def flow_run(problem, p0, spec, t_end, segments, *, budget_s=math.inf, chunk_steps=None, times=None, record=None,
             stop=None):
    """The flow preset over `segments` equal segments, or through the checkpoint `times`
    (increasing, the last t_end; `segments` is then ignored), each read inside a step (only
    t_end ends one). With `chunk_steps`, every call is capped at that many steps (status
    max_steps, then the same segment is resumed), so the run can stop once `budget_s` of wall
    time is spent; the horizon reached is returned. `record(k, state, tot)`, if given, is
    called at the end of segment k (from 1) with the counts so far; `stop(tot, t)`, if given,
    ends the run as a spent budget does once it holds after a call (t: the time reached)."""
    if chunk_steps:
        spec = dataclasses.replace(spec, max_steps=chunk_steps)
    if times is None:
        times = [k * t_end / segments for k in range(1, segments + 1)]
    segments = len(times)
    integ = flow_integrator(spec)
    advance = eqx.filter_jit(integ.advance)
    state0 = integ.init(problem, p0)
    warm, _ = advance(problem, state0, jnp.asarray(min(1.0, times[0])), jnp.asarray(t_end))  # compile
    ready(warm)

    def run():
        state = state0
        tot = {"steps": 0, "rejected": 0, "vf_evals": integ.init_evals, "hvps": 0, **dict.fromkeys(_MORE_STATS, 0),
               "calls": 0}
        elapsed, capped = 0.0, False

        def spent():
            return elapsed > budget_s or (stop is not None and stop(tot, float(integ.time(state))))

        for k in range(1, segments + 1):
            target = jnp.asarray(times[k - 1])
            while True:
                dt, (state, stats) = timed(advance, problem, state, target, jnp.asarray(t_end))
                elapsed += dt
                tot["calls"] += 1
                for key in ("steps", "rejected", "vf_evals", "hvps", *_MORE_STATS):
                    tot[key] += int(stats.get(key, 0))
                code = int(stats["status"])
                if code == Status.DONE:
                    break
                if code != Status.MAX_STEPS or not chunk_steps:
                    raise RuntimeError(f"flow {spec.method} ended with status {Status.of(code).label} at t = {float(integ.time(state)):.6g}")
                if spent():
                    break
            if record is not None and code == Status.DONE:
                record(k, state, dict(tot, wall=elapsed))
            if spent() and k < segments:
                capped = True
                break
            if code != Status.DONE:
                capped = True
                break
        tot.update(wall=elapsed, t_reached=float(integ.time(state)), capped=capped)
        return state, tot

    return run, integ


def case_flow_vs_gd(cfg, tables, summary):
    n, d, m, t_end, segs = cfg["n"], cfg["d"], cfg["m"], cfg["t_end"], cfg["segments"]
    problem, p0 = build(n, d, m)
    print(f"[1] flow vs GD: n={n} d={d} m={m} t_end={t_end:g}, {segs} segments", flush=True)

    gd_state, gd_times, gd_steps, gd_segment = gd_run(problem, p0, t_end, segs)
    steps_per_seg = gd_steps / segs
    print(f"    GD full run {sum(gd_times):.1f} s ({gd_steps} steps)", flush=True)

    tsit5 = preset("tsit5")
    flow, integ = flow_run(problem, p0, tsit5, t_end, segs)
    # interleaved rounds: one full flow run, one GD segment (identical work every segment)
    flow_walls, flow_out = [], None
    for _ in range(cfg["reps"]):
        t0 = time.perf_counter()
        flow_out = flow()
        flow_walls.append(time.perf_counter() - t0)
        gd_times.append(timed(gd_segment)[0])
    fstate, fstats = flow_out
    # GD's cost per step does not depend on the iterate: its best segment, scaled to the run
    gd_step = min(gd_times) / steps_per_seg
    gd_wall = gd_step * gd_steps
    flow_wall = min(flow_walls)
    print(f"    flow best {flow_wall:.1f} s, GD best {gd_wall:.1f} s (full run {sum(gd_times[:segs]):.1f} s)",
          flush=True)

    # Same horizon, one segment: how much do 10 segments cost over one?
    one, _ = flow_run(problem, p0, tsit5, t_end, 1)
    one_runs = [one()[1] for _ in range(max(1, cfg["reps"] - 1))]
    one_wall, one_stats = min(r["wall"] for r in one_runs), one_runs[0]

    loss_gd = float(problem.loss(gd_state.y))
    loss_flow = float(problem.loss(fstate.y))
    W_gd, W_fl, W0 = (np.asarray(x) for x in (gd_state.y["W"], fstate.y["W"], p0["W"]))
    rel_w = np.linalg.norm(W_gd - W_fl) / np.linalg.norm(W_fl)
    rel_disp = np.linalg.norm(W_gd - W_fl) / np.linalg.norm(W_fl - W0)

    evals_ratio = fstats["vf_evals"] / gd_steps
    wall_ratio = flow_wall / gd_wall
    summary.add("flow (tsit5) vector-field evals / GD gradient evals", pct(evals_ratio), "≤ 10 %",
                "yes" if evals_ratio <= 0.10 else "**no**")
    summary.add("flow (tsit5) wall time / GD wall time", pct(wall_ratio), "≤ 15 %",
                "yes" if wall_ratio <= 0.15 else "**no**")

    t = Table(f"Flow (tsit5, rtol 1e-8) vs GD (η = 1), t_end = {t_end:g}, {segs} segments",
              ["quantity", "flow", "GD", "note"])
    t.add("gradient / vector-field evaluations", fstats["vf_evals"], gd_steps,
          f"flow: {integ.init_evals} initial + 6 per step (FSAL), rejected steps included")
    t.add("steps (rejected)", f"{fstats['steps']} ({fstats['rejected']})", gd_steps, "")
    t.add("wall time / GD wall time", pct(wall_ratio), "100 %",
          f"flow best of {cfg['reps']}; GD best {steps_per_seg:g}-step segment × {segs}")
    t.add("cost of one evaluation / one GD step", fmt(flow_wall / fstats["vf_evals"] / gd_step), "1",
          "> 1: solver overhead per evaluation")
    t.add("1 segment instead of 10: wall / GD wall", pct(one_wall / gd_wall), "",
          f"{one_stats['steps']} steps ({one_stats['rejected']} rejected)")
    t.add("final loss", fmt(loss_flow, 6), fmt(loss_gd, 6), f"relative difference {fmt(abs(loss_gd - loss_flow) / loss_flow)}")
    t.add("‖W_GD − W_flow‖ / ‖W_flow‖", fmt(rel_w), "", f"÷ ‖W_flow − W0‖ instead: {fmt(rel_disp)}")
    tables.append(t)

    # other presets
    t2 = Table("Other flow presets against the same GD run", ["preset", "horizon", "steps (rejected)",
               "evals / GD evals", "wall / GD wall", "‖W − W_tsit5‖ / ‖W_tsit5 − W0‖", "note"])
    t2.add("tsit5 (rtol 1e-8)", f"{t_end:g}", f"{fstats['steps']} ({fstats['rejected']})", pct(evals_ratio),
           pct(wall_ratio), "0", "reference")
    for name, label in (("dopri5-fast", "dopri5 (rtol 1e-5)"), ("dopri8-tight", "dopri8 (rtol 1e-11)"),
                        ("kvaerno5", "kvaerno5 Newton–GMRES (rtol 1e-8)")):
        spec = preset(name)
        run, pinteg = flow_run(problem, p0, spec, t_end, segs, budget_s=cfg["preset_budget_s"],
                               chunk_steps=cfg["chunk_steps"].get(name))
        state, st = run()
        steps_eq = st["t_reached"]  # GD steps (η = 1) for the same horizon
        horizon = f"{st['t_reached']:g}" + (" (capped: time budget)" if st["capped"] else "")
        if pinteg.evals_per_step:
            ev = pct(st["vf_evals"] / steps_eq)
            note = ""
        else:
            ev = "n/a"
            note = (f"implicit: evaluations not counted; ≈ {fmt(st['wall'] / gd_step)} GD-step "
                    "equivalents of wall time")
        diff = "—"
        if not st["capped"]:
            diff = fmt(np.linalg.norm(np.asarray(state.y["W"]) - W_fl) / np.linalg.norm(W_fl - W0))
        t2.add(label, horizon, f"{st['steps']} ({st['rejected']})", ev, pct(st["wall"] / (gd_step * steps_eq)),
               diff, (note + "; " if note else "") + "one timed run after compiling")
        print(f"    {label}: {st}", flush=True)
    tables.append(t2)
    return problem, fstate.y


# ----------------------------------------------------------------------------- 2. NTG

def case_ntg(cfg, problem, params, tables, summary):
    print("[2] NTG closed form vs autodiff", flush=True)
    net, X = problem.net, problem.X
    closed = jax.jit(lambda p, X: net.ntg(p, X))
    auto = jax.jit(lambda p, X: jacobian_ntg(net, p, X))
    best = interleaved_best({"closed": lambda: closed(params, X), "auto": lambda: auto(params, X)},
                            cfg["ntg_rounds"])
    A, B = np.asarray(closed(params, X)), np.asarray(auto(params, X))
    rel_max = np.max(np.abs(A - B)) / np.max(np.abs(B))
    rel_fro = np.linalg.norm(A - B) / np.linalg.norm(B)
    speed = best["auto"] / best["closed"]
    summary.add("closed-form NTG speed-up over autodiff Jacobian contraction", f"{fmt(speed)}×", "≥ 100×",
                "yes" if speed >= 100 else "**no**")
    summary.add("closed-form vs autodiff NTG: max \\|Δ\\| / max \\|Θ\\|", fmt(rel_max), "≤ 1e-12",
                "yes" if rel_max <= 1e-12 else "**no**")
    t = Table(f"NTG at n = {X.shape[0]}, d = {X.shape[1]}, m = {net.width} (weights at t_end of the flow)",
              ["quantity", "value"])
    t.add("autodiff time / closed-form time", f"{fmt(speed)}×")
    t.add("max \\|Δ\\| / max \\|Θ\\|", fmt(rel_max))
    t.add("‖Δ‖_F / ‖Θ‖_F", fmt(rel_fro))
    tables.append(t)


# ----------------------------------------------------------------------------- 3. FLOP rate

def gd_flops(n, d, m):
    """Analytic FLOPs of one GD step (½Σ loss, one output), counting a transcendental as 1:
         forward   z = X Wᵀ/√d                2 n d m   (+ n m for the 1/√d scale)
                   h = σ(z)  (swish: z·sigmoid(z))       ≈ 3 n m
                   f = h (c∘a)                2 n m
                   r = f − y                  n
         backward  δ = (r ⊗ (c∘a)) ⊙ σ'(z)/√d ≈ 5 n m    (σ' from the saved sigmoid)
                   ∇W = δᵀ X                  2 n d m
         update    W ← W − η ∇W               2 m d
       = 4 n d m + 11 n m + 2 m d + n; the 4ndm of the two products dominates (≈ 94 % at
       n = 100, d = 50, m = 2000)."""
    return 4 * n * d * m + 11 * n * m + 2 * m * d + n


def case_flops(cfg, tables, summary):
    n, d, m = cfg["n"], cfg["d"], cfg["m"]
    t = Table(f"GD FLOP rate vs matrix-multiply rate (n = {n}, d = {d}, m = {m})",
              ["dtype", "GD GFLOP/s", "GD's two products alone, GFLOP/s", "(n×d)@(d×m) alone, GFLOP/s",
               f"{cfg['sq']}³ matmul, GFLOP/s", "GD ÷ (n×d)@(d×m)", "GD ÷ two products", "GD ÷ square",
               "time: two products ÷ step written out", "time: step written out ÷ GD step",
               "‖W_written − W_GD‖ / ‖W_GD − W0‖"])
    K = cfg["flop_steps"]
    for dtype, name in ((jnp.float64, "float64"), (jnp.float32, "float32")):
        print(f"[3] FLOP rates, {name}", flush=True)
        problem, p0 = build(n, d, m, dtype=dtype)
        integ = descent_integrator(gd_preset(1.0))
        advance = eqx.filter_jit(integ.advance)
        s0 = integ.init(problem, p0, jax.random.PRNGKey(0))
        X, W = problem.X, p0["W"]
        eps = jnp.asarray(1e-9, dtype)

        @jax.jit
        def two_products(W):
            # GD's two products and its update, nothing else: Z = X Wᵀ, G = Zᵀ X, W ← W − εG
            return jax.lax.fori_loop(0, K, lambda i, w: w - eps * ((X @ w.T).T @ X), W)

        @jax.jit
        def forward_product(X):
            # (n×d)@(d×m), chained through a cheap dependency so nothing can be hoisted:
            # the next X is a d-column slice of the product scaled down (n×d elementwise).
            return jax.lax.fori_loop(0, K, lambda i, x: x + eps * jax.lax.dynamic_slice_in_dim(x @ W.T, i % 2, d, 1), X)

        ca, y = (problem.net.c * problem.net.a[:, 0]), problem.y[:, 0]
        root_d, step = jnp.asarray(math.sqrt(d), dtype), jnp.asarray(problem.rate, dtype)

        @jax.jit
        def written_out(W):
            # The same GD step (η = 1) by hand: its two products and one sigmoid per entry
            # (swish and its derivative both from it), fused by XLA; no divergence check,
            # no bookkeeping. Nothing the engine could leave out.
            def body(i, w):
                z = (w @ X.T) / root_d
                s = jax.nn.sigmoid(z)
                r = ca @ (z * s) - y
                return w - step * ((ca[:, None] * r) * (s * (1 + z * (1 - s))) / root_d) @ X
            return jax.lax.fori_loop(0, K, body, W)

        by_hand = np.asarray(written_out(W))
        engine = np.asarray(advance(problem, s0, jnp.asarray(float(K)))[0].y["W"])
        agree = np.linalg.norm(by_hand - engine) / np.linalg.norm(engine - np.asarray(W))
        S = jnp.ones((cfg["sq"], cfg["sq"]), dtype) / cfg["sq"]
        square = jax.jit(lambda S: S @ S)
        best = interleaved_best({
            "gd": lambda: advance(problem, s0, jnp.asarray(float(K))),
            "hand": lambda: written_out(W),
            "two": lambda: two_products(W),
            "fwd": lambda: forward_product(X),
            "square": lambda: square(S),
        }, cfg["flop_rounds"])
        gd_rate = gd_flops(n, d, m) * K / best["gd"] / 1e9
        two_rate = (4 * n * d * m + 2 * m * d) * K / best["two"] / 1e9
        fwd_rate = (2 * n * d * m + 2 * n * d) * K / best["fwd"] / 1e9
        sq_rate = 2 * cfg["sq"] ** 3 / best["square"] / 1e9
        t.add(name, fmt(gd_rate), fmt(two_rate), fmt(fwd_rate), fmt(sq_rate), pct(gd_rate / fwd_rate),
              pct(gd_rate / two_rate), pct(gd_rate / sq_rate), pct(best["two"] / best["hand"]),
              pct(best["hand"] / best["gd"]), fmt(agree))
        r = gd_rate / fwd_rate
        summary.add(f"GD GFLOP/s ÷ (n×d)@(d×m) matmul GFLOP/s, {name}", pct(r), "≥ 70 %",
                    "yes" if r >= 0.7 else "**no**")
        r3 = best["two"] / best["gd"]
        summary.add(f"time of GD's two products alone ÷ time of a GD step, {name}", pct(r3), "≥ 75 %",
                    "yes" if r3 >= 0.75 else "**no**")
        summary.add(f"the same, the step written out by hand (two products, one sigmoid per entry), {name}",
                    pct(best["two"] / best["hand"]), "", "the bound for a GD step of this network")
        r2 = gd_rate / sq_rate
        summary.add(f"GD GFLOP/s ÷ {cfg['sq']}³ matmul GFLOP/s, {name}", pct(r2), "≥ 70 %",
                    "yes" if r2 >= 0.7 else "**no**")
    tables.append(t)


# ----------------------------------------------------------------------------- main

def main(argv=None) -> int:
    args = arguments(__doc__, argv, quick="small sizes, finishes in under a minute (smoke test)")
    if args.quick:
        cfg = dict(n=100, d=50, m=500, t_end=2000.0, segments=10, reps=2, preset_budget_s=8.0,
                   chunk_steps={"dopri8-tight": 100, "kvaerno5": 5}, ntg_rounds=3, flop_steps=200,
                   flop_rounds=3, sq=256)
    else:
        cfg = dict(n=100, d=50, m=2000, t_end=50_000.0, segments=10, reps=2, preset_budget_s=60.0,
                   chunk_steps={"dopri5-fast": 500, "dopri8-tight": 200, "kvaerno5": 10}, ntg_rounds=5,
                   flop_steps=1000, flop_rounds=5, sq=1024)
    summary = Table("Core ratios" + (" (--quick: reduced sizes, not the targets' setting)" if args.quick else ""),
                    ["what", "measured", "target", "met?"])
    tables: list[Table] = []
    problem, w_end = case_flow_vs_gd(cfg, tables, summary)
    case_ntg(cfg, problem, w_end, tables, summary)
    case_flops(cfg, tables, summary)

    report("core", f"Caron Fig. 1 problem (n = {cfg['n']}, d = {cfg['d']}, m = {cfg['m']}, swish, asymmetric "
           "γ = 0.5, α = 0.5, ½Σ loss)", args, summary, *tables,
           context=f"{jax.device_count()} device(s); ratios measured in one process, best of repeats, compile "
           "excluded.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
