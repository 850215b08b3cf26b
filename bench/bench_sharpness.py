"""The sharpness observable: Lanczos stopped at its residual tolerance against the 32 fixed
steps it took before, on central-scale's network; writes bench/results/sharpness.md.

    python bench/bench_sharpness.py [--quick]

The weights are those GD reaches on central-scale's problem (cohen-scale-quick's fc-tanh,
80 810 parameters, 500 images): at η = 0.02, which follows the flow while the sharpness
rises (the flow's own spectrum), and at η = 0.05 before and deep in the edge of stability,
where the top eigenvalues crowd about 2/η. Per point: Lanczos steps (Hessian-vector
products), the sharpness against the 32-step value, the residual relative to it, and the
wall of one compiled observation against the 32-step one, timed in interleaved rounds.
Every scenario that observes `sharpness` takes this observation at each checkpoint of each
leg: on central-scale that is 100 × 7 of them. --quick: two points, fewer rounds.
"""

from __future__ import annotations

import sys

import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from bench_core import ROOT, Table, arguments, fmt, gd_run, interleaved_best, report
from flowsim.config import load_scenario
from flowsim.observe.stability import LANCZOS_RTOL, LANCZOS_STEPS, sharpness
from flowsim.run.build import build_run
from flowsim.run.precision import enable_x64

POINTS = ((0.02, 0), (0.02, 1000), (0.05, 100), (0.05, 300), (0.05, 800))   # (η, GD steps)
QUICK_POINTS = ((0.05, 0), (0.05, 300))


def measure(problem, p0, points, rounds: int) -> tuple[Table, list[int], list[float]]:
    """The table of `points` ((η, GD steps) from `p0`), the steps of each observation and
    the wall of each over the 32-step one."""
    n = ravel_pytree(p0)[0].size
    adaptive = jax.jit(lambda p: sharpness(problem, p))
    fixed = jax.jit(lambda p: sharpness(problem, p, rtol=0.0))     # every one of the 32 steps
    tb = Table(f"central-scale's network ({n} parameters), one sharpness observation",
               ["weights", "sharpness", "2/η", "steps (of 32)", "difference / 32-step value", "residual / sharpness",
                "wall / 32 steps"])
    steps_all, walls = [], []
    for eta, k in points:
        p = gd_run(problem, p0, eta * k, 1, eta=eta)[0].y if k else p0   # the engine's GD, k steps
        lam, res, steps = map(float, adaptive(p))
        lam32 = float(fixed(p)[0])
        best = interleaved_best({"adaptive": lambda: adaptive(p), "fixed": lambda: fixed(p)}, rounds)
        steps_all.append(int(steps))
        walls.append(best["adaptive"] / best["fixed"])
        tb.add(f"GD η = {eta:g}, step {k} (t = {eta * k:g})", fmt(lam, 6), fmt(2 / eta), int(steps),
               fmt(abs(lam - lam32) / lam32), fmt(res / lam), fmt(walls[-1]))
        print(eta, k, "done", flush=True)
    return tb, steps_all, walls


def main(argv=None) -> int:
    args = arguments(__doc__, argv)
    enable_x64()
    sc = load_scenario(ROOT / "scenarios" / "central-scale.toml")
    b = build_run(sc.runs[0].settings, sc.runs[0].seed)
    tb, steps_all, walls = measure(b.problem, b.params, QUICK_POINTS if args.quick else POINTS, 2 if args.quick else 5)
    summary = Table("Sharpness observation" + (" (--quick)" if args.quick else ""), ["what", "measured"])
    summary.add(f"Lanczos steps per observation, stopped at residual ≤ {LANCZOS_RTOL:g} · θ (mean of the points)",
                f"{np.mean(steps_all):.1f} of {LANCZOS_STEPS}")
    summary.add("wall of one observation / 32 fixed steps (mean of the points)", fmt(float(np.mean(walls))))
    report("sharpness", "the sharpness observable's Lanczos, stopped at its tolerance", args, summary, tb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
