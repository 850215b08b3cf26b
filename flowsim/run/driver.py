"""The driver: the only loop over checkpoints.

For each sweep point, the runs of its seeds are one batch (`flowsim.run.batch`), compiled once
per solver. At each checkpoint time the batch is advanced, observed and appended to the
archive with its full resumable state; a member that ends with a numerical status
(diverged, max_steps, nonfinite, stopped) is recorded and then held still while the others
go on. Once a solver has finished a batch, the driver hands what it holds to its hooks
(analyses of the trained networks). Integrators know nothing of files; the archive knows
nothing of JAX.
"""

import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import jax
import numpy as np

from . import batch as kernels, state_arrays   # kernels: the batch's jitted programs
from .advice import STAT_KEYS as ADVICE_KEYS, advise
from ..archive import ArchiveWriter
from ..archive.format import COUNTS
from .build import Built, data_seed, dataset_arrays, program_signature
from ..config import Data, Preset, RunSpec, Scenario, to_dict
from .devices import agree, is_primary, shard, to_host
from ..integrate.base import AbstractIntegrator
from .integrators import checkpoint_grid, make_integrator
from ..nn.problem import Params
from .progress import BatchProgress, Progress
from ..observe.observables import observe, reference, series_axes
from ..status import Status

STAT_KEYS = COUNTS      # the statistics every solver keeps, and the archive's per-checkpoint columns
POLL = 0.25     # seconds between looks at a stop request while a segment computes


class Interrupted(KeyboardInterrupt):
    """A stop was requested (SIGTERM, Ctrl-C) and honoured after a committed checkpoint."""


class Hook(Protocol):
    """Called (on process 0) once a solver has finished a batch of seeds, with what the
    driver holds: the batch's runs and built problems, the solver preset's name, the
    initial and final weights (stacked along the seed axis, host arrays), and the driver's
    writer and report. Hooks store their results through the writer."""

    def __call__(self, writer: ArchiveWriter, runs: list[RunSpec], built: list[Built], solver: str, *,
                 initial: Params, final: Params, report: Callable[[str], None]) -> None: ...


@dataclass
class _Member:
    """Book-keeping of one seed of a batch for one solver."""

    run: RunSpec
    done_rows: int          # checkpoint rows already in the archive (resume)
    stats: dict
    code: int = Status.RUNNING
    # what earlier processes left (a resume): its rows and statistics, so that this process
    # reports its own leg, and a member that had ended is not charged again
    rows_before: int = 0
    before: dict = field(default_factory=dict)

    def moves(self, rows: int) -> bool:
        """Whether it has checkpoints to go of the `rows` of its grid."""
        return self.code == Status.RUNNING and self.done_rows < rows

    @property
    def ran(self) -> bool:
        """Whether this process advanced it (rows appended since the resume)."""
        return self.done_rows > self.rows_before

    def leg(self, key: str) -> float:
        """A statistic's part of this process's leg."""
        return self.stats.get(key, 0) - self.before.get(key, 0)


def _series_spec(integ: AbstractIntegrator, problem, params, names) -> dict:
    shapes = jax.eval_shape(lambda: observe(problem, params, reference(problem, params), names))
    axes = series_axes(names, problem.net)
    spec = {k: (tuple(v.shape), v.dtype.str, axes[k]) for k, v in shapes.items()}
    dtype = jax.tree.leaves(params)[0].dtype.str
    return spec | {k: ((), dtype, ()) for k in integ.certificate_series}


CHUNK = 16               # checkpoints per compiled call, at most
CHUNK_WALL = 0.5         # seconds a chunk should take, about
CHUNK_BYTES = 64 << 20   # observed values a chunk may hold on the device, at most
COMMIT_EVERY = 1.0       # seconds between archive commits, at least (and at every run's end)


def chunk_size(spec: dict) -> int:
    """Checkpoints per compiled call, at most (the shape the chunk is compiled and padded
    to): CHUNK, fewer when each row is large (weights series of a wide network), so that a
    chunk's values stay within CHUNK_BYTES."""
    row = sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype, _ in spec.values())
    return int(max(1, min(CHUNK, CHUNK_BYTES // max(row, 1))))


class _Commits:
    """When the rows appended so far become durable: archive commits (a flush and the
    members' resumable states) are batched in time, at most one every COMMIT_EVERY seconds
    (the first chunk that starts once one is due), and forced at a batch's end, before a stop
    and on a failure. A kill loses at most the work since the last commit; a resumed run
    starts from a committed chunk end, so it is the same computation as one never stopped.
    The state's stored part comes to the host with the chunk's rows (`Driver._chunk`) when the
    chunk is to be committed (`keep`)."""

    def __init__(self, writer: ArchiveWriter, solver: str, members: list["_Member"]):
        self.writer, self.solver, self.members = writer, solver, members
        self.dirty: set[int] = set()     # members with rows appended since their last commit
        self.last = None                 # the batch's state at the end of its last chunk (on the device)
        self.stored = None               # its stored part on the host, where that chunk brought it
        self.at = -float("inf")          # the first chunk is committed at once

    def wrote(self, j: int) -> None:
        self.dirty.add(j)

    def due(self) -> bool:
        return time.monotonic() - self.at >= COMMIT_EVERY

    def ended(self, state, stored) -> None:
        """A chunk ended at `state`; `stored`: its stored part on the host, or None (not brought)."""
        self.last, self.stored = state, stored

    def maybe(self, *, due: bool) -> None:
        if self.dirty and due:
            self.now()

    def now(self) -> None:
        host = self.stored
        if host is None:
            # A commit the chunk did not foresee (a stop, every member ended before the last
            # row, a failure's rescue): the state's stored part moves here, once.
            host = to_host(state_arrays.stored(self.last))
        with self.writer.commits():     # the members' commits share one opening of the file
            for j in sorted(self.dirty):
                m = self.members[j]
                self.writer.commit(m.run.name, self.solver,
                                   checkpoint=state_arrays.as_arrays(jax.tree.map(lambda x: x[j], host)),
                                   checkpoint_attrs=m.stats | {"code": m.code})
        self.dirty.clear()
        self.at = time.monotonic()

    def rescue(self) -> None:
        """On a stop or failure, commit the rows of the chunks that completed (a chunk cut
        short appended nothing); a failure here must not hide the first one."""
        if self.dirty and self.last is not None:
            try:
                self.now()
            except Exception as err:   # noqa: BLE001 - reported, the original error goes on
                print(f"flowsim: could not commit the last rows ({err})", file=sys.stderr)


@dataclass
class _Batch:
    """One solver over one batch of seeds: what its chunks share, built once (`Driver._start`)."""

    preset: Preset
    label: str                  # the sweep point's label (or the scenario's name), for reports
    integ: AbstractIntegrator
    problems: Any               # the members' problems, stacked and sharded (`kernels.stack_problems`)
    members: list[_Member]
    start: int                  # the first checkpoint row some member lacks (0, or where a resume starts)
    carried: Any                # what the observables carry between rows (the eigen-tracker's vectors)
    times: np.ndarray           # the checkpoint times (`checkpoint_grid`)
    refs: Any                   # what the observables compare with (`kernels.references`)
    names: tuple[str, ...]      # the observables
    most: int                   # checkpoints per compiled call, at most (`chunk_size`)
    bar: BatchProgress
    commit: _Commits
    here: np.ndarray            # each member's time on the host, as the last chunk left it

    @property
    def name(self) -> str:
        """The solver preset's name (its group in the archive)."""
        return self.preset.name

    def advice(self) -> str | None:
        """The solver advisor's word on a flow preset, from its seeds' statistics summed."""
        method = getattr(self.preset, "method", None)
        if method is None:
            return None
        return advise(method, {k: sum(m.stats.get(k, 0) for m in self.members) for k in ADVICE_KEYS}, self.name,
                      self.preset.kind)


def _data_key(r: RunSpec) -> tuple[Data, int]:
    return r.settings.data, data_seed(r.settings, r.seed)


class Driver:
    """Runs a scenario into an archive. `report` receives one line per finished batch;
    `hooks` are called after each solver of each batch (see `Hook`)."""

    def __init__(self, scenario: Scenario, writer: ArchiveWriter, *, progress: Progress | bool | None = None,
                 report: Callable[[str], None] = lambda s: print(s, file=sys.stderr),
                 should_stop: Callable[[], bool] = lambda: False,
                 stop_now: Callable[[], bool] | None = None, runs: list[RunSpec] | None = None,
                 hooks: Sequence[Hook] = ()):
        self.scenario = scenario
        # `runs`: a part of the scenario's runs (`flowsim run --shard i/N`); /data still holds
        # the scenario's first run's dataset, so that merged parts read like one run.
        self.runs = list(scenario.runs if runs is None else runs)
        self.writer = writer
        # bool/None: `Progress(show=...)` (None: bars on a terminal, throttled lines otherwise)
        self.progress = progress if isinstance(progress, Progress) else Progress(progress)
        self.report = report
        # Polled after every committed checkpoint (SIGTERM / Ctrl-C set it): the run then
        # ends with `Interrupted`, leaving statuses `running` and the archive resumable.
        self.should_stop = should_stop
        # Polled (locally, every POLL seconds) while a segment computes, so that a stop acts
        # within a second however long the segment; None where a stop must wait for the
        # checkpoint (several processes must stop after the same one).
        self.stop_now = stop_now
        self.hooks = tuple(hooks)

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
        horizons = self.writer.horizons()   # earlier t_ends of an extended archive
        signatures = [program_signature([built[r.name] for r in runs], runs[0].settings)
                      for runs in points.values()]
        for at, runs in enumerate(points.values()):
            if at and signatures[at] != signatures[at - 1]:
                jax.clear_caches()   # see `program_signature`
            built_runs = [built[r.name] for r in runs]
            for r, b in zip(runs, built_runs):
                if self.writer.has_run(r.name):
                    continue
                self.writer.create_run(r.name, params=r.config, seed=r.seed, label=r.label, point=r.point,
                                       init=b.init)
                if _data_key(r) != _data_key(first):
                    self.writer.write_data(dataset_arrays(b.dataset), run=r.name)
            run_cfg = runs[0].settings.run
            for preset in run_cfg.solvers:
                codes, final = self._run_batch(preset, make_integrator(preset, run_cfg), runs, built_runs,
                                               horizons)
                for name, code in codes.items():
                    statuses[name][preset.name] = code
                if self.hooks and is_primary():
                    # numpy, not `to_host`: that gathers across processes, and only this one is here
                    initial = jax.tree.map(lambda *xs: np.stack(xs), *(b.params for b in built_runs))
                    for hook in self.hooks:
                        hook(self.writer, runs, built_runs, preset.name, initial=initial, final=final,
                             report=self.report)
        return statuses

    def _run_batch(self, preset: Preset, integ: AbstractIntegrator, runs: list[RunSpec],
                   built_runs: list[Built], horizons: tuple[float, ...]) -> tuple[dict[str, str], Params]:
        """Run one solver over a batch of seeds; returns run → final status, and the final
        weights (stacked, host arrays). `horizons`: the archive's earlier t_ends (an
        extended run, see `checkpoint_grid`)."""
        batch, state = self._start(preset, integ, runs, built_runs, horizons)
        state = self._advance(batch, state)
        return self._finish(batch, state)

    def _start(self, preset: Preset, integ: AbstractIntegrator, runs: list[RunSpec], built_runs: list[Built],
               horizons: tuple[float, ...]) -> tuple[_Batch, Any]:
        """The batch's record and its state at its first chunk: the solver's groups in the
        archive, the integrator's state (initial, or each resumed member's checkpoint), the
        references the observables compare with, and the start-up's times charged to every
        member."""
        name = preset.name
        config = runs[0].settings
        names = config.run.observe
        problems = kernels.stack_problems([b.problem for b in built_runs])
        problems = problems._replace(tree=shard(problems.tree, problems.axes))
        params0 = shard(kernels.stack([b.params for b in built_runs]))
        spec = _series_spec(integ, built_runs[0].problem, built_runs[0].params, names)
        for r in runs:
            self.writer.create_solver(r.name, name, preset=to_dict(preset), series=spec, discrete=integ.discrete,
                                      conventions=integ.conventions, counts=STAT_KEYS)
        # compiled ahead (seconds for a large model; a stop meanwhile acts at once too)
        state, init_compile, init_wall = self._run_compiled(
            kernels.init, integ, problems, params0, shard(kernels.stack([b.key for b in built_runs])))
        # the observables' carried values are stored in the checkpoint beside the state, so
        # that a resumed run warm-starts as the uninterrupted one did
        carried = _cold_memory(problems, params0, names)
        members, (state, carried), older = self._members(runs, name, integ, (state, carried))
        if older:        # checkpoints written before the discrete states kept their look-ahead
            state = kernels.complete(integ, problems, state)
        # where each member starts (0, or its checkpoint's time), once per batch: from then on
        # each chunk brings it with its rows
        here = to_host(integ.time(state))
        refs, refs_compile, refs_wall = self._run_compiled(kernels.references, problems, params0)
        times = checkpoint_grid(preset, config.run, horizons)
        for m in members:   # the batch's start-up, in this process (a resumed run's again), not an ended one's
            if m.moves(len(times)):
                m.stats["compile_time"] = m.stats.get("compile_time", 0.0) + init_compile + refs_compile
                m.stats["wall_time"] = m.stats.get("wall_time", 0.0) + init_wall + refs_wall
        start = min(m.done_rows for m in members)
        label = runs[0].label or config.name
        bar = self.progress.batch(label, name, [r.name for r in runs], float(times[start - 1]) if start else 0.0,
                                  float(times[-1]))
        return _Batch(preset=preset, label=label, integ=integ, problems=problems, members=members, start=start,
                      carried=carried, times=times, refs=refs, names=names, most=chunk_size(spec), bar=bar,
                      commit=_Commits(self.writer, name, members), here=here), state

    def _members(self, runs: list[RunSpec], name: str, integ: AbstractIntegrator,
                 state) -> tuple[list[_Member], Any, bool]:
        """Each seed's book-keeping, the batch's state (with the observables' carried values: a
        pair) with every member the archive holds a checkpoint of restored from it (a resume),
        and whether those checkpoints lack the look-ahead that states keep now
        (`state_arrays.lacks_look_ahead`)."""
        members, restored, older = [], None, False
        for i, r in enumerate(runs):
            stored = self.writer.read_checkpoint(r.name, name)
            # a fresh member's counts start with what `init` spent (a resumed one has them)
            member = _Member(run=r, done_rows=self.writer.n_checkpoints(r.name, name),
                             stats=dict.fromkeys(STAT_KEYS, 0) | {"vf_evals": integ.init_evals,
                                                                  "hvps": integ.init_hvps})
            if stored is not None:
                arrays, attrs = stored
                # the restore path, once per resumed batch: the initial state is the template
                restored = state_arrays.restore(to_host(state) if restored is None else restored, i, arrays)
                older = older or state_arrays.lacks_look_ahead(restored, arrays)
                # every statistic the solver's advance returned (STAT_KEYS and its own)
                member.stats = {k: v for k, v in attrs.items() if k != "code"}
                member.code = attrs["code"]
                # a member that had ended: its final statistics (its checkpoint's, and observe_time)
                final = self.writer.solver_stats(r.name, name)
                if "observe_time" in final and all(final.get(k) == member.stats.get(k) for k in STAT_KEYS):
                    member.stats = final
                member.rows_before, member.before = member.done_rows, dict(member.stats)
            members.append(member)
        return members, state if restored is None else shard(restored), older

    def _advance(self, batch: _Batch, state):
        """The chunk loop: from the batch's first row to its last checkpoint (or until every
        member has ended), committing as `_Commits` decides; a stop raises `Interrupted`
        after a commit, and a stop or a failure commits the chunks that completed."""
        times, i, size = batch.times, batch.start, 1
        advised, due = False, True      # the first chunk is committed at once
        try:
            while i < len(times) and any(m.code == Status.RUNNING for m in batch.members):
                rows = range(i, min(i + size, len(times)))
                # committed after it: where one is due as it starts, and the last
                keep = due or rows.stop == len(times)
                tic = time.perf_counter()
                state = self._chunk(batch, state, rows, ahead=i == batch.start, keep=keep)
                if not advised:     # as soon as the statistics show it, not after the run
                    advice = batch.advice()
                    if advice is not None:
                        advised = True
                        self.report(f"flowsim: {batch.label} · {batch.name}: advice: {advice}")
                        batch.bar.advise(advice)
                # Each checkpoint is its own stretch inside the chunk, so where chunks end
                # does not change the numbers: a chunk grows (doubling) while it takes less
                # than CHUNK_WALL, and shrinks after a slow one, so that a stop or a kill
                # loses little. Process 0's size and commit on every process (`agree`).
                per = (time.perf_counter() - tic) / len(rows)
                size = int(max(1, min(batch.most, 2 * size, CHUNK_WALL // per if per > 0 else batch.most)))
                i = rows.stop
                stop = self.should_stop()
                batch.commit.maybe(due=keep or stop)
                if stop:   # the rows so far are committed: stop here, resumable
                    raise Interrupted(f"stopped after checkpoint {i} of {len(times)} ({batch.name})")
                size, due = agree(size, batch.commit.due())
            batch.commit.maybe(due=True)    # the end, or every member has ended
        except BaseException:
            batch.bar.close()      # stopped or failed: the JSON log gets no "finished" record
            batch.commit.rescue()
            raise
        return state

    def _finish(self, batch: _Batch, state) -> tuple[dict[str, str], Params]:
        """Each member's final status and statistics in the archive, the batch's summary
        reported; returns run → final status and the final weights (stacked, host arrays)."""
        out = {}
        ends = batch.here   # where each member stopped (held still after)
        # The chunk program interleaves stepping and observing; what observing costs is told
        # apart by timing one observation, and charged to every row the member recorded.
        # The eigen-tracker's products dominate an observation that takes any, and a row
        # warm-started from the row before takes fewer than the cold one timed: a member's
        # rows are charged the cold row's time scaled by the products they took.
        per_row, cold = self._observation_cost(batch, state)
        for m in batch.members:
            # each process's leg its own share, within its own wall time (an earlier leg
            # interrupted before it ended has none recorded: the same estimate for it), its
            # rows counted in the cold row's products where the tracker takes any
            if cold:
                rows_before = m.before.get("observe_hvps", 0) / cold
                rows_now = (m.stats.get("observe_hvps", 0) - m.before.get("observe_hvps", 0)) / cold
            else:
                rows_before, rows_now = m.rows_before, m.done_rows - m.rows_before
            earlier = m.before.get("observe_time", min(per_row * rows_before, m.before.get("wall_time", 0.0)))
            now = min(per_row * rows_now, max(m.leg("wall_time"), 0.0))
            m.stats["observe_time"] = earlier + now
        for j, m in enumerate(batch.members):
            final = Status.DONE if m.code == Status.RUNNING else m.code
            self.writer.set_status(m.run.name, batch.name, status=Status.of(final).label, stats=m.stats,
                                   message=Status.of(final).advice,
                                   status_time=float(ends[j]))
            out[m.run.name] = Status.of(final).label
        wall = max(m.stats["wall_time"] for m in batch.members)
        observing = max(m.stats["observe_time"] for m in batch.members)
        batch.bar.close(out, wall=wall, observe=observing)
        self._summarise(batch, out)
        # the final weights, once per batch, for the hooks alone (a gather on every process)
        return out, to_host(batch.integ.params(state)) if self.hooks else None

    def _chunk(self, batch: _Batch, state, rows: range, ahead: bool = False, keep: bool = False):
        """Advance the batch through checkpoints `rows` in one compiled call (`kernels.chunk`,
        padded to `batch.most` checkpoints: one compilation, `ahead` of the batch's first
        call and timed apart), observing at each, and append each member's rows with their
        cumulative counts. What the host needs of the chunk moves in one transfer: its rows
        (statistics, times, steps, values; the last row's times are where the members are
        now) and, where the chunk is to be committed (`keep`), the state's stored part."""
        integ, members, times, bar = batch.integ, batch.members, batch.times, batch.bar
        here = batch.here
        k = np.arange(batch.most)
        index = np.minimum(rows.start + k, rows.stop - 1)
        moving = np.array([[m.code == Status.RUNNING and m.done_rows <= i and i < rows.stop
                            for m in members] for i in rows.start + k])
        targets = np.where(moving, times[index][:, None], here[None, :]).astype(here.dtype)
        steps = np.array([m.stats["steps"] for m in members], dtype=np.int64)
        args = (integ, batch.problems, state, targets, moving, k < len(rows), steps, batch.refs, batch.names,
                np.asarray(times[-1], here.dtype), batch.carried)
        compiling = self._interruptible(lambda: _compile(kernels.chunk, *args), bar) if ahead else 0.0
        tic = time.perf_counter()

        def work():
            new, carried, out = kernels.chunk(*args)
            # the chunk's one transfer to numpy; slicing members in JAX would dispatch (and
            # compile) a small kernel per leaf
            return new, carried, to_host((out, state_arrays.stored((new, carried)) if keep else None))

        state, batch.carried, ((seg, position, step, values), stored) = self._interruptible(
            work, bar, float(times[rows.stop - 1]))
        batch.here = position[len(rows) - 1]    # (a member held still is at its time in every row)
        wall = (time.perf_counter() - tic) / len(rows)
        for m in members:     # (each member records the batch's, as its wall time)
            if m.moves(len(times)):
                m.stats["compile_time"] += compiling
        for r, i in enumerate(rows):
            for j, m in enumerate(members):
                if not (moving[r, j] and m.code == Status.RUNNING):
                    continue
                for key in (k for k in seg if k != "status"):
                    m.stats[key] = m.stats.get(key, 0) + int(seg[key][r, j])
                m.stats["wall_time"] += wall
                code = int(seg["status"][r, j])
                if code != Status.DONE:
                    m.code = code
                self.writer.append(m.run.name, batch.name, t=float(position[r, j]),
                                   step=None if step is None else int(step[r, j]),
                                   values={key: v[r, j] for key, v in values.items()},
                                   counts=[m.stats.get(key, 0) for key in STAT_KEYS])
                m.done_rows = i + 1
                batch.commit.wrote(j)
            bar.update(float(times[i]), [m.stats["steps"] for m in members], [Status.of(m.code).label for m in members])
        batch.commit.ended((state, batch.carried), stored)
        return state

    def _observation_cost(self, batch: _Batch, state) -> tuple[float, int]:
        """Seconds the batch's observation at one checkpoint takes from a cold start, and the
        Hessian-vector products it takes: the chunk program (the one compiled for the run,
        nothing new to compile) called with no member moving, with one real row of its
        `batch.most` less with none (the call's own cost), timed (the fastest of three). Its
        values are discarded."""
        here = batch.here
        still = np.zeros((batch.most, here.size), bool)
        cold = _cold_memory(batch.problems, batch.integ.params(state), batch.names)

        def call(rows: int):
            tic = time.perf_counter()
            out = jax.block_until_ready(kernels.chunk(batch.integ, batch.problems, state,
                                                      np.broadcast_to(here, still.shape).copy(), still,
                                                      np.arange(batch.most) < rows, np.zeros(here.size, np.int64),
                                                      batch.refs, batch.names, np.asarray(batch.times[-1], here.dtype),
                                                      cold))
            return time.perf_counter() - tic, out[2][0]["observe_hvps"]

        # the fastest of three each: one call's difference is within a shared machine's noise
        # (measured: 0.65-2.9 ms for one call of a 0.2 ms observation), which once charged a
        # whole resumed leg to observing
        ones, nones = [call(1) for _ in range(3)], [call(0)[0] for _ in range(3)]
        one = min(t for t, _ in ones)
        return max(one - min(nones), 0.0), int(np.max(to_host(ones[0][1])[0]))

    def _run_compiled(self, fn, *args) -> tuple[Any, float, float]:
        """`fn(*args)` (a jitted kernel of `batch`), compiled ahead: (its value, the seconds
        compiling, the seconds running). Both are interruptible (`_interruptible`)."""
        compiling = self._interruptible(lambda: _compile(fn, *args))
        tic = time.perf_counter()
        out = self._interruptible(lambda: jax.block_until_ready(fn(*args)))
        return out, compiling, time.perf_counter() - tic

    def _interruptible(self, work: Callable[[], Any], bar: BatchProgress | None = None,
                       target: float | None = None) -> Any:
        """`work()` (a segment: minutes, for a stiff or kinked flow; or a first call that
        compiles), computed on a helper thread while this one wakes every POLL seconds: a
        stop asked for meanwhile (`stop_now`) abandons the work at once (nothing of it is
        committed, and `--resume` continues from the last checkpoint), and the progress line
        of a segment (`bar`, `target`) keeps coming. A thread rather than JAX's asynchronous
        dispatch: XLA on CPU runs a program it deems cheap (a while loop is costed as one
        iteration) inline, in the caller."""
        if self.stop_now is None and (bar is None or not bar.waiting_shown):
            return work()
        out: dict[str, Any] = {}
        ready = threading.Event()

        def run():
            try:
                out["value"] = work()
            except BaseException as err:   # raised again here, in the driver's thread
                out["error"] = err
            finally:
                ready.set()

        threading.Thread(target=run, daemon=True, name="flowsim-segment").start()
        while not ready.wait(POLL):   # a lock wait: Python's signal handlers run meanwhile
            if self.stop_now is not None and self.stop_now():
                raise Interrupted("stopped while compiling" if target is None else
                                  f"stopped during the segment to t = {target:.6g}")
            if bar is not None:
                bar.waiting(target)
        if "error" in out:
            raise out["error"]
        return out["value"]

    def _summarise(self, batch: _Batch, out: dict[str, str]) -> None:
        """One line of the batch's leg in this process: a resumed run's figures are this
        process's (`flowsim inspect` has the totals), and a solver that had ended before
        says so rather than print its old figures as if they were now."""
        members, advice = batch.members, batch.advice()
        counts: dict[str, int] = {}
        for s in out.values():
            counts[s] = counts.get(s, 0) + 1
        states = ", ".join(f"{v} {k}" for k, v in counts.items())
        ran = [m for m in members if m.ran]
        if not ran:
            self.report(f"{batch.label} · {batch.name}: {states} (finished before this resume; nothing to run)")
            return
        steps = sum(m.leg("steps") for m in ran)
        wall, observing, compiling = (max(m.leg(k) for m in ran) for k in ("wall_time", "observe_time", "compile_time"))
        seeds = f"{len(ran)} seed" + ("s" if len(ran) > 1 else "")
        resumed = min(m.rows_before for m in ran)
        since = f"; resumed at t = {batch.times[resumed - 1]:.6g}" if resumed else ""
        self.report(f"{batch.label} · {batch.name}: {states} ({steps} steps over {seeds}, {wall:.1f} s, "
                    f"of which observing ≈ {observing:.1f} s; compiling {compiling:.1f} s{since})"
                    + (f"\n  advice: {advice}" if advice else ""))


def _cold_memory(problems, params, names: tuple[str, ...]):
    """The observables' carried values at a cold start, spread over the devices like the
    batch. They are constants, which jit hands back on one device of each process; left
    there, `to_host` would take each process's whole copy for its part (8 members of 4: a
    --distributed resume observing `sharpness` failed)."""
    return shard(kernels.memory(problems, params, names))


def _compile(fn, *args) -> float:
    """Seconds to trace, lower and compile the jitted `fn` for `args`, ahead of its call. The
    compiled program lands in the cache that `fn(*args)` then finds, so the call runs it
    without compiling again (JAX's ahead-of-time `lower(...).compile()`): the wall times
    of the calls leave compilation out, and `compile_time` holds it."""
    tic = time.perf_counter()
    fn.lower(*args).compile()
    return time.perf_counter() - tic
