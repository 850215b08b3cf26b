"""What a central flow's `track_threshold` buys at the papers' scale: the same stretch of a
central leg from the same state, at each threshold; writes bench/results/central-threshold.md.

    python bench/bench_central_threshold.py [--scenario NAME] [--leg NAME] [--t0 T] [--warm T]
                                            [--span T] [--thresholds A B ...] [--k K]

A direction whose ηλ/2 is below the threshold is taken as free: it pays no third-derivative
products, and it leaves the complementarity problem, which with the relaxation κ = 1/η it can
still couple into (`flowsim.integrate.central_field`). So a higher threshold is cheaper and
approximate. For the scenario's problem (seed 0; default central-cohen-scale, its leg
central-0.25 tracking K = 5 directions, as published): the gradient flow (the scenario's first
flow leg) to `t0`, beneath the edge, where the central flow is the gradient flow; the central
leg from there for `warm` time units at the first threshold; then, from that state, `span` more
at each threshold. Figures: the stretch's evaluations, Hessian-vector and third-derivative
products (tries included), their cost counted alike and weighted by each product's time
(measured here, median of 5), and the weights' distance from the first threshold's, relative to
|W| and to the displacement since `t0`. The central leg's steps are not ended on the stretch's
end (a horizon past it), as in a run whose rows lie inside steps.
"""

from __future__ import annotations

import argparse
import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from bench_core import ROOT, Table, fmt, publish, ready, timed
from flowsim.config import load_scenario
from flowsim.run.build import build_run
from flowsim.run.integrators import make_integrator


def product_times(problem, w: jax.Array, unravel) -> dict[str, float]:
    """Median seconds of a gradient, a Hessian-vector and a third-derivative product at w."""
    loss = lambda v: problem.rate * problem.loss(unravel(v))    # noqa: E731
    grad = jax.grad(loss)
    hvp = lambda v, u: jax.jvp(grad, (v,), (u,))[1]    # noqa: E731
    third = lambda v, u: jax.grad(lambda x: jnp.vdot(u, hvp(x, u)))(v)    # noqa: E731
    u = jax.random.normal(jax.random.PRNGKey(1), w.shape, w.dtype)
    out = {}
    for name, fn, args in (("gradient", jax.jit(grad), (w,)), ("hvp", jax.jit(hvp), (w, u)),
                           ("third", jax.jit(third), (w, u))):
        ready(fn(*args))    # compiled before it is timed
        out[name] = float(np.median([timed(fn, *args)[0] for _ in range(5)]))
    return out


def measure(scenario: str, leg_name: str, t0: float, warm: float, span: float,
            thresholds: tuple[float, ...], k: int | None = None) -> tuple[Table, str]:
    """The table of the stretch at each threshold, and the note beneath it."""
    sc = load_scenario(ROOT / "scenarios" / f"{scenario}.toml")
    run = sc.runs[0]
    built = build_run(run.settings, run.seed)
    problem = built.problem
    flow_preset = next(p for p in run.settings.run.solvers if p.kind == "flow")
    leg = next(p for p in run.settings.run.solvers if p.name == leg_name)
    leg = dataclasses.replace(leg, max_eigen=leg.max_eigen if k is None else k)
    end = jnp.asarray(warm + span)

    print(f"[{scenario}] the gradient flow ({flow_preset.name}) to t = {t0:g}", flush=True)
    flow = make_integrator(flow_preset, run.settings.run)
    state, _ = eqx.filter_jit(flow.advance)(problem, eqx.filter_jit(flow.init)(problem, built.params),
                                            jnp.asarray(t0))
    w0 = flow.params(state)
    flat0, unravel = jax.flatten_util.ravel_pytree(w0)

    def integrator(threshold):
        return make_integrator(dataclasses.replace(leg, track_threshold=threshold), run.settings.run)

    first = integrator(thresholds[0])
    print(f"  {leg_name} at threshold {thresholds[0]:g} for {warm:g} time units", flush=True)
    start, _ = eqx.filter_jit(first.advance)(problem, eqx.filter_jit(first.init)(problem, w0), jnp.asarray(warm), end)
    edge = float(leg.learning_rate) * np.asarray(start.solver_state.start.lam) / 2
    held = int(start.solver_state.held)
    seconds = product_times(problem, flat0, unravel)

    table = Table(f"A central leg's track_threshold: {scenario} {leg_name} (k = {leg.max_eigen}), t = {t0 + warm:g} to "
                  f"{t0 + warm + span:g}",
                  ["threshold", "steps (rejected)", "evaluations", "HVPs", "third-derivative products",
                   "counted alike", "weighted by time", "rel ‖ΔW‖ / ‖W‖", "rel ‖ΔW‖ / displacement"])
    reference = None
    for threshold in thresholds:
        integ = integrator(threshold)
        print(f"  threshold {threshold:g}: {span:g} time units", flush=True)
        before = np.asarray(start.solver_state.spent)
        state, stats = eqx.filter_jit(integ.advance)(problem, start, end, end)
        evals, hvps, thirds = (np.asarray(state.solver_state.spent) - before).tolist()
        w = np.asarray(jax.flatten_util.ravel_pytree(integ.params(state))[0])
        reference = w if reference is None else reference
        weighted = (evals * seconds["gradient"] + hvps * seconds["hvp"] + thirds * seconds["third"]) / seconds["gradient"]
        gap = np.linalg.norm(w - reference)
        table.add(f"{threshold:g}", f"{int(stats['accepted'])} ({int(stats['rejected'])})", evals, hvps, thirds,
                  evals + hvps + thirds, fmt(weighted), fmt(gap / np.linalg.norm(reference)),
                  fmt(gap / np.linalg.norm(reference - np.asarray(flat0))))
    note = (f"At the stretch's start: {held} direction(s) held, ηλ/2 of the tracked block "
            f"{np.round(edge, 4).tolist()} (0: not tracked). Product times here, relative to a gradient's "
            f"{seconds['gradient'] * 1e3:.1f} ms: Hessian-vector {seconds['hvp'] / seconds['gradient']:.2f}×, "
            f"third-derivative {seconds['third'] / seconds['gradient']:.2f}×. Distances are from the first "
            f"threshold's weights; the displacement is since t = {t0:g}.\n")
    return table, note


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", default="central-cohen-scale")
    ap.add_argument("--leg", default="central-0.25", help="the scenario's central leg")
    ap.add_argument("--t0", type=float, default=30.0, help="the gradient flow to here (beneath the edge)")
    ap.add_argument("--warm", type=float, default=7.0, help="the central leg's time units before the stretch")
    ap.add_argument("--span", type=float, default=4.0, help="the stretch compared, in time units")
    ap.add_argument("--thresholds", type=float, nargs="+", default=(0.9, 0.97))
    ap.add_argument("--k", type=int, default=5, help="max_eigen (the published table's 5; the scenario's leg: 8)")
    args = ap.parse_args(argv)
    table, note = measure(args.scenario, args.leg, args.t0, args.warm, args.span, tuple(args.thresholds), args.k)
    publish(table.markdown() + "\n" + note, "central-threshold", quick=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
