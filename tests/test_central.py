"""The central flow (flowsim/integrate/central_field.py) and its complementarity solver
(flowsim/integrate/sdcp.py) against oracles: planted and CVXPY solutions of the k×k problem,
a valley whose central flow has a closed form, the exact gradient flow below the edge of
stability, and plain Euler on the same field."""

from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_problem, rel_err, resumed_beside_uninterrupted

from flowsim.config import Preset, from_dict, load_solver
from flowsim.config.spec import ScenarioError
from flowsim.integrate import sdcp
from flowsim.integrate.central_field import (ARRIVAL_TOL, RELAX_STEPS, central_point, initial_vectors, masked_block,
                                              WarmStart, third_products, track)
from flowsim.run.integrators import central_integrator, flow_integrator
from flowsim.nn.net import AbstractNet
from flowsim.nn.ntg import vector_product_ntg
from flowsim.nn.problem import Problem


def typed(preset) -> Preset:
    return from_dict(Preset, load_solver({"name": "test"} | preset))


def central(eta, rtol, k=1, method="tsit5", **extra):
    return central_integrator(typed({"kind": "central-flow", "learning_rate": eta, "max_eigen": k, "method": method,
                                       "rtol": rtol, "atol": rtol * 1e-2} | extra))


# ---------------------------------------------------------------- the k×k problem


def _pairs(k):
    return [(i, j) for j in range(k) for i in range(j + 1)]


def _instance(rng, k, n=40, conditioned=False):
    """Third-derivative vectors g_ij = g_ji (k, k, n): Gaussian, or orthogonal with scales in
    [0.5, 2] (a Gram operator of condition ≤ 16)."""
    pairs = _pairs(k)
    if conditioned:
        Q, _ = np.linalg.qr(rng.normal(size=(n, len(pairs))))
        vectors = Q.T * rng.uniform(0.5, 2.0, size=(len(pairs), 1))
    else:
        vectors = rng.normal(size=(len(pairs), n)) / np.sqrt(n)
    G = np.zeros((k, k, n))
    for (i, j), g in zip(pairs, vectors):
        G[i, j] = G[j, i] = g
    return G


def _kkt(q, T, X):
    """The complementarity conditions' violations: X's and Y's negative parts, and |⟨X, Y⟩|."""
    Y = q + np.asarray(sdcp.apply(T, jnp.asarray(X)))
    return (max(-np.linalg.eigvalsh(X)[0], 0.0), max(-np.linalg.eigvalsh(Y)[0], 0.0), abs(np.trace(X @ Y)))


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_sdcp_finds_a_planted_solution(k):
    """X* of rank r and Y* ⪰ 0 on X*'s null space, q = Y* − M(X*): the problem's unique
    solution is X* (M positive definite). Found to 1e-8 (measured: ≤ 1e-12)."""
    rng = np.random.default_rng(k)
    solve = jax.jit(sdcp.solve)
    for trial in range(10):
        T = sdcp.gram_operator(jnp.asarray(_instance(rng, k, conditioned=trial % 2 == 0)))
        V, _ = np.linalg.qr(rng.normal(size=(k, k)))
        r = rng.integers(0, k + 1)
        X_star = V[:, :r] @ np.diag(rng.uniform(0.5, 3.0, r)) @ V[:, :r].T
        Y_star = V[:, r:] @ np.diag(rng.uniform(0.5, 3.0, k - r)) @ V[:, r:].T
        q = Y_star - np.asarray(sdcp.apply(T, jnp.asarray(X_star)))
        X = np.asarray(solve(jnp.asarray(q), T))
        assert np.abs(X - X_star).max() <= 1e-8, (k, trial, r)


def test_sdcp_solves_the_instances_its_interior_point_start_stalled_on():
    """Eight (q, T) met in test_engine's central flows (tests/archives/sdcp_stalls.npz: GD's
    at η = 1 and RMSProp's at η = 0.1, the first four of each that the solve started at q's
    size over T's norm left with Y's least eigenvalue 0.2–0.7 of ‖q‖ below 0). Started from
    the least-squares answer, each meets the complementarity conditions to 1e-9 of ‖q‖ and
    ‖X‖ (measured: ≤ 1e-12), and is a fixed point of the natural residual to 1e-7 of ‖X‖.
    RMSProp's T is not PSD (its preconditioner's motion), so there the conditions, not an
    optimum, are the oracle."""
    cases = np.load(Path(__file__).parent / "archives" / "sdcp_stalls.npz")
    solve = jax.jit(sdcp.solve)
    for kind in ("gd", "rmsprop"):
        for q, T in zip(cases[kind + "_q"], cases[kind + "_T"]):
            X = np.asarray(solve(jnp.asarray(q), jnp.asarray(T)))
            scale = np.linalg.norm(q) * np.linalg.norm(X)
            neg_x, neg_y, gap = _kkt(q, jnp.asarray(T), X)
            assert neg_x <= 1e-9 * np.linalg.norm(X) and neg_y <= 1e-9 * np.linalg.norm(q) and gap <= 1e-9 * scale, \
                (kind, neg_x, neg_y, gap)
            residual = np.asarray(sdcp._natural_residual(jnp.asarray(q), jnp.asarray(T), jnp.asarray(X)))
            assert np.linalg.norm(residual) <= 1e-7 * np.linalg.norm(X), kind


def test_sdcp_is_zero_exactly_where_q_is_psd():
    rng = np.random.default_rng(0)
    T = sdcp.gram_operator(jnp.asarray(_instance(rng, 3)))
    B = rng.normal(size=(3, 3))
    X = np.asarray(jax.jit(sdcp.solve)(jnp.asarray(B @ B.T + 0.1 * np.eye(3)), T))
    assert np.array_equal(X, np.zeros((3, 3)))


def test_the_gram_operator_over_the_live_pairs_and_its_rotation():
    """`gram_operator(G, m, weight)` forms only the rows of the pairs i ≤ j < m (G is zero
    beyond): it equals the whole tensor ½⟨g_ij, weight ⊙ g_ab⟩; and `rotate` gives the tensor
    of the vectors rotated by an orthogonal W (g_ij bilinear in the vectors)."""
    rng = np.random.default_rng(3)
    k, n, m = 4, 30, 2
    G = _instance(rng, k, n)
    G[m:] = 0.0
    G[:, m:] = 0.0
    weight = rng.uniform(0.5, 2.0, n)
    whole = 0.5 * np.einsum("ijn,n,abn->ijab", G, weight, G)
    assert np.abs(np.asarray(sdcp.gram_operator(jnp.asarray(G), jnp.asarray(m), jnp.asarray(weight))) - whole).max() <= 1e-14
    assert np.abs(np.asarray(sdcp.gram_operator(jnp.asarray(G), jnp.asarray(m))) - np.asarray(
        sdcp.gram_operator(jnp.asarray(G)))).max() <= 1e-14
    W, _ = np.linalg.qr(rng.normal(size=(k, k)))
    turned = np.einsum("ai,bj,abn->ijn", W, W, G)
    assert np.abs(np.asarray(sdcp.rotate(sdcp.gram_operator(jnp.asarray(G)), jnp.asarray(W)))
                  - np.asarray(sdcp.gram_operator(jnp.asarray(turned)))).max() <= 1e-13


@pytest.mark.parametrize("conditioned", [True, False])
def test_sdcp_against_cvxpy(conditioned):
    """Random instances (Gaussian q, Gaussian or well-conditioned g): the complementarity
    conditions hold to 1e-10 (scale 1), the QP's objective is CVXPY's (Clarabel) or lower, and X
    is CVXPY's to CVXPY's own accuracy. Clarabel stops at a gap ⟨X, Y⟩ of 1e-10–1e-9 (it fails
    at tolerances below 1e-11), and near a degenerate complementarity an X off by ε leaves a
    gap of ε², so its X is only good to about 1e-5 (measured: up to 2e-5 off ours, whose gap is
    1e-15); the 1e-8 oracle is the planted one above."""
    import cvxpy as cp   # a test extra (pyproject's [test]): a missing install is a failure, not a skip
    rng = np.random.default_rng(1)
    solve = jax.jit(sdcp.solve)
    for trial in range(12):
        k = (1, 2, 3, 5)[trial % 4]
        G = _instance(rng, k, conditioned=conditioned)
        B = rng.normal(size=(k, k))
        q = B + B.T - np.eye(k)
        T = sdcp.gram_operator(jnp.asarray(G))
        X = np.asarray(solve(jnp.asarray(q), T))
        assert max(_kkt(q, T, X)) <= 1e-10, (trial, _kkt(q, T, X))

        var = cp.Variable((k, k), PSD=True)
        pairs = _pairs(k)
        # ½⟨X, M(X)⟩ = ¼ ‖Σ_ab X_ab g_ab‖², the off-diagonal pairs counted twice
        F = np.stack([G[i, j] * (1 if i == j else 2) for i, j in pairs], 1)
        x = cp.hstack([var[i, j] for i, j in pairs])
        objective = lambda v: 0.25 * cp.sum_squares(np.linalg.qr(F)[1] @ v) + cp.trace(q @ var)
        cp.Problem(cp.Minimize(objective(x))).solve(solver="CLARABEL", tol_gap_abs=1e-10, tol_gap_rel=1e-10,
                                                   tol_feas=1e-10, max_iter=500)
        Xc = var.value
        value = lambda Z: 0.5 * np.sum(Z * np.asarray(sdcp.apply(T, jnp.asarray(Z)))) + np.sum(q * Z)
        assert value(X) <= value(Xc) + 1e-9
        assert np.abs(X - Xc).max() <= 1e-4 * max(1.0, np.abs(X).max())


# ---------------------------------------------------------------- a valley with a closed form

# L(x, u, z) = −c x + ½ (a0 + b x) u² + ½ d z². On u = 0 the Hessian is diag(0, a0 + b x, d):
# the flow runs along x at speed c and the curvature across, a(x) = a0 + b x, rises. With S =
# 2/η − a, g = ∇a = (b, 0, 0), α = ⟨g, ∇L⟩ = −bc, β = b², κ = 1/(RELAX_STEPS η): X = 0 while
# κS ≥ bc; from S = S1 = bc/κ on (t1), Y = κS − bc + ½b²X = 0 gives X = 2(bc − κS)/b², and
# ẋ = c − ½bX = κS/b, Ṡ = −κS: S = S1 e^{−κ(t − t1)}, x = x1 + (S1/b)(1 − e^{−κ(t − t1)}).
# u stays 0 and z = z0 e^{−dt} (the gradient flow's).
C, A0, B, D, ETA = 1.0, 1.0, 0.5, 0.3, 0.5


class _Point(AbstractNet):
    """The valley's "network": its three parameters are its prediction."""

    series_axes = {"weights": ("param",), "weight_change": ("leaf",), "unit_change": ("param",)}

    def __call__(self, params, X):
        return params["w"][None, :]

    def ntg(self, params, X):
        return vector_product_ntg(self, params, X)

    def weights(self, params):
        return params["w"]

    def weight_change(self, params, params0):
        return jnp.linalg.norm(params["w"] - params0["w"])[None]

    def unit_change(self, params, params0):
        return jnp.abs(params["w"] - params0["w"])


def _valley_loss(pred, y):
    x, u, z = pred[0]
    return -C * x + 0.5 * (A0 + B * x) * u ** 2 + 0.5 * D * z ** 2


def _valley():
    zero = jnp.zeros((1, 3))
    problem = Problem(net=_Point(), X=zero, y=zero, X_test=zero, y_test=zero, rate=1.0, loss_kind="callable",
                      ntg_points=1, custom_loss=_valley_loss)
    return problem, {"w": jnp.asarray([0.0, 0.0, 1.0])}


def _valley_closed_form(t):
    kappa = 1.0 / (RELAX_STEPS * ETA)
    s0, s1 = 2.0 / ETA - A0, B * C / kappa
    t1 = (s0 - s1) / (B * C)
    x = np.where(t < t1, C * t, C * t1 + (s1 / B) * (1.0 - np.exp(-kappa * (t - t1))))
    return np.stack([x, 0.0 * t, np.exp(-D * t)], -1), t1


def _flow_to(integ, problem, p0, t):
    state, stats = eqx.filter_jit(integ.advance)(problem, integ.init(problem, p0), jnp.asarray(t))
    return state, stats


@pytest.mark.slow
@pytest.mark.parametrize("method", ["tsit5", "rock4"])
def test_valley_central_flow_matches_its_closed_form(method):
    """Measured: 2.8e-13 (tsit5), 1.3e-11 (rock4) from the closed form at t = 12."""
    problem, p0 = _valley()
    integ = central(ETA, 1e-10, method=method)
    exact, t1 = _valley_closed_form(np.asarray(12.0))
    assert 5.0 < t1 < 6.0     # the onset, inside the run
    state, stats = _flow_to(integ, problem, p0, 12.0)
    assert int(stats["status"]) == 1
    assert np.abs(np.asarray(integ.params(state)["w"]) - exact).max() <= 1e-8   # measured 2.8e-13
    cert = eqx.filter_jit(integ.certificate)(problem, state)
    assert float(cert["central_events"]) == 1          # the onset, located
    assert float(cert["central_held"]) == 1
    # the held curvature sits at 2/η, up to what is left of the margin: S1 e^{−κ(t − t1)}
    s = (B * C * RELAX_STEPS * ETA) * np.exp(-(12.0 - t1) / (RELAX_STEPS * ETA))
    assert float(cert["central_eig1"]) == pytest.approx(2 / ETA - s, abs=1e-9)
    # X = 2(bc − κS)/b², and the predicted loss is L + ½ λ X
    x = 2 * (B * C - s / (RELAX_STEPS * ETA)) / B ** 2
    assert float(cert["central_sigma1"]) == pytest.approx(x, rel=1e-8)
    loss = -C * exact[0] + 0.5 * D * exact[2] ** 2
    assert float(cert["predicted_loss"]) == pytest.approx(loss + 0.5 * (2 / ETA - s) * x, rel=1e-8)


@pytest.mark.slow
def test_central_held_marks_the_eigenvalues_arrival_at_the_edge_not_the_start_of_the_hold():
    """On the valley X turns positive at t1 = 5.5, where the margin S1 = bc/κ = 0.25 is still
    6.25 % of 2/η = 4, and S = S1 e^{−κ(t − t1)} then arrives within ARRIVAL_TOL·2/η of the
    edge at t_a = t1 + ln(S1 η / (2 ARRIVAL_TOL))/κ = 8.72 (6.4 GD steps later). Before t_a the
    direction is held (an event, Σ > 0) but has not arrived: `central_held` 0; 0.05 after, 1."""
    problem, p0 = _valley()
    kappa = 1.0 / (RELAX_STEPS * ETA)
    _, t1 = _valley_closed_form(np.asarray(0.0))
    s1 = B * C / kappa
    t_arrival = t1 + np.log(s1 * ETA / (2 * ARRIVAL_TOL)) / kappa
    assert t_arrival == pytest.approx(5.5 + np.log(625) / 2, rel=1e-12)
    integ = central(ETA, 1e-10)
    for t, arrived in ((t1 + 0.5, 0), (t_arrival - 0.05, 0), (t_arrival + 0.05, 1)):
        state, _ = _flow_to(integ, problem, p0, t)
        cert = eqx.filter_jit(integ.certificate)(problem, state)
        assert float(cert["central_events"]) == 1 and float(cert["central_sigma1"]) > 0    # held
        margin = s1 * np.exp(-kappa * (t - t1))
        assert float(cert["central_edge1"]) == pytest.approx(1 - ETA * margin / 2, abs=1e-9)
        assert float(cert["central_held"]) == arrived, t


@pytest.mark.slow
@pytest.mark.parametrize("method", ["tsit5", "rock4"])
def test_tightening_the_tolerance_converges_on_the_valley(method):
    """Each tolerance's error against the closed form, after the onset: within 10 × rtol and
    falling (measured: tsit5 4.9e-9, 3.4e-11, 2.8e-13; rock4 3.8e-8, 3.6e-10, 3.5e-12 at rtol 1e-6, 1e-8, 1e-10)."""
    problem, p0 = _valley()
    exact, _ = _valley_closed_form(np.asarray(20.0))
    errors = []
    for rtol in (1e-6, 1e-8, 1e-10):
        state, _ = _flow_to(central(ETA, rtol, method=method), problem, p0, 20.0)
        errors.append(np.abs(np.asarray(state.y["w"]) - exact).max())
        assert errors[-1] <= 10 * rtol
    assert errors[0] > 10 * errors[1] > 100 * errors[2]


@pytest.mark.slow
def test_halving_eulers_step_moves_it_towards_the_central_flow_at_first_order():
    """Forward Euler on the same field (the published codes' integrator), h = 0.04, 0.02, 0.01
    to t = 10: its distance to flowsim's central flow halves with h (ratio 2 ± 0.2)."""
    problem, p0 = _valley()
    state, _ = _flow_to(central(ETA, 1e-10), problem, p0, 10.0)
    ref = np.asarray(state.y["w"])

    @jax.jit
    def euler(h, steps):
        def one(_, c):
            w, U = c
            p = central_point(problem, {"w": w}, U, ETA, 1, 0.9)
            return w + h * p.velocity["w"], p.U
        return jax.lax.fori_loop(0, steps, one, (p0["w"], initial_vectors(3, 1, jnp.float64)))[0]

    errors = [np.abs(np.asarray(euler(10.0 / n, n)) - ref).max() for n in (250, 500, 1000)]
    assert 1.8 <= errors[0] / errors[1] <= 2.2 and 1.8 <= errors[1] / errors[2] <= 2.2, errors


# ---------------------------------------------------------------- below the edge: the gradient flow


@pytest.mark.slow
@pytest.mark.parametrize("method, within", [("tsit5", 1e-10), ("rock4", 1e-9)])
def test_below_the_edge_the_central_flow_is_the_gradient_flow(method, within):
    """η = 0.4 (2/η = 5) on a network whose sharpness stays below 2.4 (0.48 × 2/η) to t = 10:
    no direction reaches the threshold, no third derivative is computed, and the central flow is
    the exact flow at the same tolerances (LOBPCG tracks k = 2 of 250 directions; measured
    relative difference of the displacements: tsit5 0 (the same steps), rock4 3.3e-11)."""
    problem, p0 = make_problem(seed=1)
    integ = central(0.4, 1e-10, k=2, method=method)
    state, stats = _flow_to(integ, problem, p0, 10.0)
    cert = eqx.filter_jit(integ.certificate)(problem, state)
    assert float(cert["central_thirds"]) == 0 and float(cert["central_events"]) == 0
    assert float(cert["central_edge1"]) < 0.5
    flow = flow_integrator(typed({"kind": "flow", "method": "tsit5", "rtol": 1e-10, "atol": 1e-12}))
    plain, _ = _flow_to(flow, problem, p0, 10.0)
    assert rel_err(integ.params(state)["W"] - p0["W"], flow.params(plain)["W"] - p0["W"]) <= within
    # the predicted loss is the loss itself (Σ = 0)
    assert float(cert["predicted_loss"]) == pytest.approx(float(problem.loss(integ.params(state))), rel=1e-14)


@pytest.mark.slow
def test_the_tracked_eigenvalues_are_the_hessians():
    problem, p0 = make_problem(seed=0)
    point = jax.jit(lambda w: central_point(problem, w, initial_vectors(250, 3, jnp.float64), 1.0, 3, 0.9,
                                            iterations=500, cold=True))(p0)
    flat, unravel = jax.flatten_util.ravel_pytree(p0)
    H = jax.hessian(lambda v: problem.rate * problem.loss(unravel(v)))(flat)
    assert np.allclose(np.asarray(point.lam), np.linalg.eigvalsh(H)[::-1][:3], rtol=1e-9, atol=0)


@pytest.mark.parametrize("columns", [1, 2, None])
def test_track_converges_to_the_top_eigenpairs(columns):
    """`track` (LOBPCG with images carried as combinations) from a random start on a 250 × 250
    Wishart matrix whose top eigenvalues are 3 % apart: the tracked columns' Ritz values are
    the top eigenvalues to their residuals' bound, never above the largest (Rayleigh–Ritz on an
    orthonormal basis with exact images cannot exceed it: a conjugate direction whose image
    lost track of it once reported 4.19 for 3.93), and each residual ‖Hu − λu‖ computed afresh
    meets the tolerance. Measured: 21, 48, 38 products for 1, 2, all columns (102 for two
    without the conjugate direction)."""
    rng = np.random.default_rng(0)
    M = rng.standard_normal((250, 250))
    H = (M @ M.T) / 250
    true = np.linalg.eigvalsh(H)[::-1]
    block = masked_block(lambda v: jnp.asarray(H) @ v)
    lam, U, spent = jax.jit(lambda U0: track(block, U0, 0.0, 1e-6, 1e-6, 200, columns))(
        jnp.asarray(rng.standard_normal((250, 2))))
    m = 2 if columns is None else columns
    lam, U = np.asarray(lam)[:m], np.asarray(U)[:, :m]
    r = np.linalg.norm(H @ U - U * lam, axis=0)
    assert np.all(r <= 1e-6 * true[0] * (1 + 1e-9))
    assert np.all(lam <= true[0] * (1 + 1e-12))
    assert np.all(np.abs(lam - true[:m]) <= r ** 2 / (true[m - 1] - true[m]) + 1e-12)
    assert np.abs(U.T @ U - np.eye(m)).max() <= 1e-12
    assert 0 < int(spent) <= 200 * m


@pytest.mark.slow
def test_a_block_sized_to_the_candidates_gives_the_whole_blocks_field():
    """A step's inner stages track the candidates alone (`columns`, `WarmStart.columns`): where
    a direction is held (λ1 1 % beneath 2/η and rising) the field and X are the whole block's (both
    tracked to 1e-10) for fewer products; with no column (below the edge) the field is
    −∇L̃ exactly, at no product."""
    problem, p0 = make_problem(seed=0)
    cold = jax.jit(lambda w: central_point(problem, w, initial_vectors(250, 3, jnp.float64), 1.0, 3, 0.9,
                                           iterations=500, cold=True))(p0)
    eta = 2 / (1.01 * float(cold.lam[0]))
    point = jax.jit(lambda w, columns: central_point(problem, w, cold.U, eta, 3, 0.9, tol=1e-10, columns=columns))
    whole = point(p0, None)
    m = int(np.sum(eta * np.asarray(whole.lam) / 2 >= 0.9))
    sized = point(p0, jnp.asarray(m))
    flat = lambda p: jax.flatten_util.ravel_pytree(p)[0]
    assert int(whole.held) >= 1 and m < 3
    assert rel_err(flat(sized.velocity), flat(whole.velocity)) <= 1e-9
    assert np.abs(np.asarray(sized.X - whole.X)).max() <= 1e-9 * np.abs(np.asarray(whole.X)).max()
    assert 0 < int(sized.hvps) < int(whole.hvps)
    below = point(p0, jnp.asarray(0))
    grad = jax.grad(lambda w: problem.rate * problem.loss(w))(p0)
    assert int(below.hvps) == 0 and int(below.thirds) == 0
    assert rel_err(flat(below.velocity), -flat(grad)) <= 1e-14


def test_third_products_are_the_nested_derivatives_and_their_values_the_hessians_products():
    """`third_products`: g_ij = ∇_w(u_iᵀ∇²L̃(w)u_j) for i ≤ j < m against reverse mode through
    the dense Hessian, symmetric, zero beyond m; and the Hessian-vector products it returns
    (its linearisations' values) against the dense Hessian's."""
    problem, p0 = make_problem(seed=0)
    w, unravel = jax.flatten_util.ravel_pytree(p0)
    loss = lambda v: problem.rate * problem.loss(unravel(v))
    U = jnp.linalg.qr(jax.random.normal(jax.random.PRNGKey(5), (w.size, 3), w.dtype))[0]
    G, HU = jax.jit(lambda U: third_products(jax.grad(loss), w, U, jnp.asarray(2)))(U)
    H = jax.hessian(loss)(w)
    assert rel_err(HU[:, :2], H @ U[:, :2]) <= 1e-12 and not np.any(np.asarray(HU[:, 2]))
    for i, j in ((0, 0), (0, 1), (1, 1)):
        g = jax.grad(lambda v: U[:, i] @ jax.hessian(loss)(v) @ U[:, j])(w)
        assert rel_err(G[i, j], g) <= 1e-11 and np.array_equal(np.asarray(G[i, j]), np.asarray(G[j, i]))
    assert not np.any(np.asarray(G[2])) and not np.any(np.asarray(G[:, 2]))


@pytest.mark.slow
def test_a_stage_from_its_third_derivative_products_gives_the_tracked_field():
    """An inner stage's point (`from_start`): Rayleigh–Ritz on the warm start from its
    third-derivative products' own Hessian-vector products. From a converged start (the
    candidates' eigenvectors mixed by a rotation, which Rayleigh–Ritz undoes) it spends no
    Hessian-vector product and gives the field of the point tracked to 1e-10 — the products
    rotated onto the Ritz vectors; from a start 1e-3 off it goes on by `track` and takes the
    products again at its vectors, with the same field."""
    problem, p0 = make_problem(seed=0)
    cold = jax.jit(lambda w: central_point(problem, w, initial_vectors(250, 3, jnp.float64), 1.0, 3, 0.9,
                                           iterations=500, cold=True))(p0)
    eta = 2 * 0.95 / float(cold.lam[1])     # two candidates: ηλ2/2 = 0.95
    exact = jax.jit(lambda w: central_point(problem, w, cold.U, eta, 3, 0.9, tol=1e-10))(p0)
    m = int(np.sum(eta * np.asarray(exact.lam) / 2 >= 0.9))
    assert m == 2 and int(exact.held) >= 1
    stage = jax.jit(lambda w, U: central_point(problem, w, U, eta, 3, 0.9, tol=1e-8, columns=jnp.asarray(m),
                                               from_start=True))
    c, s = np.cos(0.6), np.sin(0.6)
    mixed = exact.U.at[:, :2].set(exact.U[:, :2] @ jnp.asarray([[c, -s], [s, c]]))
    flat = lambda p: jax.flatten_util.ravel_pytree(p)[0]
    ready = stage(p0, mixed)
    assert int(ready.hvps) == 0 and int(ready.thirds) == 3
    assert rel_err(flat(ready.velocity), flat(exact.velocity)) <= 1e-9
    assert rel_err(ready.lam[:2], exact.lam[:2]) <= 1e-12
    assert np.abs(np.asarray(ready.X - exact.X)).max() <= 1e-9 * np.abs(np.asarray(exact.X)).max()
    off = stage(p0, mixed + 1e-3 * jax.random.normal(jax.random.PRNGKey(6), mixed.shape, mixed.dtype))
    assert int(off.hvps) > 0 and int(off.thirds) == 6
    assert rel_err(flat(off.velocity), flat(exact.velocity)) <= 1e-8


def test_the_warm_start_extrapolates_the_guards_along_the_line():
    """`WarmStart.at`: through three accepted points of vectors quadratic in t, the quadratic
    extrapolation is exact; with `linear_from`, the columns from there on (an end point's
    guards, whose convergence error the quadratic's weights amplify) are the line through the
    last two points, the others still the quadratic."""
    rng = np.random.default_rng(3)
    a, b, c = (jnp.asarray(rng.standard_normal((40, 3))) for _ in range(3))
    U = lambda t: a + t * b + t ** 2 * c
    start = WarmStart.first(U(0.0), 0.0)
    for t in (0.3, 0.5):
        start = start.next(U(t), jnp.zeros(3), t)
    assert rel_err(start.at(0.7), U(0.7)) <= 1e-12
    mixed = start.at(0.7, linear_from=jnp.asarray(2))
    line = U(0.5) + 0.2 * (U(0.5) - U(0.3)) / 0.2
    assert rel_err(mixed[:, :2], U(0.7)[:, :2]) <= 1e-12
    assert rel_err(mixed[:, 2], line[:, 2]) <= 1e-12
    assert rel_err(mixed[:, 2], U(0.7)[:, 2]) >= 1e-3


def test_a_central_flow_refuses_methods_that_cannot_step_it():
    for method in ("kvaerno5", "filippov", "rkc2", "auto"):
        with pytest.raises(ScenarioError, match="cannot step a central flow"):
            load_solver({"name": "c", "kind": "central-flow", "learning_rate": 0.1, "method": method})
    with pytest.raises(ScenarioError, match="not supported by a central flow"):
        load_solver({"name": "c", "kind": "central-flow", "learning_rate": 0.1, "reference": "dopri8-tight"})


@pytest.mark.slow
@pytest.mark.parametrize("method", ["tsit5", "rock4"])
def test_tracking_follows_the_top_eigenvalues_beneath_the_edge(method):
    """central-mlp's problem at η = 0.05 (edge 2/η = 40, threshold 36) to t = 10: the flow's top
    eigenvalue rises from 4 to 10.6, far beneath the edge, so no column is a candidate; the
    tracked eigenvalues must still be the Hessian's top five (measured within 1e-4 × λ1; a
    tracker that converged only the candidates was 32 % off by t = 10)."""
    from flowsim.run.build import build_run
    from flowsim.config import load_scenario
    sc = load_scenario("scenarios/central-mlp.toml")
    b = build_run(sc.runs[0].settings, sc.runs[0].seed)
    problem, p0 = b.problem, b.params
    unravel = jax.flatten_util.ravel_pytree(p0)[1]
    hessian = jax.jit(jax.hessian(lambda v: problem.rate * problem.loss(unravel(v))))
    integ = central(0.05, 1e-6, k=5, method=method)
    advance, certificate = eqx.filter_jit(integ.advance), eqx.filter_jit(integ.certificate)
    state = integ.init(problem, p0)
    for t in (5.0, 10.0):
        state, stats = advance(problem, state, jnp.asarray(t))
        assert int(stats["status"]) == 1
        cert = certificate(problem, state)
        true = np.linalg.eigvalsh(np.asarray(hessian(jax.flatten_util.ravel_pytree(integ.params(state))[0])))[::-1][:5]
        tracked = np.asarray([float(cert[f"central_eig{i + 1}"]) for i in range(5)])
        assert np.abs(tracked - true).max() <= 1e-3 * true[0], (t, tracked, true)
    assert float(cert["central_thirds"]) == 0


# ---------------------------------------------------------------- stepped by ROCK4


@pytest.mark.slow
def test_rock4_counts_each_stage_of_each_try():
    """The valley's field is formed densely (n = 3: three HVPs an evaluation that tracks a
    column) and its steps at rtol 1e-10 are short enough for ROCK4's lowest degree (s = 1: five
    evaluations a try, the last its end point): the counters are then known from the tries.
    The state's first point is one evaluation more; it and every end point (a guard at least)
    form the Hessian, an inner stage beneath the edge (no column) does not; the
    third-derivative products are one an evaluation from the onset on (the held direction's
    g), none before."""
    problem, p0 = _valley()
    integ = central(ETA, 1e-10, method="rock4")
    state, stats = _flow_to(integ, problem, p0, 12.0)
    cert = eqx.filter_jit(integ.certificate)(problem, state)
    tries, evals = int(stats["steps"]), int(stats["vf_evals"])
    assert evals == 5 * tries and int(stats["rejected"]) > 0
    assert float(cert["central_evals"]) == 1 + evals
    hvps = float(cert["central_hvps"])
    assert hvps % 3 == 0 and 3 * (1 + tries) <= hvps < 3 * float(cert["central_evals"])
    assert float(cert["central_hvps"]) + float(cert["central_thirds"]) == 3 + int(stats["hvps"])
    assert 0 < float(cert["central_thirds"]) < evals


@pytest.mark.slow
def test_rock4_rho_covers_the_valley_jacobian_on_the_flow():
    """ρ = RHO_SAFETY × spectral_bound, from the point alone, covers the spectral radius of
    the central field's Jacobian (jax.jacfwd of the field, the dense eigen-decomposition
    differentiated with it) on the valley's central flow: before the onset (x = 2: −diag(0,
    a, d), radius a) and held (x = 5.9, a = 3.95 just under 2/η = 4: the margin relaxes at
    κ = 2 and u's curvature a gains ½X∇²λ1 = X b²/a = 0.20 from the eigenvector's rotation,
    which the bound leaves to the safety factor: radius 4.15 against bound 3.95; before the
    onset the bound is the floor 2·0.9/η = 3.6)."""
    from flowsim.integrate.central_field import RHO_SAFETY, spectral_bound
    problem, _ = _valley()
    U = jnp.asarray([[0.0], [1.0], [0.0]])
    for x, radius_expected in ((2.0, A0 + B * 2.0), (5.9, A0 + B * 5.9 + 0.2026)):
        w = jnp.asarray([x, 0.0, 0.5])
        point = central_point(problem, {"w": w}, U, ETA, 1, 0.9)
        assert float(point.held) == (x > 5.5)
        field = lambda v: central_point(problem, {"w": v}, U, ETA, 1, 0.9).velocity["w"]
        radius = np.abs(np.linalg.eigvals(np.asarray(jax.jacfwd(field)(w)))).max()
        assert radius == pytest.approx(radius_expected, rel=1e-3)
        bound = float(spectral_bound(point, ETA, 0.9))
        assert radius <= RHO_SAFETY * bound, (x, radius, bound)


@pytest.mark.slow
def test_rock4_central_flow_resumes_bit_identically_from_its_checkpoint_arrays():
    """As tests/test_engine.py for every kind's default: two seeds at η = 1 (seed 1 starts past
    2/η and is held there), seed 1's state stored as arrays at t = 1 and restored goes on to
    t = 2 exactly as the uninterrupted batch (the warm start's history included)."""
    pairs = [make_problem(seed=s) for s in range(2)]
    integ = central(1.0, 1e-8, k=2, method="rock4")
    a, b, stats, stats_b = resumed_beside_uninterrupted(integ, pairs)
    assert (np.asarray(stats["status"]) == 1).all()
    assert np.array_equal(integ.params(a)["W"][1], integ.params(b)["W"][1])
    assert int(stats["steps"][1]) == int(stats_b["steps"][1])
    cert = integ.certificate(pairs[1][0], jax.tree.map(lambda x: x[1], a))
    # seed 1 is held (Σ > 0; `central_held` counts arrivals only): the test covers the third derivatives
    assert float(cert["central_sigma1"]) > 0


# ---------------------------------------------------------------- the tracked block grows and shrinks


def test_guards_do_not_wait_on_the_gap_beneath_the_block():
    """`track`'s guards (the last columns of the block) are converged to `guard_tol` whatever
    their eigenvalue: on a 300 × 300 matrix with eigenvalues 5, 4 (the candidates), 3.9 (the
    guard) and 3.9 − 1e-5 beneath it, the candidates meet the tolerance and are the top two
    eigenvalues (to their residuals' quadratic bound) for fewer products than when the guard is
    converged as a candidate, which waits on the 1e-5 gap."""
    rng = np.random.default_rng(1)
    Q, _ = np.linalg.qr(rng.standard_normal((300, 300)))
    eig = np.concatenate([[5.0, 4.0, 3.9, 3.9 - 1e-5], rng.uniform(0.0, 1.0, 296)])
    H = (Q * eig) @ Q.T
    block = masked_block(lambda v: jnp.asarray(H) @ v)
    U0 = jnp.asarray(Q[:, :3] + 1e-2 * rng.standard_normal((300, 3)))
    run = jax.jit(lambda guards: track(block, U0, 3.5, 1e-8, 1e-3, 300, jnp.asarray(3), guards))
    lam, U, guarded = run(jnp.asarray(1))
    _, _, unguarded = run(jnp.asarray(0))
    lam, U = np.asarray(lam)[:2], np.asarray(U)[:, :2]
    r = np.linalg.norm(H @ U - U * lam, axis=0)
    assert np.all(r <= 1e-8 * 5.0)
    assert np.all(np.abs(lam - eig[:2]) <= r ** 2 / 0.1 + 1e-13)
    assert int(guarded) < int(unguarded)


# L = Σ_i [−c x_i + ½ a_i(x_i) u_i²] + ½ d |z|²: on u = 0 the Hessian is diag(a_1, a_2) on the u's,
# d on the 24 z's, 0 on the x's, and each pair (x_i, u_i) is the valley above, apart. a_1 = 3 + x/2
# reaches the edge 2/η = 4 (η = 0.5) and is held from t1 = 1.5; a_2 = 2.9 + 0.85 s(x/4), s(u) =
# u e^{1−u}, rises above the threshold 0.9·2/η = 3.6 at t ≈ 1.9, peaks at 3.75 (t = 4: never held,
# its rise 0.19 per time unit is beneath κS ≥ 0.5), and falls back under 3.6 at t ≈ 6.4; a_2 < a_1
# throughout (no crossing). So the block an end point tracks (candidates and one guard) has 1, 2, 3
# columns, then 2 again, and x_2 = ct, z = z0 e^{−dt} while x_1 follows the valley's closed form.
def _two_valleys_loss(pred, y):
    w = pred[0]
    x1, u1, x2, u2, z = w[0], w[1], w[2], w[3], w[4:]
    a1 = 3.0 + 0.5 * x1
    s = x2 / 4.0
    a2 = 2.9 + 0.85 * s * jnp.exp(1.0 - s)
    return -C * (x1 + x2) + 0.5 * a1 * u1 ** 2 + 0.5 * a2 * u2 ** 2 + 0.5 * D * jnp.sum(z ** 2)


def _two_valleys():
    zero = jnp.zeros((1, 28))
    problem = Problem(net=_Point(), X=zero, y=zero, X_test=zero, y_test=zero, rate=1.0, loss_kind="callable",
                      ntg_points=1, custom_loss=_two_valleys_loss)
    return problem, {"w": jnp.concatenate([jnp.zeros(4), jnp.linspace(0.5, 1.5, 24)])}


def _two_valleys_closed_form(t):
    kappa = 1.0 / (RELAX_STEPS * ETA)
    s0, s1 = 2.0 / ETA - 3.0, 0.5 * C / kappa
    t1 = (s0 - s1) / (0.5 * C)
    x1 = np.where(t < t1, C * t, C * t1 + (s1 / 0.5) * (1.0 - np.exp(-kappa * (t - t1))))
    return np.concatenate([[x1, 0.0, C * t, 0.0], np.linspace(0.5, 1.5, 24) * np.exp(-D * t)])


@pytest.mark.slow
@pytest.mark.parametrize("method, k", [("tsit5", 3), ("rock4", 3), ("rock4", 2)])
def test_the_block_grows_when_its_guard_becomes_a_candidate_and_shrinks_when_it_leaves(method, k):
    """The block an end point tracks (`WarmStart.columns`: the candidates and a guard) grows from
    1 to 3 columns as a_1 and then a_2 become candidates and shrinks to 2 when a_2 leaves; the
    flow stays on its closed form throughout (the oracle a block tracked whole at every
    evaluation would approach to the same tolerance), and the last tracked column (the z
    cluster, the guard) is never a candidate: no saturated-block note. With max_eigen k = 2 the
    two candidates fill it and the block still has its guard beneath them (capacity k + 1)."""
    from flowsim.integrate.central_field import END_GUARDS
    problem, p0 = _two_valleys()
    integ = central(ETA, 1e-8, k=k, method=method, track_threshold=0.9)
    advance = eqx.filter_jit(integ.advance)
    state = integ.init(problem, p0)
    columns = []
    for t in (1.0, 3.0, 4.0, 9.0, 12.0):
        state, stats = advance(problem, state, jnp.asarray(t))
        assert int(stats["status"]) == 1
        start = state.solver_state.start
        columns.append(int(start.columns(jnp.asarray(ETA), 0.9, END_GUARDS)))
        w = np.asarray(integ.params(state)["w"])
        assert rel_err(w, _two_valleys_closed_form(t)) <= 1e-6, (t, rel_err(w, _two_valleys_closed_form(t)))
        assert ETA * float(start.lam[2]) / 2 < 0.9
    assert columns == [1, 3, 3, 2, 2]
