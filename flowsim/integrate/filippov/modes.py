"""The mode algebra of the exact ReLU flow (the package's docstring has the mathematics): a
mode's smooth field and the sliders' controls δ, how far a control is outside [low, 1]
(the exit test), the resolution of the mode after an event, and the NTG of a mode's flow.

The network is a `flowsim.models.ShallowNet` (the loader admits `filippov` for no other):
its public `preactivations`, `output_layer` and `frozen_output` are what the field is
assembled from.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp

from ...nn.activations import PIECEWISE_LINEAR
from ...nn.problem import Params, Problem

# An exit is an event once a control is this far outside [low, 1]: far above the round-off
# in which the event's two computations of δ (on the step, and in `resolve` after the
# pairs are put back on their surfaces) differ, so that the resolution always sees the
# exit it was called for (a control on the bound to round-off would be an exit at every
# step, and time would stand still), and far below the tolerances' effect on W.
EXIT_SLACK = 1e-9
NOISE_SLACK = 1e3   # the slack per unit of the controls' relative round-off (`_exit_slack`)
TINY = 1e-300


class Mode(eqx.Module):
    active: jax.Array     # (m, n) bool: the side of each pair off its surface (s_ji > 0)
    slide: jax.Array      # (m, slots) int32: the pairs held on s_ji = 0; n marks an empty slot
    # (m, slots, slots) the sliders' inverse Gram matrices (identity rows for empty slots),
    # made with the mode: every evaluation then projects with products, not a solve
    gram_inv: jax.Array


def low_slope(problem: Problem) -> float:
    """σ' on the negative side of the network's activation."""
    return PIECEWISE_LINEAR[problem.net.activation]


def slopes(problem: Problem, active: jax.Array, dtype) -> jax.Array:
    """The mode's D: σ' of each pair on its side."""
    return jnp.where(active, 1.0, low_slope(problem)).astype(dtype)


def _slider_weight(bs: jax.Array, Xs: jax.Array, u: jax.Array) -> jax.Array:
    """The force each slider can exert, |b_ji|‖x_i‖, against its node's free velocity ‖u_j‖
    (see `_violation`)."""
    return jnp.abs(bs) * jnp.linalg.norm(Xs, axis=-1) / (jnp.linalg.norm(u, axis=-1, keepdims=True) + TINY)


def whole(reduce, x: jax.Array) -> jax.Array:
    """`reduce` (jnp.max, jnp.any, ...) over all of x, its leading axes first. XLA:CPU reduces
    a whole array to a scalar one element after another (6 µs for the 4 000 pairs of
    caron-fig1-relu-quick), but along leading axes with vector instructions (1 µs)."""
    return reduce(reduce(x.reshape(-1, x.shape[-1]), axis=0))


def sliding_mask(slide: jax.Array, n: int) -> jax.Array:
    """(m, n) mask of the sliding pairs."""
    return (slide[..., None] == jnp.arange(n)).any(-2)


def _compact(mask: jax.Array, slots: int) -> tuple[jax.Array, jax.Array]:
    """The pairs of `mask` (m, n) as slot lists (m, slots), and whether every node's fit."""
    m, n = mask.shape
    # each pair's rank among its node's, written to that slot (the others, and pairs past
    # the last slot, out of range: dropped); a scatter, as argsort and argmax are slow on CPU
    rank = jnp.where(mask, jnp.cumsum(mask, axis=-1) - 1, slots)
    pairs = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (m, n))
    index = jnp.full((m, slots), n, jnp.int32).at[jnp.arange(m)[:, None], rank].set(pairs, mode="drop")
    return index, mask.sum(-1) <= slots


def _basis(X: jax.Array, slide: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The sliding pairs' inputs (m, slots, d), their Gram matrices (identity rows for empty
    slots) and which slots are filled."""
    n = X.shape[0]
    valid = slide < n
    idx = jnp.minimum(slide, n - 1)
    Xs = jnp.where(valid[..., None], X[idx], 0.0)
    # the entries of X Xᵀ, where Xs Xsᵀ would be m small products (slow on CPU: 130 µs for
    # 128 Gram matrices of 8 × 8 from 100 dimensions; the gather, 5 µs)
    both = valid[..., :, None] & valid[..., None, :]
    G = jnp.where(both, (X @ X.T)[idx[..., :, None], idx[..., None, :]], 0.0)
    return Xs, G + jnp.eye(slide.shape[-1], dtype=X.dtype) * ~valid[..., None, :], valid


def _spd_solve(G: jax.Array, B: jax.Array) -> jax.Array:
    """G⁻¹B for a batch of small symmetric positive definite G (..., k, k), B (..., k, r):
    Gauss–Jordan elimination without pivoting (stable for SPD), unrolled over the k pivots.
    The whole batch then takes k fused elementwise passes, where LAPACK is called once per
    matrix (for m = 200 Gram matrices of 8 × 8, about 6× slower on CPU)."""
    k = G.shape[-1]
    for p in range(k):
        row_g = G[..., p, :] / G[..., p, p, None]
        row_b = B[..., p, :] / G[..., p, p, None]
        # rows i ≠ p lose G_ip times row p; row p becomes row p / G_pp
        col = (G[..., :, p] - (jnp.arange(k) == p))[..., None]
        G = G - col * row_g[..., None, :]
        B = B - col * row_b[..., None, :]
    return B


def output_layer(problem: Problem) -> jax.Array:
    """c_j a_j (m, k): the fixed output layer with its scaling."""
    return problem.net.output_layer()


def preactivations(problem: Problem, W: jax.Array) -> jax.Array:
    """s_ji = w_j·x_i/√d (m, n)."""
    return problem.net.preactivations(W, problem.X)


def predictions(problem: Problem, S: jax.Array, D: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The mode's branch of f on the training points (n, k), f = Σ_j c_j a_j D_j s_j (S: the
    preactivations s), and the size of its round-off (first order: ε times the sum of what
    the sums cancel)."""
    ca, terms = output_layer(problem), D * S
    pred, spread = (ca.T @ terms).T, (jnp.abs(ca).T @ jnp.abs(terms)).T
    ref = problem.net.frozen_output(problem.X)     # the zeroed variant's frozen copy
    if ref is not None:
        pred, spread = pred - ref, spread + jnp.abs(ref)
    return pred, jnp.finfo(S.dtype).eps * spread


def loss_grad(problem: Problem):
    """∂L/∂f as a function of the predictions f (n, k)."""
    return jax.grad(lambda p: problem.loss_function()(p, problem.y))


def loss_gradient(problem: Problem, pred: jax.Array):
    """∂L/∂f at `pred`, and its linearisation there (pred's round-off and the step's error
    both reach the gradient through it)."""
    return jax.linearize(loss_grad(problem), pred)


def response(problem: Problem, S: jax.Array, active: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """b (m, n) with ẇ_j = Σ_i b_ji D_ji x_i at the preactivations S, the mode's D, and the
    relative round-off of b (`_exit_slack`)."""
    D = slopes(problem, active, S.dtype)
    pred, roundoff = predictions(problem, S, D)
    g, linear = loss_gradient(problem, pred)
    noise = jnp.linalg.norm(linear(roundoff)) / (jnp.linalg.norm(g) + TINY)
    return -problem.rate * (output_layer(problem) @ g.T) / math.sqrt(problem.X.shape[-1]), D, noise


def velocity_and_control(problem: Problem, W: jax.Array, mode: Mode) -> tuple[jax.Array, ...]:
    """The mode's velocity of W, the sliding pairs' controls δ (m, slots; an empty slot gets
    a value inside [low, 1]), each slider's weight (`_slider_weight`) and the exit slack
    (`_exit_slack`)."""
    return velocity_and_control_at(problem, preactivations(problem, W), mode)


def velocity_and_control_at(problem: Problem, S: jax.Array, mode: Mode) -> tuple[jax.Array, ...]:
    """`velocity_and_control` at the preactivations S: none of it needs W itself, and
    within a step S is a quartic in θ whose coefficients the event search has, so that each
    evaluation of the exit search makes one product with X, not two."""
    X = problem.X
    b, D, noise = response(problem, S, mode.active)
    u = (b * jnp.where(sliding_mask(mode.slide, X.shape[0]), 0.0, D)) @ X
    Xs, _, valid = _basis(X, mode.slide)
    mu = jnp.einsum("mkl,mld,md->mk", mode.gram_inv, Xs, u)
    bs = jnp.take_along_axis(b, jnp.minimum(mode.slide, X.shape[0] - 1), axis=-1)
    inside = 0.5 * (1.0 + low_slope(problem))
    delta = jnp.where(valid & (bs != 0), -mu / jnp.where(bs != 0, bs, 1.0), jnp.where(valid, jnp.inf, inside))
    return u - jnp.einsum("mkd,mk->md", Xs, mu), delta, _slider_weight(bs, Xs, u), _exit_slack(noise)


def mode_field(t, y: Params, args) -> Params:
    problem, mode = args
    return {"W": velocity_and_control(problem, y["W"], mode)[0]}


def _exit_slack(noise: jax.Array) -> jax.Array:
    """How far outside [low, 1] (weighted, `_violation`) a control must be for an exit.
    Near a global minimum the residual is a difference of predictions of order 1: at a loss
    of 1e-21 its round-off is 1e-6 of it, and so is that of every control; a fixed slack
    below that made sliders exit and re-enter on round-off. The slack grows with it."""
    return EXIT_SLACK + NOISE_SLACK * noise


def _violation(delta: jax.Array, weight: jax.Array, low: float) -> jax.Array:
    """How far each slider's control is outside [low, 1] (≤ 0: inside), weighted by the
    force the slider can exert relative to its node's velocity (at most 1). When a fitted
    point's residual nears 0, b_ji → 0 and δ = −μ/b is round-off over round-off: such a
    slider holds its node with a force too small to matter, and its δ must not make events."""
    return jnp.maximum(low - delta, delta - 1.0) * jnp.minimum(weight, 1.0)


def exit_excess(delta: jax.Array, weight: jax.Array, slack: jax.Array, low: float) -> jax.Array:
    """Each slider's violation less the exit slack (m, slots; > 0: an exit)."""
    return _violation(delta, weight, low) - slack


def resolve(problem: Problem, W: jax.Array, mode: Mode, touching: jax.Array, leaving: jax.Array):
    """The mode after an event at W: every pair on a surface (sliding, or `touching` it now)
    is put back on it exactly and assigned to slide, go up (D = 1) or go down (D = low) by
    an active-set iteration per node on ṡ_Z(δ) = q + A δ, until every pair is consistent
    (sliding: δ within [low, 1]; up: ṡ ≥ 0; down: ṡ ≤ 0). `leaving` (m, slots, aligned with
    `mode.slide`: 0 stays, 1 leaves down, 2 leaves up) are the sliders whose exit is the
    event: they leave whatever the solve here says, because where b_ji is tiny (a fitted
    point) δ = −μ/b is too sensitive for two computations of it to agree on the bound.
    Returns the corrected W, the new mode, the event counts (3,) and whether every node's
    surfaces fit in its slots."""
    X = problem.X
    n = X.shape[0]
    low = low_slope(problem)
    was = sliding_mask(mode.slide, n)
    k_slots = mode.slide.shape[-1]
    slots, fit = _compact(was | touching, k_slots)
    Xz, G, valid = _basis(X, slots)
    # back onto the surfaces: w_j minus its component along span{x_i : i on a surface}
    W = W - jnp.einsum("mkd,mk->md", Xz, _spd_solve(G, Xz @ W[..., None])[..., 0])
    b, D, noise = response(problem, preactivations(problem, W), mode.active)
    slack = _exit_slack(noise)
    idx = jnp.minimum(slots, n - 1)
    u = (b * jnp.where(was | touching, 0.0, D)) @ X
    q = jnp.einsum("mkd,md->mk", Xz, u)
    bz = jnp.where(valid, jnp.take_along_axis(b, idx, axis=-1), 0.0)
    A = G * bz[..., None, :]
    weight = _slider_weight(bz, Xz, u)
    scale = jnp.abs(q) + jnp.abs(A).sum(-1) + jnp.finfo(W.dtype).tiny
    # 0: down, 1: slide, 2: up; a touching pair starts on the side it comes from
    sides = jnp.where(jnp.take_along_axis(mode.active, idx, axis=-1), 2, 0)
    r = jnp.where(jnp.take_along_axis(was, idx, axis=-1), 1, sides)
    rows = jnp.arange(W.shape[0])[:, None]
    exits = jnp.zeros(was.shape, jnp.int32).at[rows, mode.slide].set(leaving, mode="drop")
    frozen = jnp.take_along_axis(exits, idx, axis=-1) > 0
    r = jnp.where(frozen, 2 * (jnp.take_along_axis(exits, idx, axis=-1) == 2), r)
    r = jnp.where(valid, r, 0)

    def controls(r):
        sliding = (r == 1) & valid
        fixed = jnp.where(r == 2, 1.0, low) * (valid & ~sliding)
        # A_SS δ_S = rhs with A = G diag(b): solved as G_SS (b δ)_S = rhs, G_SS being SPD
        both = sliding[..., :, None] & sliding[..., None, :]
        Gs = jnp.where(both, G, jnp.eye(k_slots, dtype=G.dtype))
        rhs = jnp.where(sliding, -(q + jnp.einsum("mkl,ml->mk", A, fixed)), 0.0)
        bdelta = _spd_solve(Gs, rhs[..., None])[..., 0]
        delta = jnp.where(sliding, jnp.where(bz != 0, bdelta / jnp.where(bz != 0, bz, 1.0), jnp.inf), fixed)
        return delta, q + jnp.einsum("mkl,ml->mk", A, delta), sliding

    def fix(r):
        delta, sdot, sliding = controls(r)
        # (half the exit's slack: a slider the event did not name leaves only if it is out)
        out = jnp.where(sliding, _violation(delta, weight, low) - 0.5 * slack, 0.0)
        wrong = jnp.where(valid & (r == 2), -sdot, jnp.where(valid & (r == 0), sdot, 0.0)) / scale
        wrong = jnp.where(frozen, 0.0, wrong)
        wrong = jnp.where(wrong > 1e-12, wrong, 0.0)
        k_out, k_wrong = jnp.argmax(out, -1), jnp.argmax(wrong, -1)
        any_out, any_wrong = out.max(-1) > 0, wrong.max(-1) > 0
        k = jnp.where(any_out, k_out, k_wrong)
        pick = lambda x: jnp.take_along_axis(x, k[:, None], axis=-1)[:, 0]  # noqa: E731
        # a slider out of its range leaves to the side of the bound it passed; a pair
        # moving against its side slides if both sides push into the surface (b < 0)
        # and crosses otherwise
        to = jnp.where(any_out, jnp.where(pick(delta) > 1.0, 2, 0),
                       jnp.where(pick(bz) < 0, 1, jnp.where(pick(r) == 2, 0, 2)))
        change = any_out | any_wrong
        return jnp.where(change[:, None] & (jnp.arange(k_slots) == k[:, None]), to[:, None], r), whole(jnp.any, change[:, None])

    # until no node changes (usually after 0 to 2 rounds; at most 4·slots)
    _, r, _ = jax.lax.while_loop(lambda c: c[2] & (c[0] < 4 * k_slots),
                                 lambda c: (c[0] + 1, *fix(c[1])), (0, r, jnp.asarray(True)))
    # A touching pair is one the mode's own continuation carries across its surface. Left on
    # its side by the solve, it grazes (ṡ = 0 to within the solve's resolution): left there,
    # the next step would find the same crossing at once, and flipped, it may graze back, in
    # either case forever. It is held on its surface instead; holding it takes next to no
    # force, and as soon as it would take more than the exit slack of its node's, it exits (an
    # event) to the side that force points to.
    grazing = jnp.take_along_axis(touching, idx, axis=-1) & valid & (r == sides)
    r = jnp.where(grazing, 1, r)
    sliding = (r == 1) & valid
    # (empty slots hold index n, out of range: their writes are dropped)
    active = mode.active.at[rows, slots].set(jnp.where(sliding, jnp.take_along_axis(mode.active, idx, axis=-1),
                                                       r == 2), mode="drop")
    now = jnp.zeros_like(was).at[rows, slots].set(sliding, mode="drop")
    new_slide, _ = _compact(now, k_slots)
    off = ~was & ~now
    events = jnp.stack([whole(jnp.sum, off & (active != mode.active)), whole(jnp.sum, now & ~was),
                        whole(jnp.sum, was & ~now)])
    # the sliders' inverse Gram matrices change with their sets only: a crossing (most events)
    # keeps them (a cond, which under vmap computes both and selects)
    gram_inv = jax.lax.cond(whole(jnp.all, new_slide == mode.slide), lambda: mode.gram_inv,
                            lambda: make_mode(X, active, new_slide).gram_inv)
    return W, Mode(active=active, slide=new_slide, gram_inv=gram_inv), events, whole(jnp.all, fit[:, None])


def projected_ntg(problem: Problem, W: jax.Array, mode: Mode) -> jax.Array:
    """The NTG (first output, every training point) of the mode's flow: the Jacobian of the
    predictions with each w_j's directions restricted to the complement of its sliding
    surfaces' normals, Θ = Σ_j (c_j a_j)² D_j D_jᵀ ⊙ X P_j Xᵀ/d. While pairs slide, its λ_min
    (not the plain NTG's) bounds the rate of the residual (Caron et al.'s bound)."""
    X = problem.X
    d = X.shape[-1]
    weight = output_layer(problem)[:, 0] ** 2
    D = slopes(problem, mode.active, W.dtype)
    plain = ((D.T * weight) @ D) * (X @ X.T)
    Xs, _, _ = _basis(X, mode.slide)
    E = D[..., None] * (X @ jnp.swapaxes(Xs, -1, -2)) * jnp.sqrt(weight)[:, None, None]    # (m, n, slots)
    return (plain - jnp.einsum("mis,mst,mkt->ik", E, mode.gram_inv, E)) / d


def initial_mode(problem: Problem, W: jax.Array, slots: int) -> Mode:
    """The mode of W off every surface, with room for `slots` sliders per node, or min(n, d)
    where that is fewer: a node's sliding surfaces have linearly independent normals x_i
    (their Gram matrix is solved), so further slots would stay empty, and each costs time
    (chen-exp2-quick's d = 10 points under `filippov16` run with 10)."""
    n = problem.X.shape[0]
    slots = min(slots, *problem.X.shape)
    return make_mode(problem.X, W @ problem.X.T > 0, jnp.full((W.shape[0], slots), n, jnp.int32))


def make_mode(X: jax.Array, active: jax.Array, slide: jax.Array) -> Mode:
    G = _basis(X, slide)[1]
    return Mode(active=active, slide=slide, gram_inv=_spd_solve(G, jnp.broadcast_to(jnp.eye(slide.shape[-1], dtype=X.dtype), G.shape)))
