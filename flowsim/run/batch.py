"""A batch of seeds as one computation: stacked problems, params and keys, and the compiled
kernels that map an integrator and the observables over them (`over_members`: `eqx.filter_vmap`).

The driver, the analyses and the bench scripts share these kernels. Each takes the
integrator as an argument: its configuration is static, so every batch with the same
preset and shapes reuses one compilation.
"""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..status import Status
from ..integrate.base import AbstractIntegrator, State
from ..nn.problem import Params
from ..observe.observables import Reference, memory as memory_member, observe_carried, reference
from ..observe.observables import observe as observe_member
from ..nn.problem import Problem


def over_members(fn, in_axes, out_axes=0):
    """`eqx.filter_vmap(fn, in_axes=in_axes, out_axes=out_axes)`, except that a batch of one
    member calls `fn` on that member and puts the batch axis back on its outputs. Batching
    costs as much as tracing: a flow chunk's vmap took 0.1 s of a one-seed run's start-up
    (0.23 → 0.13 s to trace and lower, the same program bit for bit on the Fig. 1 problem)."""
    vmapped = eqx.filter_vmap(fn, in_axes=in_axes, out_axes=out_axes)

    def call(*args):
        sizes = set()     # the batch sizes the mapped leaves hold (collected, nothing mapped)
        for arg, axes in zip(args, in_axes):
            _on_mapped(lambda x, ax: sizes.add(x.shape[ax]) or x, arg, axes)
        if sizes != {1}:
            return vmapped(*args)
        out = fn(*(_on_mapped(jnp.squeeze, arg, axes) for arg, axes in zip(args, in_axes)))
        if isinstance(out_axes, int):
            return _on_mapped(jnp.expand_dims, out, out_axes)
        return tuple(_on_mapped(jnp.expand_dims, o, axes) for o, axes in zip(out, out_axes))

    return call


def _on_mapped(f, tree, axes):
    """`f(leaf, axis)` on each array leaf of `tree` that `axes` maps (an axis, None, or a tree
    of them, as vmap's in_axes); the other leaves as they are."""
    if axes is None or isinstance(axes, int):
        return jax.tree.map(lambda x: f(x, axes) if axes is not None and eqx.is_array(x) else x, tree)
    return jax.tree.map(lambda ax, x: _on_mapped(f, x, ax), axes, tree, is_leaf=lambda x: x is None)


def stack(trees):
    """Pytrees of equal structure stacked along a new leading (seed) axis."""
    # numpy, not jnp: stacking eagerly in JAX would compile a kernel per leaf shape
    return jax.tree.map(lambda *xs: jnp.asarray(np.stack(xs)), *trees)


class Problems(NamedTuple):
    """A batch of Problems for vmap: `tree` holds the members stacked along a leading axis,
    except leaves equal in every member, which stay single; `axes` is vmap's `in_axes`
    (0 or None per leaf). Seeds that share their data then share X in one matmul instead of
    a batched one: 8 seeds' flow solves take about the time of 8 sequential ones on CPU,
    against ~1.3× with the data copied per seed (bench/bench_scale.py)."""

    tree: Problem
    axes: Problem


class _Leaf(NamedTuple):
    value: object
    axis: int | None


def stack_problems(problems: list[Problem]) -> Problems:
    def one(*xs):
        if not eqx.is_array(xs[0]):   # a user model's non-array leaf (its activation function)
            return _Leaf(xs[0], None)
        if all(np.array_equal(xs[0], x) for x in xs[1:]):
            return _Leaf(xs[0], None)
        return _Leaf(jnp.asarray(np.stack(xs)), 0)

    # (a user's model may hold tuples of its own: only _Leaf marks a mapped leaf)
    leaves = jax.tree.map(one, *problems)
    is_leaf = lambda x: isinstance(x, _Leaf)  # noqa: E731
    return Problems(tree=jax.tree.map(lambda p: p.value, leaves, is_leaf=is_leaf),
                    axes=jax.tree.map(lambda p: p.axis, leaves, is_leaf=is_leaf))


@eqx.filter_jit
def init(integ: AbstractIntegrator, problems: Problems, params: Params, keys: jax.Array | None = None) -> State:
    """Every member's initial state (`keys`: one per member, for a stochastic method)."""
    return over_members(integ.init, in_axes=(problems.axes, 0, 0))(problems.tree, params, keys)


@eqx.filter_jit
def complete(integ: AbstractIntegrator, problems: Problems, state: State) -> State:
    """Every member's state with its look-ahead computed again (`AbstractIntegrator.complete`:
    a state restored from a checkpoint written before the states kept one)."""
    return over_members(integ.complete, in_axes=(problems.axes, 0))(problems.tree, state)


@eqx.filter_jit
def advance(integ: AbstractIntegrator, problems: Problems, state: State, t: jax.Array, horizon=None):
    """Every member advanced to its own target time `t[i]` (`horizon`: see
    `AbstractIntegrator.advance`): (state, statistics)."""
    return over_members(integ.advance, in_axes=(problems.axes, 0, 0, None))(problems.tree, state, t, horizon)


@eqx.filter_jit
def chunk(integ: AbstractIntegrator, problems: Problems, state: State, targets: jax.Array, moving: jax.Array,
          real: jax.Array, steps: jax.Array, refs: Reference | None, names: tuple[str, ...], horizon: jax.Array,
          carried: dict[str, jax.Array]):
    """Several checkpoints in one compiled call: every member advanced through its column of
    `targets` (K × members, nondecreasing), observed at each (observables and certificate
    series), in a `lax.scan`. One dispatch and one transfer per chunk instead of per checkpoint:
    per-checkpoint calls cost about 10 ms each on a GPU, most of it launching and copying.

    `moving[k, i]`: whether member i goes to checkpoint k at all (False: held where it is,
    e.g. a member resumed further than the others). A member that ends with another status
    than `done` (diverged, max_steps, stopped, nonfinite) is held still for the rest of the
    chunk, as the driver holds it afterwards; `steps[i]`: the steps it has taken before the
    chunk, for the step budget (`out_of_steps`), which is checked after every checkpoint.
    `real[k]` (one for all members): False for the padding of a short chunk, which is
    neither advanced nor observed (a `lax.cond` on an unbatched flag stays a branch under
    vmap), so a chunk of one checkpoint costs one checkpoint. `horizon`: the run's last
    checkpoint time (see `AbstractIntegrator.advance`). `carried`: what the observables carry
    from one checkpoint to the next (the eigen-tracker's vectors: `memory` at the start),
    updated at the checkpoints a member moves to only, so that a member held still
    carries what an uninterrupted run would.

    Returns the state and the carried values at the end of the chunk and, stacked along a
    leading K axis per member, each checkpoint's statistics (with its status and the
    observation's Hessian-vector products, `observe_hvps`), time, step and values."""

    def member(problem, s, times, move, before, ref, kept):
        def one(carry, xs):
            s, code, taken, kept = carry
            t, go = xs
            go = go & (code == Status.DONE)
            new, seg = integ.advance(problem, s, jnp.where(go, t, integ.time(s)), horizon)
            taken = taken + seg["steps"]
            ended = jnp.where(seg["status"] != Status.DONE, seg["status"],
                              jnp.where(jnp.asarray(integ.out_of_steps(taken)), Status.MAX_STEPS, Status.DONE))
            code = jnp.where(go, ended, code)
            precond = integ.preconditioner(problem, new) if "preconditioned_sharpness" in names else None
            values, after, products = observe_carried(problem, integ.params(new), ref, names, kept, precond,
                                                      integ.loss_and_gradient(problem, new))
            kept = jax.tree.map(lambda a, b: jnp.where(go, a, b), after, kept)
            values = values | integ.certificate(problem, new)
            stats = seg | {"status": code, "observe_hvps": products}
            return (new, code, taken, kept), (stats, integ.time(new), integ.step(new), values)

        carry = (s, jnp.asarray(Status.DONE), before, kept)
        # `one` traced once, its jaxpr reused by the branch and its output shapes by the
        # padding (an integrator's step takes most of the chunk's tracing: twice was 1/3 more)
        traced = eqx.filter_closure_convert(one, carry, (times[0], move[0]))

        def padding(carry, xs):
            shapes = traced.out_struct[1]
            return carry, jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)

        def step(carry, xs):   # (a lambda: lax.cond hashes its branches, and `traced` is unhashable)
            return jax.lax.cond(xs[2], lambda c, x: traced(c, x), padding, carry, xs[:2])

        (s, _, _, kept), out = jax.lax.scan(step, carry, (times, move, real))
        return s, kept, out

    return over_members(member, in_axes=(problems.axes, 0, 1, 1, 0, 0, 0), out_axes=(0, 0, 1))(
        problems.tree, state, targets, moving, steps, refs, carried)


@eqx.filter_jit
def observe(problems: Problems, params: Params, refs: Reference | None, names: tuple[str, ...]) -> dict[str, jax.Array]:
    """The observables `names` of every member (see `flowsim.observe.observables`)."""
    return over_members(lambda p, y, r: observe_member(p, y, r, names),
                        in_axes=(problems.axes, 0, 0))(problems.tree, params, refs)


@eqx.filter_jit
def memory(problems: Problems, params: Params, names: tuple[str, ...]) -> dict[str, jax.Array]:
    """What the observables `names` carry between checkpoints, at a cold start, for every
    member (`flowsim.observe.observables.memory`)."""
    return over_members(lambda p, y: memory_member(p, y, names), in_axes=(problems.axes, 0))(problems.tree, params)


@eqx.filter_jit
def references(problems: Problems, params: Params) -> Reference:
    """What the change measures compare against: every member's initial weights and NTG."""
    return over_members(reference, in_axes=(problems.axes, 0))(problems.tree, params)


@eqx.filter_jit
def _certificate(integ: AbstractIntegrator, problems: Problems, state: State) -> dict[str, jax.Array]:
    return over_members(integ.certificate, in_axes=(problems.axes, 0))(problems.tree, state)


def certificate(integ: AbstractIntegrator, problems: Problems, state: State) -> dict[str, jax.Array]:
    """The integrator's certificate series of every member (nothing to compile for an
    integrator without one)."""
    return _certificate(integ, problems, state) if integ.certificate_series else {}
