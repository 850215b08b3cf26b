"""What observing the Hessian costs per checkpoint row: the sharpness by the Lanczos it was
computed with before (a cold start from a fixed vector at every row, stopped at a residual of
1e-10·θ) against the eigen-tracker (flowsim/observe/eigen.py: warm-started from the row
before, stopped at a relative accuracy of 1e-4), and `hessian_top` (k = 5) by the tracker;
writes bench/results/observe.md.

    python bench/bench_observe.py [--quick]

The rows are those of cohen-scale-quick's GD leg at η = 0.04 with 40 checkpoints (25 steps a
row, t = 0 … 40; fc-tanh 192-200-200-10, 80 810 parameters, 500 images): the network passes
the edge of stability (2/η = 50) and the top eigenvalues cross. Per method: Hessian-vector
products per row, the wall of a row's observation (each compiled call timed once, summed
over the rows) against the wall of the row's 25 GD steps, and the largest relative
difference from the cold Lanczos's sharpness (converged to 1e-10). All in one run, the
methods called in turn at each row. --quick: the first 10 rows.

Per method also the CPU time of the process (the ratios' primary figure: on 2 shared cores
the wall of a call swings 2-3x with the load, its CPU far less).

Both trackers run twice, with the products `hessian_matvec` takes on this smooth network
(forward differences of gradients) and with the linearised ones, in alternation.

Last run (2 shared cores, load 1.4): sharpness 4.44 products a row (the cold Lanczos 17.3),
0.305x the CPU of the rows' GD steps (0.352x with linearised products); hessian_top (k = 5,
soft-locked) 15.6, 1.01x (1.30x). Issue 53's targets (observation <= 0.3x the integration
for `sharpness`, <= 1x for `hessian_top`, on `flowsim run`'s GD and `auto` legs) sit at the
edge on GD's rows: 0.3x of a row's 25 gradients leaves 7.5 gradients, which 4.44 products,
the row's own gradient and the tracker's linear algebra on the 80 810-long block take
(docs/benchmarks.md says what was tried).
"""

from __future__ import annotations

import contextlib
import sys
import time

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from bench_core import ROOT, Table, arguments, fmt, gd_preset, ready, report
from flowsim.config import load_scenario
from flowsim.observe.observables import memory, observe_carried
from flowsim.observe import stability
from flowsim.observe.stability import sharpness
from flowsim.run.build import build_run
from flowsim.run.integrators import descent_integrator
from flowsim.run.precision import enable_x64

ETA, ROWS, T_END = 0.04, 40, 40.0


@contextlib.contextmanager
def _exact_products(exact: bool):
    """While tracing: `hessian_matvec`'s linearised products where `exact`, whatever
    `stability.differenced` would choose."""
    chosen = stability.differenced
    if exact:
        stability.differenced = lambda *_: False
    try:
        yield
    finally:
        stability.differenced = chosen


def _timed(fn, *args):
    """(CPU seconds of the process, wall seconds, value) of one call: on a machine shared with
    other work the CPU a call takes moves far less than its wall (2-3x from one run to the
    next at load 5-10) and both sides of a ratio are taken the same way."""
    cpu, tic = time.process_time(), time.perf_counter()
    out = ready(fn(*args))
    return time.process_time() - cpu, time.perf_counter() - tic, out


def main(argv=None) -> int:
    args = arguments(__doc__, argv)
    enable_x64()
    sc = load_scenario(ROOT / "scenarios" / "cohen-scale-quick.toml")
    b = build_run(sc.runs[0].settings, sc.runs[0].seed)
    problem, p0 = b.problem, b.params
    n = ravel_pytree(p0)[0].size
    rows = 10 if args.quick else ROWS
    integ = descent_integrator(gd_preset(ETA))
    advance = eqx.filter_jit(integ.advance)
    old = jax.jit(lambda p: sharpness(problem, p))
    # each tracker with the products `hessian_matvec` takes here (differences of gradients:
    # the network is smooth) and with the linearised products, compiled while
    # `stability.differenced` says no (it is read when the program is traced)
    keys = [(names, exact) for names in (("sharpness",), ("hessian_top",)) for exact in (False, True)]
    trackers, carried = {}, {}
    for key in keys:
        names, exact = key
        f = jax.jit(lambda p, c, names=names: observe_carried(problem, p, None, names, c))
        carried[key] = memory(problem, p0, names)
        with _exact_products(exact):
            trackers[key] = f.lower(p0, carried[key]).compile()
    state = integ.init(problem, p0, jax.random.PRNGKey(0))
    ready(advance(problem, state, jnp.asarray(ETA)))                     # compile
    ready(old(p0))
    walls = {"gd": 0.0, "old": 0.0} | {key: 0.0 for key in keys}
    cpus = dict(walls)
    products = {"old": 0} | {key: 0 for key in keys}
    worst = {key: 0.0 for key in keys}
    for i in range(rows + 1):
        if i:
            cpu, dt, (state, _) = _timed(advance, problem, state, jnp.asarray(i * T_END / ROWS))
            walls["gd"] += dt
            cpus["gd"] += cpu
        p = integ.params(state)
        cpu, dt, (lam, _, steps) = _timed(old, p)
        walls["old"] += dt
        cpus["old"] += cpu
        products["old"] += int(steps)
        for key in (keys if i % 2 else keys[::-1]):       # in turn, the order alternating
            names, _ = key
            cpu, dt, (values, carried[key], count) = _timed(trackers[key], p, carried[key])
            walls[key] += dt
            cpus[key] += cpu
            products[key] += int(count)
            top = float(values["sharpness"] if names == ("sharpness",) else values["hessian_top"][0])
            worst[key] = max(worst[key], abs(top - float(lam)) / float(lam))
        print(f"row {i}: sharpness {float(lam):.4f}", flush=True)
    per = rows + 1
    tb = Table(f"cohen-scale-quick's GD η = {ETA:g} ({n} parameters), {per} rows of {int(T_END / ROWS / ETA)} steps",
               ["observation", "HVPs per row", "CPU / row's GD steps", "wall / row's GD steps", "CPU / cold Lanczos",
                "max relative Δ of the sharpness from the Lanczos 1e-10"])
    gd = walls["gd"] * per / rows          # the rows' GD steps, per observed row
    gd_cpu = cpus["gd"] * per / rows
    tb.add("sharpness, cold Lanczos to 1e-10·θ (before)", fmt(products["old"] / per), fmt(cpus["old"] / gd_cpu),
           fmt(walls["old"] / gd), "1", "—")
    for (names, exact), label in zip(keys, ("sharpness, tracker k = 1 (+1 guard), warm, rtol 1e-4",
                                            "the same, linearised products",
                                            "hessian_top, tracker k = 5 (+2 guards), warm, rtol 1e-4",
                                            "the same, linearised products")):
        key = names, exact
        tb.add(label, fmt(products[key] / per), fmt(cpus[key] / gd_cpu), fmt(walls[key] / gd),
               fmt(cpus[key] / cpus["old"]), fmt(worst[key]))
    sharp, top = (("sharpness",), False), (("hessian_top",), False)
    summary = Table("Observation cost per row" + (" (--quick)" if args.quick else ""), ["what", "measured", "target"])
    summary.add("sharpness: tracker's products / cold Lanczos's", fmt(products[sharp] / products["old"]), "")
    summary.add("sharpness: tracker's CPU / cold Lanczos's", fmt(cpus[sharp] / cpus["old"]), "")
    summary.add("sharpness (k = 1) CPU / the rows' GD CPU", fmt(cpus[sharp] / gd_cpu), "≤ 0.3")
    summary.add("hessian_top (k = 5) CPU / the rows' GD CPU", fmt(cpus[top] / gd_cpu), "≤ 1")
    for names in (("sharpness",), ("hessian_top",)):
        summary.add(f"{names[0]}: CPU with differenced products / with linearised ones",
                    fmt(cpus[names, False] / cpus[names, True]), "")
    report("observe", "the Hessian observables' cost per checkpoint row", args, summary, tb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
