"""Cohen et al.'s scheme against `auto` at equal or worse error, on cohen-scale-quick to T = 40;
writes bench/results/cohen_matched.md.

    python bench/bench_cohen_matched.py [--quick] [--rtols 1e-6 1e-5 3e-5]

bench_scale_flow.py stops Cohen et al.'s RK4 scheme (h = 1/λ_max, `eigsh` once per unit time)
on a wall budget; here it runs to T = 40 whatever it costs, and `auto` (PI 0.3/0.3, atol =
rtol/100) runs at each of `--rtols`, so that issue 40's "Cohen et al.'s scheme costs ≥ 10×
`auto` at equal or worse error" is read off one table: each `auto` row's cost ratio is given
where its worst error over the 10 checkpoints is no larger than the scheme's. Errors are
bench_scale_flow's (relative to the displacement, against its cached Dopri8 reference, which
this script computes first if the cache lacks it: about an hour on 2 cores). --quick:
bench_scale_flow's small student to T = 2.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from bench_auto import variant
from bench_core import Table, arguments, fmt, report
from bench_scale_flow import (FULL, GD_ETA, QUICK, cached_reference, checkpoints, relative_errors, run_cohen,
                              run_preset, scale_problem)
from bench_stiff import flat
from flowsim.run.precision import enable_x64



def main(argv=None) -> int:
    def options(ap):
        ap.add_argument("--rtols", type=float, nargs="+", default=[1e-6, 1e-5, 3e-5])
        ap.add_argument("--cache", type=Path, default=Path("/tmp/flowsim-bench"))
    args = arguments(__doc__, argv, options=options)
    enable_x64()
    cfg = QUICK if args.quick else FULL
    problem, p0 = scale_problem(cfg["sets"])
    times = checkpoints(cfg["horizons"], cfg["every"])      # the reference's grid (its cache key)
    ref = cached_reference(problem, p0, times, args.cache)
    horizon = cfg["horizons"][0]
    gd_gradients = round(horizon / GD_ETA)                  # GD η = 0.04 to the horizon: the unit of cost
    k = int(np.argmin(np.abs(times - horizon))) + 1
    theta0 = flat(p0)
    cohen = run_cohen(problem, p0, times[:k], math.inf)
    cohen_err = relative_errors(cohen.theta, ref.theta[:k], theta0)
    t = Table(f"cohen-scale-quick{' (--quick: a small student)' if args.quick else ''} to T = {horizon:g}: cost "
              f"(evaluations + HVPs) over GD η = {GD_ETA:g}'s {gd_gradients} gradients; worst error over the {k} "
              f"checkpoints",
              ["method", "steps (rejected)", "cost ÷ GD", "worst error", "error at T", "Cohen et al. ÷ this",
               "at equal or worse error"])
    t.add(f"Cohen et al.: RK4 at h = 1/λ_max, eigsh per unit time ({cohen.note})", cohen.steps[-1],
          fmt(cohen.cost[-1] / gd_gradients), f"{cohen_err.max():.2e}", f"{cohen_err[-1]:.2e}", "", "")
    for rtol in args.rtols:
        tr = run_preset(problem, p0, variant("auto", rtol, pi=True), times[:k], math.inf, cost_cap=math.inf)
        err = relative_errors(tr.theta, ref.theta[:k], theta0)
        t.add(f"auto, rtol {rtol:g}", f"{tr.steps[-1]} ({tr.rejected[-1]})", fmt(tr.cost[-1] / gd_gradients),
              f"{err.max():.2e}", f"{err[-1]:.2e}", fmt(cohen.cost[-1] / tr.cost[-1]),
              "yes" if err.max() <= cohen_err.max() else "no (smaller error by Cohen et al.)")
        print(t.markdown().splitlines()[-1], flush=True)
    report("cohen_matched", "Cohen et al.'s scheme against `auto` at equal or worse error", args, t,
           context="Evaluation counts (machine-independent), at --rtols " + " ".join(f"{r:g}" for r in args.rtols)
           + ".")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
