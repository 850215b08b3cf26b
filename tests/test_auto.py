"""`auto` (flowsim.integrate.auto): Tsit5 while accuracy holds the step, ROCK4 while stability
does. Against closed forms: the stiff quadratic of test_rock4 (λ_max = 1e3, where it turns to
ROCK4) and a quadratic that is not stiff (where it hands back to Tsit5); its switches survive
checkpoints, a resume and a batch unchanged."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import resumed_beside_uninterrupted
from helpers import counting
from test_engine import make_flow_integrator
from test_rock4 import log_spaced_quadratic, quadratic

from flowsim.config import load_solver
from flowsim.integrate.auto import NONSTIFF_STREAK, STIFF_STREAK
from flowsim.run.advice import advise
from flowsim.status import Status

PRESET = {"kind": "flow", "method": "auto", "rtol": 1e-6, "atol": 1e-8}     # the preset's tolerances


def _error(state, p0, exact, t) -> float:
    ref = exact(t)
    return float(np.linalg.norm(np.asarray(state.y.w) - ref) / np.linalg.norm(ref - np.asarray(p0.w)))


def _solve(method, problem, p0, t):
    integ = make_flow_integrator(PRESET | {"method": method})
    state, stats = eqx.filter_jit(integ.advance)(problem, integ.init(problem, p0), jnp.asarray(t))
    assert int(stats["status"]) == Status.DONE
    return integ, state, {k: int(v) for k, v in stats.items()}


@pytest.mark.slow
def test_a_stiff_flow_turns_auto_to_rock4_at_rock4s_cost():
    """λ_max = 1e3 to t = 20: Tsit5's first steps follow the fast transient; then its steps are
    held by stability, and after `STIFF_STREAK` of them auto steps with ROCK4 to the end. Within
    10× rtol of the closed form, for no more than 1.1× rock4's evaluations + HVPs (measured:
    2 237 against 2 252, rock4's 20 start-up HVPs included; tsit5: 43 638)."""
    problem, p0, exact = quadratic(1e3)
    integ, state, stats = _solve("auto", problem, p0, 20.0)
    rock, _, rock_stats = _solve("rock4", problem, p0, 20.0)
    assert _error(state, p0, exact, 20.0) <= 10 * PRESET["rtol"]
    assert bool(state.solver_state.stabilised) and int(state.solver_state.switches) == 1
    # the Tsit5 steps before the switch, at least STIFF_STREAK of them held by stability
    assert stats["stiff_steps"] >= STIFF_STREAK and stats["stabilised_steps"] >= 0.5 * stats["accepted"]
    assert stats["hvps"] >= 2 and integ.init_hvps == 0     # ρ estimated at the switch, not at t = 0
    cost = integ.init_evals + stats["vf_evals"] + stats["hvps"]
    assert cost <= 1.1 * (rock.init_evals + rock.init_hvps + rock_stats["vf_evals"] + rock_stats["hvps"]), stats
    # ρ (safety factor included) brackets λ_max once ROCK4 estimated it
    assert 1e3 <= float(state.solver_state.rho) <= 1.2e3 * (1 + 1e-9)


def test_every_evaluation_in_both_modes_is_counted():
    """A counting callback in the field (λ_max = 1e3 to t = 2, both methods and the switch):
    `init`'s evaluations and the statistics' `vf_evals` and `hvps` (each Jacobian-vector product
    evaluates the field once, its primal) are every call."""
    problem, p0, _ = quadratic(1e3)
    calls = []
    counted_problem = counting(problem, calls)
    integ = make_flow_integrator(PRESET | {"rho_every": 3})
    state, stats = eqx.filter_jit(integ.advance)(counted_problem, integ.init(counted_problem, p0), jnp.asarray(2.0))
    assert int(stats["stabilised_steps"]) > 0 and int(stats["stabilised_steps"]) < int(stats["accepted"])
    assert len(calls) == integ.init_evals + integ.init_hvps + int(stats["vf_evals"]) + int(stats["hvps"])


def test_a_flow_that_is_not_stiff_hands_auto_back_to_tsit5():
    """A quadratic with λ_max = 1 to t = 20, started in ROCK4's mode: ROCK4's steps there are
    held by accuracy at h·ρ below Tsit5's limit, where Tsit5 is cheaper, so after
    `NONSTIFF_STREAK` of them auto hands back and stays in Tsit5; the result within 10× rtol of
    the closed form."""
    problem, p0, exact = quadratic(1.0)
    integ = make_flow_integrator(PRESET)
    start = integ.init(problem, p0)
    start = eqx.tree_at(lambda s: (s.solver_state.stabilised, s.solver_state.rock.age), start,
                        (jnp.asarray(True), jnp.asarray(-1, jnp.int32)))
    state, stats = eqx.filter_jit(integ.advance)(problem, start, jnp.asarray(20.0))
    assert int(stats["status"]) == Status.DONE
    assert not bool(state.solver_state.stabilised) and int(state.solver_state.switches) == 1
    assert int(stats["stabilised_steps"]) == NONSTIFF_STREAK and int(stats["stiff_steps"]) == 0
    assert _error(state, p0, exact, 20.0) <= 10 * PRESET["rtol"]


@pytest.mark.slow
def test_checkpoints_inside_steps_do_not_move_the_switch_and_read_both_dense_outputs():
    """λ_max = 1e3, 40 log-spaced checkpoints to t = 20 (many inside Tsit5's steps before the
    switch, many inside ROCK4's after): the steps, the switch and the end are those of a solve
    observed only at the horizon, bit for bit, and every checkpoint lies within 10× rtol of the
    closed form."""
    problem, p0, exact = quadratic(1e3)
    integ = make_flow_integrator(PRESET)
    advance = eqx.filter_jit(integ.advance)
    horizon = jnp.asarray(20.0)
    alone, alone_stats = advance(problem, integ.init(problem, p0), horizon, horizon)
    state, steps, inside, worst = integ.init(problem, p0), 0, {False: 0, True: 0}, 0.0
    for t in np.geomspace(1e-3, 20.0, 40):
        state, seg = advance(problem, state, jnp.asarray(t), horizon)
        assert int(seg["status"]) == Status.DONE and float(integ.time(state)) == t
        steps += int(seg["steps"])
        if float(state.t) < t:
            inside[bool(state.ahead.stages["stabilised"])] += 1
        ref = exact(t)
        worst = max(worst, np.linalg.norm(np.asarray(integ.params(state).w) - ref) / np.linalg.norm(ref - p0.w))
    assert steps == int(alone_stats["steps"]) and inside[False] >= 5 and inside[True] >= 5, inside
    for a, b in zip(jax.tree.leaves(state.y), jax.tree.leaves(alone.y)):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    assert worst <= 10 * PRESET["rtol"], worst


@pytest.mark.slow
def test_a_batch_with_members_in_both_modes_resumes_bit_for_bit_and_equals_its_members():
    """Two members, stiff (λ_max = 1e3: ROCK4 by t = 1) and not (λ_max = 1: Tsit5 throughout),
    in one batch: the stiff one's state stored as named arrays at t = 1 and restored goes on to
    t = 2 as the uninterrupted batch, bit for bit (the mode, ρ, its vector and the streak are
    solver state); each member ends where it ends alone, the stiff one to 1e-9 (measured: 1.2e-10;
    a batch's arithmetic differs from a lone member's in the last bits, 1e-15 for tsit5 and
    1.6e-14 for rock4 here, and the power iteration that ROCK4 runs to convergence at the switch
    carries that further)."""
    members = [quadratic(1e3)[:2], quadratic(1.0)[:2]]
    integ = make_flow_integrator(PRESET)
    a, b, stats, stats_b = resumed_beside_uninterrupted(integ, members[::-1])
    assert (np.asarray(stats["status"]) == Status.DONE).all()
    assert np.asarray(a.solver_state.stabilised).tolist() == [False, True]
    for x, y in zip(jax.tree.leaves(integ.params(a)), jax.tree.leaves(integ.params(b))):
        assert np.array_equal(np.asarray(x)[1], np.asarray(y)[1])
    assert int(stats["steps"][1]) == int(stats_b["steps"][1])
    advance = eqx.filter_jit(integ.advance)
    for i, (problem, p0) in enumerate(members[::-1]):
        s = integ.init(problem, p0)
        for t in (1.0, 2.0):
            s, _ = advance(problem, s, jnp.asarray(t), jnp.asarray(3.0))
        ends = np.asarray(integ.params(a).w)[i]
        assert np.linalg.norm(np.asarray(integ.params(s).w) - ends) <= 1e-9 * np.linalg.norm(ends)


@pytest.mark.slow
def test_the_log_spaced_quadratic_within_ten_rtol_few_rejections_and_not_called_kinked():
    """The `auto` preset on tests/test_rock4.py's spectrum without a gap (T = 100, λ_max = 1e2,
    1e3, 1e4): within 10× rtol of the closed form, at most 10 % of the steps rejected, and the
    advisor silent (a smooth field). Measured (bench/bench_auto.py --log-quadratic): 134 (9),
    427 (29), 2 715 (29) steps (rejected), 1 720, 11 181, 100 117 evaluations + HVPs, errors
    ≤ 0.017× rtol. The cost grows like λ_max^0.88, as the rock4 preset's (0.85): from λ_max ≈ 1e3
    on, ROCK4's steps are held by its round-off ceiling, h·ρ ≤ 464 at rtol 1e-6 (rock4.py)."""
    preset = load_solver("auto")
    lams, costs = [1e2, 1e3, 1e4], []
    for lam in lams:
        problem, p0, exact, _ = log_spaced_quadratic(lam)
        integ, state, stats = _solve("auto", problem, p0, 100.0)
        assert _error(state, p0, exact, 100.0) <= 10 * preset["rtol"], lam
        assert stats["rejected"] <= 0.1 * stats["steps"] and stats["stiff_rejections"] <= stats["rejected"], stats
        assert advise("auto", stats) is None, stats
        costs.append(integ.init_evals + stats["vf_evals"] + stats["hvps"])
    slope = float(np.polyfit(np.log(lams), np.log(costs), 1)[0])
    assert slope <= 0.9, (slope, costs)
