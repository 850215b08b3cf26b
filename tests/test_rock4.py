"""ROCK4 (flowsim.integrate.rock4) against its oracles: the published coefficients' order
conditions and stability polynomials, the JAX step against those polynomials, order 4 on a
nonlinear ODE, a stiff quadratic's closed-form flow, ρ's estimate, the round-off ceiling on
h·ρ and the log-spaced quadratic's closed form across λ_max. With the other flow
methods in tests/test_engine.py (through the registry): a tight reference, the closed-form
linear flow read inside steps, the evaluation counts, resume bit for bit and vmapped seeds;
the compilation cache in tests/test_scale.py."""

import json
from importlib import resources

import diffrax as dfx
import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_problem
from helpers import pendulum_convergence_rates
from test_engine import flow_to, make_flow_integrator, tight

from flowsim.run.advice import advise
from flowsim.status import Status
from flowsim.config import load_solver
from flowsim.integrate.rock4 import (MAX_H_RHO, TABLES, Rock4, advance, power_iteration, roundoff_bound,
                                     stability_bound)
from flowsim.models.quadratic import log_spaced_quadratic, quadratic

RAW = json.loads(resources.files("flowsim.integrate").joinpath("rock4.json").read_text())
STARTS = np.concatenate([[0], np.cumsum(2 * np.asarray(RAW["ms"]) - 1)[:-1]])


def rock4(rtol=1e-6, **more):
    return {"kind": "flow", "method": "rock4", "rtol": rtol, "atol": rtol * 1e-2, **more}


# ---------------------------------------------------------------- the published tables

def _tableau(i: int):
    """The Butcher tableau of a whole step of tabulated degree ms[i] (ms + 4 stages), rebuilt
    from the recurrence, with the weights b and the embedded weights (one stage more: f(y1))."""
    m = RAW["ms"][i]
    r = RAW["recf"][STARTS[i]: STARTS[i] + 2 * m - 1]
    s = m + 4
    rows = [np.zeros(s + 1), np.eye(s + 1)[0] * r[0]]     # u_0 = y0, u_1 = y0 + h μ1 f(u_0)
    for k in range(2, m + 1):
        mu, kappa = r[2 * k - 3], r[2 * k - 2]
        u = (1 + kappa) * rows[k - 1] - kappa * rows[k - 2]
        u[k - 1] += mu
        rows.append(u)
    a = np.zeros((s + 1, s + 1))
    a[:m] = rows[:m]
    a21, a31, a32, a41, a42, a43 = RAW["fpa"][i]
    for j, extra in enumerate(([], [a21], [a31, a32], [a41, a42, a43])):
        a[m + j] = rows[m]
        a[m + j, m: m + len(extra)] += extra
    b = rows[m].copy()
    b[m: m + 4] += RAW["fpb"][i]
    a[s] = b                                              # the embedded method's last stage is f(y1)
    be = rows[m].copy()
    be[m: m + 4] += RAW["fpbe"][i][:4]
    be[s] = RAW["fpbe"][i][4]
    return a, b, be


def _order_defects(a, b, order):
    c = a.sum(1)
    ac = a @ c
    out = [b.sum() - 1, b @ c - 1 / 2, b @ c**2 - 1 / 3, b @ ac - 1 / 6]
    if order == 4:
        out += [b @ c**3 - 1 / 4, b @ (c * ac) - 1 / 8, b @ (a @ c**2) - 1 / 12, b @ (a @ ac) - 1 / 24]
    return np.abs(out)


def _stability(i: int, x):
    """R(x) of degree ms[i]: the step applied to y' = x y, y0 = 1, h = 1."""
    m = RAW["ms"][i]
    r = RAW["recf"][STARTS[i]: STARTS[i] + 2 * m - 1]
    before, u = np.ones_like(x), 1 + r[0] * x
    for k in range(2, m + 1):
        mu, kappa = r[2 * k - 3], r[2 * k - 2]
        before, u = u, mu * x * u + (1 + kappa) * u - kappa * before
    a21, a31, a32, a41, a42, a43 = RAW["fpa"][i]
    k1 = x * u
    k2 = x * (u + a21 * k1)
    k3 = x * (u + a31 * k1 + a32 * k2)
    k4 = x * (u + a41 * k1 + a42 * k2 + a43 * k3)
    b = RAW["fpb"][i]
    return u + b[0] * k1 + b[1] * k2 + b[2] * k3 + b[3] * k4


@pytest.mark.parametrize("i", range(len(RAW["ms"])))
def test_every_tabulated_degree_is_order_four_and_the_usable_ones_stable(i):
    """Order 4 (the 8 conditions) and an embedded order 3, to round-off; |R(x)| ≤ 1 on the
    interval rock4.f's degree rule gives the degree, exactly for the degrees flowsim uses
    (the three that leave it, 63, 129 and 148, are the ones `rock4.json` excludes)."""
    a, b, be = _tableau(i)
    assert _order_defects(a, b, 4).max() <= 1e-13
    assert _order_defects(a, be, 3).max() <= 1e-13
    assert _order_defects(a, be, 4)[4:].max() >= 1e-5      # and really of order 3: an estimate
    m = RAW["ms"][i]
    x = -np.linspace(0.0, stability_bound(m), 100_001)
    stable = np.abs(_stability(i, x)).max() <= 1 + 1e-12
    assert stable == (m in TABLES["ms"]), (m, np.abs(_stability(i, x)).max())


@pytest.mark.parametrize("h_rho", [0.5, 5.0, 37.0, 400.0, 1500.0, 5500.0])
def test_a_step_on_a_linear_ode_is_the_stability_polynomial_of_its_degree(h_rho):
    """y' = −λ y: one JAX step is R(−hλ) of the degree the rule picks at ρ = λ × safety, and
    stays within [−1, 1]."""
    lam = 2.0
    h = h_rho / lam
    solver = Rock4()
    term = dfx.ODETerm(lambda t, y, args: {"w": -lam * y["w"]})
    y0 = {"w": jnp.ones(1)}
    state = solver.init(term, 0.0, h, y0, None)
    assert float(state.rho) == pytest.approx(1.2 * lam, rel=1e-12)
    y1, *_ = solver.step(term, jnp.asarray(0.0), jnp.asarray(h), y0, None, state, False)
    need = max(int(np.floor(np.sqrt((3 + h * 1.2 * lam) / 0.353))) + 1 - 4, 1)
    m = int(TABLES["ms"][np.searchsorted(TABLES["ms"], need)])
    expected = _stability(RAW["ms"].index(m), np.asarray([-h_rho]))[0]
    assert float(y1["w"][0]) == pytest.approx(expected, rel=1e-10, abs=1e-14)
    assert abs(expected) <= 1.0


@pytest.mark.slow
def test_fixed_steps_converge_at_order_four():
    """The pendulum with constant steps h, h/2, h/4: the error falls 16× per halving."""
    rates = pendulum_convergence_rates(Rock4(), (10, 20, 40))
    assert all(3.8 < r < 4.3 for r in rates), rates


# ---------------------------------------------------------------- flows

def test_a_stiff_quadratic_costs_rock4_a_fraction_of_tsit5_at_the_same_accuracy():
    """λ_max = 1e3 over t = 20: tsit5 is held to h ≲ 3.5/λ_max (≈ 6 000 steps); ROCK4's
    steps are set by accuracy, its stages by √(h·ρ). Both within 1e-5 of the closed form; ROCK4
    with under a tenth of the evaluations (measured 2 059 against 43 638)."""
    problem, p0, exact = quadratic(1e3)
    out = {}
    for method in ("rock4", "tsit5"):
        integ = make_flow_integrator({"kind": "flow", "method": method, "rtol": 1e-6, "atol": 1e-8})
        state, stats = eqx.filter_jit(integ.advance)(problem, integ.init(problem, p0), jnp.asarray(20.0))
        assert int(stats["status"]) == Status.DONE
        ref = exact(20.0)
        err = float(np.linalg.norm(np.asarray(state.y.w) - ref) / np.linalg.norm(ref - np.asarray(p0.w)))
        out[method] = (int(stats["vf_evals"]) + int(stats["hvps"]), err, int(stats["stiff_steps"]),
                       int(stats["accepted"]))
    (r_cost, r_err, r_held, _), (t_cost, t_err, t_held, t_acc) = out["rock4"], out["tsit5"]
    assert r_err <= 1e-5 and t_err <= 1e-5, out
    assert r_cost <= 0.1 * t_cost, out
    assert r_held == 0 and t_held >= 0.9 * t_acc, out     # tsit5's steps are held by stability


def test_rho_estimate_brackets_the_top_eigenvalue_and_recovers_from_an_underestimate():
    """On the quadratic, ρ (safety factor 1.2 included) lies in [λ_max, 1.2 λ_max] after the
    first estimate. A state whose ρ is 100× too small takes an unstable step, which is
    rejected; the rejection re-estimates ρ, and the flow still reaches the closed form."""
    problem, p0, exact = quadratic(1e3)
    integ = make_flow_integrator(rock4(1e-6))
    state = integ.init(problem, p0)
    assert 1e3 <= float(state.solver_state.rho) <= 1.2e3 * (1 + 1e-9)
    fooled = eqx.tree_at(lambda s: s.solver_state.rho, state, state.solver_state.rho / 100)
    fooled = eqx.tree_at(lambda s: s.controller_state[1], fooled, jnp.asarray(0.5))
    new, stats = eqx.filter_jit(integ.advance)(problem, fooled, jnp.asarray(20.0))
    assert int(stats["status"]) == Status.DONE and int(stats["rejected"]) >= 1 and int(stats["hvps"]) >= 1
    assert float(new.solver_state.rho) >= 1e3
    ref = exact(20.0)
    assert np.linalg.norm(np.asarray(new.y.w) - ref) / np.linalg.norm(ref - np.asarray(p0.w)) <= 1e-5


def test_power_iteration_approaches_the_spectral_radius_from_below():
    problem, p0, _ = quadratic(50.0)
    field = lambda y: problem.velocity(y)   # noqa: E731
    estimates = [float(power_iteration(field, p0, problem.velocity(p0), k)[0]) for k in (1, 3, 30)]
    assert estimates[0] <= estimates[1] <= estimates[2] <= 50.0 * (1 + 1e-12)
    assert estimates[2] == pytest.approx(50.0, rel=1e-6)


def test_the_longest_step_keeps_the_highest_usable_degree_stable():
    assert MAX_H_RHO == pytest.approx(stability_bound(138))
    state = Rock4().init(dfx.ODETerm(lambda t, y, a: -1e4 * y), 0.0, 1.0, jnp.ones(3), None)
    assert float(Rock4().max_step(state)) == pytest.approx(MAX_H_RHO / 1.2e4, rel=1e-9)


# ---------------------------------------------------------------- round-off, and a spectrum without a gap

@pytest.mark.parametrize("rtol", [1e-4, 1e-6, 1e-8])
def test_a_step_from_rest_at_the_round_off_ceiling_errs_by_a_fraction_of_rtol(rtol):
    """From the rest point θ* of the log-spaced quadratic (λ_max = 1e4) every step is exact but
    for round-off, which the finishing procedure amplifies by |R₄(−h·λ)| ≈ 0.01 (hλ)⁴. At h·ρ =
    `roundoff_bound(rtol)` the step ends within a tenth of rtol of θ* (relative to ‖θ*‖;
    measured 0.015, 0.0066, 0.0051 × rtol); four times longer it is past rtol (3.8, 5.0, 2.7 ×
    rtol): the ceiling is where the noise reaches the tolerance, to within a factor of 4 in h."""
    problem, p0, _, star = log_spaced_quadratic(1e4)
    y0 = eqx.tree_at(lambda p: p.w, p0, jnp.asarray(star))
    zero = jnp.zeros((), jnp.int32)
    field = lambda t, y: (problem.velocity(y), zero)    # noqa: E731
    rho = 1.2e4
    noise = []
    for h_rho in (roundoff_bound(rtol), 4 * roundoff_bound(rtol)):
        y1 = advance(field, None, jnp.asarray(0.0), jnp.asarray(h_rho / rho), y0, problem.velocity(y0),
                     jnp.asarray(rho), zero)[0]
        noise.append(np.linalg.norm(np.asarray(y1.w) - star) / np.linalg.norm(star))
    assert noise[0] <= 0.1 * rtol and noise[1] >= rtol, noise


@pytest.mark.slow
def test_the_log_spaced_quadratic_within_ten_rtol_with_few_rejections():
    """The `rock4` preset (rtol 1e-6, PI control) on the log-spaced quadratic to T = 100 for
    λ_max = 1e2, 1e3, 1e4: within 10× rtol of the closed form, at most 10 % of the steps
    rejected, and evaluations + HVPs growing at most like λ_max^0.9.
    Measured: 184 (0), 442 (8), 2 784 (24) steps (rejected), 2 034, 11 271, 100 561 evaluations
    + HVPs (exponent 0.85), errors ≤ 1.1e-8. Without the round-off ceiling (integral control, as
    rock4 was): 131 (4), 397 (99), 2 788 (947) steps, 129 843 at 1e4 (exponent 0.94): from h·λ_max ≈
    500 on, the finishing procedure's amplified round-off is as large as the tolerance, the
    error estimate reads noise, and a third of the tries fail. The exponent cannot fall to the
    √λ of an accuracy-held ROCK4: the ceiling holds h·ρ ≤ 464 at rtol 1e-6, so from λ_max ≈
    1e3 on the step is ∝ 1/λ_max (2 784 steps at 1e4 against T·ρ/464 = 2 586)."""
    preset = load_solver("rock4")
    lams, costs = [1e2, 1e3, 1e4], []
    for lam in lams:
        problem, p0, exact, _ = log_spaced_quadratic(lam)
        integ = make_flow_integrator(preset)
        state, stats = eqx.filter_jit(integ.advance)(problem, integ.init(problem, p0), jnp.asarray(100.0))
        assert int(stats["status"]) == Status.DONE
        ref = exact(100.0)
        err = np.linalg.norm(np.asarray(state.y.w) - ref) / np.linalg.norm(ref - np.asarray(p0.w))
        assert err <= 10 * preset["rtol"], (lam, err)
        assert int(stats["rejected"]) <= 0.1 * int(stats["steps"]), (lam, stats)
        assert advise("rock4", {k: int(v) for k, v in stats.items()}) is None    # a smooth field: not kinked
        costs.append(integ.init_evals + integ.init_hvps + int(stats["vf_evals"]) + int(stats["hvps"]))
    slope = float(np.polyfit(np.log(lams), np.log(costs), 1)[0])
    assert slope <= 0.9, (slope, costs)


def test_a_rejection_re_estimates_rho_from_the_error_where_the_old_vector_is_blind():
    """The old vector orthogonal to the top eigenvector (λ_max = 1e3): one more power iteration
    from it (what a rejection used to buy) stays at the second eigenvalue (1.0), and ρ with it.
    A try at that ρ with a step 20× too long for λ_max is unstable along the top direction, so
    its error estimate points there; the retry's power iteration starts from it and ρ is
    within [λ_max, 1.2 λ_max] again."""
    problem, p0, _ = quadratic(1e3)
    blind = eqx.tree_at(lambda p: p.w, p0, jnp.zeros(16).at[-2].set(1.0))     # λ = 1 there, exactly
    solver = Rock4()
    term = dfx.ODETerm(lambda t, y, args: problem.velocity(y))
    state = solver.init(term, 0.0, 1.0, p0, None)
    field = lambda y: problem.velocity(y)   # noqa: E731
    assert float(power_iteration(field, p0, blind, 1)[0]) == pytest.approx(1.0, rel=1e-9)
    fooled = eqx.tree_at(lambda s: (s.rho, s.v), state, (jnp.asarray(1.2), blind))
    t0, h = jnp.asarray(0.0), jnp.asarray(20 * MAX_H_RHO / 1e3)
    _, err, _, tried, _ = solver.step(term, t0, t0 + h, p0, None, fooled, False)
    assert np.abs(np.asarray(err.w))[-1] >= 0.99 * np.abs(np.asarray(err.w)).max()
    retry = solver.rejected(fooled, tried)
    *_, after, _ = solver.step(term, t0, t0 + 1e-3, p0, None, retry, False)
    assert 1e3 <= float(after.rho) <= 1.2e3 * (1 + 1e-9) and 2 <= int(after.hvps) <= 20


# ---------------------------------------------------------------- checkpoints inside a step (rock4 and rkc2)

def _observed(problem, p0, preset, times, horizon):
    """A flow advanced through `times` toward `horizon` (steps independent of the times): at each,
    whether it lies inside a step, the weights read there and the committed step end (t, θ);
    and the statistics summed."""
    integ = make_flow_integrator(preset)
    advance = eqx.filter_jit(integ.advance)
    state, rows, evals = integ.init(problem, p0), [], 0
    for t in times:
        state, stats = advance(problem, state, jnp.asarray(t), jnp.asarray(horizon))
        assert int(stats["status"]) == Status.DONE
        evals += int(stats["vf_evals"])
        rows.append((float(state.t) < t, integ.params(state), float(state.t), state.y))
    return rows, evals


def _pi(method, rtol):
    return {"kind": "flow", "method": method, "rtol": rtol, "atol": rtol * 1e-2, "pcoeff": 0.3, "icoeff": 0.3}


@pytest.mark.slow
@pytest.mark.parametrize("method, rtol", [("rock4", 1e-6), ("rock4", 1e-8), ("rkc2", 1e-3), ("rkc2", 1e-4)])
def test_a_checkpoint_inside_a_step_is_as_accurate_as_a_step_end(method, rtol):
    """The log-spaced quadratic (λ_max = 1e3, stiff: h·ρ up to the hundreds) to T = 20 under PI
    control, observed at 30 checkpoints: against the closed form, relative to the displacement,
    each row read inside a step lies within 10× rtol and within 1.2× the worst committed step
    end, where reading is a shorter step from the step's start (`AbstractStabilised.read`), its
    evaluations counted (at least one a row). Measured, worst inside / worst step end (× rtol): rock4
    1e-6 0.078 / 0.080, 1e-8 0.048 / 0.051; rkc2 1e-3 0.019 / 0.019, 1e-4 0.028 / 0.028. The
    cubic Hermite interpolant of the step's ends read rock4's rows 1.24 and 0.79 × rtol
    (h·f(y0) carries the stiff components' error times h·λ)."""
    problem, p0, exact, _ = log_spaced_quadratic(1e3)
    times = np.geomspace(0.05, 20.0, 30)
    rows, evals = _observed(problem, p0, _pi(method, rtol), times, 20.0)
    (_, alone_evals) = _observed(problem, p0, _pi(method, rtol), [20.0], 20.0)
    w0 = np.asarray(p0.w)
    err = lambda w, t: np.linalg.norm(np.asarray(w.w) - exact(t)) / np.linalg.norm(exact(t) - w0)  # noqa: E731
    inside = [err(w, t) / rtol for t, (within, w, _, _) in zip(times, rows) if within]
    ends = [err(y, t1) / rtol for _, _, t1, y in rows if t1 > 0]
    assert len(inside) >= 25 and evals - alone_evals >= len(inside), (len(inside), evals, alone_evals)
    assert max(inside) <= min(10.0, 1.2 * max(ends)), (inside, ends)


@pytest.mark.slow
def test_checkpoints_inside_steps_lie_within_ten_rtol_of_dopri8_on_a_tanh_network():
    """A tanh network (m = 50, n = 20, d = 5) to t = 10, observed at 10 checkpoints, against Dopri8
    at rtol 1e-12 ending a step on each: rock4 at rtol 1e-6 and 1e-8, rkc2 at 1e-3 and 1e-4 (PI
    control), every row inside a step within 10× rtol relative to the displacement."""
    problem, p0 = make_problem(activation="tanh", m=50, n=20, d=5)
    times = np.linspace(1.0, 10.0, 10)
    refs = flow_to(problem, p0, times, tight())
    for method, rtol in [("rock4", 1e-6), ("rock4", 1e-8), ("rkc2", 1e-3), ("rkc2", 1e-4)]:
        rows, _ = _observed(problem, p0, _pi(method, rtol), times, 10.0)
        inside = [float(jnp.linalg.norm(w["W"] - ref.y["W"]) / jnp.linalg.norm(ref.y["W"] - p0["W"]))
                  for (within, w, _, _), ref in zip(rows, refs) if within]
        assert len(inside) >= 5 and max(inside) <= 10 * rtol, (method, rtol, inside)
