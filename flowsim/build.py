"""From a resolved run config (one sweep point, one seed) to a ready `Problem`.

Everything that can fail on bad input (files, shapes, incompatible choices) fails here,
before any archive is touched or any integration starts, with a `BuildError` that names the
scenario key and what is allowed.
"""

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from . import theory
from .data import Dataset, make_dataset
from .models import Params, init_shallow
from .problem import Problem
from .scaling import output_scale


class BuildError(ValueError):
    """A run config that validates key by key but cannot be built (e.g. mismatched shapes)."""


@dataclass(frozen=True)
class Built:
    problem: Problem
    params: Params
    dataset: Dataset
    init: dict[str, np.ndarray]   # what the archive stores under /runs/<run>/init
    key: jax.Array                # seeds the stochastic solvers (SGD batches)


def dtype_of(config: dict):
    return jnp.float32 if config["dtype"] == "float32" else jnp.float64


def data_seed(config: dict, seed: int) -> int:
    """`data.seed` is an int shared by every run, or "run" to draw the data per seed."""
    return seed if config["data"]["seed"] == "run" else int(config["data"]["seed"])


def _load_npz(path: str, key: str, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    try:
        with np.load(path) as f:
            missing = [n for n in names if n not in f.files]
            if missing:
                raise BuildError(f"{path} (from `{key}`): missing array(s) {missing}; the file holds {f.files}")
            return {n: np.asarray(f[n], dtype=np.float64) for n in names}
    except (OSError, ValueError) as err:
        if isinstance(err, BuildError):
            raise
        raise BuildError(f"{path} (from `{key}`): not a readable .npz file ({err})") from None


def _scaling_params(cfg: dict, m: int) -> dict:
    params = {k: v for k, v in cfg.items() if k in ("gamma", "alpha", "k")}
    if cfg["kind"] == "custom":
        lam = _load_npz(cfg["path"], "model.scaling.path", ("lam",))["lam"]
        if lam.shape != (m,):
            raise BuildError(f"{cfg['path']} (from `model.scaling.path`): `lam` has shape {lam.shape}; "
                             f"allowed: a vector of length model.width = {m}")
        params["lam"] = lam
    return params


def _init_weights(model: dict, d: int) -> dict[str, np.ndarray] | None:
    if not model["init_path"]:
        return None
    w = _load_npz(model["init_path"], "model.init_path", ("W0", "a"))
    m = model["width"]
    if w["W0"].shape != (m, d) or w["a"].shape[0] != m:
        raise BuildError(f"{model['init_path']} (from `model.init_path`): W0 has shape {w['W0'].shape} and a "
                         f"{w['a'].shape}; allowed: W0 of shape (model.width, d) = ({m}, {d}) and a of length {m}")
    return w


def _check_compatible(config: dict, ds: Dataset) -> None:
    n = ds.X_train.shape[0]
    if config["loss"]["kind"] == "cross-entropy" and ds.y_train.shape[1] < 2:
        raise BuildError("`loss.kind` = \"cross-entropy\" needs a classification dataset (one-hot targets "
                         f"with ≥ 2 classes); `data.kind` = {config['data']['kind']!r} gives 1 target column")
    wants_test = {"test_loss", "test_accuracy"} & set(config["run"]["observe"])
    if wants_test and ds.X_test.shape[0] == 0:
        raise BuildError(f"`run.observe` asks for {sorted(wants_test)} but the dataset has no test points; "
                         "set `data.n_test` > 0 or drop them")
    for solver in config["run"]["solvers"]:
        if solver["kind"] == "sgd" and solver["batch_size"] > n:
            raise BuildError(f"solver {solver['name']!r}: `batch_size` = {solver['batch_size']} exceeds the "
                             f"{n} training points; allowed: an integer in [1, {n}]")


def build_run(config: dict, seed: int) -> Built:
    """Data, network, loss and initial weights of one run."""
    dtype = dtype_of(config)
    ds = make_dataset(config["data"], data_seed(config, seed))
    _check_compatible(config, ds)
    model = config["model"]
    n, d = ds.X_train.shape
    m = model["width"]
    scaling = model["scaling"]
    scale = output_scale(scaling["kind"], m, **_scaling_params(scaling, m))
    model_key, solver_key = jax.random.split(jax.random.PRNGKey(seed))
    net, params = init_shallow(model_key, d=d, outputs=ds.y_train.shape[1], scale=scale,
                               scaling_kind=scaling["kind"], activation_name=model["activation"],
                               init_std=model["init_std"], train_output=model["output"] == "trained",
                               zeroed=model["zeroed"], init_weights=_init_weights(model, d), dtype=dtype)
    p = min(config["run"]["ntg_points"], n)
    problem = Problem(net=net, X=jnp.asarray(ds.X_train, dtype), y=jnp.asarray(ds.y_train, dtype),
                      X_test=jnp.asarray(ds.X_test, dtype), y_test=jnp.asarray(ds.y_test, dtype),
                      rate=scale.rate, loss_kind=config["loss"]["kind"], ntg_points=p)
    init = {"W0": np.asarray(params["W"]), "a": np.asarray(net.a), "lam": scale.lam, "c": scale.c,
            "kappa_n": np.asarray(theory.kappa_n(ds.X_train[:p], model["activation"])),
            "loss0": np.asarray(problem.loss(params))}
    return Built(problem=problem, params=params, dataset=ds, init=init, key=solver_key)


def dataset_arrays(ds: Dataset) -> dict[str, np.ndarray]:
    return {"X_train": ds.X_train, "y_train": ds.y_train, "X_test": ds.X_test, "y_test": ds.y_test,
            **{k: np.asarray(v) for k, v in ds.extra.items()}}

