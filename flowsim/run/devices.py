"""Where a batch's arrays live: one device, several devices of one process, or the devices
of several processes joined by `jax.distributed` (one program over many hosts).

Multi-process runs follow JAX's multi-controller model: every process runs the same
driver on the same scenario, the compiled segments span all processes' devices, and each
host copy of a checkpoint is gathered to every process. Only process 0 touches the
archive; the others ask it what the archive holds (resume) and write nothing.
"""

import contextlib
import math
import os
import pickle
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils


class DistributedError(Exception):
    """`jax.distributed` could not be set up from the environment."""


# The variables a job needs when no cluster (SLURM, Open MPI, Kubernetes, Cloud TPU) is
# detected by JAX itself; JAX reads the first, flowsim passes on the other two.
ENVIRONMENT = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")


def initialize() -> None:
    """Join this process to a multi-process run (before any other JAX call)."""
    def number(name):
        value = os.environ.get(name)
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            raise DistributedError(f"--distributed: {name}={value!r}: allowed: a whole number") from None

    try:
        jax.distributed.initialize(num_processes=number("JAX_NUM_PROCESSES"),
                                   process_id=number("JAX_PROCESS_ID"))
    except (RuntimeError, ValueError) as err:
        raise DistributedError(
            f"--distributed: jax.distributed could not start ({str(err).strip().splitlines()[0]}); "
            f"outside a cluster JAX detects, set {', '.join(ENVIRONMENT)} in every process") from None
    if jax.process_count() > 1:
        sys.excepthook = _leave_at_once
    if jax.process_count() > 1 and is_primary() and jax.devices()[0].platform == "cpu":
        import warnings

        warnings.warn(CPU_PROCESSES, stacklevel=2)


def _leave_at_once(kind, value, traceback) -> None:
    """A process of a multi-process run that fails (an error the others do not share) says
    why and leaves without the interpreter's teardown: that teardown waits in JAX's shutdown
    barrier for the others, up to 300 s, while they wait in a collective for it, and then
    aborts them all (exit -6) with the reason far up the log. Gone, its connections close,
    and the others' collectives fail within seconds."""
    sys.__excepthook__(kind, value, traceback)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


# Measured (docs/scale.md): a batched solver loop whose seeds span processes ends every
# iteration with a cross-process reduction of "is any member still running"; over Gloo
# between CPU processes that was 0.05-1.8 ms, where a small model's step takes 0.1 ms.
CPU_PROCESSES = ("--distributed over CPU processes: every solver step waits for a cross-process reduction "
                 "(0.05-1.8 ms over Gloo, measured), up to 15x the step of a small model (caron-fig1-quick ran "
                 "16-23x slower than one process); it pays only where a step takes far longer. For a sweep, run "
                 "its parts as separate processes instead: `flowsim submit` or `--shard` (docs/scale.md)")


def is_primary() -> bool:
    return jax.process_index() == 0


def shard(tree, axes=None):
    """Spread the leading (seed) axis of a stacked batch over the visible devices.

    `axes` (vmap's in_axes: 0 or None per leaf, default all 0) says which leaves carry the
    batch. With one device every array leaf is simply put on it. With several (GPUs, TPU
    cores, CPU devices from XLA_FLAGS=--xla_force_host_platform_device_count=N), batched
    leaves get a NamedSharding over a 1-D mesh ("batch"), so the compiled segment runs each
    device's members there; a batch the device count does not divide uses the largest count
    that divides it. Across processes every leaf must be a global array: the mesh spans all
    devices as gcd(batch, devices) × the rest, the seeds split along the first axis and
    repeated along the second, and unbatched leaves (shared data) are replicated.
    Leaves must be host (numpy) arrays or single-process JAX arrays."""
    n = jax.device_count()
    axes = jax.tree.map(lambda x: 0, tree) if axes is None else axes
    is_none = lambda a: a is None  # noqa: E731
    pairs = list(zip(jax.tree.leaves(tree), jax.tree.leaves(axes, is_leaf=is_none)))
    batched = [x for x, ax in pairs if eqx.is_array(x) and ax == 0]
    b = batched[0].shape[0] if batched else 1
    P = jax.sharding.PartitionSpec
    if jax.process_count() == 1:
        k = max(k for k in range(1, n + 1) if b % k == 0)
        if k == 1:
            return jax.tree.map(lambda x: jnp.asarray(x) if eqx.is_array(x) else x, tree)
        mesh = jax.sharding.Mesh(np.array(jax.devices()[:k]), ("batch",))
        rest = None        # shared leaves stay where JAX puts them
    else:
        k = math.gcd(b, n)
        mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(k, n // k), ("batch", "copy"))
        rest = jax.sharding.NamedSharding(mesh, P())
    split = jax.sharding.NamedSharding(mesh, P("batch"))

    def put(x, ax):
        if not eqx.is_array(x):
            return x
        where = split if ax == 0 else rest
        if where is None:
            return jnp.asarray(x)
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, where, lambda index: host[index])

    return jax.tree.map(put, tree, axes, is_leaf=is_none)


def to_host(tree):
    """The arrays of `tree` as numpy arrays, whole on every process."""
    if jax.process_count() == 1:
        return jax.tree.map(np.asarray, tree)
    return multihost_utils.process_allgather(tree, tiled=True)


def _broadcast(obj):
    """Process 0's `obj` on every process (any picklable value)."""
    data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8) if is_primary() else np.zeros(0, np.uint8)
    size = int(multihost_utils.broadcast_one_to_all(np.int64(data.size)))
    buffer = np.zeros(size, np.uint8)
    buffer[:data.size] = data
    return pickle.loads(np.asarray(multihost_utils.broadcast_one_to_all(buffer)).tobytes())


def on_primary(fn):
    """fn() on process 0 only; its exception, if any, is raised on every process (so all
    exit alike). Returns fn's value on process 0 and None elsewhere."""
    value, error = None, None
    if is_primary():
        try:
            value = fn()
        except Exception as err:  # noqa: BLE001 - handed to every process below
            error = err
    if jax.process_count() > 1:
        try:
            sent = _broadcast(error)
        except (pickle.PicklingError, TypeError, AttributeError):
            sent = _broadcast(RuntimeError(f"process 0: {error}"))
        error = error if is_primary() else sent   # process 0 keeps its traceback
    if error is not None:
        raise error
    return value


def shared(fn):
    """fn()'s value on process 0, on every process (fn runs on process 0 only)."""
    value = on_primary(fn)
    return value if jax.process_count() == 1 else _broadcast(value)


def agree(*values: int) -> tuple[int, ...]:
    """Process 0's integers on every process. A decision read from a clock (a chunk's size,
    whether a commit is due) differs between processes; taken on one, it keeps them running
    the same programs and collectives, where two clocks would leave them waiting on each
    other."""
    if jax.process_count() == 1:
        return values
    return tuple(int(v) for v in multihost_utils.broadcast_one_to_all(np.array(values, np.int64)))


def any_process(flag: bool) -> bool:
    """True where `flag` is true on any process (a stop request reaching only some)."""
    if jax.process_count() == 1:
        return flag
    return bool(np.any(multihost_utils.process_allgather(np.array([flag]))))


class SharedWriter:
    """The archive writer as every process of a multi-process run sees it: process 0 holds
    the file and writes; the others write nothing, and each question the driver asks of
    the archive (what a resume finds there) gets process 0's answer.

    Every method of the writer is named below as a question or a write. A question that
    answered None off process 0 (as `solver_stats` once did, unlisted) sent the processes
    down different paths: one raised, the other waited in a collective until the
    coordination service aborted both, minutes later. A method named in neither list
    raises on every process alike; tests/test_scale.py checks the lists against the
    writer's methods."""

    QUESTIONS = frozenset({"has_run", "n_checkpoints", "read_checkpoint", "solver_stats", "horizons"})
    WRITES = frozenset({"write_data", "create_run", "create_solver", "append", "commit", "write_analysis",
                        "extend_horizon", "set_status", "close"})

    def __init__(self, writer):
        self._writer = writer      # None off process 0

    def __getattr__(self, name):
        if name in self.QUESTIONS:
            return lambda *a, **k: shared(lambda: getattr(self._writer, name)(*a, **k))
        if name not in self.WRITES:
            raise AttributeError(f"SharedWriter: {name!r} is neither one of its QUESTIONS (answered by process 0 "
                                 "on every process) nor one of its WRITES (process 0 only): add it to one")
        if self._writer is None:
            return lambda *a, **k: None
        return getattr(self._writer, name)

    def commits(self):
        """The members' commits share one opening of the file on process 0; elsewhere
        nothing is opened (a context manager all the same: the driver enters it everywhere)."""
        return contextlib.nullcontext() if self._writer is None else self._writer.commits()

    def __enter__(self):
        if self._writer is not None:
            self._writer.__enter__()
        return self

    def __exit__(self, *exc):
        return None if self._writer is None else self._writer.__exit__(*exc)
