"""bench/bench_scale_flow.py's machinery on a small problem with a closed form (the
log-spaced quadratic of tests/test_rock4.py), so that the bench cannot rot: the cached
reference, a preset's trace, GD's count, Cohen et al.'s RK4 scheme against RK4's own
amplification factors, the error against the exact flow, and the preset list."""

import sys
from pathlib import Path

import numpy as np
import pytest
from test_rock4 import log_spaced_quadratic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import bench_scale_flow as bench  # noqa: E402

from flowsim.config import list_solvers, solver_preset  # noqa: E402

TIMES = np.array([1.0, 2.0])


def test_tick_steps_follow_cohen_et_al_s_loop():
    """Their rk_advance_time subtracts h until the tick is spent, the last step truncated."""
    assert bench.tick_steps(0.25) == (4, 0.25)
    n, last = bench.tick_steps(0.3)
    assert n == 4 and last == pytest.approx(0.1)
    assert bench.tick_steps(2.0) == (1, 1.0)


@pytest.mark.slow     # compiles Dopri8, Tsit5 and GD: about 50 s on 2 busy cores, cache cold
def test_the_reference_and_a_preset_s_errors_against_the_closed_form(tmp_path, monkeypatch):
    """The cached Dopri8 reference lies within 1e-9 of the exact flow, so the bench's error
    (relative to the displacement) is the error against the closed form; the second call
    reads the cache without solving."""
    problem, p0, exact, _ = log_spaced_quadratic(1e2)
    theta0 = bench.flat(p0)
    ref = bench.cached_reference(problem, p0, TIMES, tmp_path)
    exact_thetas = [exact(t) for t in TIMES]
    assert np.max(bench.relative_errors(ref.theta, exact_thetas, theta0)) <= 1e-9
    assert ref.cost[-1] >= ref.steps[-1] > 0 and len(list(tmp_path.glob("*.npz"))) == 1

    monkeypatch.setattr(bench, "reference", lambda *a, **k: pytest.fail("the cache was not used"))
    again = bench.cached_reference(problem, p0, TIMES, tmp_path)
    np.testing.assert_array_equal(np.stack(again.theta), np.stack(ref.theta))

    spec = solver_preset({"name": "tsit5-loose", "kind": "flow", "method": "tsit5", "rtol": 1e-5, "atol": 1e-7})
    # the quadratic costs Tsit5 more than 4× GD η = 0.04's gradients: stopped at the first checkpoint
    capped = bench.run_preset(problem, p0, spec, TIMES, budget_s=float("inf"))
    assert capped.capped_at == TIMES[0] and capped.capped_by == "cost" and len(capped.theta) == 1
    assert capped.cost[0] > bench.COST_CAP * TIMES[0] / bench.GD_ETA
    tr = bench.run_preset(problem, p0, spec, TIMES, budget_s=float("inf"), cost_cap=float("inf"))
    assert tr.capped_at is None and len(tr.theta) == len(TIMES) and tr.cost[0] == capped.cost[0]
    assert tr.cost == sorted(tr.cost) and tr.cost[-1] >= 6 * (tr.steps[-1])   # 6 evaluations a Tsit5 step
    measured = bench.relative_errors(tr.theta, ref.theta, theta0)
    true = bench.relative_errors(tr.theta, exact_thetas, theta0)
    np.testing.assert_allclose(measured, true, rtol=1e-3)
    assert 0 < np.max(true) <= 10 * spec.rtol

    gd = bench.run_gd(problem, p0, TIMES, eta=0.01)
    assert gd.cost == [100, 200] and gd.steps == gd.cost
    f = bench.horizon_figures(tr, gd, ref, theta0, 1)
    assert f["ratio"] == pytest.approx(tr.cost[1] / 200) and f["worst"] == pytest.approx(np.max(measured))

    # the report: a run capped after the first checkpoint is shown as such, not as a figure
    capped.label, capped.capped_at = "capped", 1.5
    cohen = bench.Trace("cohen", capped_at=1.0, capped_by="wall", total_wall=5.0)
    cohen.add(10 * tr.cost[0], 1, 0, 0.0, tr.theta[0])
    cfg = {"horizons": (1.0, 2.0), "sets": (), "budget_s": 1.0, "implicit_budget_s": 1.0, "cohen_budget_s": 1.0}
    _, context, tables = bench.results({"times": TIMES, "theta0": theta0, "n": 40, "refused": [("x", "why")],
                                        "gd": gd, "runs": [tr, capped, ref, cohen], "cohen": cohen, "ref": ref},
                                       cfg, True)
    text = context + "\n".join(t.markdown() for t in tables)
    assert f"| tsit5-loose | 1e-05 | {tr.steps[1]} ({tr.rejected[1]}" in text
    assert f"capped at t = 1.5 past {bench.COST_CAP:g}× GD's gradients; at t = 1: " in text
    assert "| cohen | — | capped at t = 1 after 5 s of solving; at t = 1: " in text
    assert "- `x` skipped: why" in text and "no solvers/auto.toml" in text


def test_cohen_et_al_s_scheme_is_rk4_at_one_over_the_top_eigenvalue():
    """On a quadratic the scheme's result is known: eigsh finds λ_max = 100, each tick takes
    100 RK4 steps of h = 1/100, and RK4 multiplies the i-th eigencomponent of θ − θ* by
    R(−hλ_i) = 1 − z + z²/2 − z³/6 + z⁴/24 (z = hλ_i) a step. Its cost is 4 gradients a step
    plus the eigensolve's HVPs (the same each tick: the Hessian and ARPACK's start are fixed)."""
    lam_max, d = 1e2, 40
    problem, p0, exact, star = log_spaced_quadratic(lam_max, d)
    rng = np.random.default_rng(0)          # log_spaced_quadratic's basis, drawn the same way
    lam = np.logspace(-2, np.log10(lam_max), d)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    theta0 = bench.flat(p0)

    scheme = bench.CohenRK4(problem, p0)
    sharpness, hvps = scheme.sharpness(scheme.v0)
    assert sharpness == pytest.approx(lam_max, rel=1e-10) and hvps > 0

    tr = bench.run_cohen(problem, p0, TIMES, budget_s=float("inf"))
    # the steps of a tick, as Cohen et al.'s loop takes them (100, or 101 where round-off
    # leaves a sliver of the tick after the hundredth)
    n, last = bench.tick_steps(1 / sharpness)
    assert n in (100, 101)
    R = lambda h: 1 - h * lam + (h * lam) ** 2 / 2 - (h * lam) ** 3 / 6 + (h * lam) ** 4 / 24  # noqa: E731
    amplification = R(1 / sharpness) ** (n - 1) * R(last)
    expected = [star + Q @ (amplification ** (k + 1) * (Q.T @ (theta0 - star))) for k in range(len(TIMES))]
    np.testing.assert_allclose(np.stack(tr.theta), np.stack(expected), rtol=1e-9, atol=1e-12)
    assert tr.steps == [n, 2 * n] and tr.cost == [4 * n + hvps, 2 * (4 * n + hvps)]
    # its error against the exact flow is the closed form's (RK4's truncation in the slow
    # components: ≈ 6e-11 of the displacement at t = 2)
    exact_thetas = [exact(t) for t in TIMES]
    np.testing.assert_allclose(bench.relative_errors(tr.theta, exact_thetas, theta0),
                               bench.relative_errors(expected, exact_thetas, theta0), rtol=1e-2)


def test_every_flow_preset_of_the_catalog_is_run_or_refused_with_the_loader_s_reason():
    """The list is read from solvers/ (a preset added later, such as `auto`, appears): each
    `flow` preset is either usable on cohen-scale-quick or refused with a message naming it."""
    usable, refused = bench.flow_presets()
    flows = {name for name, _ in list_solvers() if solver_preset(name).kind == "flow"}
    assert {s.name for s in usable} | {name for name, _ in refused} == flows
    assert {"rock4", "rkc2", "tsit5"} <= {s.name for s in usable}
    assert dict(refused)["filippov"].count("filippov") >= 1
