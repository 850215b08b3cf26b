"""ROCK4 (flowsim.integrate.rock4) against its oracles: the published coefficients' order
conditions and stability polynomials, the JAX step against those polynomials, order 4 on a
nonlinear ODE, a stiff quadratic's closed-form flow, ρ's estimate. With the other flow
methods in tests/test_engine.py (through the registry): a tight reference, the closed-form
linear flow read inside steps, the evaluation counts, resume bit for bit and vmapped seeds;
the compilation cache in tests/test_scale.py."""

import json
from importlib import resources

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_engine import make_flow_integrator

from flowsim.status import Status
from flowsim.integrate.rock4 import MAX_H_RHO, TABLES, Rock4, power_iteration, stability_bound
from flowsim.models.module import ModuleNet
from flowsim.nn.problem import Problem

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


def test_fixed_steps_converge_at_order_four():
    """The pendulum with constant steps h, h/2, h/4: the error falls 16× per halving."""
    term = dfx.ODETerm(lambda t, y, args: jnp.stack([y[1], -jnp.sin(y[0])]))
    y0 = jnp.asarray([1.0, 0.0])
    ref = dfx.diffeqsolve(term, dfx.Dopri8(), 0.0, 2.0, None, y0,
                          stepsize_controller=dfx.PIDController(rtol=1e-13, atol=1e-15)).ys[-1]
    errs = [float(jnp.max(jnp.abs(dfx.diffeqsolve(term, Rock4(), 0.0, 2.0, 2.0 / n, y0).ys[-1] - ref)))
            for n in (10, 20, 40)]
    rates = np.log2(np.asarray(errs[:-1]) / np.asarray(errs[1:]))
    assert np.all((rates > 3.8) & (rates < 4.3)), errs


# ---------------------------------------------------------------- flows

class _Linear(eqx.Module):
    w: jax.Array

    def __call__(self, x):
        return jnp.atleast_1d(x @ self.w)


def quadratic(lam_max: float, p: int = 16):
    """L = ½ Σ (√λ_i w_i − y_i)²: Hessian diag(λ), slow λ in [1e-2, 1] and one λ_max; the
    exact flow w(t) = w* + e^{−λt}(w0 − w*)."""
    lam = np.concatenate([np.logspace(-2, 0, p - 1), [lam_max]])
    rng = np.random.default_rng(0)
    X, y, w0 = np.diag(np.sqrt(lam)), rng.normal(size=(p, 1)), rng.normal(size=p)
    params, frozen = eqx.partition(_Linear(jnp.asarray(w0)), eqx.is_inexact_array)
    problem = Problem(net=ModuleNet(frozen=frozen), X=jnp.asarray(X), y=jnp.asarray(y), X_test=jnp.asarray(X[:1]),
                      y_test=jnp.asarray(y[:1]), rate=1.0, loss_kind="half-sse", ntg_points=1)
    star = y[:, 0] / np.sqrt(lam)
    return problem, params, lambda t: star + np.exp(-lam * t) * (w0 - star)


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
