"""Deep networks: generic NTG strategies on a 3-layer MLP, and the flow/GD ratio of
`cohen-eos-quick`; writes bench/results/deep.md.

    python bench/bench_deep.py [--quick]

[1] NTG of a 3-layer MLP (two hidden layers of width 512, n = 100 points, d = 64, one
output), two ways, timed interleaved in one process (best of `rounds`):
  - jacrev: reverse-mode Jacobian J (p × P), then J Jᵀ (`flowsim.nn.ntg.jacobian_ntg`, the oracle);
  - ntk-vp: Θ·e_i = J (Jᵀ e_i) column by column (a VJP then a JVP per point, no J stored;
    the "NTK-vector products" strategy of neural-tangents): `flowsim.nn.ntg.vector_product_ntg`.
`ModuleNet` uses the one this measured faster on its backend (`flowsim.nn.ntg.ntg_strategy`):
ntk-vp on CPU, jacrev on a GPU; the summary says whether that still holds.
Forward mode (jacfwd) is left out: it takes P = 300 000 JVPs where reverse mode takes p = 100
VJPs, and vmapped it would hold P × n × width activations (over 100 GiB).
neural-tangents itself is not measured: installing it beside this project's JAX pulls
TensorFlow 2.21 and downgrades h5py (pip's dry run, 2026-11-23), so two of the library's
strategies are stood in for by plain-JAX ones. They agree to 1e-10 (checked).

[2] cohen-eos-quick (500 optdigits points, tanh MLP [64, 64], mse): the exact flow (tsit5 at
rtol 1e-8, and rock4 at rtol 1e-6, the scenario's flow leg) to t_end against GD at the
smallest step of the scenario (η = 0.9), each compiled, one segment each after a warm-up, in
one process: the ratio of wall times and of gradient evaluations (rock4's Hessian-vector
products for its spectral radius counted with them). bench_stiff.py compares them at equal
accuracy.
"""

from __future__ import annotations

import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from bench_core import ROOT, Table, arguments, fmt, interleaved_best, ready, report  # noqa: E402
from flowsim.status import Status
from flowsim.run.build import build_run
from flowsim.config import load_scenario, solver_preset
from flowsim.run.integrators import make_integrator
from flowsim.models.mlp import init_mlp
from flowsim.models.module import ModuleNet
from flowsim.nn.ntg import jacobian_ntg, ntg_strategy, vector_product_ntg
from flowsim.run.precision import enable_x64


def ntg_strategies(n: int, d: int, width: int):
    net = init_mlp(jax.random.PRNGKey(0), [d, width, width, 1], parameterisation="standard", init_std=1.0,
                   bias=True, activation_name="tanh")
    params, frozen = eqx.partition(net, eqx.is_inexact_array)
    module = ModuleNet(frozen=frozen)
    X = jax.random.normal(jax.random.PRNGKey(1), (n, d))
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    strategies = {
        "jacrev": jax.jit(lambda q: jacobian_ntg(module, unravel(q), X)),
        "ntk-vp": jax.jit(lambda q: vector_product_ntg(module, unravel(q), X)),
    }
    return strategies, flat


def case_ntg(cfg, tables, summary):
    n, d, width = cfg["n"], cfg["d"], cfg["width"]
    print(f"[1] NTG strategies: 3-layer MLP, n={n} d={d} width={width}", flush=True)
    strategies, flat = ntg_strategies(n, d, width)
    results = {k: np.asarray(fn(flat)) for k, fn in strategies.items()}
    ref = results["jacrev"]
    for k, v in results.items():
        err = np.max(np.abs(v - ref)) / np.max(np.abs(ref))
        assert err <= 1e-10, (k, err)
    best = interleaved_best({k: (lambda fn=fn: fn(flat)) for k, fn in strategies.items()}, cfg["rounds"])
    t = Table(f"NTG of a 3-layer MLP: n = {n}, d = {d}, widths [{width}, {width}], P = {flat.size}",
              ["strategy", "time / jacrev time", "max \\|Δ\\| / max \\|Θ\\| vs jacrev"])
    for k in strategies:
        err = np.max(np.abs(results[k] - ref)) / np.max(np.abs(ref))
        t.add(k, f"{fmt(best[k] / best['jacrev'])}×", fmt(err) if k != "jacrev" else "—")
    tables.append(t)
    fastest = min(best, key=best.get)
    backend = jax.default_backend()
    chosen = {jacobian_ntg: "jacrev", vector_product_ntg: "ntk-vp"}[ntg_strategy(backend)]
    summary.add(f"fastest generic NTG strategy (flowsim's ModuleNet uses {chosen} on {backend})", fastest,
                chosen, "yes" if fastest == chosen else "**no**")


def case_eos(cfg, tables, summary):
    sets = [f"run.t_end={cfg['t_end']}"]
    sc = load_scenario(ROOT / "scenarios" / "cohen-eos-quick.toml", sets)
    r = sc.runs[0]
    b = build_run(r.settings, r.seed)
    print(f"[2] cohen-eos-quick: flow (tsit5) vs GD (η = 0.9) to t = {cfg['t_end']}", flush=True)
    out = {}
    for name in ("tsit5", "rock4", {"name": "gd-0.9", "kind": "gd", "learning_rate": 0.9}):
        preset = solver_preset(name)
        integ = make_integrator(preset, r.settings.run)
        advance = eqx.filter_jit(integ.advance)
        state0 = integ.init(b.problem, b.params, b.key)
        ready(advance(b.problem, state0, jnp.asarray(9.0)))   # compile (a multiple of 0.9)
        tic = time.perf_counter()
        state, stats = ready(advance(b.problem, state0, jnp.asarray(float(cfg["t_end"]))))
        wall = time.perf_counter() - tic
        assert int(stats["status"]) == Status.DONE, stats
        out[preset.name] = (wall, int(stats["steps"]), int(stats["vf_evals"]) + int(stats.get("hvps", 0)),
                            float(b.problem.loss(integ.params(state))))
    wg, sg, eg, lg = out["gd-0.9"]
    t = Table(f"cohen-eos-quick to t = {cfg['t_end']}: n = 500, tanh MLP [64, 64], one compiled segment each",
              ["solver", "steps", "gradient evaluations (+ HVPs)", "final loss", "wall / GD wall"])
    for name, what in (("tsit5", "tsit5 (exact flow, rtol 1e-8)"), ("rock4", "rock4 (exact flow, rtol 1e-6)")):
        wf, sf, ef, lf = out[name]
        t.add(what, sf, ef, fmt(lf), f"{fmt(wf / wg)}×")
    t.add("GD η = 0.9", sg, eg, fmt(lg), "1×")
    tables.append(t)
    wf = out["rock4"][0]
    summary.add("cohen-eos-quick: exact flow (rock4) wall / GD (η = 0.9) wall", f"{fmt(wf / wg)}×", "≤ 1× (the aim)",
                "yes" if wf <= wg else "**no**")


def main(argv=None) -> int:
    args = arguments(__doc__, argv)
    enable_x64()
    cfg = ({"n": 20, "d": 16, "width": 64, "rounds": 2, "t_end": 198.0} if args.quick else
           {"n": 100, "d": 64, "width": 512, "rounds": 5, "t_end": 1980.0})
    tables: list[Table] = []
    summary = Table("Deep-network ratios", ["quantity", "measured", "target", "met"])
    case_ntg(cfg, tables, summary)
    case_eos(cfg, tables, summary)
    report("deep", "generic NTG of an MLP, and the exact flow against GD at the edge of stability", args, summary,
           *tables, context="One process.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
