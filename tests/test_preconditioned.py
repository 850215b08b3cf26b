"""The observable `preconditioned_sharpness`, rate·λ_max(P^{-1/2} ∇²L P^{-1/2}) with P the
leg's own denominator, through the batch kernel, against an independent oracle: a plain optax
loop's state, the dense Hessian by `jax.hessian` and numpy's eigvalsh."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import make_problem
from jax.flatten_util import ravel_pytree

from flowsim.config import Preset, Run, from_dict, load_solver
from flowsim.kinds.solvers import edge
from flowsim.run import batch
from flowsim.run.integrators import make_integrator

ETA = 0.02         # below every leg's edge here: rounding differences between the leg and the loop stay small
STEPS = (0, 1, 20, 60)          # the rows observed (step 0: the first step's denominator)
NAMES = ("sharpness", "preconditioned_sharpness")


def integrator(**preset):
    typed = from_dict(Preset, load_solver({"name": "leg"} | preset))
    return make_integrator(typed, Run(t_end=1.0, solvers=(typed,)))


def observed(integ, pair, rtol=1e-12, names=NAMES):
    """The observables `names` at the rows STEPS of one seed, by `batch.chunk`."""
    problem, w0 = pair
    problem = dataclasses.replace(problem, eigen_rtol=rtol)
    problems, params = batch.stack_problems([problem]), batch.stack([w0])
    state = batch.init(integ, problems, params, batch.stack([jax.random.PRNGKey(0)]))
    times = np.asarray(STEPS, float)[:, None] * ETA
    k = len(STEPS)
    _, _, (seg, _, step, values) = batch.chunk(integ, problems, state, times, np.ones((k, 1), bool),
                                               np.ones(k, bool), np.zeros(1, np.int64), None, names,
                                               np.asarray(times[-1, 0]), batch.memory(problems, params, names))
    assert np.asarray(step)[:, 0].tolist() == list(STEPS)
    return {n: np.asarray(v)[:, 0] for n, v in values.items()}, np.asarray(seg["observe_hvps"])[:, 0]


def oracle(tx, denominator, pair):
    """rate·λ_max(P^{-1/2} H P^{-1/2}) at the rows STEPS of a plain optax loop: H dense by
    `jax.hessian`, P = `denominator`(the loop's state after max(k, 1) updates), the last step's
    (at k = 0 the first's)."""
    problem, w = pair
    _, unravel = ravel_pytree(w)
    loss = lambda f: problem.loss(unravel(f))  # noqa: E731
    grad = jax.jit(lambda p: jax.tree.map(lambda x: problem.rate * x, jax.grad(problem.loss)(p)))
    weights, states = [w], [tx.init(w)]
    for _ in range(max(STEPS)):
        updates, state = tx.update(grad(weights[-1]), states[-1], weights[-1])
        weights.append(optax.apply_updates(weights[-1], updates))
        states.append(state)
    out = []
    for k in STEPS:
        s = 1 / np.sqrt(np.asarray(ravel_pytree(denominator(states[max(k, 1)]))[0]))
        H = np.asarray(jax.hessian(loss)(ravel_pytree(weights[k])[0]))
        out.append(problem.rate * np.linalg.eigvalsh(s[:, None] * H * s[None, :])[-1])
    return np.asarray(out)


def rms_denominator(eps, inside=False):
    def d(state):
        nu = optax.tree_utils.tree_get(state, "nu")
        return jax.tree.map(lambda n: jnp.sqrt(n + eps) if inside else jnp.sqrt(n) + eps, nu)
    return d


def adam_denominator(b2, eps, corrected=True):
    def d(state):
        nu, count = optax.tree_utils.tree_get(state, "nu"), optax.tree_utils.tree_get(state, "count")
        return jax.tree.map(lambda n: jnp.sqrt(n / (1 - b2 ** count) if corrected else n) + eps, nu)
    return d


PAIR = make_problem(n=12, d=4, m=10, seed=0)


def relative(a, b):
    return np.max(np.abs(a - b) / np.abs(b))


@pytest.mark.slow
def test_rmsprop_leg_equals_dense_eigvalsh_of_its_own_preconditioned_hessian():
    eps = 1e-3
    values, hvps = observed(integrator(kind="rmsprop", learning_rate=ETA, beta2=0.9, eps=eps), PAIR)
    expected = oracle(optax.rmsprop(ETA, decay=0.9, eps=eps, eps_in_sqrt=False), rms_denominator(eps), PAIR)
    assert relative(values["preconditioned_sharpness"], expected) <= 1e-8
    # the tracker's products are counted with the sharpness's
    assert (hvps >= 4).all()
    # ε inside the root moves the figure by more than the tolerance a thousandfold: the test can fail
    wrong = oracle(optax.rmsprop(ETA, decay=0.9, eps=eps, eps_in_sqrt=False), rms_denominator(eps, True), PAIR)
    assert relative(wrong, expected) > 1e-2


def test_rmsprop_leg_with_eps_in_the_root():
    eps = 1e-3
    values, _ = observed(integrator(kind="rmsprop", learning_rate=ETA, beta2=0.9, eps=eps, eps_in_sqrt=True), PAIR)
    expected = oracle(optax.rmsprop(ETA, decay=0.9, eps=eps, eps_in_sqrt=True), rms_denominator(eps, True), PAIR)
    assert relative(values["preconditioned_sharpness"], expected) <= 1e-8


def test_adam_leg_equals_dense_eigvalsh_with_bias_correction():
    b2, eps = 0.99, 1e-8
    values, _ = observed(integrator(kind="adam", learning_rate=ETA, beta1=0.9, beta2=b2, eps=eps), PAIR)
    expected = oracle(optax.adam(ETA, b1=0.9, b2=b2, eps=eps), adam_denominator(b2, eps), PAIR)
    assert relative(values["preconditioned_sharpness"], expected) <= 1e-8
    # without bias correction (ν̂ → ν) the figure moves by far more than the tolerance
    wrong = oracle(optax.adam(ETA, b1=0.9, b2=b2, eps=eps), adam_denominator(b2, eps, False), PAIR)
    assert relative(wrong[1:], expected[1:]) > 1e-2


@pytest.mark.slow
def test_gd_leg_preconditioned_sharpness_is_its_sharpness_from_one_solve():
    """P = I: the sharpness's solve is shared (the same value and error bound, and no product
    more than the sharpness alone takes), and it is the dense Hessian's top eigenvalue."""
    values, hvps = observed(integrator(kind="gd", learning_rate=ETA), PAIR)
    alone, alone_hvps = observed(integrator(kind="gd", learning_rate=ETA), PAIR, names=("sharpness",))
    assert np.array_equal(values["preconditioned_sharpness"], values["sharpness"])
    assert np.array_equal(values["sharpness"], alone["sharpness"])
    assert (values["preconditioned_sharpness_error"] <= values["sharpness_residual"]).all()   # min(‖r‖, ‖r‖²/δ)
    assert np.array_equal(hvps, alone_hvps) and (hvps > 0).all()
    exact = oracle(optax.sgd(ETA), lambda state: jax.tree.map(jnp.ones_like, PAIR[1]), PAIR)
    assert relative(values["preconditioned_sharpness"], exact) <= 1e-8


def test_edges_of_the_legs():
    assert edge("gd", 0.1, {}) == pytest.approx(20.0)
    assert edge("momentum", 0.1, {"beta": 0.9}) == pytest.approx(38.0)
    assert edge("rmsprop", 0.1, {}) == pytest.approx(20.0)
    assert edge("adam", 0.1, {"beta1": 0.9}) == pytest.approx(380.0)


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(16, 3)), rng.normal(size=(16, 1))


def _model():
    import equinox as eqx

    return eqx.nn.MLP(3, 1, 6, 1, activation=jnp.tanh, key=jax.random.PRNGKey(1))


def test_refused_beside_a_given_transformation(tmp_path):
    import flowsim

    X, y = _data()
    with pytest.raises(ValueError, match=r"`observe`.*preconditioned_sharpness.*solver 'c' "
                                         r"\(`solvers\[0\]`, a given optax transformation\)"):
        flowsim.simulate(_model(), data=(X, y), t_end=0.1, output=tmp_path / "o.h5",
                         observe=["preconditioned_sharpness"],
                         solvers=[{"name": "c", "kind": "optax", "transformation": optax.sgd(0.1),
                                   "learning_rate": 0.1}], progress=False)


@pytest.mark.slow
def test_simulate_records_it_for_adam_and_its_flow(tmp_path):
    """Through `flowsim.simulate` and the archive: at t = 0 the Adam leg's P (the first step's,
    |g₀| + ε) is the Adam flow's (√ν(0) + ε, ν(0) = g₀ ⊙ g₀), so their rows 0 agree to the
    tracker's accuracy; every row is finite and its error bound below 1e-4 of it; compare
    judges the Adam leg against 38/η; a resumed run records what an uninterrupted one does."""
    import flowsim

    X, y = _data()
    with flowsim.simulate(_model(), data=(X, y), loss="mse", t_end=40 * ETA, checkpoints={"count": 4},
                          solvers=[{"name": "adam", "kind": "adam", "learning_rate": ETA, "beta2": 0.99},
                                   {"name": "flow", "kind": "adam-flow", "learning_rate": ETA, "beta2": 0.99,
                                    "method": "tsit5"}],
                          observe=["loss", "preconditioned_sharpness"], output=tmp_path / "o.h5",
                          progress=False) as arch:
        legs = arch.runs["seed0"].solvers
        a, f = (np.asarray(legs[n]["preconditioned_sharpness"]) for n in ("adam", "flow"))
        err = np.asarray(legs["adam"]["preconditioned_sharpness_error"])
        assert a.shape == (5,) and np.isfinite(a).all() and np.isfinite(f).all()
        assert (err <= 1e-4 * a).all()
        assert abs(a[0] - f[0]) <= 1e-3 * a[0]
        assert legs["adam"].stats["observe_hvps"] > 0
    # compare judges the Adam leg by its preconditioned sharpness against its own edge, 38/η
    from flowsim.analysis.compare import compare_archive

    (stab,) = compare_archive(tmp_path / "o.h5").stability
    assert (stab.solver, stab.source, stab.limit) == ("adam", "preconditioned_sharpness", pytest.approx(38.0))
    assert np.allclose(stab.sharp, a) and stab.verdict in ("below", "crossed")
    # resumed from the archive's checkpoint at half time (its warm-start vectors and Adam's
    # moments with it), every row equals the uninterrupted run's bit for bit
    kw = dict(data=(X, y), loss="mse", checkpoints={"every": 10 * ETA}, progress=False,
              solvers=[{"name": "adam", "kind": "adam", "learning_rate": ETA, "beta2": 0.99}],
              observe=["preconditioned_sharpness"])
    with flowsim.simulate(_model(), t_end=40 * ETA, output=tmp_path / "a.h5", **kw) as straight:
        expected = np.asarray(straight.runs["seed0"].solvers["adam"]["preconditioned_sharpness"])
    flowsim.simulate(_model(), t_end=20 * ETA, output=tmp_path / "b.h5", **kw).close()
    with flowsim.simulate(_model(), t_end=40 * ETA, output=tmp_path / "b.h5", resume=True, **kw) as resumed:
        assert np.array_equal(np.asarray(resumed.runs["seed0"].solvers["adam"]["preconditioned_sharpness"]), expected)
