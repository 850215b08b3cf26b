"""The driver: the only loop over checkpoints.

For each sweep point, the runs of its seeds are one batch (`eqx.filter_vmap`), compiled
once per solver. At each checkpoint time the batch is advanced, observed and appended to
the archive with its full resumable state; a member that ends with a numerical status
(diverged, max_steps, nonfinite, stopped) is recorded and then held still while the others
go on. Integrators know nothing of files; the archive knows nothing of JAX.
"""

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from . import status
from .archive import ArchiveError, ArchiveWriter
from .build import Built, data_seed, dataset_arrays
from .config import RunSpec, Scenario, checkpoint_times
from .descent import make_descent_integrator
from .devices import is_primary, shard, to_host
from .flow import make_flow_integrator
from .observe import observe, reference, series_axes
from .problem import Problem

DISCRETE = frozenset({"gd", "momentum", "sgd"})
STAT_KEYS = ("steps", "accepted", "rejected", "vf_evals")


def _stack(trees):
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


def stack_problems(problems: list[Problem]) -> Problems:
    def one(*xs):
        if eqx.is_array(xs[0]) and all(np.array_equal(xs[0], x) for x in xs[1:]):
            return xs[0], None
        return jnp.asarray(np.stack(xs)), 0

    pairs = jax.tree.map(one, *problems)
    is_pair = lambda x: isinstance(x, tuple)  # noqa: E731
    return Problems(tree=jax.tree.map(lambda p: p[0], pairs, is_leaf=is_pair),
                    axes=jax.tree.map(lambda p: p[1], pairs, is_leaf=is_pair))


# Module-level compiled functions take the integrator as an argument: its configuration is
# static, so every batch with the same preset and shapes reuses one compilation.
@eqx.filter_jit
def _advance(integ, problems: Problems, state, t):
    return eqx.filter_vmap(integ.advance, in_axes=(problems.axes, 0, 0))(problems.tree, state, t)


@eqx.filter_jit
def _init_flow(integ, problems: Problems, params):
    return eqx.filter_vmap(integ.init, in_axes=(problems.axes, 0))(problems.tree, params)


@eqx.filter_jit
def _init_descent(integ, problems: Problems, params, keys):
    return eqx.filter_vmap(integ.init, in_axes=(problems.axes, 0, 0))(problems.tree, params, keys)


@eqx.filter_jit
def _observe(problems: Problems, params, refs, names):
    return eqx.filter_vmap(lambda p, y, r: observe(p, y, r, names),
                           in_axes=(problems.axes, 0, 0))(problems.tree, params, refs)


@eqx.filter_jit
def _references(problems: Problems, params):
    return eqx.filter_vmap(reference, in_axes=(problems.axes, 0))(problems.tree, params)


class Interrupted(KeyboardInterrupt):
    """A stop was requested (SIGTERM, Ctrl-C) and honoured after a committed checkpoint."""


@dataclass
class _Member:
    """Book-keeping of one seed of a batch for one solver."""

    run: RunSpec
    done_rows: int          # checkpoint rows already in the archive (resume)
    stats: dict
    code: int = status.RUNNING


class _Solver:
    """One solver preset, its integrator(s) and its checkpoint grid.

    A flow preset with a `reference` integrates a second, tighter flow beside it; the
    state is then the pair (flow, reference) and the difference is recorded as the
    flow's global-error estimate.
    """

    def __init__(self, preset: dict, run_cfg: dict):
        self.preset = preset
        self.discrete = preset["kind"] in DISCRETE
        self.ref = None
        if self.discrete:
            self.integ = make_descent_integrator(preset)
        else:
            self.integ = make_flow_integrator(preset, stop_loss=run_cfg["stop_loss"])
            if preset.get("reference"):
                ref = preset["reference"]
                if preset["kind"] == "modified-flow":  # the reference solves the same equation
                    ref = ref | {"kind": "modified-flow", "learning_rate": preset["learning_rate"]}
                self.ref = make_flow_integrator(ref)

    def init(self, problems, params, built: list[Built]):
        if self.discrete:
            return _init_descent(self.integ, problems, params, shard(_stack([b.key for b in built])))
        state = _init_flow(self.integ, problems, params)
        return state if self.ref is None else (state, _init_flow(self.ref, problems, params))

    def advance(self, problems, state, t):
        if self.ref is None:
            return _advance(self.integ, problems, state, t)
        main, seg = _advance(self.integ, problems, state[0], t)
        ref, _ = _advance(self.ref, problems, state[1], t)
        return (main, ref), seg

    def main(self, state):
        return state if self.ref is None else state[0]

    def certificate(self, problems, state) -> dict[str, jax.Array]:
        """‖W − W_ref‖ and |L − L_ref| per member: the flow's global-error estimate."""
        if self.ref is None:
            return {}
        main, ref = state
        diff = jax.tree.map(lambda a, b: jnp.sum((a - b) ** 2, axis=tuple(range(1, a.ndim))), main.y, ref.y)
        loss = _observe(problems, main.y, None, ("loss",))["loss"]
        loss_ref = _observe(problems, ref.y, None, ("loss",))["loss"]
        return {"flow_error": jnp.sqrt(sum(jax.tree.leaves(diff))), "flow_loss_error": jnp.abs(loss - loss_ref)}

    def times(self, run_cfg: dict) -> tuple[np.ndarray, np.ndarray | None]:
        """Checkpoint times from t = 0, and GD step numbers (at t = kη exactly).

        A flow also stops at every time a discrete solver of the scenario records, so
        that flow and GD are compared at matched times, never by interpolation."""
        times = np.concatenate([[0.0], checkpoint_times(run_cfg)])
        if self.discrete:
            eta = self.preset["learning_rate"]
            steps = np.unique(np.round(times / eta).astype(np.int64))
            return steps * eta, steps
        grids = [np.round(times / p["learning_rate"]).astype(np.int64) * p["learning_rate"]
                 for p in run_cfg["solvers"] if p["kind"] in DISCRETE]
        return np.unique(np.concatenate([times, *grids])), None

    def position(self, state) -> jax.Array:
        """Each member's current time (for GD, its step count × η)."""
        state = self.main(state)
        if self.discrete:
            return state.step * self.preset["learning_rate"]
        return state.t


def _series_spec(problem, params, names, solver: "_Solver") -> dict:
    ref = reference(problem, params)
    shapes = jax.eval_shape(lambda: observe(problem, params, ref, names))
    axes = series_axes(names)
    spec = {k: (tuple(v.shape), v.dtype.str, axes[k]) for k, v in shapes.items()}
    if solver.ref is not None:
        dtype = params["W"].dtype.str
        spec |= {"flow_error": ((), dtype, ()), "flow_loss_error": ((), dtype, ())}
    return spec


def _data_key(r: RunSpec) -> tuple[str, int]:
    return json.dumps(r.config["data"], sort_keys=True), data_seed(r.config, r.seed)


def _checkpoint(state) -> dict[str, np.ndarray]:
    """A member's state as named arrays (its static, non-array parts are rebuilt on resume)."""
    return {f"leaf{i:03d}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(eqx.filter(state, eqx.is_array)))}


def _restore(template, i: int, arrays: dict[str, np.ndarray]):
    """Put one member's stored arrays into row i of the batched `template` state (numpy)."""
    dynamic, static = eqx.partition(template, eqx.is_array)
    leaves, treedef = jax.tree.flatten(dynamic)
    if len(arrays) != len(leaves):
        raise ArchiveError(f"checkpoint holds {len(arrays)} arrays, the solver's state has {len(leaves)}")
    new = []
    for j, x in enumerate(leaves):
        x = np.array(x)
        x[i] = np.reshape(arrays[f"leaf{j:03d}"], x.shape[1:])  # the archive stores 0-d as (1,)
        new.append(x)
    return eqx.combine(jax.tree.unflatten(treedef, new), static)


class Driver:
    """Runs a scenario into an archive. `report` receives one line per finished batch."""

    def __init__(self, scenario: Scenario, writer: ArchiveWriter, *, progress: bool | None = None,
                 report: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
                 should_stop: Callable[[], bool] = lambda: False, runs: list[RunSpec] | None = None):
        self.scenario = scenario
        # `runs`: a part of the scenario's runs (`flowsim run --shard i/N`); /data still holds
        # the scenario's first run's dataset, so that merged parts read like one run.
        self.runs = list(scenario.runs if runs is None else runs)
        self.writer = writer
        self.progress = progress
        self.report = report
        # Polled after every committed checkpoint (SIGTERM / Ctrl-C set it): the run then
        # ends with `Interrupted`, leaving statuses `running` and the archive resumable.
        self.should_stop = should_stop

    def run(self, built: dict[str, Built]) -> dict[str, dict[str, str]]:
        """Run every sweep point × solver; returns run → solver → final status."""
        statuses: dict[str, dict[str, str]] = {r.name: {} for r in self.runs}
        points: dict[int, list[RunSpec]] = {}
        for r in self.runs:
            points.setdefault(r.point, []).append(r)
        # /data holds the first run's dataset; a run whose data differ (a per-seed data
        # seed, a swept data key) also keeps its own under /runs/<run>/data.
        first = self.scenario.runs[0]
        if not self.writer.has_run(self.runs[0].name):
            self.writer.write_data(dataset_arrays(built[first.name].dataset))
        for runs in points.values():
            batch = [built[r.name] for r in runs]
            for r, b in zip(runs, batch):
                if self.writer.has_run(r.name):
                    continue
                self.writer.create_run(r.name, params=r.config, seed=r.seed, label=r.label, point=r.point,
                                       init=b.init)
                if _data_key(r) != _data_key(first):
                    self.writer.write_data(dataset_arrays(b.dataset), run=r.name)
            config = runs[0].config
            for preset in config["run"]["solvers"]:
                solver = _Solver(preset, config["run"])
                for name, code in self._run_batch(solver, runs, batch).items():
                    statuses[name][preset["name"]] = code
                if config.get("analysis") and is_primary():   # Caron analyses of the final weights
                    from .analysis.caron import analyze_runs
                    analyze_runs(self.writer, runs, batch, preset["name"], self._final_params,
                                 report=self.report)
        return statuses

    def _run_batch(self, solver: _Solver, runs: list[RunSpec], batch: list[Built]) -> dict[str, str]:
        name = solver.preset["name"]
        config = runs[0].config
        names = tuple(config["run"]["observe"])
        problems = stack_problems([b.problem for b in batch])
        problems = problems._replace(tree=shard(problems.tree, problems.axes))
        params0 = shard(_stack([b.params for b in batch]))
        spec = _series_spec(batch[0].problem, batch[0].params, names, solver)
        for r in runs:
            self.writer.create_solver(r.name, name, preset=solver.preset, series=spec, discrete=solver.discrete)
        state = solver.init(problems, params0, batch)
        members, restored = [], None
        for i, r in enumerate(runs):
            stored = self.writer.read_checkpoint(r.name, name)
            member = _Member(run=r, done_rows=self.writer.n_checkpoints(r.name, name),
                             stats=dict.fromkeys(STAT_KEYS, 0) | {"wall_time": 0.0})
            if stored is not None:
                arrays, attrs = stored
                restored = _restore(to_host(state) if restored is None else restored, i, arrays)
                member.stats = {k: attrs[k] for k in (*STAT_KEYS, "wall_time")}
                member.code = attrs["code"]
            members.append(member)
        if restored is not None:
            state = shard(restored)
        refs = _references(problems, params0)
        times, steps = solver.times(config["run"])
        start = min(m.done_rows for m in members)
        bar = tqdm(total=len(times), initial=start, disable=self._bar_disabled(), unit="ckpt", leave=False,
                   desc=f"{runs[0].label or config['name']} · {name}"[:60])
        try:
            for i in range(start, len(times)):
                if all(m.code != status.RUNNING for m in members):
                    break
                state = self._step(solver, problems, state, members, i, times, steps, refs, names)
                bar.update(1)
                bar.set_postfix_str(f"t={times[i]:.4g}")
                if self.should_stop():   # checkpoint i is committed: stop here, resumable
                    raise Interrupted(f"stopped after checkpoint {i + 1} of {len(times)} ({name})")
        finally:
            bar.close()
        self._final_params = to_host(solver.main(state).y)      # for the analyses of run()
        out = {}
        ends = to_host(solver.position(state))   # where each member stopped (held still after)
        for j, m in enumerate(members):
            final = status.DONE if m.code == status.RUNNING else m.code
            self.writer.set_status(m.run.name, name, status=status.name(final), stats=m.stats,
                                   wall_time=m.stats["wall_time"], message=status.ADVICE[status.name(final)],
                                   status_time=float(ends[j]))
            out[m.run.name] = status.name(final)
        self._summarise(runs[0].label or config["name"], name, members, out)
        return out

    def _step(self, solver, problems, state, members, i, times, steps, refs, names):
        """Advance the batch to checkpoint i, observe it, and append each member's row."""
        moving = [m.code == status.RUNNING and m.done_rows <= i for m in members]
        here = to_host(solver.position(state))
        target = np.where(moving, times[i], here).astype(here.dtype)
        tic = time.perf_counter()
        state, seg = solver.advance(problems, state, target)
        values = _observe(problems, solver.main(state).y, refs, names) | solver.certificate(problems, state)
        # one transfer to numpy per checkpoint; slicing members in JAX would dispatch
        # (and compile) a small kernel per leaf
        host, seg, values = to_host((state, seg, values))
        wall = time.perf_counter() - tic
        position = np.asarray(solver.position(host))
        for j, m in enumerate(members):
            if not moving[j]:
                continue
            for k in STAT_KEYS:
                m.stats[k] += int(seg[k][j])
            m.stats["wall_time"] += wall
            code = int(seg["status"][j])
            if code == status.DONE and not solver.discrete and m.stats["steps"] >= solver.integ.max_steps:
                code = status.MAX_STEPS
            if code != status.DONE:
                m.code = code
            self.writer.append(m.run.name, solver.preset["name"], t=float(position[j]),
                               step=None if steps is None else int(solver.main(host).step[j]),
                               values={k: v[j] for k, v in values.items()},
                               checkpoint=_checkpoint(jax.tree.map(lambda x: x[j], host)),
                               checkpoint_attrs=m.stats | {"code": m.code})
            m.done_rows = i + 1
        return state

    def _bar_disabled(self):
        return None if self.progress is None else not self.progress

    def _summarise(self, label: str, solver: str, members: list[_Member], out: dict[str, str]) -> None:
        counts: dict[str, int] = {}
        for s in out.values():
            counts[s] = counts.get(s, 0) + 1
        steps = sum(m.stats["steps"] for m in members)
        wall = max(m.stats["wall_time"] for m in members)
        states = ", ".join(f"{v} {k}" for k, v in counts.items())
        self.report(f"{label} · {solver}: {states} ({steps} steps over {len(members)} seeds, {wall:.1f} s)")
