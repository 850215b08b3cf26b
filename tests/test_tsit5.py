"""flowsim's Tsit5 step (flowsim.integrate.tsit5) against Diffrax's, its oracle: one step from
the same state gives the same end, error estimate, dense output and first-same-as-last
evaluation to round-off, and a whole flow at the same tolerances the same steps and weights."""

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_problem, rel_err

from flowsim.integrate import stiffness
from flowsim.integrate.flow import FlowIntegrator
from flowsim.integrate.runge_kutta import runge_kutta
from flowsim.integrate.tsit5 import Tsit5, increments
from flowsim.run.integrators import flow_integrator
from test_engine import typed


def _field(t, y, args):
    # nonlinear in y and t, a pytree of two leaves of different shapes
    return {"a": -jnp.sin(y["a"]) * (1 + t) + jnp.sum(y["b"]), "b": y["b"] @ args - jnp.tanh(y["a"][:3])[:, None]}


def test_one_step_equals_diffraxs_to_round_off():
    rng = np.random.default_rng(0)
    y0 = {"a": jnp.asarray(rng.normal(size=5)), "b": jnp.asarray(rng.normal(size=(3, 2)))}
    args = jnp.asarray(rng.normal(size=(2, 2)))
    term, t0, t1 = dfx.ODETerm(_field), jnp.asarray(0.3), jnp.asarray(0.55)
    ours, theirs = Tsit5(), dfx.Tsit5()
    f0 = ours.init(term, t0, t1, y0, args)
    y1, err, dense, f1, result = ours.step(term, t0, t1, y0, args, f0, False)
    y1_d, err_d, dense_d, (_, f1_d), result_d = theirs.step(term, t0, t1, y0, args, (jnp.asarray(False), f0), False)
    assert result == result_d == dfx.RESULTS.successful
    for mine, oracle in ((y1, y1_d), (increments(t0, t1, dense["f"]), dense_d["k"]), (f1, f1_d), (dense["y1"], dense_d["y1"])):
        for key in ("a", "b"):
            assert rel_err(mine[key], oracle[key]) <= 3e-14, key    # a few ulps, the field amplifying them
    # the error estimate, a sum of terms of the size of the step's displacement that cancel to
    # O(h⁵), is off by the round-off of those terms
    displacement = max(float(jnp.max(jnp.abs(y1[key] - y0[key]))) for key in y1)
    assert max(float(jnp.max(jnp.abs(err[key] - err_d[key]))) for key in err) <= 1e-15 * displacement
    # the same stiffness probe (Hairer's h·ρ), from the stages as the step leaves them
    weights, _ = stiffness.stiffness_probe(ours.tableau)
    h_rho, _ = stiffness.stage_h_rho(weights, dense["f"])
    h_rho_d, _ = stiffness.stage_h_rho(weights, dense_d["k"])
    assert float(h_rho) > 0 and float(h_rho) == pytest.approx(float(h_rho_d), rel=1e-12)
    # the same interpolant inside the step, and the same orders
    t = jnp.asarray(0.41)
    assert isinstance(dense["f"], tuple) and len(dense["f"]) == 7    # neither scaled nor stacked by the step
    inside = ours.interpolation_cls(t0=t0, t1=t1, **dense).evaluate(t)
    inside_d = theirs.interpolation_cls(t0=t0, t1=t1, **dense_d).evaluate(t)
    assert all(rel_err(inside[key], inside_d[key]) <= 1e-14 for key in inside)
    assert (ours.order(term), ours.error_order(term)) == (theirs.order(term), theirs.error_order(term))


def test_the_registry_steps_tsit5_by_flowsims_step():
    flow = flow_integrator(typed({"kind": "flow", "method": "tsit5"}))
    assert isinstance(flow.solver, Tsit5)


@pytest.mark.parametrize("rtol", [1e-6, 1e-10])
def test_a_flow_equals_diffraxs_tsit5_flow(rtol):
    problem, params = make_problem(m=30)
    ours = flow_integrator(typed({"kind": "flow", "method": "tsit5", "rtol": rtol, "atol": rtol * 1e-2}))
    diffrax = eqx.tree_at(lambda f: f.solver, ours, runge_kutta("Tsit5"))
    assert isinstance(ours, FlowIntegrator) and isinstance(ours.solver, Tsit5)
    results = []
    for flow in (ours, diffrax):
        advance, state = eqx.filter_jit(flow.advance), flow.init(problem, params)
        rows, total = [], None
        for t in (0.5, 3.0, 20.0):     # rows inside steps, read from the interpolant
            state, stats = advance(problem, state, jnp.asarray(t), jnp.asarray(20.0))
            total = stats if total is None else jax.tree.map(jnp.add, total, stats)
            rows.append(flow.params(state))
        results.append((rows, {k: int(v) for k, v in total.items()}))
    (rows, stats), (rows_d, stats_d) = results
    assert stats == stats_d and stats["steps"] > 10
    for row, row_d in zip(rows, rows_d):
        for key in row:
            moved = np.linalg.norm(np.asarray(row_d[key]) - np.asarray(params[key]))
            # relative to the displacement, which the weights' own norm would dwarf
            assert np.linalg.norm(np.asarray(row[key]) - np.asarray(row_d[key])) <= 1e-10 * moved, key
