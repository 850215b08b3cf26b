"""The central flow of GD at step η (Cohen, Damian, Talwalkar, Kolter, Lee, ICLR 2025): the
path GD's time average follows at the edge of stability, integrated under error control.

With L̃ = rate·L (GD on L moves W ← W − η·rate·∇L, i.e. GD on L̃ with step η) and flowsim's
time t = kη,

    dW/dt = −∇L̃(W) − ½ ∇_W⟨∇²L̃(W), Σ⟩,   Σ = U X Uᵀ, X ⪰ 0 (k×k),

U the top k eigenvectors of ∇²L̃ (λ descending). With g_ij = ∇_W(u_iᵀ ∇²L̃ u_j) (u held
fixed: third derivatives, from nested jvp/grad), the stability margins S = 2/η − UᵀHU move as
dS/dt = α + ½ β[X] with α_ij = ⟨g_ij, ∇L̃⟩ and β_ijab = ⟨g_ij, g_ab⟩. X solves the
complementarity problem (`flowsim.integrate.sdcp`)

    X ⪰ 0,   Y = κ S + α + ½ β[X] ⪰ 0,   ⟨X, Y⟩ = 0:

while a direction is held (X > 0 on it) its margin obeys dS/dt = −κS, so it relaxes onto
2/η at rate κ, and a direction with S > 0 that is not rising faster than κS is free. κ → ∞ is
the paper's continuous-time problem (S ≥ 0, dS/dt ⪰ 0 on the held directions); a finite κ
keeps the field a function of W alone (no state beyond W) and absorbs the integration's
drift off 2/η, which the κ → ∞ problem lets accumulate. The published codes have the same
relaxation in discrete form: their substep dt enters the problem as α + S/dt (κ = 1/dt).
Here κ = 1/η: a margin closes over one GD step (`RELAX_STEPS`).
Directions whose ηλ/2 is below `threshold` are taken as free (no third derivatives are
computed for them): below the edge of stability X = 0 and the field is the gradient flow's.

Predicted time-averaged loss: L + ½⟨∇²L̃, Σ⟩/rate = L + ½ Σ_i λ_i X_ii / rate.

Integration: an explicit Runge–Kutta method of Diffrax (`inner`, Tsit5 by default) on this
field, under flowsim's PID control. The eigenvectors are solver state: each evaluation
starts LOBPCG from the last accepted step's U (warm start), so a checkpoint holds them and a
resumed run is the same computation. The field is continuous but has a kink where the set of
held directions (the rank of X) changes; such a change inside a step is an event: the step is
rejected (its error reported as huge, so the controller shrinks it by its factormin) until
the step that holds the change is no longer than `EVENT_TOL`·η, and then accepted and counted
(`events`). The event is thus located to `EVENT_TOL`·η in time, not stepped over.
Measured on the valley of tests/test_central.py (one event, the onset): at rtol 1e-6 and 1e-8
the located run ends 3.5e-7 and 8.8e-10 from the closed form at t = 12, in 77 and 98 steps
(33 and 31 rejected); with location switched off, 3.5e-7 and 8.2e-10 in 29 and 65 steps. The
relaxed field is continuous across the event (only its derivative jumps), so the error
control alone already resolves it there: the location costs about 30 rejected tries per
event and buys the event's time, not accuracy.
"""

from typing import ClassVar, NamedTuple

import diffrax as dfx
import equinox as eqx
import jax
import jax.numpy as jnp
from jax.experimental.sparse.linalg import lobpcg_standard
from jax.flatten_util import ravel_pytree

from ..problem import Params, Problem
from . import sdcp

# A held margin relaxes onto 2/η over this many GD steps (κ = 1/(RELAX_STEPS·η)).
RELAX_STEPS = 1.0
# LOBPCG's tolerance: an eigenpair is converged when its residual is below this share of
# (|λ| + ‖Hu‖) (jax's criterion is tol·10·n·(…), hence the division by 10·n below). The
# eigenvalues are then good to about (1e-6 λ)²/gap, and on central-mlp to t = 40 (past the
# onset) the weights moved by 2e-11 against 1e-10, for 115 HVPs per evaluation against 247.
TRACK_TOL = 1e-6
# LOBPCG iterations at most per evaluation (warm-started, it converges in a few), and at t = 0.
TRACK_ITERATIONS = 50
TRACK_ITERATIONS_INIT = 500
# Models this small (n ≤ DENSE·k: LOBPCG needs n > 5k) form the Hessian and use eigh.
DENSE = 5
# An accepted step that holds a change of the held set is at most this many GD steps long.
EVENT_TOL = 1e-6
# An eigenvalue of X above this share of X's largest (and above ZERO_X) counts as held.
RANK_SHARE = 1e-8
# The error a step across an event reports: large and finite (a non-finite error is counted
# by FlowIntegrator as a blow-up).
_EVENT_ERROR = 1e30


class CentralPoint(NamedTuple):
    velocity: Params
    U: jax.Array        # (n, k) eigenvectors of ∇²L̃, eigenvalues descending
    lam: jax.Array      # (k,)
    X: jax.Array        # (k, k), Σ = U X Uᵀ
    held: jax.Array     # rank of X
    hvps: jax.Array     # Hessian-vector products spent (eigen-tracking)
    thirds: jax.Array   # third-derivative products spent


def _pairs(k: int) -> tuple[jax.Array, jax.Array]:
    """The k(k+1)/2 pairs i ≤ j ordered by j, so that the pairs among the top m come first."""
    ii, jj = zip(*[(i, j) for j in range(k) for i in range(j + 1)])
    return jnp.asarray(ii), jnp.asarray(jj)


def initial_vectors(n: int, k: int, dtype) -> jax.Array:
    """A fixed start for the eigen-tracking (the same for every member: deterministic)."""
    return jax.random.normal(jax.random.PRNGKey(0), (n, k), dtype)


def rank(X: jax.Array) -> jax.Array:
    e = jnp.linalg.eigvalsh(X)
    return jnp.sum(e > RANK_SHARE * jnp.maximum(e[-1], 0.0) + jnp.finfo(X.dtype).tiny).astype(jnp.int32)


def central_point(problem: Problem, y: Params, U0: jax.Array, eta, k: int, threshold: float,
                  iterations: int = TRACK_ITERATIONS) -> CentralPoint:
    """The central flow's field at W = y and everything it is made of, eigen-tracking
    started from U0 (n, k)."""
    w, unravel = ravel_pytree(y)
    n, dtype = w.size, w.dtype
    eta = jnp.asarray(eta, dtype)
    loss = lambda v: problem.rate * problem.loss(unravel(v))
    grad = jax.grad(loss)
    hvp = lambda v: jax.jvp(grad, (w,), (v,))[1]
    g = grad(w)

    if n <= DENSE * k:
        H = jax.vmap(hvp)(jnp.eye(n, dtype=dtype))
        lam, V = jnp.linalg.eigh(0.5 * (H + H.T))
        lam, U = lam[::-1][:k], V[:, ::-1][:, :k]
        hvps = jnp.asarray(n)
    else:
        lam, U, its = lobpcg_standard(jax.vmap(hvp, in_axes=1, out_axes=1), U0, m=iterations,
                                      tol=TRACK_TOL / (10 * n))
        order = jnp.argsort(-lam)
        lam, U = lam[order], U[:, order]
        hvps = k * (4 * its + 1)    # LOBPCG applies H to [X, P, R] and to X per iteration

    # third derivatives of the candidates (ηλ/2 ≥ threshold): the first m(m+1)/2 pairs
    m = jnp.sum(eta * lam / 2 >= threshold)
    ii, jj = _pairs(k)

    def third(p, G):
        i, j = ii[p], jj[p]
        gij = jax.grad(lambda v: jnp.vdot(U[:, i], jax.jvp(grad, (v,), (U[:, j],))[1]))(w)
        return G.at[i, j].set(gij).at[j, i].set(gij)

    thirds = m * (m + 1) // 2
    G = jax.lax.fori_loop(0, thirds, third, jnp.zeros((k, k, n), dtype))
    alpha = G @ g
    kappa = 1.0 / (RELAX_STEPS * eta)
    q = jnp.diag(kappa * (2.0 / eta - lam)) + alpha
    X = sdcp.solve(q, sdcp.gram_operator(G))
    v = -g - 0.5 * jnp.einsum("ab,abn->n", X, G)
    return CentralPoint(velocity=unravel(v), U=U, lam=lam, X=X, held=rank(X), hvps=hvps,
                        thirds=thirds.astype(hvps.dtype))


def predicted_loss(problem: Problem, y: Params, point: CentralPoint) -> jax.Array:
    """GD's time-averaged loss as the central flow predicts it: L + ½⟨∇²L, Σ⟩."""
    return problem.loss(y) + 0.5 * jnp.sum(point.lam * jnp.diag(point.X)) / problem.rate


class CentralField(eqx.Module):
    """The vector field; `args` is (problem, U) with U the warm start of the eigen-tracking.
    η is an array leaf, so central flows of different η share one compilation."""

    eta: jax.Array
    k: int = eqx.field(static=True)
    threshold: float = eqx.field(static=True)

    def __call__(self, t, y, args) -> Params:
        problem, U = args
        return central_point(problem, y, U, self.eta, self.k, self.threshold).velocity


class CentralState(eqx.Module):
    inner: object           # the Runge–Kutta method's own state
    U: jax.Array            # eigenvectors at the last accepted step's end (the warm start)
    held: jax.Array         # rank of X there
    events: jax.Array       # changes of the held set since t = 0 (accepted steps holding one)
    spent: jax.Array        # (3,) field evaluations, HVPs, third-derivative products since t = 0, tries included
    tried: jax.Array        # (3,) the same for the last try alone


class CentralSolver(dfx.AbstractSolver):
    """An explicit Diffrax method stepping `CentralField`, with the eigenvectors, the held
    set and the cost counters in its state (see the module's docstring for the events)."""

    inner: dfx.AbstractSolver
    field: CentralField
    evals_per_step: int = eqx.field(static=True)

    term_structure: ClassVar = dfx.AbstractTerm

    @property
    def interpolation_cls(self):
        return self.inner.interpolation_cls

    @property
    def tableau(self):
        return self.inner.tableau

    def order(self, terms) -> int:
        return self.inner.order(terms)

    def error_order(self, terms) -> int:
        return self.inner.error_order(terms)

    def _start(self, y0) -> jax.Array:
        w, _ = ravel_pytree(y0)
        return initial_vectors(w.size, self.field.k, w.dtype)

    def func(self, terms, t0, y0, args):
        # Diffrax's first step-size search calls this with the problem alone
        return terms.vf(t0, y0, (args, self._start(y0)))

    def init(self, terms, t0, t1, y0, args) -> CentralState:
        f = self.field
        point = central_point(args, y0, self._start(y0), f.eta, f.k, f.threshold, TRACK_ITERATIONS_INIT)
        inner = self.inner.init(terms, t0, t1, y0, (args, point.U))
        zero = jnp.zeros((), jnp.int32)
        cost = jnp.stack([1, point.hvps, point.thirds]).astype(jnp.int64)
        return CentralState(inner=inner, U=point.U, held=point.held, events=zero, spent=cost, tried=cost)

    def point(self, problem: Problem, y: Params, state: CentralState) -> CentralPoint:
        f = self.field
        return central_point(problem, y, state.U, f.eta, f.k, f.threshold)

    def step(self, terms, t0, t1, y0, args, state: CentralState, made_jump):
        y1, y_error, dense, inner, result = self.inner.step(terms, t0, t1, y0, (args, state.U), state.inner,
                                                            made_jump)
        end = self.point(args, y1, state)
        changed = end.held != state.held
        # a change of the held set inside a step longer than EVENT_TOL GD steps: rejected
        located = (t1 - t0) <= EVENT_TOL * self.field.eta
        y_error = jax.tree.map(lambda e: jnp.where(changed & ~located, _EVENT_ERROR, e), y_error)
        # cost of the try: its stages, each paying about what the step's end paid
        evals = self.evals_per_step + 1
        tried = jnp.stack([evals, evals * end.hvps, evals * end.thirds]).astype(jnp.int64)
        new = CentralState(inner=inner, U=end.U, held=end.held, events=state.events + changed.astype(jnp.int32),
                           spent=state.spent + tried, tried=tried)
        return y1, y_error, dense, new, result

    def rejected(self, committed: CentralState, tried: CentralState) -> CentralState:
        """The committed state after a rejected try: the try's cost counted, nothing else."""
        return eqx.tree_at(lambda s: s.spent, committed, tried.spent)


def certificate_names(k: int) -> tuple[str, ...]:
    """The series a central flow records beside the observables: the tracked eigenvalues of
    ∇²L̃ (raw and as ηλ/2, 1 at the edge of stability), Σ's eigenvalues (descending), the
    predicted time-averaged loss, the held set's size, the events, and the cost since t = 0."""
    per = [f"{name}{i + 1}" for name in ("central_eig", "central_edge", "central_sigma") for i in range(k)]
    return (*per, "predicted_loss", "central_held", "central_events",
            "central_evals", "central_hvps", "central_thirds")


def certificate(solver: CentralSolver, problem: Problem, y: Params, state: CentralState) -> dict[str, jax.Array]:
    point = solver.point(problem, y, state)
    dtype = point.lam.dtype
    eta = solver.field.eta.astype(dtype)
    sigma = jnp.linalg.eigvalsh(point.X)[::-1]
    k = solver.field.k
    values = [*point.lam, *(eta * point.lam / 2), *sigma, predicted_loss(problem, y, point),
              point.held, state.events, *state.spent]
    return {name: jnp.asarray(v, dtype) for name, v in zip(certificate_names(k), values)}
