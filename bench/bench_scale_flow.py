"""Flows at the papers' scale: every flow preset, GD and Cohen et al.'s RK4 scheme on
cohen-scale-quick to T = 40 and 80 against a Dopri8 reference; writes bench/results/scale_flow.md.

    python bench/bench_scale_flow.py [--quick]

The problem is `scenarios/cohen-scale-quick.toml` (fc-tanh 192-200-200-10, 80 810 parameters,
500 synthetic 3×8×8 images, ½Σ(f − y)²/n; issue 40, SCALE.md), run once to the last horizon
with a checkpoint every 4 time units (the scenario's own grid, extended). A horizon's figures
are those of its checkpoint: a flow reads it inside a step (only the last horizon ends one).

- Every preset of `solvers/` whose kind is `flow` and which the scenario loader accepts on this
  model (a preset added later appears without editing this file; one the loader refuses, e.g.
  `filippov` on a deep tanh net, is listed with the loader's reason). Each solves from t = 0
  in compiled calls of at most 200 steps after a warm-up and stops ("capped", with the time
  it reached and its cost there) past COST_CAP × GD's gradients to that time (4×: it has lost
  to GD by then) or past a wall budget (180 s of solving for kvaerno5, whose cost is not counted).
- GD at η = 0.04 (1 000 steps to t = 40); its gradient count is the unit of cost.
- Cohen et al.'s scheme as their `src/flow.py` runs it (locuslab/edge-of-stability): per tick
  of 1 time unit, λ_max from SciPy's `eigsh` (ARPACK, 2 eigenvalues, as their README's
  `--neigs 2`) on Hessian-vector products, then RK4 at h = 1/λ_max (`--alpha` 1) with the last
  step of the tick truncated. Its cost is 4 gradients a step plus the HVPs of the eigensolves.
  Here in float64 (theirs is float32), with a fixed ARPACK start vector (seed 0).

Cost = field evaluations + Hessian-vector products (ROCK4's and RKC2's power iteration; `init`'s
included), rejected steps included, over GD's gradients to the same time. kvaerno5's Newton–
Krylov products are not counted by the engine: its cost is given as "n/a (implicit)".
Error = ‖θ(t) − θ_ref(t)‖ / ‖θ_ref(t) − θ0‖ (relative to the displacement) at every checkpoint
t ≤ T, against Dopri8 at rtol 1e-11 (atol 1e-13) ending a step on each checkpoint; "at T" and
the worst over the checkpoints (with its time and its ratio to the preset's rtol).
The reference is cached in $FLOWSIM_BENCH_CACHE (default /tmp/flowsim-bench), keyed by a hash
of θ0, the data, the checkpoint times and its settings, so a rerun does not solve it again.

SUNDIALS' LSRKStep (RKC/RKL, SUNDIALS ≥ 7.2) is not measured: `sundials4py` ships wheels for
CPython ≥ 3.12 only (7.6–7.9: cp312-abi3, cp314t, cp315t; no sdist), this project's Python is
3.11, and Debian 12's SUNDIALS (6.4.1) predates LSRKStep (checked 2026-11-27).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from scipy.sparse.linalg import LinearOperator, eigsh

from bench_core import ROOT, Table, arguments, flow_run, fmt, gd_preset, preset, ready, report, timed  # noqa: E402
from bench_stiff import flat, reference  # noqa: E402
from flowsim.cli.lifecycle import compilation_cache
from flowsim.config import ScenarioError, list_solvers, load_scenario
from flowsim.kinds.solvers import FLOW_METHODS
from flowsim.nn.problem import hessian_vector_product
from flowsim.run.build import build_run
from flowsim.run.integrators import descent_integrator
from flowsim.status import Status

SCENARIO = ROOT / "scenarios" / "cohen-scale-quick.toml"
REFERENCE = {"method": "dopri8", "rtol": 1e-11, "atol": 1e-13}   # bench_stiff.reference's settings
GD_ETA = 0.04
# Wall budgets (s of solving): a run whose cost is counted stops at COST_CAP first unless the
# machine is very slow; an implicit method (its Newton–Krylov products are not counted) and
# Cohen et al.'s scheme (whose cost per unit time is known: 4·λ_max) stop on their budget.
FULL = {"horizons": (40.0, 80.0), "every": 4.0, "budget_s": 900.0, "implicit_budget_s": 180.0,
        "cohen_budget_s": 420.0, "sets": (), "implicit": True}
# --quick: a small student on fewer images (the same machinery; compilation dominates, and
# compiling kvaerno5's Newton–Krylov solve alone takes over 2 minutes on 2 busy cores)
QUICK = {"horizons": (2.0, 4.0), "every": 1.0, "budget_s": 10.0, "implicit_budget_s": 10.0, "cohen_budget_s": 10.0,
         "sets": ("data.n=100", "data.teacher_widths=[32, 32]", "model.widths=[32, 32]"), "implicit": False}
CHUNK_STEPS = 200
# A flow is stopped once its evaluations + HVPs pass this many times GD's gradients to the time
# it has reached: past it, it has lost to GD on this problem by any measure the issue asks for.
COST_CAP = 4.0


@dataclass
class Trace:
    """One method's run: cumulative counts and the weights at each checkpoint it reached."""
    label: str
    rtol: float | None = None
    cost: list[int] = field(default_factory=list)       # evaluations + HVPs (None: not counted)
    steps: list[int] = field(default_factory=list)
    rejected: list[int] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)
    theta: list[np.ndarray] = field(default_factory=list)
    counted: bool = True
    note: str = ""
    capped_at: float | None = None                      # the time reached where the budget ran out
    capped_by: str = ""                                 # "wall" or "cost"
    total_wall: float = math.nan

    def add(self, cost, steps, rejected, wall, theta):
        self.cost.append(int(cost)), self.steps.append(int(steps)), self.rejected.append(int(rejected))
        self.wall.append(float(wall)), self.theta.append(theta)


# ----------------------------------------------------------------------------- the problem

def scale_problem(sets=()):
    """cohen-scale-quick's problem (with `--set`-style overrides) and its initial weights."""
    sc = load_scenario(SCENARIO, list(sets))
    r = sc.runs[0]
    b = build_run(r.settings, r.seed)
    return b.problem, b.params


def checkpoints(horizons, every: float) -> np.ndarray:
    """every, 2·every, … up to the last horizon; each horizon is one of them."""
    times = every * np.arange(1, round(max(horizons) / every) + 1)
    assert all(np.isclose(times, h).any() for h in horizons), (horizons, every)
    return times


def relative_errors(thetas, refs, theta0) -> np.ndarray:
    """‖θ(t) − θ_ref(t)‖ / ‖θ_ref(t) − θ0‖ at each checkpoint (the error relative to the
    distance the reference has moved)."""
    return np.array([np.linalg.norm(th - rf) / np.linalg.norm(rf - theta0) for th, rf in zip(thetas, refs)])


# ----------------------------------------------------------------------------- the reference

def _cache_key(problem, p0, times) -> str:
    h = hashlib.sha256()
    for a in (flat(p0), np.asarray(problem.X), np.asarray(problem.y), np.asarray(times, np.float64)):
        h.update(np.ascontiguousarray(a).tobytes())
    h.update(json.dumps([REFERENCE, problem.rate, problem.loss_kind, str(flat(p0).dtype)]).encode())
    return h.hexdigest()[:20]


def cached_reference(problem, p0, times, cache_dir: Path) -> Trace:
    """Dopri8 at rtol 1e-11 through `times` (a step ends on each), from the cache when it holds
    the same settings; its own counts are kept with it (the `dopri8-tight` preset's row)."""
    path = cache_dir / f"scale_flow-ref-{_cache_key(problem, p0, times)}.npz"
    if not path.exists():
        print(f"  reference: Dopri8 rtol 1e-11 through {len(times)} checkpoints (cache: {path})", flush=True)
        t0, counts = time.perf_counter(), []
        out = reference(problem, p0, [float(t) for t in times], counts)
        cum = {k: np.cumsum([c[k] for c in counts]) for k in ("steps", "rejected", "vf_evals")}
        cache_dir.mkdir(parents=True, exist_ok=True)
        np.savez(path, theta=np.stack([out[float(t)] for t in times]), wall=time.perf_counter() - t0, **cum)
    data = np.load(path)
    tr = Trace("reference: Dopri8", rtol=REFERENCE["rtol"], note=f"cached in {path}")
    for k in range(len(times)):
        tr.add(data["vf_evals"][k], data["steps"][k], data["rejected"][k], math.nan, data["theta"][k])
    tr.total_wall = float(data["wall"])
    return tr


# ----------------------------------------------------------------------------- the methods

def flow_presets(sets=(), implicit: bool = True) -> tuple[list, list[tuple[str, str]]]:
    """The flow presets of solvers/ that the scenario loader accepts on this problem (typed),
    and (name, reason) for each one it refuses (or, `implicit` false, each implicit one).
    Presets of other kinds are not flows: left out."""
    usable, refused = [], []
    for name, _ in list_solvers():
        spec = preset(name)
        if spec.kind != "flow":
            continue
        if not implicit and FLOW_METHODS[spec.method].implicit:
            refused.append((name, "--quick: compiling an implicit method's Newton–Krylov solve takes minutes here"))
            continue
        try:
            load_scenario(SCENARIO, [*sets, f'run.solvers=["{name}"]'])
        except ScenarioError as e:
            refused.append((name, str(e)))
            continue
        usable.append(spec)
    return usable, refused


def is_reference(spec) -> bool:
    return (spec.method, spec.rtol, spec.atol) == (REFERENCE["method"], REFERENCE["rtol"], REFERENCE["atol"])


def run_preset(problem, p0, spec, times, budget_s: float, cost_cap: float = COST_CAP) -> Trace:
    """A flow preset through `times`, in calls of at most CHUNK_STEPS steps, stopped past
    `budget_s` of wall time or `cost_cap` × GD's gradients (η = GD_ETA) to the time reached."""
    implicit = FLOW_METHODS[spec.method].implicit
    tr = Trace(spec.name, rtol=spec.rtol, counted=not implicit)
    run, integ = flow_run(problem, p0, spec, float(times[-1]), len(times), budget_s=budget_s,
                          chunk_steps=CHUNK_STEPS, times=[float(t) for t in times],
                          record=lambda k, state, tot: tr.add(tot["vf_evals"] + tot["hvps"] + integ.init_hvps,
                                                              tot["steps"], tot["rejected"], tot["wall"],
                                                              flat(integ.params(state))),
                          stop=lambda tot, t: tot["vf_evals"] + tot["hvps"] > cost_cap * max(t, times[0]) / GD_ETA)
    _, tot = run()
    tr.total_wall = tot["wall"]
    if tot["capped"]:
        tr.capped_at, tr.capped_by = tot["t_reached"], "wall" if tot["wall"] > budget_s else "cost"
    return tr


def run_gd(problem, p0, times, eta: float = GD_ETA) -> Trace:
    """GD through `times` (multiples of η), one compiled call per checkpoint."""
    integ = descent_integrator(gd_preset(eta))
    advance = eqx.filter_jit(integ.advance)
    state = integ.init(problem, p0, jax.random.PRNGKey(0))
    ready(advance(problem, state, jnp.asarray(eta)))     # compile
    tr, steps, wall = Trace(f"GD η = {eta:g}"), 0, 0.0
    for t in times:
        dt, (state, stats) = timed(advance, problem, state, jnp.asarray(float(t)))
        assert int(stats["status"]) == Status.DONE, stats
        steps, wall = steps + int(stats["steps"]), wall + dt
        tr.add(steps, steps, 0, wall, flat(state.y))
    tr.total_wall = wall
    return tr


def tick_steps(h: float, tick: float = 1.0) -> tuple[int, float]:
    """Cohen et al.'s `rk_advance_time`: steps of min(h, remaining) until the tick is spent
    (their loop subtracts h each time). Returns (the number of steps, the last one's size)."""
    n, remaining, last = 0, tick, 0.0
    while remaining > 0:
        n, last, remaining = n + 1, min(h, remaining), remaining - h
    return n, last


class CohenRK4:
    """Cohen et al.'s gradient-flow integration (their src/flow.py) on a flowsim Problem: per
    tick, the top Hessian eigenvalues by `eigsh` on HVPs, then RK4 at h = α/λ_max."""

    def __init__(self, problem, p0, neigs: int = 2, alpha: float = 1.0, seed: int = 0):
        v0, self.unravel = ravel_pytree(p0)
        self.v0, self.neigs, self.alpha = v0, neigs, alpha
        self.start = np.random.default_rng(seed).normal(size=v0.size)   # ARPACK's start vector
        self.rate = problem.rate
        field_ = lambda v: ravel_pytree(problem.velocity(self.unravel(v)))[0]  # noqa: E731

        def rk4(v, h, n):
            def step(_, v):
                k1 = field_(v)
                k2 = field_(v + h / 2 * k1)
                k3 = field_(v + h / 2 * k2)
                k4 = field_(v + h * k3)
                return v + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            return jax.lax.fori_loop(0, n, step, v)

        self.rk4 = jax.jit(rk4)
        self.hvp = jax.jit(lambda v, u: ravel_pytree(hessian_vector_product(problem, self.unravel(v),
                                                                             self.unravel(u)))[0])

    def sharpness(self, v) -> tuple[float, int]:
        """λ_max of the loss Hessian at v (× the flow's rate) and the HVPs `eigsh` spent."""
        calls = [0]

        def mv(u):
            calls[0] += 1
            return np.asarray(self.hvp(v, jnp.asarray(u.ravel(), v.dtype)))

        op = LinearOperator((v.size, v.size), matvec=mv, dtype=np.float64)
        evals = eigsh(op, self.neigs, v0=self.start, return_eigenvectors=False)
        return float(np.max(evals)) * self.rate, calls[0]

    def tick(self, v, tick: float = 1.0) -> tuple[jax.Array, int, int, float]:
        """One tick: (v at its end, gradients, HVPs, λ_max used)."""
        lam, hvps = self.sharpness(v)
        n, last = tick_steps(self.alpha / lam, tick)
        v = self.rk4(v, self.alpha / lam, n - 1)
        v = self.rk4(v, last, 1)
        return v, 4 * n, hvps, lam


def run_cohen(problem, p0, times, budget_s: float, tick: float = 1.0) -> Trace:
    """Cohen et al.'s scheme through `times` (multiples of the tick), stopped past `budget_s`."""
    scheme = CohenRK4(problem, p0)
    ready(scheme.rk4(scheme.v0, 1e-3, 1))                # compile
    tr = Trace("Cohen et al.: RK4 at h = 1/λ_max, eigsh per tick", counted=True)
    v, t, cost, steps, wall, lams = scheme.v0, 0.0, 0, 0, 0.0, []
    for target in times:
        while t < target - 1e-9 * tick:
            dt, (v, grads, hvps, lam) = timed(scheme.tick, v, tick)
            t, cost, steps, wall = t + tick, cost + grads + hvps, steps + grads // 4, wall + dt
            lams.append(lam)
        tr.add(cost, steps, 0, wall, np.asarray(v))
        if wall > budget_s and target < times[-1]:
            tr.capped_at, tr.capped_by = float(target), "wall"
            break
    tr.total_wall = wall
    tr.note = f"λ_max {lams[0]:.1f} → {lams[-1]:.1f}"
    return tr


# ----------------------------------------------------------------------------- the tables

def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


def horizon_figures(tr: Trace, gd: Trace, ref: Trace, theta0, k: int) -> dict | None:
    """A run's figures at checkpoint index k (None where it stopped before): cost over GD's
    gradients, rejected share, the error at that checkpoint and the worst one up to it."""
    if len(tr.theta) <= k:
        return None
    errs = relative_errors(tr.theta[: k + 1], ref.theta[: k + 1], theta0)
    worst = int(np.argmax(errs))
    return {"ratio": tr.cost[k] / gd.cost[k], "rejected": tr.rejected[k] / max(tr.steps[k], 1),
            "err": float(errs[k]), "worst": float(errs[worst]), "worst_k": worst,
            "wall": tr.wall[k] / gd.wall[k], "errs": errs}


def cap_reason(tr: Trace) -> str:
    return f"after {tr.total_wall:.0f} s of solving" if tr.capped_by == "wall" else f"past {COST_CAP:g}× GD's gradients"


def horizon_table(T: float, k: int, runs: list[Trace], gd: Trace, ref: Trace, theta0, times) -> Table:
    t = Table(f"cohen-scale-quick to T = {T:g}: cost over GD η = {GD_ETA:g}'s {gd.cost[k]} gradients; error relative "
              f"to the displacement ‖θ_ref(t) − θ0‖ at the {k + 1} checkpoints t ≤ T (every {times[0]:g})",
              ["method", "rtol", "steps (rejected)", "evals + HVPs", "÷ GD's gradients", "error at T",
               "worst error (at t)", "worst ÷ rtol", "wall ÷ GD's"])
    for tr in [gd, *runs]:
        f = horizon_figures(tr, gd, ref, theta0, k)
        rtol = "—" if tr.rtol is None else f"{tr.rtol:g}"
        if f is None:
            reached = len(tr.theta)
            last = (f"; at t = {times[reached - 1]:g}: {fmt(tr.cost[reached - 1] / gd.cost[reached - 1])}× GD's"
                    if reached and tr.counted else "")
            t.add(tr.label, rtol, f"capped at t = {tr.capped_at:.3g} {cap_reason(tr)}{last}", "—", "—",
                  "—", "—", "—", "—")
            continue
        share = f"{tr.steps[k]} ({tr.rejected[k]}, {100 * f['rejected']:.0f} %)" if tr is not gd else str(tr.steps[k])
        cost = (str(tr.cost[k]), f"{fmt(f['ratio'])}×") if tr.counted else ("n/a (implicit)", "—")
        if tr is gd:
            errs = (f"{fmt(f['err'])} (from the flow)", f"{fmt(f['worst'])} (t = {times[f['worst_k']]:g})", "—")
        elif tr is ref:
            errs = ("0 (the reference)", "—", "—")
        else:
            errs = (fmt(f["err"]), f"{fmt(f['worst'])} (t = {times[f['worst_k']]:g})",
                    fmt(f["worst"] / tr.rtol) if tr.rtol else "—")
        t.add(tr.label, rtol, share, *cost, *errs, "—" if tr is ref else f"{fmt(f['wall'])}×")
    return t


def error_table(runs: list[Trace], ref: Trace, theta0, times) -> Table:
    t = Table("Error relative to the displacement at every checkpoint (Dopri8 rtol 1e-11 reference)",
              ["method", *(f"t = {x:g}" for x in times)])
    for tr in runs:
        errs = relative_errors(tr.theta, ref.theta[: len(tr.theta)], theta0)
        t.add(tr.label, *(f"{e:.1e}" for e in errs), *("—" for _ in range(len(times) - len(errs))))
    return t


def targets(by_name: dict[str, Trace], cohen: Trace, gd: Trace, ref: Trace, theta0, ks: dict[float, int],
            times) -> Table:
    """Issue 40's targets on this problem, with what was measured."""
    t = Table("Issue 40's targets on cohen-scale-quick", ["target", "measured", "met"])
    (T1, k1), (T2, k2) = ks.items()
    fig = lambda name, k: horizon_figures(by_name[name], gd, ref, theta0, k) if name in by_name else None  # noqa: E731
    auto = by_name.get("auto")
    if auto is None:
        t.add(f"`auto` ≤ 1.2× GD's gradients at T = {T1:g}, ≤ 1.5× at T = {T2:g}, rtol ≤ 1e-6, within 10× rtol",
              "no solvers/auto.toml yet: not measured", "—")
    else:
        for T, k, cap in ((T1, k1, 1.2), (T2, k2, 1.5)):
            f = fig("auto", k)
            if f is None:
                t.add(f"`auto` ≤ {cap}× GD at T = {T:g}", f"capped at t = {auto.capped_at:.3g}", "**no**")
                continue
            ok = f["ratio"] <= cap and auto.rtol <= 1e-6 and f["worst"] <= 10 * auto.rtol
            t.add(f"`auto` ≤ {cap}× GD's gradients at T = {T:g}, rtol ≤ 1e-6, every checkpoint within 10× rtol",
                  f"{fmt(f['ratio'])}× at rtol {auto.rtol:g}, worst {fmt(f['worst'] / auto.rtol)}× rtol", _met(ok))
    f = fig("rkc2", k1)
    if f is not None:
        rk = by_name["rkc2"]
        t.add(f"rkc2 ≤ 0.6× GD's gradients at T = {T1:g}, rtol ≈ 1e-4, within 10× rtol",
              f"{fmt(f['ratio'])}× at rtol {rk.rtol:g}, worst {fmt(f['worst'] / rk.rtol)}× rtol",
              _met(f["ratio"] <= 0.6 and f["worst"] <= 10 * rk.rtol))
    against = "auto" if auto is not None else "rock4"
    other, shown = by_name.get(against), set()
    for T, k in ks.items():
        # where either run was capped before T, at the last checkpoint both reached (once)
        j = min(k, len(cohen.cost) - 1, len(other.cost) - 1 if other is not None else -1)
        if j < 0 or j in shown:
            continue
        shown.add(j)
        f, c = fig(against, j), horizon_figures(cohen, gd, ref, theta0, j)
        ratio = cohen.cost[j] / other.cost[j]
        at = "" if j == k else f" (at t = {times[j]:g}, the last checkpoint both reached)"
        t.add(f"Cohen et al.'s scheme ≥ 10× `{against}`'s cost at T = {T:g}"
              + ("" if auto is not None else " (`auto` not there: rock4 stands in)"),
              f"{fmt(ratio)}×{at}; worst errors {fmt(c['worst'])} against {fmt(f['worst'])}", _met(ratio >= 10))
    return t


def measure(cfg: dict) -> dict:
    """Every run of the bench: GD, the presets, Cohen et al.'s scheme, then the reference (last,
    so that a reference being cached by another process meanwhile is read, not solved again)."""
    problem, p0 = scale_problem(cfg["sets"])
    times = checkpoints(cfg["horizons"], cfg["every"])
    compilation_cache()      # as `flowsim run` does: a rerun loads the solvers' programs
    specs, refused = flow_presets(cfg["sets"], cfg["implicit"])
    for name, why in refused:
        print(f"  skipped {name}: {why}", flush=True)
    print(f"  GD η = {GD_ETA:g}", flush=True)
    gd = run_gd(problem, p0, times)
    runs = {}
    for spec in specs:
        if not is_reference(spec):    # the reference's own run stands for that preset
            print(f"  {spec.name} ({spec.method}, rtol {spec.rtol:g})", flush=True)
            implicit = FLOW_METHODS[spec.method].implicit
            runs[spec.name] = run_preset(problem, p0, spec, times, cfg["implicit_budget_s" if implicit else "budget_s"])
    print("  Cohen et al.'s RK4 scheme", flush=True)
    cohen = run_cohen(problem, p0, times, cfg["cohen_budget_s"])
    ref = cached_reference(problem, p0, times, Path(os.environ.get("FLOWSIM_BENCH_CACHE", "/tmp/flowsim-bench")))
    for spec in specs:
        if is_reference(spec):
            ref.label = f"{spec.name} (the reference)"
            runs[spec.name] = ref
    runs = [runs[s.name] for s in specs] + [cohen]
    return {"times": times, "theta0": flat(p0), "n": int(problem.X.shape[0]), "refused": refused, "gd": gd,
            "runs": runs, "cohen": cohen, "ref": ref}


def results(m: dict, cfg: dict, quick: bool) -> tuple[str, str, list[Table]]:
    """The published section's title, what its tables assume, and its tables."""
    times, theta0, gd, runs, cohen, ref = (m[k] for k in ("times", "theta0", "gd", "runs", "cohen", "ref"))
    ks = {T: int(np.argmin(np.abs(times - T))) for T in cfg["horizons"]}
    by_name = {tr.label: tr for tr in runs}
    tables = [targets(by_name, cohen, gd, ref, theta0, ks, times)]
    tables += [horizon_table(T, k, runs, gd, ref, theta0, times) for T, k in ks.items()]
    tables.append(error_table([gd, *(r for r in runs if r is not ref)], ref, theta0, times))
    skipped = "".join(f"\n- `{name}` skipped: {why}" for name, why in m["refused"])
    title = f"flows at the papers' scale: cohen-scale-quick to T = {' and '.join(f'{T:g}' for T in cfg['horizons'])}"
    context = (f"{'A small student: ' + ', '.join(cfg['sets']) + '. ' if quick else ''}"
               f"{m['n']} images, {theta0.size} parameters; one process. Counts are machine-independent; walls are of this run. Each flow solves in calls of at most {CHUNK_STEPS} steps "
            f"and stops (\"capped\") past {COST_CAP:g}× GD's gradients to the time it reached, or past "
            f"{cfg['budget_s']:g} s of solving ({cfg['implicit_budget_s']:g} s for an implicit method, whose cost "
            f"is not counted; {cfg['cohen_budget_s']:g} s for Cohen et al.'s scheme). Cohen et al.'s scheme: "
            f"{cohen.note}. Reference: {ref.total_wall:.0f} s when computed. SUNDIALS' LSRKStep: not measured "
            f"(`sundials4py` needs CPython ≥ 3.12; this project runs 3.11; Debian 12's SUNDIALS 6.4 has no "
               f"LSRKStep).{skipped}")
    return title, context, tables


def main(argv=None) -> int:
    args = arguments(__doc__, argv, quick="a small student to T = 4 (about a minute)")
    cfg = QUICK if args.quick else FULL
    title, context, tables = results(measure(cfg), cfg, args.quick)
    report("scale_flow", title, args, *tables, context=context)
    return 0


if __name__ == "__main__":
    sys.exit(main())
