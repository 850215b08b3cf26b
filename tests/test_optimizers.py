"""RMSProp and Adam by optax (the `rmsprop`, `adam` kinds and any transformation handed to
`flowsim.simulate`) and their stable flows (`rmsprop-flow`, `adam-flow`), each against an
independent oracle: a plain optax loop, a hand-written update, scipy's DOP853."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import make_problem, rel_err, resumed_beside_uninterrupted
from helpers import call_cli
from jax.flatten_util import ravel_pytree
from scipy.integrate import solve_ivp

import flowsim
from flowsim.config import Preset, Run, from_dict, load_solver, scenarios_dir
from flowsim.run import batch
from flowsim.run.integrators import make_integrator
from flowsim.status import Status

ETA = 0.01


def integrator(**preset):
    typed = from_dict(Preset, load_solver({"name": "leg"} | preset))
    return make_integrator(typed, Run(t_end=1.0, solvers=(typed,)))


def through_batch(integ, pairs, t):
    """Every seed of `pairs` (problem, weights) advanced to t by the batch kernels (vmapped)."""
    problems, params = batch.stack_problems([p for p, _ in pairs]), batch.stack([w for _, w in pairs])
    keys = batch.stack([jax.random.PRNGKey(s) for s in range(len(pairs))])
    state = batch.init(integ, problems, params, keys)
    state, stats = batch.advance(integ, problems, state, jnp.full(len(pairs), t))
    return [jax.tree.map(lambda x: x[i], integ.params(state)) for i in range(len(pairs))], stats


def gradient(problem):
    """g = rate·∇L, the gradient the legs are given (rate = 1 on these networks but for the scale)."""
    return jax.jit(lambda w: jax.tree.map(lambda x: problem.rate * x, jax.grad(problem.loss)(w)))


def optax_loop(tx, problem, w, steps):
    grad, state = gradient(problem), tx.init(w)
    for _ in range(steps):
        updates, state = tx.update(grad(w), state, w)
        w = optax.apply_updates(w, updates)
    return w


def flat(w):
    return np.asarray(ravel_pytree(w)[0])


PAIRS = [make_problem(n=12, d=4, m=10, seed=s) for s in range(2)]


def test_adam_leg_equals_a_plain_optax_loop_after_200_steps():
    integ = integrator(kind="adam", learning_rate=ETA, beta1=0.8, beta2=0.99, eps=1e-7)
    legs, stats = through_batch(integ, PAIRS, 200 * ETA)
    assert np.asarray(stats["steps"]).tolist() == [200, 200]
    # one gradient a step: the one at W_0 is `init`'s, the last step's look-ahead is kept
    assert np.asarray(stats["vf_evals"]).tolist() == [200, 200] and integ.init_evals == 1
    for (problem, w0), leg in zip(PAIRS, legs):
        plain = optax_loop(optax.adam(ETA, b1=0.8, b2=0.99, eps=1e-7), problem, w0, 200)
        assert np.max(np.abs(flat(leg) - flat(plain))) <= 1e-12 * np.max(np.abs(flat(plain)))
        assert rel_err(flat(leg), flat(w0)) > 1e-2        # it moved


def test_a_diverging_leg_ends_diverged_at_its_last_good_iterate():
    """Adam at η = 2 on this net: its first step takes the loss to 9 × L(W_0) (a plain optax
    loop's figure), past a divergence factor of 2: the leg ends `diverged` where it started."""
    problem, w0 = PAIRS[0]
    assert float(problem.loss(optax_loop(optax.adam(2.0), problem, w0, 1))) > 8 * float(problem.loss(w0))
    integ = integrator(kind="adam", learning_rate=2.0, divergence_factor=2.0)
    legs, stats = through_batch(integ, [PAIRS[0]], 100 * 2.0)
    assert int(stats["status"][0]) == Status.DIVERGED and int(stats["steps"][0]) == 0
    assert np.array_equal(flat(legs[0]), flat(w0))


def rmsprop_by_hand(problem, w0, steps, *, eta, beta2, eps, eps_in_sqrt, nu0_grad):
    """ν ← β₂ν + (1 − β₂) g ⊙ g, w ← w − η g / (√ν + ε) (or / √(ν + ε)), in numpy."""
    grad = gradient(problem)
    w, unravel = ravel_pytree(w0)
    w = np.asarray(w)
    g = lambda x: np.asarray(ravel_pytree(grad(unravel(jnp.asarray(x))))[0])  # noqa: E731
    nu = g(w) ** 2 if nu0_grad else np.zeros_like(w)
    for _ in range(steps):
        gk = g(w)
        nu = beta2 * nu + (1 - beta2) * gk * gk
        w = w - eta * gk / (np.sqrt(nu + eps) if eps_in_sqrt else np.sqrt(nu) + eps)
    return w


@pytest.mark.parametrize("eps_in_sqrt, nu0", [(False, "zero"), (False, "grad-squared"), (True, "zero"),
                                               (True, "grad-squared")])
def test_rmsprop_leg_equals_the_update_written_by_hand(eps_in_sqrt, nu0):
    # ε = 1e-3: its place (inside or outside the root) changes the iterates at this size. η =
    # 2e-3: at η = 1e-2 these iterates amplify round-off (optax's own rmsprop and this loop part
    # by 4e-4 after 200 steps, from 7e-16 after 50)
    eta = 2e-3
    integ = integrator(kind="rmsprop", learning_rate=eta, beta2=0.9, eps=1e-3, eps_in_sqrt=eps_in_sqrt, nu0=nu0)
    legs, _ = through_batch(integ, PAIRS[:1], 200 * eta)
    problem, w0 = PAIRS[0]
    ours = rmsprop_by_hand(problem, w0, 200, eta=eta, beta2=0.9, eps=1e-3, eps_in_sqrt=eps_in_sqrt,
                           nu0_grad=nu0 == "grad-squared")
    other = rmsprop_by_hand(problem, w0, 200, eta=eta, beta2=0.9, eps=1e-3, eps_in_sqrt=not eps_in_sqrt,
                            nu0_grad=nu0 != "grad-squared")
    assert np.max(np.abs(flat(legs[0]) - ours)) <= 1e-12 * np.max(np.abs(ours))
    assert rel_err(other, ours) > 1e-6      # the variants are told apart


@pytest.mark.slow
@pytest.mark.parametrize("preset", [dict(kind="adam", learning_rate=0.1),
                                    dict(kind="rmsprop", learning_rate=0.1, nu0="grad-squared", eps_in_sqrt=True),
                                    dict(kind="adam-flow", learning_rate=0.1, method="auto", rtol=1e-8)],
                         ids=["adam", "rmsprop", "adam-flow"])
def test_resumed_equals_uninterrupted_bit_for_bit(preset):
    """The optimizer's moments (and Adam's step count) ride in the checkpoint's arrays;
    test_engine's every-kind test runs the same for every registered kind."""
    integ = integrator(**preset)
    a, b, stats, stats_b = resumed_beside_uninterrupted(integ, [make_problem(seed=s) for s in range(2)])
    assert (np.asarray(stats["status"]) == Status.DONE).all()
    assert np.array_equal(flat(integ.params(a)), flat(integ.params(b)))
    assert all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
    assert int(stats["steps"][1]) == int(stats_b["steps"][1])


# ------------------------------------------------------------------ the stable flows


def dop853(problem, w0, t_end, kind, *, beta1, beta2, eps):
    """The flow's ODE as written in docs/optimizers.md, in numpy, solved by scipy's DOP853."""
    grad = gradient(problem)
    w, unravel = ravel_pytree(w0)
    n = w.size
    g = lambda x: np.asarray(ravel_pytree(grad(unravel(jnp.asarray(x))))[0])  # noqa: E731
    c1, c2 = (1 - beta1) / (beta1 * ETA), (1 - beta2) / (beta2 * ETA)

    def field(t, z):
        gw = g(z[:n])
        if kind == "rmsprop-flow":
            nu = z[n:]
            return np.concatenate([-gw / (np.sqrt(nu) + eps), c2 * (gw * gw - nu)])
        m, nu = z[n:2 * n], z[2 * n:]
        return np.concatenate([-m / (np.sqrt(nu) + eps), c1 * (gw - m), c2 * (gw * gw - nu)])

    g0 = g(np.asarray(w))
    z0 = np.concatenate([w, g0 * g0] if kind == "rmsprop-flow" else [w, g0, g0 * g0])
    sol = solve_ivp(field, (0.0, t_end), z0, method="DOP853", rtol=1e-12, atol=1e-14)
    assert sol.success
    return sol.y[:n, -1]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["rmsprop-flow", "adam-flow"])
def test_stable_flow_agrees_with_scipy_dop853(kind):
    """Through the engine with `auto` at rtol 1e-12, read at rows inside its steps: t_end = 100 η."""
    beta1 = {"beta1": 0.9} if kind == "adam-flow" else {}
    integ = integrator(kind=kind, learning_rate=ETA, beta2=0.99, eps=1e-8, method="auto", rtol=1e-12, atol=1e-14,
                       **beta1)
    problem, w0 = PAIRS[0]
    problems, params = batch.stack_problems([problem]), batch.stack([w0])
    state = batch.init(integ, problems, params, batch.stack([jax.random.PRNGKey(0)]))
    for t in (0.3, 1.0):      # a row inside a step, then t_end
        state, stats = batch.advance(integ, problems, state, jnp.full(1, t), jnp.asarray(1.0))
        exact = dop853(problem, w0, t, kind, beta1=0.9, beta2=0.99, eps=1e-8)
        ours = flat(jax.tree.map(lambda x: x[0], integ.params(state)))
        assert rel_err(ours, exact) < 1e-9
    assert rel_err(ours, flat(w0)) > 1e-2            # it moved
    assert integ.init_evals == integ.solver.init_evals + 1       # g₀


# ------------------------------------------------------------------ refusals, through the command


QUICK = ["--set", "data.n=6", "--set", "data.d=3", "--set", "model.width=8", "--set", "seeds=[0]",
         "--set", "run.t_end=0.5", "--set", "run.checkpoints={count=2}",
         "--set", 'sweep={"model.scaling"=[{kind="ntk"}]}']


@pytest.mark.parametrize("solver, message", [
    ('{name = "a", kind = "adam", learning_rate = 0.1, beta2 = 1.5}',
     "`run.solvers[0].beta2` = 1.5 is out of range; allowed: a number in (0, 1)"),
    ('{name = "a", kind = "rmsprop", learning_rate = 0.1, eps = -1e-8}', "`run.solvers[0].eps`"),
    ('{name = "a", kind = "rmsprop", learning_rate = 0.1, nu0 = "one"}', '"zero", "grad-squared"'),
    ('{name = "a", kind = "adam", learning_rate = 0.1, nu0 = "zero"}', "`run.solvers[0].nu0`"),
    ('{name = "a", kind = "rmsprop-flow", learning_rate = 0.1, method = "filippov"}',
     "cannot step a rmsprop-flow; allowed: a method of the flow engine"),
])
def test_bad_hyper_parameters_are_refused_by_flowsim_run(tmp_path, solver, message):
    rc, out, err = call_cli("run", scenarios_dir() / "quickstart.toml", *QUICK, "--set", f"run.solvers=[{solver}]",
                            "-o", tmp_path / "x.h5")
    assert rc != 0 and message in err, err
    assert not (tmp_path / "x.h5").exists()


# ------------------------------------------------------------------ flowsim.simulate


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(16, 3)), rng.normal(size=(16, 1))


def _model():
    import equinox as eqx

    return eqx.nn.MLP(3, 1, 6, 1, activation=jnp.tanh, key=jax.random.PRNGKey(1))


@pytest.mark.slow
def test_simulate_takes_any_optax_transformation(tmp_path):
    """A transformation handed to simulate, beside the `adam` kind: both equal a plain optax
    loop at every row (t = kη), with their steps counted."""
    import equinox as eqx

    X, y = _data()
    model = _model()
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(ETA, b1=0.9, b2=0.99))
    arch = flowsim.simulate(model, data=(X, y), loss="mse", t_end=100 * ETA, checkpoints={"count": 4},
                            solvers=[{"name": "clipped-adam", "kind": "optax", "transformation": tx,
                                      "learning_rate": ETA},
                                     {"name": "adam", "kind": "adam", "learning_rate": ETA, "beta2": 0.99},
                                     {"name": "adam-flow", "kind": "adam-flow", "learning_rate": ETA, "beta2": 0.99,
                                      "method": "tsit5"}],
                            observe=["loss", "weights"], output=tmp_path / "o.h5", progress=False)
    run = arch.runs["seed0"]
    params, static = eqx.partition(model, eqx.is_inexact_array)
    loss = lambda p: jnp.mean((jax.vmap(eqx.combine(p, static))(jnp.asarray(X)) - y) ** 2)  # noqa: E731
    for name, plain_tx in (("clipped-adam", tx), ("adam", optax.adam(ETA, b1=0.9, b2=0.99))):
        leg = run.solvers[name]
        assert leg.status == "done" and np.asarray(leg.step).tolist() == [0, 25, 50, 75, 100]
        np.testing.assert_allclose(np.asarray(leg.t), np.asarray(leg.step) * ETA, rtol=1e-15)
        w, state, rows = params, plain_tx.init(params), []
        for k in range(101):
            if k % 25 == 0:
                rows.append(flat(w))
            updates, state = plain_tx.update(jax.grad(loss)(w), state, w)
            w = optax.apply_updates(w, updates)
        np.testing.assert_allclose(np.asarray(leg["weights"]), np.asarray(rows), rtol=1e-11, atol=1e-13)
        counts = leg.counts
        assert counts["steps"].tolist() == counts["accepted"].tolist() == [0, 25, 50, 75, 100]
        # as GD's: a gradient per step, and the first step's at the start (each step's
        # look-ahead is kept in the state: a row costs none of its own)
        assert (counts["vf_evals"] - counts["steps"]).tolist() == [1, 1, 1, 1, 1]
    flow = run.solvers["adam-flow"]
    assert flow.status == "done" and np.array_equal(np.asarray(flow.t), np.asarray(run.solvers["adam"].t))
    # its start-up: Tsit5's two for the first step's size and f(y0), and g₀ for m(0), ν(0)
    assert flow.counts["vf_evals"][0] == 4
    np.testing.assert_array_equal(np.asarray(flow["weights"])[0], flat(params))   # the archive's weights: w only
    arch.close()


@pytest.mark.slow
def test_a_scenario_runs_each_method_beside_its_own_flow(tmp_path):
    """Through `flowsim run` and `flowsim compare`: Adam is compared with Adam's flow at its η,
    RMSProp with none (no RMSProp flow in the run)."""
    solvers = ('run.solvers=[{name = "adam", kind = "adam", learning_rate = 0.01}, '
               '{name = "rmsprop", kind = "rmsprop", learning_rate = 0.01}, '
               '{name = "adam-flow", kind = "adam-flow", learning_rate = 0.01, method = "auto"}]')
    rc, out, err = call_cli("run", scenarios_dir() / "quickstart.toml", *QUICK, "--set", solvers, "--set",
                            "run.t_end=1.0", "-o", tmp_path / "q.h5")
    assert rc == 0, err
    with flowsim.open(tmp_path / "q.h5") as arch:
        legs = arch.runs[next(iter(arch.runs))].solvers
        assert [legs[n].status for n in ("adam", "rmsprop", "adam-flow")] == ["done"] * 3
        assert legs["adam"].counts["steps"][-1] == legs["rmsprop"].counts["steps"][-1] == 100
    rc, out, err = call_cli("compare", tmp_path / "q.h5")
    assert rc == 0, err
    paired = [line.split()[:2] for line in out.splitlines() if line.startswith("  adam") or line.startswith("  rms")]
    assert paired and all(pair == ["adam", "adam-flow"] for pair in paired), out


def test_simulate_refuses_what_is_not_a_transformation(tmp_path):
    X, y = _data()
    with pytest.raises(ValueError, match=r"`solvers\[0\].transformation` = 'adam' is not an "
                                         r"optax.GradientTransformation; allowed: an optax transformation"):
        flowsim.simulate(_model(), data=(X, y), t_end=0.1, output=tmp_path / "o.h5",
                         solvers=[{"name": "a", "kind": "optax", "transformation": "adam", "learning_rate": 0.1}])
    with pytest.raises(ValueError, match=r"`solvers\[0\].learning_rate` = -1.0 is out of range; allowed: a number "
                                         r"> 0"):
        flowsim.simulate(_model(), data=(X, y), t_end=0.1, output=tmp_path / "o.h5",
                         solvers=[{"name": "a", "kind": "optax", "transformation": optax.sgd(0.1),
                                   "learning_rate": -1.0}])


@pytest.mark.slow
def test_simulate_resumes_an_optax_leg_from_its_archive_bit_for_bit(tmp_path):
    """Two seeds to t = 0.5, extended to t = 1 with resume=True: the transformation's state
    (clipping's nothing, Adam's count and moments) comes back from the archive's checkpoint,
    and every row equals a run straight to t = 1."""
    X, y = _data()
    tx = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(ETA))
    kw = dict(data=(X, y), loss="mse", checkpoints={"every": 0.25}, observe=["loss", "weights"], progress=False,
              seeds=[0, 1], solvers=[{"name": "c", "kind": "optax", "transformation": tx, "learning_rate": ETA}])
    with flowsim.simulate(_model(), t_end=1.0, output=tmp_path / "a.h5", **kw) as straight:
        expected = [np.asarray(straight.runs[s].solvers["c"]["weights"]) for s in ("seed0", "seed1")]
    flowsim.simulate(_model(), t_end=0.5, output=tmp_path / "b.h5", **kw).close()
    with flowsim.simulate(_model(), t_end=1.0, output=tmp_path / "b.h5", resume=True, **kw) as resumed:
        for s, w in zip(("seed0", "seed1"), expected):
            leg = resumed.runs[s].solvers["c"]
            assert np.array_equal(np.asarray(leg["weights"]), w) and leg.stats["steps"] == 100
