"""A flow method of one's own, from outside the package: Heun's method with its embedded Euler
estimate, written here against the engine's interface (`flowsim.integrate.solver`), its
factory here, its row added by `flowsim.kinds.solvers.register_flow_method`. This file is
all it takes (the method, its row, its test), and the method gets every guarantee of the
engine: rows inside steps read from its dense output (steps independent of the checkpoints),
a resume bit-identical to the uninterrupted run, vmapped seeds equal to sequential ones, and
programs the persistent compilation cache holds; a preset names it as any other
(`flowsim.simulate`). Its result is checked against the closed form of the linear flow and a
tight tsit5."""

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import ClassVar
from unittest import mock

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_problem, rel_err, resumed_beside_uninterrupted
from test_engine import rows_along_the_linear_flow, typed

import flowsim
from flowsim.config import FlowPreset, ScenarioError
from flowsim.integrate.flow import FlowIntegrator, flow_term, stepping
from flowsim.kinds.solvers import FLOW_METHODS, FlowMethod, register_flow_method
from flowsim.integrate.solver import INIT_STEP_SEARCH_EVALS, AbstractFlowSolver
from flowsim.run import batch
from flowsim.run.integrators import flow_integrator
from flowsim.status import Status


class HeunEuler(AbstractFlowSolver):
    """Heun's method (order 2) with explicit Euler embedded: error h/2 (f(y0 + h f0) − f0).
    Its state is f(y0), first same as last: f(y1) is evaluated for the cubic Hermite dense
    output and is the next step's f0, so a try costs 2 evaluations."""

    term_structure: ClassVar = dfx.AbstractTerm
    interpolation_cls: ClassVar = dfx.ThirdOrderHermitePolynomialInterpolation.from_k

    def order(self, terms):
        return 2

    def error_order(self, terms):
        return 2

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)

    def init(self, terms, t0, t1, y0, args):
        return self.func(terms, t0, y0, args)

    def step(self, terms, t0, t1, y0, args, f0, made_jump):
        h = t1 - t0
        k2 = self.func(terms, t1, jax.tree.map(lambda y, f: y + h * f, y0, f0), args)
        y1 = jax.tree.map(lambda y, a, b: y + 0.5 * h * (a + b), y0, f0, k2)
        error = jax.tree.map(lambda a, b: 0.5 * h * (b - a), f0, k2)
        f1 = self.func(terms, t1, y1, args)
        dense = {"y0": y0, "y1": y1, "k": jax.tree.map(lambda a, b: jnp.stack([h * a, h * b]), f0, f1)}
        return y1, error, dense, f1, dfx.RESULTS.successful

    @property
    def init_evals(self) -> int:
        return INIT_STEP_SEARCH_EVALS + 1

    def cost(self, state):
        return jnp.asarray(2), jnp.asarray(0), jnp.asarray(False)


def heun_euler_integrator(spec, *, accuracy, step_control, learning_rate=None, stop_loss=0.0) -> FlowIntegrator:
    return FlowIntegrator(solver=HeunEuler(), **stepping(accuracy, step_control, stop_loss),
                          term=flow_term(learning_rate))


TOY = FlowMethod("heun-euler", implicit=False, state_copies=10, diffrax="", reads=("accuracy", "step_control"),
                 integrator=f"{__name__}:heun_euler_integrator", central=False)


@pytest.fixture
def toy():
    """The toy registered for one test (the registry as it was afterwards)."""
    with mock.patch.dict(FLOW_METHODS):
        register_flow_method(TOY)
        yield


def integrator(rtol):
    """The toy's integrator through its registry row, as a preset naming it gets it."""
    return flow_integrator(typed({"kind": "flow", "method": TOY.name, "rtol": rtol, "atol": rtol * 1e-2}))


def test_a_name_taken_is_refused(toy):
    with pytest.raises(ValueError, match="'heun-euler' is registered already"):
        register_flow_method(TOY)
    with pytest.raises(ValueError, match="'tsit5' is registered already"):
        register_flow_method(dataclasses.replace(TOY, name="tsit5"))


def test_rows_inside_steps_read_the_dense_output_and_match_the_closed_form(toy):
    """The linear flow observed at 30 log-spaced rows takes the steps of the flow observed only
    at the horizon, bit for bit, and each row (most inside a step) is within 3 × rtol of the
    closed form relative to the displacement (measured: 4.8e-6 at rtol 1e-5 to t = 20, in 679
    steps, 29 of the 30 rows inside one)."""
    integ = integrator(1e-5)
    assert isinstance(integ.solver, HeunEuler)
    alone, stats, state, steps, evals, inside, worst = rows_along_the_linear_flow(integ, np.geomspace(0.05, 20.0, 30))
    assert evals == 2 * steps     # its `cost`: two a try
    assert inside >= 20 and steps == int(stats["steps"]) > 20
    assert np.array_equal(np.asarray(state.y["W"]), np.asarray(alone.y["W"])) and float(state.t) == 20.0
    assert worst <= 3e-5, worst


def test_a_resumed_batch_is_bit_identical_to_the_uninterrupted_one(toy):
    """Seed 1's state stored as named arrays at t = 1 (the step past it held ahead, scratch)
    and restored into a fresh batch goes on to t = 2 as the uninterrupted batch does."""
    pairs = [make_problem(seed=s) for s in range(2)]
    integ = integrator(1e-6)
    a, b, stats, stats_b = resumed_beside_uninterrupted(integ, pairs)
    assert (np.asarray(stats["status"]) == Status.DONE).all()
    assert np.array_equal(integ.params(a)["W"][1], integ.params(b)["W"][1])
    assert int(stats["steps"][1]) == int(stats_b["steps"][1]) > 0


@pytest.mark.slow
def test_vmapped_seeds_equal_sequential_seeds(toy):
    """Three seeds in one chunk program (`batch.chunk`, the driver's) take each seed's own
    steps, to rounding (1e-12)."""
    pairs = [make_problem(seed=s) for s in range(3)]
    integ = integrator(1e-6)
    problems, params = batch.stack_problems([p for p, _ in pairs]), batch.stack([w for _, w in pairs])
    state = batch.init(integ, problems, params, batch.stack([jax.random.PRNGKey(0)] * 3))
    times = np.array([1.0, 2.5, 4.0])
    new, _, (seg, t, _, _) = batch.chunk(integ, problems, state, np.repeat(times[:, None], 3, 1),
                                         np.ones((3, 3), bool), np.ones(3, bool), np.zeros(3, np.int64), None, (),
                                         np.asarray(4.0), batch.memory(problems, params, ()))
    assert (np.asarray(seg["status"]) == Status.DONE).all() and np.array_equal(np.asarray(t)[:, 0], times)
    single = eqx.filter_jit(integ.advance)
    for i, (p, w) in enumerate(pairs):
        s = integ.init(p, w)
        for k, tk in enumerate(times):
            s, stats = single(p, s, jnp.asarray(tk), jnp.asarray(4.0))
            assert int(stats["steps"]) == int(seg["steps"][k, i])
        assert rel_err(integ.params(new)["W"][i], integ.params(s)["W"]) <= 1e-12


@pytest.mark.slow
def test_simulate_runs_it_by_name(toy, tmp_path):
    """A preset names the registered method as it names any: `flowsim.simulate` runs it into an
    archive whose loss rows lie within 1e-7 (relative) of a tight tsit5's beside it (measured:
    4.5e-9 at rtol 1e-6, in 3 635 steps), and a misspelt name is refused with the registered one
    offered."""
    rng = np.random.default_rng(0)
    data = rng.normal(size=(20, 3)), rng.normal(size=(20, 1))
    model = eqx.nn.Linear(3, 1, key=jax.random.PRNGKey(0))
    solvers = [FlowPreset(name="toy", method=TOY.name, rtol=1e-6, atol=1e-8),
               FlowPreset(name="tight", method="tsit5", rtol=1e-12, atol=1e-14)]
    with flowsim.simulate(model, data, solvers=solvers, t_end=2.0, checkpoints={"count": 5}, observe=["loss"],
                          output=tmp_path / "a.h5", progress=False) as arch:
        toy_run, tight = arch.runs["seed0"].solvers["toy"], arch.runs["seed0"].solvers["tight"]
        assert toy_run.status == tight.status == "done"
        loss, exact = np.asarray(toy_run["loss"]), np.asarray(tight["loss"])
        assert np.array_equal(np.asarray(toy_run.t), np.asarray(tight.t)) and exact[-1] < 0.5 * exact[0]
    np.testing.assert_allclose(loss, exact, rtol=1e-7)
    with pytest.raises(ScenarioError, match='did you mean "heun-euler"'):
        flowsim.simulate(model, data, solvers=[FlowPreset(method="heun-eulr")], t_end=2.0,
                         output=tmp_path / "b.h5", progress=False)


_CACHED_RUN = textwrap.dedent("""
    import logging, sys
    sys.path[:0] = [{tests!r}]
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("jax._src.compiler").setLevel(logging.DEBUG)
    import conftest, test_plugin_method as toy
    from flowsim.kinds.solvers import register_flow_method
    from flowsim.run import batch
    import jax, numpy as np
    register_flow_method(toy.TOY)
    integ = toy.integrator(1e-6)
    pairs = [conftest.make_problem(seed=s) for s in range(2)]
    problems, params = batch.stack_problems([p for p, _ in pairs]), batch.stack([w for _, w in pairs])
    state = batch.init(integ, problems, params, batch.stack([jax.random.PRNGKey(0)] * 2))
    refs = batch.references(problems, params)
    names = ("loss", "weight_change")
    new, _, (seg, *_) = batch.chunk(integ, problems, state, np.ones((1, 2)), np.ones((1, 2), bool), np.ones(1, bool),
                                    np.zeros(2, np.int64), refs, names, np.asarray(2.0),
                                    batch.memory(problems, params, names))
    print(np.asarray(seg["steps"]).tolist())
""")


@pytest.mark.slow
def test_a_second_identical_process_compiles_nothing(tmp_path):
    """Two processes, one fresh compilation cache: the second finds the toy's programs (the
    driver's chunk kernel with observables, init, references) in the cache, per JAX's own
    compiler log, and takes the same steps."""
    code = _CACHED_RUN.format(tests=str(Path(__file__).resolve().parent))
    env = os.environ | {"FLOWSIM_CACHE_DIR": str(tmp_path / "cache")}
    procs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
             for _ in range(2)]
    for proc in procs:
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert procs[0].stdout == procs[1].stdout
    assert "PERSISTENT COMPILATION CACHE MISS" in procs[0].stderr     # the first process filled the cache
    assert "Persistent compilation cache hit" in procs[1].stderr
    misses = [ln for ln in procs[1].stderr.splitlines() if "PERSISTENT COMPILATION CACHE MISS" in ln]
    assert misses == [], misses
