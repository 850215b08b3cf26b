"""From a typed run config (`RunSpec.settings`: one sweep point, one seed) to a ready `Problem`.

Everything that can fail on bad input (files, shapes, incompatible choices) fails here,
before any archive is touched or any integration starts, with a `BuildError` that names the
scenario key and what is allowed.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .config.typed import Config, FlowPreset, MlpModel, PythonModel, ShallowModel
from .data import DataError, Dataset, make_dataset
from .integrate.registry import state_copies
from .models import MODELS, BuildError, Built, Network
from .models.base import dtype_of
from .models.module import leaf_paths
from .observe import OBSERVABLES
from .precision import enable_x64
from .problem import Params, Problem


def data_seed(config: Config, seed: int) -> int:
    """`data.seed` is an int shared by every run, or "run" to draw the data per seed."""
    return seed if config.data.seed == "run" else int(config.data.seed)


def _check_compatible(config: Config, ds: Dataset) -> None:
    n = ds.X_train.shape[0]
    if config.loss.kind == "cross-entropy" and ds.y_train.shape[1] < 2:
        raise BuildError("`loss.kind` = \"cross-entropy\" needs a classification dataset (one-hot targets "
                         f"with ≥ 2 classes); `data.kind` = {config.data.kind!r} gives 1 target column")
    wants_test = {"test_loss", "test_accuracy"} & set(config.run.observe)
    if wants_test and ds.X_test.shape[0] == 0:
        raise BuildError(f"`run.observe` asks for {sorted(wants_test)} but the dataset has no test points; "
                         "set `data.n_test` > 0 or drop them")
    for solver in config.run.solvers:
        if solver.kind == "sgd" and solver.batch_size > n:
            raise BuildError(f"solver {solver.name!r}: `batch_size` = {solver.batch_size} exceeds the "
                             f"{n} training points; allowed: an integer in [1, {n}]")


_DATA_ALLOWED = {
    "csv": "a UTF-8 CSV file with one header row, at least one data row, the same number of fields "
           "on every line, finite numbers in every cell, and the `data.target` column(s)",
    "npz": "an .npz holding X_train (rows × features) and y_train with as many rows (and optionally "
           "X_test, y_test), all finite",
}


def _dataset(config: Config, seed: int) -> Dataset:
    """The run's data; a bad data file is a DataError naming the file, the key and what is
    allowed (make_dataset names the file and what is wrong with it)."""
    data = config.data
    # Only the user-file kinds (csv, npz) have a `path`; uci and digits read shipped files.
    has_path = hasattr(data, "path")
    try:
        return make_dataset(data, data_seed(config, seed))
    except (DataError, UnicodeDecodeError) as err:
        text = str(err) if isinstance(err, DataError) else \
            f"{data.path if has_path else '?'}: is not UTF-8 text ({err.reason} at byte {err.start})"
        if "allowed:" in text:
            raise
        kind = data.kind
        key = "data.path" if has_path else "data"
        allowed = _DATA_ALLOWED.get(kind, f"data of kind {kind!r} as described in the scenario docs")
        raise DataError(f"{text} (from `{key}`); allowed: {allowed}") from None


def build_run(config: Config, seed: int) -> Built:
    """Data, network, loss and initial weights of one run (the network by `model.kind`,
    through `flowsim.models.MODELS`)."""
    enable_x64()   # every run, float32 ones too (int64 step counters, float64 times)
    ds = _dataset(config, seed)
    _check_compatible(config, ds)
    network = MODELS[config.model.kind].build(config, ds, seed)
    return assemble(network, ds, dtype=dtype_of(config), loss_kind=config.loss.kind,
                    ntg_points=config.run.ntg_points)


def assemble(network: Network, ds: Dataset, *, dtype, loss_kind: str, ntg_points: int,
             custom_loss=None) -> Built:
    """A run's `Problem`, assembled in one place for every model kind and for
    `flowsim.simulate` (whose loss may be a Python function, `custom_loss`): the network on
    the inputs it sees, the data's targets, the loss and the flow's rate. The init record
    gets the initial loss, "loss0"."""
    as_j = lambda a: jnp.asarray(a, dtype)  # noqa: E731
    X = ds.X_train if network.X is None else network.X
    X_test = ds.X_test if network.X_test is None else network.X_test
    problem = Problem(net=network.net, X=as_j(X), y=as_j(ds.y_train), X_test=as_j(X_test),
                      y_test=as_j(ds.y_test), rate=network.rate, loss_kind=loss_kind,
                      ntg_points=min(ntg_points, ds.X_train.shape[0]), custom_loss=custom_loss)
    loss0 = _initial_loss(problem, network.params) if network.compiled_loss0 else problem.loss(network.params)
    init = network.init | {"loss0": np.asarray(loss0)}
    return Built(problem=problem, params=network.params, dataset=ds, init=init, key=network.key)


@eqx.filter_jit
def _initial_loss(problem: Problem, params: Params) -> jax.Array:
    # one compiled program: evaluated eagerly, a shallow net's forward pass is a dozen small
    # programs, each a compilation (or a cache load) at start-up
    return problem.loss(params)


def program_signature(built_runs: list[Built], config: Config) -> tuple:
    """What the programs compiled for a sweep point's batch depend on: the problems' and
    weights' structure (static fields included) and shapes, the seeds batched, the solvers.
    Where it changes from one point to the next, the last point's programs cannot serve
    and are released (`jax.clear_caches`): each compiled program holds its own memory
    mappings, and a 200-point sweep of varied widths, keeping ~100-400 per point, reached
    the system's limit of 65 530 and crashed."""
    tree = (built_runs[0].problem, built_runs[0].params)
    leaves = tuple((getattr(x, "shape", None), str(getattr(x, "dtype", type(x)))) for x in jax.tree.leaves(tree))
    return jax.tree.structure(tree), leaves, len(built_runs), repr(config.run.solvers)


@eqx.filter_jit
def _finite_start(problem, params):
    """Whether the loss is finite at `params`, and each gradient leaf (one compiled program
    per shape: a batch of seeds pays for one)."""
    loss, grad = jax.value_and_grad(problem.loss)(params)
    return jnp.isfinite(loss), [jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grad)]


def start_problem(built: Built) -> str | None:
    """Why no solver can start from the run's initial weights, naming the first offending
    leaf or training sample (row of X); None when the loss and its gradient are finite.
    A non-finite start otherwise ends every solver at t = 0 (`nonfinite`, `diverged`)
    after minutes of rejected steps, with an archive that holds nothing to compare."""
    problem, params = built.problem, built.params
    loss_ok, grad_ok = _finite_start(problem, params)
    if bool(loss_ok) and all(map(bool, grad_ok)):
        return None
    names, leaves = leaf_paths(params), jax.tree.leaves(params)
    bad = next((n for n, v in zip(names, leaves) if not np.all(np.isfinite(np.asarray(v)))), None)
    if bad is not None:
        return f"the initial weights hold NaN or infinite values in leaf `{bad}`"
    out = np.asarray(problem.net(params, problem.X))
    rows = np.flatnonzero(~np.isfinite(out.reshape(out.shape[0], -1)).all(axis=1))
    if rows.size:
        return f"the model's output is not finite on training sample {rows[0]} (row {rows[0]} of X)"
    per_sample = jax.vmap(lambda o, y: problem.loss_function()(o[None], y[None]))(jnp.asarray(out), problem.y)
    rows = np.flatnonzero(~np.isfinite(np.asarray(per_sample)))
    if rows.size:
        return f"the loss is not finite on training sample {rows[0]} (row {rows[0]} of X and of y)"
    if not bool(loss_ok):
        return "the loss is not finite (each sample's is: their total overflows)"
    return f"the gradient is not finite in leaf `{names[[bool(g) for g in grad_ok].index(False)]}`"


def dataset_arrays(ds: Dataset) -> dict[str, np.ndarray]:
    return {"X_train": ds.X_train, "y_train": ds.y_train, "X_test": ds.X_test, "y_test": ds.y_test,
            **{k: np.asarray(v) for k, v in ds.extra.items()}}



# ---------------------------------------------------------------------------------------
# Resource estimate: a scenario that would exhaust memory (or the disk) is refused before
# anything is built, with the estimate and the limit in the message.
# ---------------------------------------------------------------------------------------

_GIB = float(1 << 30)
_SYNTHETIC_SHAPE = ("n", "d")     # data kinds that state their size in the scenario


class ResourceError(BuildError):
    """A scenario whose estimated memory or disk need exceeds what is available."""


def _limit_from_env(name: str) -> float | None:
    import os

    text = os.environ.get(name, "").strip()
    if not text:
        return None
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    scale = units.get(text[-1].lower(), 1)
    try:
        return float(text[:-1] if scale != 1 else text) * scale
    except ValueError:
        raise BuildError(f"{name} = {text!r} is not a size; allowed: bytes, or a number with "
                         "a suffix K, M, G, T (e.g. 8G)") from None


def memory_limit() -> tuple[float, str]:
    """Bytes the run may use, and where that number comes from. `FLOWSIM_MEMORY_LIMIT`
    (e.g. "8G") overrides; otherwise the available RAM (MemAvailable) and, on an
    accelerator, its memory."""
    env = _limit_from_env("FLOWSIM_MEMORY_LIMIT")
    if env is not None:
        return env, "FLOWSIM_MEMORY_LIMIT"
    limit, source = float("inf"), "unknown"
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    limit, source = float(line.split()[1]) * 1024, "available RAM"
    except OSError:
        import os

        try:
            limit = float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
            source = "available RAM"
        except (ValueError, OSError, AttributeError):
            pass
    try:
        dev = jax.devices()[0]
        if dev.platform != "cpu":
            stats = dev.memory_stats() or {}
            if stats.get("bytes_limit") and stats["bytes_limit"] < limit:
                limit, source = float(stats["bytes_limit"]), f"{dev.platform} memory"
    except Exception:  # noqa: BLE001 - the estimate must never be what fails a run
        pass
    return limit, source


def _data_shape(cfg: Config, seed: int, cache: dict) -> tuple[int, int, int]:
    """(n, n_test, d) of a run's data: from the scenario when it says, else by loading it
    (file-backed data are bounded by their file)."""
    data = cfg.data
    if all(hasattr(data, k) for k in _SYNTHETIC_SHAPE):
        return int(data.n), int(data.n_test), int(data.d)
    key = (data, data_seed(cfg, seed))
    if key not in cache:
        ds = _dataset(cfg, seed)
        cache[key] = (ds.X_train.shape[0], ds.X_test.shape[0], ds.X_train.shape[1])
    return cache[key]


def estimate_resources(config: Config, n: int, n_test: int, d: int, seeds: int) -> dict[str, float]:
    """Rough bytes of one sweep point's batch of `seeds` runs: memory and archive size.

    Memory: per seed, the solver's copies of the parameters (m·d; an MLP's P), the
    forward/backward intermediates (≈ 4·n·m; m the sum of an MLP's widths), the NTG work
    (2·p·m + 3·p²; an MLP's Jacobian p·P) and the data (stacked twice).
    Disk: every checkpoint row of every observed series plus the double-buffered
    checkpoint (the weights and at most one more parameter-sized array: a first-same-as-last
    evaluation, a velocity; twice that for a flow with its reference), per seed and solver,
    uncompressed."""
    item = 4 if config.dtype == "float32" else 8
    model = config.model
    p = min(int(config.run.ntg_points), n)
    if isinstance(model, MlpModel):
        # k = 1 output assumed (the data's width is not known here): a rough lower bound
        sizes = [d, *model.widths, 1]
        params = sum(a * b + (b if model.bias else 0) for a, b in zip(sizes, sizes[1:]))
        m, ntg_work, row_m, row_d = sum(model.widths), p * params, params, 1   # J (p × P) for the NTG
    else:
        m = int(model.width)
        trained = isinstance(model, ShallowModel) and model.output == "trained"
        params = m * d + (m if trained else 0)
        ntg_work, row_m, row_d = 2 * p * m, m, d
    solvers = config.run.solvers
    copies = stored = 0
    for s in solvers:
        paired = isinstance(s, FlowPreset) and s.reference is not None
        copies = max(copies, state_copies(s) * (2 if paired else 1))
        stored = max(stored, 2 * (2 if paired else 1))
    data = (n + n_test) * (d + 1)
    memory = item * seeds * (copies * params + 4 * n * m + ntg_work + 3 * p * p + 2 * data)
    rows = len(config.run.checkpoint_times()) + 1
    row = 0
    for name in config.run.observe:
        row += OBSERVABLES[name].row_size(row_m, p, row_d)
    disk = item * seeds * len(solvers) * (2 * rows * row + 2 * stored * params) + item * data
    return {"memory": float(memory), "disk": float(disk), "params": float(params), "copies": float(copies)}


def point_estimates(scenario) -> list[tuple[list, dict[str, float] | None]]:
    """Each sweep point's runs with `estimate_resources` of their batch (plus the data's
    `n` and `d`); None for a plug-in model, whose size is known only once it is built."""
    cache: dict = {}
    points: dict[int, list] = {}
    for r in scenario.runs:
        points.setdefault(r.point, []).append(r)
    out = []
    for runs in points.values():
        cfg = runs[0].settings
        if isinstance(cfg.model, PythonModel):
            out.append((runs, None))
            continue
        n, n_test, d = _data_shape(cfg, runs[0].seed, cache)
        out.append((runs, estimate_resources(cfg, n, n_test, d, len(runs)) | {"n": float(n), "d": float(d)}))
    return out


def _share_to_write(runs, cfg: Config, written: dict[str, dict[str, int]] | None) -> float:
    """The share of a sweep point's checkpoint rows that a (resumed) archive still lacks."""
    if written is None:
        return 1.0
    rows = len(cfg.run.checkpoint_times()) + 1
    names = [s.name for s in cfg.run.solvers]
    done = sum(min(rows, written.get(r.name, {}).get(s, 0)) for r in runs for s in names)
    return 1.0 - done / (rows * len(runs) * len(names))


def check_resources(scenario, out_dir=None, written: dict[str, dict[str, int]] | None = None) -> None:
    """Refuse, before anything is built, a scenario whose largest sweep point would not fit
    in memory (or whose archive would not fit on the disk). The message gives the estimate,
    the limit and the keys that drive it. `written`: a resumed archive's committed rows (run
    -> solver -> rows); the disk then needs room only for the rows still to come."""
    import shutil

    limit, source = memory_limit()
    disk_free = None
    if out_dir is not None:
        try:
            disk_free = float(shutil.disk_usage(out_dir).free)
        except OSError:
            disk_free = None
    file = getattr(scenario, "path", "scenario")
    disk_total = 0.0
    for runs, est in point_estimates(scenario):
        if est is None:
            continue   # the factory's network is unknown until it is built: no estimate
        cfg = runs[0].settings
        n, d = int(est["n"]), int(est["d"])
        disk_total += est["disk"] * _share_to_write(runs, cfg, written)
        if est["memory"] > limit:
            where = f" (sweep point {runs[0].label})" if runs[0].label else ""
            size, key = (f"`model.widths` = {list(cfg.model.widths)}: {int(est['params'])} parameters",
                         "model.widths") if isinstance(cfg.model, MlpModel) else \
                (f"`model.width` = {cfg.model.width} × d = {d} parameters", "model.width")
            raise ResourceError(
                f"{file}: this scenario needs an estimated {est['memory'] / _GIB:.3g} GiB of memory{where}: "
                f"{size} × {int(est['copies'])} solver "
                f"copies × {len(runs)} seed(s) (`seeds`), plus n = {n} points (`data.n`) × width and "
                f"`run.ntg_points` = {cfg.run.ntg_points}; the limit is {limit / _GIB:.3g} GiB ({source}); "
                f"allowed: a scenario whose estimate fits (lower {key}, data.n, run.ntg_points or the "
                "number of seeds; FLOWSIM_MEMORY_LIMIT sets the limit)")
    if disk_free is not None and disk_total > disk_free:
        what = "the rest of the resumed archive" if written is not None else "the archive"
        raise ResourceError(
            f"{file}: {what} would need an estimated {disk_total / _GIB:.3g} GiB (uncompressed: every "
            f"checkpoint row of `run.observe` = {list(scenario.settings.run.observe)} for every run and "
            f"solver{' still to come' if written is not None else ''}), more than the "
            f"{disk_free / _GIB:.3g} GiB free at {out_dir}; allowed: fewer "
            "checkpoints (`run.checkpoints`), no `weights`/`ntg` in `run.observe`, or a smaller model")
