"""The eigen-tracker (flowsim/observe/eigen.py) and the Hessian observables built on it,
against dense eigen-decompositions: `top_eigen` on matrices with chosen spectra (clusters, a
vanishing gap beneath the block, a diagonal preconditioner) and `sharpness`, `hessian_top`,
`hessian_density` on small networks against `eigvalsh` of the autodiff Hessian."""

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from conftest import make_problem
from helpers import call_cli

import flowsim
from flowsim.observe import stability
from flowsim.observe.eigen import error_bounds, start_block, top_eigen
from flowsim.observe.observables import DENSITY_PROBES, HESSIAN_VECTORS, memory, observe, observe_carried
from flowsim.run.driver import Interrupted
from flowsim.run.session import run_scenario


def _matrix(spectrum, seed=0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((spectrum.size, spectrum.size)))
    return jnp.asarray(Q @ np.diag(spectrum) @ Q.T)


def _tracker(A, k, b, rtol, precond=None, X0=None, refine_guards=False):
    n = A.shape[0]
    X0 = start_block(n, b, A.dtype) if X0 is None else X0
    return jax.jit(lambda X: top_eigen(lambda v: A @ v, X, k, rtol, precond=precond,
                                       refine_guards=refine_guards))(X0)


@pytest.mark.parametrize("k, refine_guards", [(1, False), (5, False), (5, True)])
def test_top_k_to_1e_12_and_the_default_accuracy_honoured(k, refine_guards):
    """A spectrum with a pair 1e-4 apart at the top and a gap of 1e-6 between the k-th and
    the (k+1)-th (beneath the block's first guard): both accuracies hold against eigvalsh,
    and the reported bound is a true bound; the guards expanded or not."""
    rng = np.random.default_rng(1)
    top = np.array([100.0, 100.0 - 1e-2, 60.0, 50.0, 45.0, 45.0 - 4.5e-5, 30.0, 29.0])
    spectrum = np.concatenate([top, rng.uniform(-5, 10, 192)])
    A = _matrix(spectrum)
    exact = np.sort(np.linalg.eigvalsh(np.asarray(A)))[::-1][:k]
    for rtol, within in ((1e-12, 1e-8), (1e-4, 1e-4)):
        e = _tracker(A, k, k + 2, rtol, refine_guards=refine_guards)
        theta = np.asarray(e.values[:k])
        assert bool(e.converged)
        assert np.all(np.abs(theta - exact) <= within * exact), (rtol, theta - exact)
        assert np.all(np.abs(theta - exact) <= np.asarray(e.errors[:k]) + 1e-13 * exact)   # the bound bounds
        assert np.all(np.asarray(e.errors[:k]) <= rtol * theta)
        # the first Rayleigh–Ritz step's products, then at most one a column an iteration and
        # at least one (a locked column, within rtol, takes none)
        most = k + 2 + (k + 2 if refine_guards else k) * int(e.iterations)
        assert k + 2 + int(e.iterations) <= int(e.products) <= most
        if k == 5 and not refine_guards:
            assert int(e.products) < most      # the pairs converge apart: locking saves products


def test_a_warm_start_from_a_nearby_operator_takes_fewer_products():
    rng = np.random.default_rng(2)
    spectrum = np.concatenate([[50.0, 40.0, 30.0], rng.uniform(0, 10, 197)])
    A = _matrix(spectrum)
    E = rng.standard_normal(A.shape) * 1e-3
    B = A + jnp.asarray(E + E.T) / 2
    cold = _tracker(A, 1, 3, 1e-10)
    warm = _tracker(B, 1, 3, 1e-10, X0=cold.vectors)
    again = _tracker(B, 1, 3, 1e-10)
    exact = np.linalg.eigvalsh(np.asarray(B))[-1]
    assert abs(float(warm.values[0]) - exact) <= 1e-10 * exact
    assert int(warm.products) < int(again.products)


def test_the_preconditioned_operator():
    """precond = d: the top eigenvalues of D^{-1/2} A D^{-1/2}."""
    rng = np.random.default_rng(3)
    A = _matrix(np.concatenate([[20.0, 15.0, 9.0], rng.uniform(-1, 5, 97)]))
    d = jnp.asarray(rng.uniform(0.2, 3.0, 100))
    exact = np.sort(np.linalg.eigvalsh(np.asarray(A / jnp.sqrt(d)[:, None] / jnp.sqrt(d)[None, :])))[::-1][:3]
    e = _tracker(A, 3, 5, 1e-12, precond=d)
    assert np.all(np.abs(np.asarray(e.values[:3]) - exact) <= 1e-10 * exact)


def test_the_error_bound_is_quadratic_with_a_gap_and_linear_without():
    theta, res = jnp.array([10.0, 5.0, 4.999]), jnp.array([1e-3, 1e-3, 1e-3])
    e = np.asarray(error_bounds(theta, res))
    assert e[0] == pytest.approx(1e-6 / (5.0 - 1e-3)) and e[1] == 1e-3 and e[2] == 1e-3


def test_bad_block_sizes_are_refused():
    with pytest.raises(ValueError, match="need 0 < k < b and 3·b ≤ n"):
        top_eigen(lambda v: v, jnp.ones((3, 6)), 1)
    with pytest.raises(ValueError, match="need 0 < k < b"):
        top_eigen(lambda v: v, jnp.ones((3, 60)), 3)


def _dense_hessian(problem, params):
    flat, unravel = ravel_pytree(params)
    H = jax.hessian(lambda w: problem.loss(unravel(w)))(flat)
    return np.linalg.eigvalsh(np.asarray(H))[::-1]


def _network(**kw):
    problem, p0 = make_problem(n=20, d=5, m=30, activation="tanh", scaling="mean-field", output="trained", **kw)
    return problem, p0     # rate ≠ 1 (mean-field): the observables' units are checked too


def _products(problem, params):
    hvp, flat = stability.hessian_matvec(problem, params)
    exact = jax.linearize(lambda w: ravel_pytree(problem.grad(ravel_pytree(params)[1](w)))[0], flat)[1]
    return hvp, exact, flat


@pytest.mark.slow
def test_hessian_products_difference_gradients_only_where_the_loss_is_smooth_and_the_accuracy_coarse():
    """A smooth network in float64 at `eigen_rtol` ≥ 1e-5: forward differences of gradients,
    within 1e-6 of the linearised product (measured: 1e-7), along a random and a scaled vector
    (the step is ε along the unit vector). A ReLU network, a finer `eigen_rtol`, a user's loss
    or float32: the linearised product itself."""
    problem, p0 = _network()
    hvp, exact, flat = _products(problem, p0)
    assert stability.differenced(problem, flat.dtype)
    v = jnp.asarray(np.random.default_rng(0).normal(size=flat.size))
    for u in (v, 1e-3 * v):
        assert float(jnp.linalg.norm(hvp(u) - exact(u))) <= 1e-6 * float(jnp.linalg.norm(exact(u)))
    assert np.array_equal(np.asarray(hvp(jnp.zeros_like(flat))), np.zeros(flat.size))
    relu, r0 = make_problem(n=20, d=5, m=30, activation="relu")
    fine = dataclasses.replace(problem, eigen_rtol=1e-6)
    own = dataclasses.replace(problem, loss_kind="callable", custom_loss=lambda f, y: 0.5 * jnp.sum((f - y) ** 2))
    single, s0 = make_problem(n=20, d=5, m=30, activation="tanh", dtype=jnp.float32)
    for other, params in ((relu, r0), (fine, p0), (own, p0), (single, s0)):
        hvp, exact, flat = _products(other, params)
        assert not stability.differenced(other, flat.dtype)
        u = jnp.ones_like(flat)
        assert np.array_equal(np.asarray(hvp(u)), np.asarray(exact(u)))


@pytest.mark.parametrize("rtol, within", [(1e-12, 1e-8), (1e-4, 1e-4)])
def test_sharpness_and_hessian_top_against_eigvalsh(rtol, within):
    problem, p0 = _network()
    problem = dataclasses.replace(problem, eigen_rtol=rtol, hessian_k=5)
    exact = problem.rate * _dense_hessian(problem, p0)[:5]
    values = jax.jit(lambda p: observe(problem, p, None, ("sharpness", "hessian_top")))(p0)
    top = np.asarray(values["hessian_top"])
    assert top.shape == (5,)
    assert np.all(np.abs(top - exact) <= within * np.abs(exact)), (top - exact) / exact
    assert float(values["sharpness"]) == top[0]
    assert np.all(np.asarray(values["hessian_top_error"]) <= rtol * np.abs(top))


def test_the_carried_vectors_warm_the_next_observation():
    """observe_carried: the block it returns, given back at a nearby point, gives the same
    eigenvalues (to the accuracy asked) for fewer products than a cold start."""
    problem, p0 = _network()
    problem = dataclasses.replace(problem, eigen_rtol=1e-10)
    names = ("sharpness",)
    step = jax.jit(lambda p, c: observe_carried(problem, p, None, names, c))
    start = memory(problem, p0, names)
    assert start[HESSIAN_VECTORS].shape == (2, ravel_pytree(p0)[0].size)
    _, after, cold = step(p0, start)
    p1 = jax.tree.map(lambda w, g: w - 1e-2 * g, p0, problem.grad(p0))
    v_warm, _, warm = step(p1, after)
    v_cold, _, cold1 = step(p1, start)
    exact = problem.rate * _dense_hessian(problem, p1)[0]
    assert abs(float(v_warm["sharpness"]) - exact) <= 1e-8 * exact
    assert abs(float(v_cold["sharpness"]) - exact) <= 1e-8 * exact
    assert int(warm) < int(cold1) and int(cold) > 0


@pytest.mark.slow
def test_hessian_density_matches_the_spectrum_mean_and_variance():
    """SLQ's moments are Hutchinson estimates of tr(H)/n and tr(H²)/n, the top 5 deflated:
    within 5 % of the dense spectrum's mean and variance, on a network trained near a
    minimum: more data than weights, so that the Hessian is nearly the Gauss–Newton matrix,
    positive definite (a few outliers over a bulk, where plain Hutchinson at 8 probes is tens
    of per cent off)."""
    problem, p0 = make_problem(n=200, d=5, m=10, activation="tanh", scaling="mean-field", output="trained")
    descend = jax.jit(lambda p: jax.tree.map(lambda w, g: w - 0.5 / problem.rate * g, p, problem.grad(p)))
    for _ in range(300):
        p0 = descend(p0)
    values = jax.jit(lambda p: observe(problem, p, None, ("hessian_density",)))(p0)
    lam = problem.rate * _dense_hessian(problem, p0)
    nodes, weights = np.asarray(values["hessian_density_nodes"]), np.asarray(values["hessian_density_weights"])
    assert nodes.shape[0] == DENSITY_PROBES
    assert abs(weights.sum() - 1.0) <= 1e-12
    mean, second = np.sum(weights * nodes), np.sum(weights * nodes ** 2)
    assert abs(mean - lam.mean()) <= 0.05 * abs(lam.mean())
    assert abs((second - mean ** 2) - lam.var()) <= 0.05 * lam.var()
    grid, dens = np.asarray(values["hessian_density_grid"]), np.asarray(values["hessian_density"])
    assert abs(np.trapezoid(dens, grid) - 1.0) <= 1e-3          # a density on its grid
    assert grid[0] <= lam.min() and grid[-1] >= lam.max()


# ---------------------------------------------------------------- through the driver

TINY = Path(__file__).resolve().parent / "scenarios" / "tiny.toml"
OBSERVED = ["seeds=[0, 1]", 'sweep."model.scaling"=[{kind="ntk"}]', "run.checkpoints={count=12}",
            'run.observe=["loss", "sharpness", "hessian_top", "hessian_density"]', "run.hessian_k=3"]


@pytest.mark.slow
def test_the_carried_vectors_resume_bit_for_bit_and_the_series_read_back(tmp_path):
    """Two seeds, flow and GD, observing the Hessian series: a run stopped after a few chunks
    and resumed (its Ritz vectors restored from the checkpoint) records what the uninterrupted
    run records, bit for bit, with the same observation products; `flowsim.open` and xarray
    read the series with their axes, and the observed products are counted apart."""
    whole, cut = tmp_path / "whole.h5", tmp_path / "cut.h5"
    run_scenario(TINY, OBSERVED, output=whole, progress=False, report=lambda s: None)
    checks = iter(range(1000))
    with pytest.raises(Interrupted):
        run_scenario(TINY, OBSERVED, output=cut, progress=False, report=lambda s: None,
                     should_stop=lambda: next(checks) >= 2)
    run_scenario(TINY, OBSERVED, output=cut, resume=True, progress=False, report=lambda s: None)
    series = ("sharpness", "hessian_top", "hessian_top_error", "hessian_density", "hessian_density_grid")
    with flowsim.open(whole) as a, flowsim.open(cut) as b:
        for name, run in a.runs.items():
            for solver, sv in run.solvers.items():
                other = b.runs[name].solvers[solver]
                for s in series:
                    assert np.array_equal(np.asarray(sv[s]), np.asarray(other[s])), (name, solver, s)
                assert sv.stats["observe_hvps"] == other.stats["observe_hvps"] > 0
                top = np.asarray(sv["hessian_top"])
                assert top.shape[1] == 3 and np.all(np.diff(top, axis=1) <= 0)
                assert np.array_equal(np.asarray(sv["sharpness"]), top[:, 0])
        ds = a.to_xarray(solver="tsit5")
        assert ds["hessian_top"].dims[-1] == "hessian_eig" and ds["hessian_density"].dims[-1] == "density_grid"
        assert ds["hessian_top"].shape[-1] == 3 and ds["hessian_density_nodes"].dims[-2:] == ("density_probe",
                                                                                               "density_node")


def test_bad_hessian_settings_are_refused_by_the_command(tmp_path):
    """`run.hessian_k` out of its range, or more eigenvalues than the network can hold a
    block for: a message naming the key, the value and what is allowed, exit status 2,
    nothing run."""
    tiny = ["seeds=[0]", 'sweep."model.scaling"=[{kind="ntk"}]']
    for value, says in (("0", "`run.hessian_k` = 0 is out of range; allowed: an integer in [1, 64]"),
                        ("40", "`run.hessian_k` = 40: tracking 40 Hessian eigenvalues and 20 guards needs at least "
                               "180 trainable parameters, and the network has 96; ask for at most 21")):
        sets = [a for s in [*tiny, f"run.hessian_k={value}", 'run.observe=["hessian_top"]'] for a in ("--set", s)]
        rc, _, err = call_cli("run", TINY, "-o", tmp_path / "bad.h5", "-q", *sets)
        assert rc == 2 and says in err, err
    rc, _, err = call_cli("run", TINY, "-o", tmp_path / "bad.h5", "-q", "--set", "run.eigen_rtol=0.5")
    assert rc == 2 and "`run.eigen_rtol` = 0.5 is out of range; allowed: a number in [1e-14, 0.1]" in err, err
