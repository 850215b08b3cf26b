"""From a typed run config (`RunSpec.settings`: one sweep point, one seed) to a ready `Problem`
(the estimate of a run's memory and disk is `flowsim.run.resources`).

Everything that can fail on bad input (files, shapes, incompatible choices) fails here,
before any archive is touched or any integration starts, with a `BuildError` that names the
scenario key and what is allowed.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..config.typed import Config
from ..data import DataError, Dataset, make_dataset
from ..kinds import EIGEN_RTOL, HESSIAN_K
from ..models import MODELS, BuildError, Built, Network
from ..models.base import dtype_of
from ..models.module import leaf_paths
from .precision import enable_x64
from ..nn.problem import Params, Problem
from ..observe.observables import hessian_k_refusal


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
    "cifar": "an .npz holding X (n images, any shape with n rows; uint8 or float pixels, finite) and y (n integer "
             "labels in [0, data.classes)), and optionally X_test with y_test",
}


def _dataset(config: Config, seed: int) -> Dataset:
    """The run's data; a bad data file is a DataError naming the file, the key and what is
    allowed (make_dataset names the file and what is wrong with it)."""
    data = config.data
    # Only the user-file kinds (csv, npz, cifar) have a `path`; uci, digits and mnist read shipped files.
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
    enable_x64(for_run=True)   # every run, float32 ones too (int64 step counters, float64 times)
    ds = _dataset(config, seed)
    _check_compatible(config, ds)
    network = MODELS[config.model.kind].build(config, ds, seed)
    why = hessian_k_refusal(config.run.observe, config.run.hessian_k,
                            sum(np.size(x) for x in jax.tree.leaves(network.params)))
    if why:
        raise BuildError(why)
    return assemble(network, ds, dtype=dtype_of(config), loss_kind=config.loss.kind,
                    ntg_points=config.run.ntg_points, hessian_k=config.run.hessian_k,
                    eigen_rtol=config.run.eigen_rtol)


def assemble(network: Network, ds: Dataset, *, dtype, loss_kind: str, ntg_points: int,
             custom_loss=None, hessian_k: int = HESSIAN_K, eigen_rtol: float = EIGEN_RTOL) -> Built:
    """A run's `Problem`, assembled in one place for every model kind and for
    `flowsim.simulate` (whose loss may be a Python function, `custom_loss`): the network on
    the inputs it sees, the data's targets, the loss and the flow's rate. The init record
    gets the initial loss, "loss0"."""
    as_j = lambda a: jnp.asarray(a, dtype)  # noqa: E731
    X = ds.X_train if network.X is None else network.X
    X_test = ds.X_test if network.X_test is None else network.X_test
    problem = Problem(net=network.net, X=as_j(X), y=as_j(ds.y_train), X_test=as_j(X_test),
                      y_test=as_j(ds.y_test), rate=network.rate, loss_kind=loss_kind,
                      ntg_points=min(ntg_points, ds.X_train.shape[0]), custom_loss=custom_loss,
                      hessian_k=hessian_k, eigen_rtol=eigen_rtol)
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
