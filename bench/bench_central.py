"""GD beside its central flow and the exact flow: tracking figures and costs; writes
bench/results/central.md.

    python bench/bench_central.py [--scenario NAME] [--eta ETA] [--steps N] [--quick]
                                  [--method M] [--rtol R] [--pid P I] [--own-error]
    python bench/bench_central.py --cost [--scenario NAME] [--eta ETA] [--steps N] [--k K] [--rtol R]

For the scenario's problem (seed 0; default central-mlp, the JAX central-flow package's
example) and GD's step η:
- GD for N steps (every loss recorded), and GD again from a start perturbed by 1e-12 (each
  weight plus 1e-12 × a standard normal draw): the noise floor of any distance to GD's
  iterates, GD being chaotic after the edge-of-stability onset;
- the exact gradient flow (tsit5, rtol 1e-8) and the central flow (k = 5; by default as the
  scenario's central-0.1 leg: rock4, rtol 1e-5, PI control 0.3/0.3), observed at the matched
  times t = kη every `EVERY` steps.
Figures, after the onset (the first matched time where GD's sharpness reaches 2/η):
- ‖θ_GD − θ_central‖ / ‖θ_GD − θ_flow‖, its mean and its value at steps 500, 750 and 1 000;
- the predicted loss L + ½⟨∇²L, Σ⟩ against GD's loss smoothed by a Gaussian of σ = 50 steps
  (scipy's gaussian_filter1d, mode "nearest", on the loss of every step): mean relative error;
- sharpness of the three (top eigenvalue by LOBPCG, to 1e-8 relative);
- cost in gradient-equivalents per GD step: gradients + Hessian-vector products + third-
  derivative products (counted alike), against GD's one gradient and the flow's evaluations;
- the spectral radius of the central field's Jacobian (power iteration on finite differences)
  beside the `spectral_bound` that ROCK4's ρ is made of;
- with --own-error, the central flow's own error at step 600: max |Δθ| against the central
  flow by tsit5 at rtol 1e-9.
With --cost, the central flow alone (no GD, flow or sharpness: writes
bench/results/central-cost[-SCENARIO].md): its cost per GD step by component (evaluations =
gradients, Hessian-vector products, third-derivative products; tries and the first point
included), steps, events, and its own error: the same method at rtol 1e-8 (atol 1e-10) as the
reference, ‖θ − θ_ref‖ / ‖θ_ref − θ0‖ (SCALE.md's measure) at the worst of the rows every
EVERY_COST steps, and max |Δθ|.
"""

from __future__ import annotations

import argparse
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from scipy.ndimage import gaussian_filter1d

from bench_core import ROOT, Table, fmt, publish, ready  # noqa: E402
from flowsim.run.build import build_run
from flowsim.config import Preset, from_dict, load_scenario, load_solver
from flowsim.integrate.central_field import central_point, initial_vectors, spectral_bound
from flowsim.run.integrators import central_integrator, flow_integrator

EVERY = 10            # GD steps between matched times
OWN_ERROR_STEP = 600    # the own error: max |Δθ| there against the central flow at REFERENCE_RTOL
REFERENCE_RTOL = 1e-9
RADIUS_ITERATIONS = 40  # power iterations on the central field's finite-difference Jacobian
SMOOTH_STEPS = 50     # σ of the Gaussian smoothing of GD's loss, in steps
PERTURBATION = 1e-12
EVERY_COST = 100      # --cost: GD steps between the rows the own error is read at
COST_REFERENCE_RTOL = 1e-8


def typed(preset) -> Preset:
    return from_dict(Preset, load_solver({"name": "bench"} | preset))


def flat(params) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(x)) for x in jax.tree.leaves(params)])


def gd(problem, p0, eta: float, steps: int):
    """Plain GD W ← W − η·rate·∇L: the loss at every step, the weights every EVERY steps."""
    def one(w, _):
        loss, g = jax.value_and_grad(problem.loss)(w)
        return jax.tree.map(lambda x, gi: x - eta * problem.rate * gi, w, g), (loss, w)

    @jax.jit
    def run(w):
        w_end, (losses, ws) = jax.lax.scan(one, w, None, length=steps)
        return losses, ws, w_end

    losses, ws, w_end = ready(run(p0))
    rows = [flat(jax.tree.map(lambda x: x[i], ws)) for i in range(0, steps, EVERY)] + [flat(w_end)]
    return np.asarray(losses), np.stack(rows)


def sharpness(problem, params_rows, unravel):
    top = jax.jit(lambda w, U: central_point(problem, unravel(w), U, 1.0, 1, 2.0, iterations=500, cold=True).lam[0])
    U = initial_vectors(params_rows.shape[1], 1, jnp.float64)
    return np.asarray([float(top(jnp.asarray(w), U)) for w in params_rows])


def flow_rows(integ, problem, p0, times):
    advance = eqx.filter_jit(integ.advance)
    certificate = eqx.filter_jit(integ.certificate)
    # init compiled with the problem as an argument: called eagerly, the cold tracking closes over the data
    # and XLA constant-folds it (minutes on cohen-scale-quick's 500 × 192 inputs)
    state, rows, certs, spent = eqx.filter_jit(integ.init)(problem, p0), [flat(p0)], [], {"vf_evals": 0, "hvps": 0, "accepted": 0,
                                                                          "rejected": 0}
    certs.append({k: float(v) for k, v in certificate(problem, state).items()} if integ.certificate_series else {})
    states = [state]
    start = time.perf_counter()
    for t in times[1:]:
        # the run's end as the horizon: a step ends on a matched time only there, as in a run
        # whose checkpoints are these times (the weights between are the dense output's)
        state, stats = advance(problem, state, jnp.asarray(t), jnp.asarray(times[-1]))
        assert int(stats["status"]) == 1, stats
        for k in spent:
            spent[k] += int(stats[k])
        rows.append(flat(integ.params(state)))
        states.append(state)
        if integ.certificate_series:
            certs.append({k: float(v) for k, v in certificate(problem, state).items()})
    return np.stack(rows), certs, spent, time.perf_counter() - start, states


def jacobian_radius(integ, problem, state, eps: float = 1e-4, iterations: int = RADIUS_ITERATIONS):
    """Power iteration on finite-difference Jacobian-vector products of the central field at a
    state's point (central differences of step eps, the tracking warm-started from the state's
    vectors): ‖J v‖ for the last unit v, a lower estimate of the spectral radius; and the
    `spectral_bound` that ROCK4 scales by its safety factor."""
    f = integ.solver.field
    w, unravel = jax.flatten_util.ravel_pytree(integ.params(state))
    U = state.solver_state.start.U
    field = jax.jit(lambda v: jax.flatten_util.ravel_pytree(
        central_point(problem, unravel(v), U, f.eta, f.k, f.threshold).velocity)[0])
    v = jax.random.normal(jax.random.PRNGKey(2), w.shape, w.dtype)
    v = v / jnp.linalg.norm(v)
    for _ in range(iterations):
        jv = (field(w + eps * v) - field(w - eps * v)) / (2 * eps)
        norm = float(jnp.linalg.norm(jv))
        v = jv / norm
    point = central_point(problem, unravel(w), U, f.eta, f.k, f.threshold)
    return norm, float(spectral_bound(point, f.eta, f.threshold))


def central_leg(eta: float, k: int, method: str, rtol: float, pid) -> object:
    return central_integrator(typed({"kind": "central-flow", "learning_rate": eta, "max_eigen": k, "method": method,
                                     "rtol": rtol, "atol": rtol / 100, "pcoeff": pid[0], "icoeff": pid[1]}))


def cost_table(args, problem, p0, steps: int) -> None:
    """--cost: the central flow's cost by component and its own error against rtol 1e-8."""
    eta = args.eta
    times = np.arange(0, steps + 1, EVERY_COST) * eta
    table = Table(f"The central flow's cost by component: {args.scenario}, η = {args.eta:g}", ["figure", "value"])
    table.add("scenario, η, GD steps, k, method, PID", f"{args.scenario}, {eta:g}, {steps}, {args.k}, {args.method}, "
                                                       f"({args.pid[0]:g}, {args.pid[1]:g})")
    rows = {}
    for rtol in (args.rtol, *args.also, COST_REFERENCE_RTOL):
        print(f"  central flow ({args.method}, rtol {rtol:g}, k = {args.k})", flush=True)
        w, certs, spent, wall, _ = flow_rows(central_leg(eta, args.k, args.method, rtol, args.pid), problem, p0, times)
        rows[rtol] = w
        end = certs[-1]
        per = [end[f"central_{c}"] / steps for c in ("evals", "hvps", "thirds")]
        table.add(f"rtol {rtol:g}: gradient-equivalents per GD step (gradients + HVPs + third-derivative products)",
                  f"{fmt(sum(per))} = {fmt(per[0])} + {fmt(per[1])} + {fmt(per[2])}")
        table.add(f"rtol {rtol:g}: steps accepted, rejected; events; per evaluation: HVPs, third-derivative products",
                  f"{spent['accepted']}, {spent['rejected']}; {int(end['central_events'])}; "
                  f"{fmt(end['central_hvps'] / end['central_evals'])}, {fmt(end['central_thirds'] / end['central_evals'])}")
        table.add(f"rtol {rtol:g}: wall (s, this machine, compilation included)", fmt(wall))
    ref = rows[COST_REFERENCE_RTOL]
    for rtol in (args.rtol, *args.also):
        w = rows[rtol]
        off = np.linalg.norm(w - ref, axis=1)
        rel = off[1:] / np.linalg.norm(ref[1:] - ref[0], axis=1)
        table.add(f"own error at rtol {rtol:g}: max over rows of ‖θ − θ_ref‖ / ‖θ_ref − θ0‖ (at GD step), of "
                  f"‖θ − θ_ref‖ / ‖θ_ref‖ (θ_ref: rtol {COST_REFERENCE_RTOL:g}); max |Δθ|",
                  f"{fmt(rel.max())} ({(int(np.argmax(rel)) + 1) * EVERY_COST}), "
                  f"{fmt((off / np.linalg.norm(ref, axis=1)).max())}; "
                  f"{fmt(np.abs(w - ref).max())}")
    publish(table.markdown(), "central-cost" if args.scenario == "central-mlp" else
            f"central-cost-{args.scenario}-{eta:g}", args.quick)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", default="central-mlp")
    ap.add_argument("--eta", type=float, default=0.1)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--quick", action="store_true", help="300 steps")
    ap.add_argument("--method", default="rock4", help="the central flow's method (rock4 or a Runge–Kutta method)")
    ap.add_argument("--rtol", type=float, default=1e-5, help="the central flow's rtol (atol = rtol/100)")
    ap.add_argument("--pid", type=float, nargs=2, default=(0.3, 0.3), metavar=("PCOEFF", "ICOEFF"),
                    help="the central flow's PID coefficients (0 1: integral control, the preset's default)")
    ap.add_argument("--own-error", action="store_true",
                    help=f"also the central flow at rtol {REFERENCE_RTOL:g} (tsit5) to step {OWN_ERROR_STEP}: "
                         "the own error")
    ap.add_argument("--cost", action="store_true", help="the central flow alone: cost by component, own error")
    ap.add_argument("--k", type=int, default=5, help="the central flow's max_eigen")
    ap.add_argument("--also", type=float, nargs="*", default=(), metavar="RTOL",
                    help="--cost: also the central flow at these rtols (cost and own error)")
    args = ap.parse_args()
    steps = 300 if args.quick else args.steps
    eta = args.eta

    sc = load_scenario(ROOT / "scenarios" / f"{args.scenario}.toml")
    b = build_run(sc.runs[0].settings, sc.runs[0].seed)
    problem, p0 = b.problem, b.params
    w0, unravel = jax.flatten_util.ravel_pytree(p0)
    times = np.arange(0, steps + 1, EVERY) * eta
    if args.cost:
        return cost_table(args, problem, p0, steps)

    print(f"[{args.scenario}] GD at η = {eta}, {steps} steps", flush=True)
    losses, gd_w = gd(problem, p0, eta, steps)
    noise = jax.random.normal(jax.random.PRNGKey(1), w0.shape, w0.dtype) * PERTURBATION
    _, gd2_w = gd(problem, unravel(w0 + noise), eta, steps)
    print("  exact flow (tsit5, rtol 1e-8)", flush=True)
    flow = flow_integrator(typed({"kind": "flow", "method": "tsit5", "rtol": 1e-8, "atol": 1e-10}))
    flow_w, _, flow_spent, flow_wall, _ = flow_rows(flow, problem, p0, times)
    print(f"  central flow ({args.method}, rtol {args.rtol:g}, k = 5)", flush=True)
    central = central_leg(eta, args.k, args.method, args.rtol, args.pid)
    central_w, certs, central_spent, central_wall, central_states = flow_rows(central, problem, p0, times)

    print("  sharpness", flush=True)
    s_gd, s_flow = sharpness(problem, gd_w, unravel), sharpness(problem, flow_w, unravel)
    s_central = np.asarray([c["central_eig1"] for c in certs])
    reached = s_gd >= 2 / eta
    onset = int(np.argmax(reached)) if reached.any() else None     # None: GD stays below the edge
    after = slice(onset, None)
    smooth = gaussian_filter1d(losses, SMOOTH_STEPS, mode="nearest")
    matched = np.minimum(np.arange(0, steps + 1, EVERY), steps - 1)
    predicted = np.asarray([c["predicted_loss"] for c in certs])
    rel = np.abs(predicted - smooth[matched]) / smooth[matched]
    d_central = np.linalg.norm(gd_w - central_w, axis=1)
    d_flow = np.linalg.norm(gd_w - flow_w, axis=1)
    floor = np.linalg.norm(gd_w - gd2_w, axis=1)
    # the tries (stats) and the first point (the state's counters at t = 0); the two evaluations of
    # the first step-size search are not counted
    cost = (central_spent["vf_evals"] + central_spent["hvps"]
            + certs[0]["central_hvps"] + certs[0]["central_evals"] + certs[0]["central_thirds"])

    table = Table(f"GD beside its central flow: {args.scenario}", ["figure", "value"])
    table.add("scenario, η, steps", f"{args.scenario}, {eta:g}, {steps}")
    table.add("central flow: method, rtol, atol, PID (pcoeff, icoeff)",
              f"{args.method}, {args.rtol:g}, {args.rtol / 100:g}, ({args.pid[0]:g}, {args.pid[1]:g})")
    if onset is None:
        table.add("onset (first matched step with GD sharpness ≥ 2/η)",
                  f"none: GD's sharpness stays below 2/η = {2 / eta:.3g} (the central flow is the gradient flow)")
    else:
        table.add("onset (first matched step with GD sharpness ≥ 2/η)", f"{onset * EVERY}")
        table.add("predicted loss vs GD smoothed (σ = 50 steps): mean rel. error after onset",
                  fmt(rel[after].mean()))
        # the ratio of mean distances and the median ratio, as `flowsim compare` reports (a mean
        # of per-row ratios is dominated by the rows where GD passes near the flow: issue 41)
        table.add("after onset: mean ‖GD − central‖ / mean ‖GD − flow‖; median of the per-row ratios",
                  f"{fmt(d_central[after].mean() / d_flow[after].mean())}; "
                  f"{fmt(np.median(d_central[after] / d_flow[after]))}")
    for step in (500, 750, 1000):
        if step <= steps:
            i = step // EVERY
            table.add(f"step {step}: ‖GD − central‖, ‖GD − flow‖, noise floor ‖GD − GD(θ0 + 1e-12)‖",
                       f"{fmt(d_central[i])}, {fmt(d_flow[i])}, {fmt(floor[i])}")
    # (the central flow's is its tracked λ1, certified only from 2·0.9/η on: below, a lower value)
    table.add("sharpness at the end: GD, central, flow", f"{fmt(s_gd[-1])}, {fmt(s_central[-1])}, {fmt(s_flow[-1])}")
    table.add("central flow: steps accepted, rejected; evaluations, HVPs + third-derivative products, events",
               f"{central_spent['accepted']}, {central_spent['rejected']}; {central_spent['vf_evals']}, "
               f"{central_spent['hvps']}, {int(certs[-1]['central_events'])}")
    table.add("central flow: HVPs, third-derivative products (of which t = 0: the cold start)",
               f"{int(certs[-1]['central_hvps'])}, {int(certs[-1]['central_thirds'])} "
               f"({int(certs[0]['central_hvps'])}, {int(certs[0]['central_thirds'])})")
    table.add("cost per GD step (gradient-equivalents): central, flow, GD",
               f"{fmt(cost / steps)}, {fmt(flow_spent['vf_evals'] / steps)}, 1")
    radii = []
    for step in (100, 300, 600, 1000):
        if step <= steps:
            radii.append(f"{step}: " + ", ".join(fmt(r) for r in jacobian_radius(central, problem,
                                                                                    central_states[step // EVERY])))
    table.add("central field's Jacobian: step: power iteration on finite differences, spectral_bound",
              "; ".join(radii))
    if args.own_error and OWN_ERROR_STEP <= steps:
        print(f"  reference central flow (tsit5, rtol {REFERENCE_RTOL:g})", flush=True)
        reference = central_integrator(typed({"kind": "central-flow", "learning_rate": eta, "max_eigen": 5,
                                              "method": "tsit5", "rtol": REFERENCE_RTOL,
                                              "atol": REFERENCE_RTOL / 100}))
        ref_w = flow_rows(reference, problem, p0, times[: OWN_ERROR_STEP // EVERY + 1])[0]
        table.add(f"own error at step {OWN_ERROR_STEP}: max |Δθ| against tsit5 at rtol {REFERENCE_RTOL:g}",
                  fmt(np.abs(central_w[OWN_ERROR_STEP // EVERY] - ref_w[-1]).max()))
    table.add("wall (s, this machine): central, flow", f"{fmt(central_wall)}, {fmt(flow_wall)}")
    publish(table.markdown(), "central" if args.scenario == "central-mlp" else f"central-{args.scenario}",
            args.quick)


if __name__ == "__main__":
    main()
