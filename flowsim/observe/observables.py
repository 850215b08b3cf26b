"""Observables, declared once: `OBSERVABLES` is the registry.

A scenario's `run.observe` list picks observables; each observable yields one or more
archive series. Validation, the disk estimate, the driver and the archive read the
registry, so adding an observable is one entry here. `Reference` holds what the
feature-learning measures compare against (the initial weights and NTG), computed once
per run.

The weight measures ask the network (`flowsim.nn.net.AbstractNet`): a shallow network reports
per hidden node (its weights as (node, feature)), a user's Equinox model
(`flowsim.models.ModuleNet`) per trainable leaf (its weights as one flat vector); the
network's `series_axes` names their axes. Observables of one model family (`family`)
refuse any other network.
"""

import functools
from collections.abc import Callable
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from ..kinds import OBSERVABLES as KINDS
from ..nn.net import AbstractNet
from ..nn.problem import Params, Problem
from .eigen import Eigen, broadened, guards, spectral_density, start_block, top_eigen
from .stability import differenced, gn_sharpness, hessian_matvec


class Reference(eqx.Module):
    params0: Params     # the initial trainable weights
    ntg0: jax.Array     # (p, p)


def reference(problem: Problem, params: Params) -> Reference:
    return Reference(params0=params, ntg0=problem.ntg(params))


# The carried state of the Hessian observables: the eigen-tracker's Ritz vectors (b × n), the
# next checkpoint's warm start (`memory`, `observe_carried`).
HESSIAN_VECTORS = "hessian_vectors"
# `preconditioned_sharpness`'s own warm start (its operator P^{-1/2} H P^{-1/2} is another)
PRECONDITIONED_VECTORS = "preconditioned_vectors"
# hessian_density: Rademacher probes (at least run.hessian_k: each holds a deflated pair's node), Lanczos steps per probe, grid points, and the Gaussian
# width of each node as a fraction of the nodes' span (PyHessian: 1 probe, 100 steps)
DENSITY_PROBES, DENSITY_STEPS, DENSITY_GRID, DENSITY_WIDTH = 8, 32, 128, 0.01


def tracked(problem: Problem, names: tuple[str, ...]) -> int:
    """The Hessian eigenvalues the observables `names` track: `run.hessian_k` with
    `hessian_top` or `hessian_density` (which deflates them), 1 for `sharpness` alone, 0
    without any."""
    return _tracked(names, problem.hessian_k)


def _tracked(names: tuple[str, ...], hessian_k: int) -> int:
    return hessian_k if {"hessian_top", "hessian_density"} & set(names) else int("sharpness" in names)


def memory(problem: Problem, params: Params, names: tuple[str, ...]) -> dict[str, jax.Array]:
    """The observables' carried state at a cold start: a fixed pseudo-random start block for
    the eigen-tracker when `sharpness` or `hessian_top` is observed, and one for
    `preconditioned_sharpness`'s top eigenvalue, else nothing."""
    k = tracked(problem, names)
    n = sum(x.size for x in jax.tree.leaves(params))
    dtype = jax.tree.leaves(params)[0].dtype
    out = {}
    if k:
        why = hessian_k_refusal(names, problem.hessian_k, n)
        if why:
            raise ValueError(why)
        out[HESSIAN_VECTORS] = start_block(n, k + guards(k), dtype)
    if "preconditioned_sharpness" in names:
        if 3 * (1 + guards(1)) > n:
            raise ValueError(hessian_k_refusal(("sharpness",), 1, n))
        out[PRECONDITIONED_VECTORS] = start_block(n, 1 + guards(1), dtype, jax.random.PRNGKey(1))
    return out


def hessian_k_refusal(names: tuple[str, ...], hessian_k: int, n: int) -> str | None:
    """Why a network of n trainable parameters cannot track `run.hessian_k` eigenvalues for
    the observables `names` (the tracker's basis of 3·(k + guards) vectors must fit in it),
    or None."""
    k = _tracked(names, hessian_k)
    if not k or 3 * (k + guards(k)) <= n:
        return None
    most = max((j for j in range(1, k) if 3 * (j + guards(j)) <= n), default=0)
    return (f"`run.hessian_k` = {k}: tracking {k} Hessian eigenvalues and {guards(k)} guards needs at least "
            f"{3 * (k + guards(k))} trainable parameters, and the network has {n}; "
            + (f"ask for at most {most}" if most else "it is too small for the Hessian observables"))


class Snapshot:
    """One checkpoint of one seed as the observables read it. The NTG and the Hessian's top
    eigenpairs are computed once at trace time however many observables ask for them;
    `products` counts the Hessian-vector products the observation takes."""

    def __init__(self, problem: Problem, params: Params, ref: Reference | None, names: tuple[str, ...] = (),
                 carried: dict[str, jax.Array] | None = None, precond: Params | None = None,
                 at: tuple[jax.Array, Params] | None = None):
        self.problem, self.params, self.ref, self.names, self.precond = problem, params, ref, names, precond
        self.at = at
        self.carried = memory(problem, params, names) if carried is None else carried
        self.products = jnp.zeros((), jnp.int32)

    @functools.cached_property
    def ntg(self) -> jax.Array:
        return self.problem.ntg(self.params)

    @functools.cached_property
    def _differences(self) -> bool:
        """Whether the observation takes Hessian products and they are differenced gradients
        (`flowsim.observe.stability.differenced`): their base point ∇L(w) is then computed
        with the loss, in one pass."""
        products = tracked(self.problem, self.names) or "preconditioned_sharpness" in self.names
        return bool(products) and differenced(self.problem, jax.tree.leaves(self.params)[0].dtype)

    @functools.cached_property
    def _loss_and_gradient(self) -> tuple[jax.Array, jax.Array]:
        """L and the flat ∇L at the weights: the method's own (`at`) or one gradient pass."""
        value, grad = jax.value_and_grad(self.problem.loss)(self.params) if self.at is None else self.at
        return value, ravel_pytree(grad)[0]

    @functools.cached_property
    def loss(self) -> jax.Array:
        """The training loss: the method's own (`at`: GD's look-ahead) or, beside differenced
        Hessian products, the value of the gradient pass that they need anyway (on
        cohen-scale-quick's GD rows the loss's own forward pass was a sixth of observing
        `loss` and `sharpness`)."""
        if self.at is not None or self._differences:
            return self._loss_and_gradient[0]
        return self.problem.loss(self.params)

    @functools.cached_property
    def matvec(self):
        """v ↦ ∇²L·v on flat vectors (`hessian_matvec`), one for every observable here."""
        return hessian_matvec(self.problem, self.params,
                              self._loss_and_gradient[1] if self._differences else None)[0]

    @functools.cached_property
    def hessian(self) -> Eigen:
        """The tracked top eigenpairs of ∇²L (unscaled), from the carried vectors."""
        eig = top_eigen(self.matvec, self.carried[HESSIAN_VECTORS], tracked(self.problem, self.names),
                        self.problem.eigen_rtol)
        self.products = self.products + eig.products.astype(jnp.int32)
        return eig

    @property
    def shares_hessian(self) -> bool:
        """Whether `preconditioned` is the Hessian's own solve: P = I (`precond` None: GD, the
        flow, momentum) beside an observable that tracks the Hessian's top eigenvalues, whose
        first is the same eigenvalue to the same accuracy (one solve instead of two)."""
        return self.precond is None and HESSIAN_VECTORS in self.carried

    @functools.cached_property
    def preconditioned(self) -> Eigen:
        """The top eigenpair of P^{-1/2} ∇²L P^{-1/2} (unscaled), P the member's preconditioner
        (`precond`; None: P = I, the Hessian itself), from its own carried vectors, or the
        Hessian's solve where it `shares_hessian`."""
        if self.shares_hessian:
            return self.hessian
        d = None if self.precond is None else ravel_pytree(self.precond)[0]
        eig = top_eigen(self.matvec, self.carried[PRECONDITIONED_VECTORS], 1, self.problem.eigen_rtol, precond=d)
        self.products = self.products + eig.products.astype(jnp.int32)
        return eig


# The axes of a series that the network measures: its `series_axes` names them.
NET_AXES = None


@dataclass(frozen=True)
class Observable:
    name: str
    # series it writes -> axis names of one checkpoint's value (NET_AXES: the network's)
    series: dict[str, tuple[str, ...] | None]
    row_size: Callable[[int, int, int], int]   # (m, p, d) -> values per checkpoint row (disk estimate)
    fn: Callable[[Snapshot], dict[str, jax.Array]]

    @property
    def family(self) -> str:
        """"shallow": defined for the one-hidden-layer networks only (`flowsim.kinds`)."""
        return KINDS[self.name].family


def _accuracy(pred: jax.Array, y: jax.Array) -> jax.Array:
    """The fraction of right answers, in the run's dtype (a mean of booleans is float32 in
    JAX whatever the run's precision)."""
    if y.shape[-1] == 1:  # binary labels coded by sign
        return jnp.mean((jnp.sign(pred[:, 0]) == jnp.sign(y[:, 0])).astype(pred.dtype))
    return jnp.mean((jnp.argmax(pred, -1) == jnp.argmax(y, -1)).astype(pred.dtype))


def _ntg_change(s: Snapshot) -> dict[str, jax.Array]:
    delta = s.ntg - s.ref.ntg0
    return {"ntg_change_spectral": jnp.max(jnp.abs(jnp.linalg.eigvalsh(delta))),
            "ntg_change_frobenius": jnp.linalg.norm(delta)}


def _hidden(s: Snapshot) -> dict[str, jax.Array]:
    # Chen et al. Fig. 4 scatter (x₂ = a training point when no test set)
    X, X_test, W = s.problem.X, s.problem.X_test, s.params["W"]
    probes = jnp.concatenate([X[:1], X_test[:1] if X_test.shape[0] else X[1:2]])
    return {"hidden": (probes @ W.T).T / jnp.sqrt(probes.shape[-1])}


def _sharpness(s: Snapshot) -> dict[str, jax.Array]:
    rate, eig = s.problem.rate, s.hessian
    return {"sharpness": rate * eig.values[0], "sharpness_residual": rate * eig.residuals[0]}


def _preconditioned_sharpness(s: Snapshot) -> dict[str, jax.Array]:
    rate, eig = s.problem.rate, s.preconditioned
    return {"preconditioned_sharpness": rate * eig.values[0], "preconditioned_sharpness_error": rate * eig.errors[0]}


def _hessian_top(s: Snapshot) -> dict[str, jax.Array]:
    rate, eig, k = s.problem.rate, s.hessian, s.problem.hessian_k
    return {"hessian_top": rate * eig.values[:k], "hessian_top_error": rate * eig.errors[:k]}


def _hessian_density(s: Snapshot) -> dict[str, jax.Array]:
    """Stochastic Lanczos quadrature of ∇²L (rate units) from a fixed key (the same probes
    at every checkpoint and in a resumed run), the tracked top eigenpairs deflated."""
    flat = ravel_pytree(s.params)[0]
    eig, k = s.hessian, s.problem.hessian_k
    nodes, weights = spectral_density(s.matvec, flat.size, flat.dtype, max(DENSITY_PROBES, k), DENSITY_STEPS,
                                      jax.random.PRNGKey(0), (eig.values[:k], eig.vectors[:k]))
    s.products = s.products + DENSITY_PROBES * DENSITY_STEPS
    nodes = s.problem.rate * nodes
    lo, hi = jnp.min(nodes), jnp.max(nodes)
    sigma = DENSITY_WIDTH * jnp.maximum(hi - lo, jnp.finfo(flat.dtype).tiny ** 0.5)
    grid = jnp.linspace(lo - 5 * sigma, hi + 5 * sigma, DENSITY_GRID, dtype=flat.dtype)
    return {"hessian_density": broadened(nodes, weights, grid, sigma), "hessian_density_grid": grid,
            "hessian_density_nodes": nodes, "hessian_density_weights": weights}


def _scalar_row(m: int, p: int, d: int) -> int:
    return 2   # the estimate counts two values per scalar observable (an upper bound)


# In the order flowsim.kinds declares them (the order validation lists them). The change measures (ntg_change, weight_change)
# read the run's `Reference`.
OBSERVABLES: dict[str, Observable] = {o.name: o for o in (
    Observable("loss", {"loss": ()}, _scalar_row,
               lambda s: {"loss": s.loss}),
    Observable("test_loss", {"test_loss": ()}, _scalar_row,
               lambda s: {"test_loss": s.problem.test_loss(s.params)}),
    Observable("accuracy", {"accuracy": ()}, _scalar_row,
               lambda s: {"accuracy": _accuracy(s.problem.net(s.params, s.problem.X), s.problem.y)}),
    Observable("test_accuracy", {"test_accuracy": ()}, _scalar_row,
               lambda s: {"test_accuracy": _accuracy(s.problem.net(s.params, s.problem.X_test), s.problem.y_test)}),
    Observable("ntg", {"ntg": ("point", "point_b")}, lambda m, p, d: p * p,
               lambda s: {"ntg": s.ntg}),
    # ascending: ntg_eig[..., 0] is eig_min
    Observable("ntg_eig", {"ntg_eig": ("eig",)}, lambda m, p, d: p,
               lambda s: {"ntg_eig": jnp.linalg.eigvalsh(s.ntg)}),
    Observable("ntg_change", {"ntg_change_spectral": (), "ntg_change_frobenius": ()}, _scalar_row, _ntg_change),
    Observable("weight_change", {"weight_change": NET_AXES}, lambda m, p, d: m,
               lambda s: {"weight_change": s.problem.net.weight_change(s.params, s.ref.params0)}),
    # per unit of every dense layer: ‖w_i(t) − w_i(0)‖ of each unit's incoming weights (the
    # rows of each 2-D trainable leaf; a shallow network's hidden nodes)
    Observable("unit_change", {"unit_change": NET_AXES}, lambda m, p, d: m,
               lambda s: {"unit_change": s.problem.net.unit_change(s.params, s.ref.params0)}),
    # Caron et al.'s node importance λ_j‖w_j‖²
    Observable("importance", {"importance": ("node",)}, lambda m, p, d: m,
               lambda s: {"importance": s.problem.net.lam * jnp.sum(s.params["W"] ** 2, axis=-1)}),
    Observable("weights", {"weights": NET_AXES}, lambda m, p, d: m * d,
               lambda s: {"weights": s.problem.net.weights(s.params)}),
    # rate·λ_max of the loss Hessian (Lanczos) and of its Gauss–Newton part: GD with step η
    # is linearly stable iff η·sharpness < 2 (flowsim/observe/stability.py)
    Observable("sharpness", {"sharpness": (), "sharpness_residual": ()}, _scalar_row, _sharpness),
    Observable("gn_sharpness", {"gn_sharpness": ()}, _scalar_row,
               lambda s: {"gn_sharpness": gn_sharpness(s.problem, s.params)}),
    # rate·λ_max(P^{-1/2} ∇²L P^{-1/2}), P the diagonal preconditioner of the leg's step (the
    # denominator of RMSProp, Adam and their flows; I for the others, where it is the
    # sharpness), and the bound on its error: the leg is linearly stable below its own edge
    # (`flowsim.kinds.solvers.edge`: 2/η for RMSProp, (2 + 2β₁)/((1 − β₁)η) for Adam)
    Observable("preconditioned_sharpness", {"preconditioned_sharpness": (), "preconditioned_sharpness_error": ()},
               _scalar_row, _preconditioned_sharpness),
    # the k = run.hessian_k largest Hessian eigenvalues in sharpness's units, descending, and
    # the bound on each one's error (flowsim/observe/eigen.py)
    Observable("hessian_top", {"hessian_top": ("hessian_eig",), "hessian_top_error": ("hessian_eig",)},
               lambda m, p, d: 2 * 64, _hessian_top),   # (run.hessian_k ≤ 64)
    # the Hessian's spectral density (rate units) on its own grid per checkpoint, and the
    # quadrature it is drawn from
    Observable("hessian_density", {"hessian_density": ("density_grid",), "hessian_density_grid": ("density_grid",),
                                   "hessian_density_nodes": ("density_probe", "density_node"),
                                   "hessian_density_weights": ("density_probe", "density_node")},
               lambda m, p, d: 2 * DENSITY_GRID + 2 * DENSITY_PROBES * (DENSITY_STEPS + 1), _hessian_density),
    # preactivations h_i(x) = w_i·x/√d at two probes: the first training and first test point
    Observable("hidden", {"hidden": ("node", "probe")}, lambda m, p, d: 2 * m, _hidden),
)}


def observe_carried(problem: Problem, params: Params, ref: Reference | None, names: tuple[str, ...],
                    carried: dict[str, jax.Array], precond: Params | None = None,
                    at: tuple[jax.Array, Params] | None = None
                    ) -> tuple[dict[str, jax.Array], dict[str, jax.Array], jax.Array]:
    """The series of the observables `names` at `params` (one checkpoint, one seed), in
    the registry's order, from the state `carried` from the checkpoint before (`memory` at
    the first); returns them, the state to carry to the next checkpoint, and the
    Hessian-vector products taken. `ref` is needed only by the change measures
    (ntg_change, weight_change). `precond`: the member's preconditioner
    (`AbstractIntegrator.preconditioner`), read by `preconditioned_sharpness`; `at`: L and ∇L
    at `params` where the method has them (`AbstractIntegrator.loss_and_gradient`)."""
    snapshot = Snapshot(problem, params, ref, names, carried, precond, at)
    want = set(names)
    out: dict[str, jax.Array] = {}
    for name, obs in OBSERVABLES.items():
        if name in want:
            out |= obs.fn(snapshot)
    after = {HESSIAN_VECTORS: snapshot.hessian.vectors} if HESSIAN_VECTORS in snapshot.carried else {}
    if PRECONDITIONED_VECTORS in snapshot.carried:     # (a shared solve leaves its own start as it was)
        after[PRECONDITIONED_VECTORS] = (snapshot.carried[PRECONDITIONED_VECTORS] if snapshot.shares_hessian
                                         else snapshot.preconditioned.vectors)
    return out, after, snapshot.products


def observe(problem: Problem, params: Params, ref: Reference | None, names: tuple[str, ...]) -> dict[str, jax.Array]:
    """`observe_carried`'s series from a cold start."""
    return observe_carried(problem, params, ref, names, memory(problem, params, names))[0]


def series_axes(names: tuple[str, ...], net: AbstractNet) -> dict[str, tuple[str, ...]]:
    """Series name → axis names, for the observables `names` of the network `net` (which
    names the axes of its weight measures)."""
    return {s: net.series_axes[s] if axes is NET_AXES else axes
            for n in names for s, axes in OBSERVABLES[n].series.items()}
