"""`auto` against the method it should match: tsit5 where flows are not stiff, rock4 where they
are, and its growth on a spectrum without a gap (issue 40's targets); writes bench/results/auto.md.

    python bench/bench_auto.py [--quick] [--rtol 1e-6] [--pi] [--scenarios NAME ...] [--no-quadratic]

[1] Catalog scenarios (quickstart, caron-fig1-quick, cohen-eos-long-quick; --quick: quickstart),
each flow from t = 0 to the scenario's t_end in one compiled call (the steps do not depend on
checkpoints): `auto` and, at the same rtol, atol and step control, the method it is held to —
tsit5 where the catalog runs tsit5, rock4 where it runs rock4. Cost = every evaluation and HVP,
`init`'s included. Target: auto ≤ 1.1× the other.
[2] The log-spaced quadratic of tests/test_rock4.py (d = 40, eigenvalues on [1e-2, λ_max], T =
100), λ_max = 1e2, 1e3, 1e4 (--quick: to 1e3): `auto`'s cost, rejected share, error against the
closed form and the advisor's word, and the exponent of the cost's growth. Targets: exponent
≤ 0.6, ≤ 10 % rejected, error ≤ 10× rtol, no advice.
"""

from __future__ import annotations


import numpy as np

from bench_core import ROOT, Table, arguments, flow_run, fmt, preset, report
from bench_stiff import flat, log_spaced_quadratic
from flowsim.config import load_scenario
from flowsim.run.advice import advise
from flowsim.run.build import build_run
from flowsim.run.precision import enable_x64

TARGET = 1.1      # auto's cost over the matched method's (issue 40)


def variant(method: str, rtol: float, pi: bool):
    return preset({"name": method, "kind": "flow", "method": method, "rtol": rtol, "atol": rtol * 1e-2,
                   **({"pcoeff": 0.3, "icoeff": 0.3} if pi else {})})


def solve(problem, p0, spec, t_end: float) -> dict:
    run, integ = flow_run(problem, p0, spec, t_end, 1)
    state, tot = run()
    return tot | {"cost": tot["vf_evals"] + tot["hvps"] + integ.init_hvps, "theta": flat(integ.params(state)),
                  "switches": int(getattr(state.solver_state, "switches", 0))}


def matched(scenario) -> str:
    """The flow method the catalog runs the scenario with: auto's yardstick."""
    methods = [getattr(p, "method", "") for p in scenario.runs[0].settings.run.solvers]
    return "rock4" if "rock4" in methods else "tsit5"


def case_scenarios(names, rtol, pi) -> Table:
    t = Table(f"auto against the catalog's method, rtol {rtol:g}, {'PI 0.3/0.3' if pi else 'I'} control",
              ["scenario", "method", "steps (rejected)", "rock4 steps", "switches", "evals + HVPs",
               "auto / other", f"≤ {TARGET}"])
    for name in names:
        sc = load_scenario(ROOT / "scenarios" / f"{name}.toml", [])
        r = sc.runs[0]
        b = build_run(r.settings, r.seed)
        t_end = float(r.settings.run.t_end)
        other = matched(sc)
        out = {m: solve(b.problem, b.params, variant(m, rtol, pi), t_end) for m in (other, "auto")}
        ratio = out["auto"]["cost"] / out[other]["cost"]
        for m, o in out.items():
            t.add(name, m, f"{o['steps']} ({o['rejected']})", o["stabilised_steps"],
                  o["switches"] if m == "auto" else "—", o["cost"], fmt(ratio) if m == "auto" else "",
                  ("yes" if ratio <= TARGET else "NO") if m == "auto" else "")
        print(t.markdown().splitlines()[-1], flush=True)
    return t


def case_log_quadratic(rtol, pi, lams) -> tuple[Table, float]:
    t_end, costs = 100.0, []
    t = Table(f"auto on the log-spaced quadratic (d = 40, T = {t_end:g}), rtol {rtol:g}",
              ["λ_max", "steps (rejected, %)", "rock4 steps", "evals + HVPs", "error / rtol", "advice"])
    for lam in lams:
        problem, p0, exact, _ = log_spaced_quadratic(lam)
        o = solve(problem, p0, variant("auto", rtol, pi), t_end)
        ref = exact(t_end)
        err = float(np.linalg.norm(o["theta"] - ref) / np.linalg.norm(ref - flat(p0)))
        costs.append(o["cost"])
        t.add(f"{lam:g}", f"{o['steps']} ({o['rejected']}, {100 * o['rejected'] / o['steps']:.1f} %)",
              o["stabilised_steps"], o["cost"], fmt(err / rtol),
              advise("auto", o | {"accepted": o["steps"] - o["rejected"]}) or "none")
        print(t.markdown().splitlines()[-1], flush=True)
    return t, float(np.polyfit(np.log(lams), np.log(costs), 1)[0])


def main(argv=None) -> int:
    def options(ap):
        ap.add_argument("--scenarios", nargs="*", default=None, help="case [1]'s scenarios (none: skip it)")
        ap.add_argument("--no-quadratic", action="store_true", help="skip case [2]")
        ap.add_argument("--rtol", type=float, default=1e-6)
        ap.add_argument("--pi", action="store_true", help="PI 0.3/0.3 step control (default: integral, as the preset)")
    args = arguments(__doc__, argv, options=options)
    enable_x64()
    tables = []
    names = args.scenarios if args.scenarios is not None else (
        ["quickstart"] if args.quick else ["quickstart", "caron-fig1-quick", "cohen-eos-long-quick"])
    if names:
        tables.append(case_scenarios(names, args.rtol, args.pi).markdown())
    if not args.no_quadratic:
        t, slope = case_log_quadratic(args.rtol, args.pi, [1e2, 1e3] if args.quick else [1e2, 1e3, 1e4])
        tables.append(t.markdown() + f"\nExponent of evals + HVPs against λ_max: {slope:.3f} (target ≤ 0.6)\n")
    report("auto", "the auto flow against tsit5 and rock4", args, *tables,
           context=f"Evaluation counts (machine-independent), at --rtol {args.rtol:g}{' --pi' if args.pi else ''}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
