"""RMSProp's central flow (flowsim/integrate/central_rmsprop.py through central_field's
`central_point`) against its definition on a small network: a dense Hessian, a dense
eigen-decomposition of D^{-1/2}HD^{-1/2}, ∇⟨H, Σ⟩ by autodiff of the dense Hessian, ν's
equation with the gradient's covariance diag(HΣH), and the held margin's rate by finite
differences along the field; below the edge, RMSProp's stable flow exactly."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_problem, resumed_beside_uninterrupted

from flowsim.config import Preset, from_dict, load_solver
from flowsim.config.spec import ScenarioError
from flowsim.integrate.adaptive_flows import adaptive_form
from flowsim.integrate.central_field import RELAX_STEPS, central_point, initial_vectors
from flowsim.run.integrators import central_integrator

BETA2, EPS = 0.99, 1e-8
# ε inside the root (`eps_in_sqrt`): D = √(ν + ε), ε of the order of the smallest ν (the floor
# 1e-6 of `_state`'s), so that D and ∂D/∂ν differ from the default's where ν is small
EPS_IN_SQRT = 1e-6
VARIANTS = pytest.mark.parametrize("in_sqrt", [False, True], ids=["eps-outside", "eps-in-sqrt"])


def _state(seed=0):
    """A small network (m = 12 hidden nodes, 5 inputs: 84 weights) and a state (w, ν) with ν
    its gradient's square times a spread of factors (an unequal preconditioner)."""
    problem, p0 = make_problem(n=16, d=5, m=12, seed=seed)
    w, unravel = jax.flatten_util.ravel_pytree(p0)
    g = problem.rate * jax.grad(lambda v: problem.loss(unravel(v)))(w)
    spread = jnp.asarray(np.random.default_rng(seed).uniform(0.5, 2.0, w.size))
    return problem, p0, unravel, w, g * g * spread + 1e-6


def _denominator(nu, in_sqrt=False):
    """RMSProp's D: √ν + ε, or √(ν + ε) with ε inside the root."""
    return jnp.sqrt(nu + EPS_IN_SQRT) if in_sqrt else jnp.sqrt(nu) + EPS


def _dense(problem, unravel, w, nu, in_sqrt=False):
    """H of L̃ = rate·L, D (`_denominator`), and the eigenpairs of D^{-1/2}HD^{-1/2} (descending)."""
    loss = lambda v: problem.rate * problem.loss(unravel(v))
    H = jax.hessian(loss)(w)
    D = _denominator(nu, in_sqrt)
    lam, V = jnp.linalg.eigh(H / jnp.sqrt(D[:, None] * D[None, :]))
    return loss, H, D, lam[::-1], V[:, ::-1]


def _point(problem, unravel, w, nu, eta, k=2, in_sqrt=False):
    form = adaptive_form("rmsprop-flow", learning_rate=eta, beta2=BETA2, eps=EPS_IN_SQRT if in_sqrt else EPS,
                         eps_in_sqrt=in_sqrt)
    y = {"w": unravel(w), "nu": unravel(nu)}
    point = jax.jit(lambda y: central_point(problem, y, initial_vectors(w.size, k, w.dtype), eta, k, 0.9,
                                            iterations=500, cold=True, tol=1e-12, form=form))(y)
    return form, y, point


@pytest.mark.slow
@VARIANTS
def test_the_tracked_eigenvalues_are_those_of_the_preconditioned_hessian(in_sqrt):
    problem, _, unravel, w, nu = _state()
    _, _, _, lam, _ = _dense(problem, unravel, w, nu, in_sqrt)
    _, _, point = _point(problem, unravel, w, nu, eta=1.0 / float(lam[0]), in_sqrt=in_sqrt)
    np.testing.assert_allclose(np.asarray(point.lam), np.asarray(lam[:2]), rtol=1e-9)


@pytest.mark.slow
@VARIANTS
def test_at_the_edge_the_field_is_its_definition(in_sqrt):
    """η puts the top effective eigenvalue ηλ₁ at 3, past the edge (the second beneath the threshold 0.9·2):
    one direction is held (X > 0, rank 1), and
    - dν/dt = (1 − β₂)/(β₂η)·(g² + diag(HΣH) − ν) with H dense, Σ = U X Uᵀ, U = D^{-1/2}V (to 1e-9);
    - dw/dt = −D⁻¹(g + ½∇_w⟨H(w), Σ⟩), the gradient of the dense Hessian's trace against Σ (1e-9);
    - the held margin A = u₀ᵀ(2D/η − H)u₀ (u₀ = D^{-1/2}v₁ fixed) moves at −κA, κ = 1/η, along the
      field (a central difference in (w, ν) of step 1e-5: 1e-5 relative), i.e. the stability
      condition 2P − H ⪰ 0 is what X holds, P moving with ν.
    With ε inside the root (D = √(ν + ε)) the same, ∂D/∂ν = 1/(2√(ν + ε)) in P's motion."""
    problem, _, unravel, w, nu = _state()
    loss, H, D, lam, V = _dense(problem, unravel, w, nu, in_sqrt)
    assert float(lam[1] / lam[0]) < 0.6       # only the top direction is a candidate
    eta = 3.0 / float(lam[0])
    _, y, point = _point(problem, unravel, w, nu, eta, in_sqrt=in_sqrt)
    X = np.asarray(point.X)
    assert int(point.held) == 1 and X[0, 0] > 0 and np.abs(X[1:, :]).max() == 0 and np.abs(X[:, 1:]).max() == 0

    U = point.U / jnp.sqrt(D)[:, None]
    Sigma = U @ point.X @ U.T
    g = jax.grad(loss)(w)
    c = (1 - BETA2) / (BETA2 * eta)
    nu_dot = c * (g * g + jnp.diag(H @ Sigma @ H) - nu)
    np.testing.assert_allclose(np.asarray(jax.flatten_util.ravel_pytree(point.velocity["nu"])[0]), nu_dot,
                               rtol=1e-9, atol=1e-9 * float(jnp.abs(nu_dot).max()))
    dtrace = jax.grad(lambda v: jnp.sum(jax.hessian(loss)(v) * Sigma))(w)
    w_dot = -(g + 0.5 * dtrace) / D
    np.testing.assert_allclose(np.asarray(jax.flatten_util.ravel_pytree(point.velocity["w"])[0]), w_dot,
                               rtol=1e-9, atol=1e-9 * float(jnp.abs(w_dot).max()))

    u0 = V[:, 0] / jnp.sqrt(D)
    margin = lambda w, nu: u0 @ (2 * _denominator(nu, in_sqrt) / eta * u0) - u0 @ jax.hessian(loss)(w) @ u0
    h = 1e-5
    rate = (margin(w + h * w_dot, nu + h * nu_dot) - margin(w - h * w_dot, nu - h * nu_dot)) / (2 * h)
    kappa = 1 / (RELAX_STEPS * eta)
    A = margin(w, nu)
    assert float(A) < 0       # past the edge: the hold closes the margin
    assert abs(float(rate + kappa * A)) <= 1e-5 * abs(float(kappa * A))


def test_below_the_edge_it_is_rmsprops_stable_flow():
    """ηλ₁ = 1.5 < 2·0.9: no candidate, X = 0, no third derivative, and the field is the stable
    flow's to rounding (1e-12: the compiled programs sum the gradient differently)."""
    problem, _, unravel, w, nu = _state(1)
    _, _, _, lam, _ = _dense(problem, unravel, w, nu)
    form, y, point = _point(problem, unravel, w, nu, eta=1.5 / float(lam[0]))
    assert float(jnp.abs(point.X).max()) == 0 and int(point.thirds) == 0
    stable = form(0.0, y, problem)
    for key in ("w", "nu"):
        a, b = (jax.flatten_util.ravel_pytree(v[key])[0] for v in (point.velocity, stable))
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=0, err_msg=key)


def _typed(preset) -> Preset:
    return from_dict(Preset, load_solver({"name": "test"} | preset))


@pytest.mark.slow
def test_the_central_leg_holds_the_preconditioned_sharpness_at_the_edge():
    """RMSProp's central flow through the engine (rock4) from a start below the edge, at η whose
    edge the stable flow's preconditioned sharpness crosses: after the arrival the top
    effective eigenvalue stays at 2/η (central_edge1 within 1e-3 of 1, by the relaxation and
    the step's tolerance), the predicted loss lies above the loss (Σ ⪰ 0 along positive
    curvature), and the cost per unit time is counted."""
    problem, p0, unravel, w, _ = _state(2)
    g = problem.rate * jax.grad(lambda v: problem.loss(unravel(v)))(w)
    _, _, _, lam, _ = _dense(problem, unravel, w, g * g)     # at the leg's start, ν = g₀²
    eta = 1.2 / float(lam[0])
    integ = central_integrator(_typed({"kind": "rmsprop-central", "learning_rate": eta, "beta2": BETA2,
                                       "max_eigen": 2, "method": "rock4", "rtol": 1e-6, "atol": 1e-8}))
    state = eqx.filter_jit(integ.init)(problem, p0)
    advance, cert = eqx.filter_jit(integ.advance), eqx.filter_jit(integ.certificate)
    edges, held = [], []
    for t in np.linspace(0, 300 * eta, 31)[1:]:
        state, stats = advance(problem, state, jnp.asarray(t))
        assert int(stats["status"]) == 1
        c = cert(problem, state)
        edges.append(float(c["central_edge1"]))
        held.append(int(c["central_held"]))
        if held[-1]:
            assert float(c["predicted_loss"]) > float(problem.loss(integ.params(state)))
    assert edges[0] < 0.8 and any(held), edges
    after = np.asarray(edges)[np.argmax(held):]
    assert np.abs(after - 1).max() <= 1e-3, after
    assert float(cert(problem, state)["central_hvps"]) > 0


@pytest.mark.slow
def test_a_resumed_central_leg_equals_the_uninterrupted_one_bit_for_bit():
    """Two seeds through the batch kernel to t = 1, seed 1's state stored and restored, both to
    t = 2: the resumed member's weights and ν equal the uninterrupted one's bit for bit, in the
    same steps; η puts seed 1's top effective eigenvalue at 2.2 at the start, so the held
    direction's third derivatives are in the stretch (Σ > 0)."""
    pairs = [make_problem(n=16, d=5, m=12, seed=s) for s in range(2)]
    problem, _ = pairs[1]
    w, unravel = jax.flatten_util.ravel_pytree(pairs[1][1])
    g = problem.rate * jax.grad(lambda v: problem.loss(unravel(v)))(w)
    _, _, _, lam, _ = _dense(problem, unravel, w, g * g)
    integ = central_integrator(_typed({"kind": "rmsprop-central", "learning_rate": 2.2 / float(lam[0]),
                                       "beta2": BETA2, "max_eigen": 2, "method": "rock4", "rtol": 1e-6,
                                       "atol": 1e-8}))
    a, b, stats, stats_b = resumed_beside_uninterrupted(integ, pairs)
    assert (np.asarray(stats["status"]) == 1).all() and int(stats["steps"][1]) == int(stats_b["steps"][1])
    for at in (lambda s: s.y, lambda s: s.ahead.y_at):      # the committed step's end, and t = 2
        for key in ("w", "nu"):
            for x, y in zip(jax.tree.leaves(at(a)[key]), jax.tree.leaves(at(b)[key])):
                assert np.array_equal(np.asarray(x)[1], np.asarray(y)[1]), key
    cert = integ.certificate(problem, jax.tree.map(lambda x: x[1], a))
    assert float(cert["central_sigma1"]) > 0


def test_a_central_leg_refuses_a_method_that_cannot_step_it():
    with pytest.raises(ScenarioError, match="method"):
        _typed({"kind": "rmsprop-central", "learning_rate": 0.01, "method": "filippov"})
