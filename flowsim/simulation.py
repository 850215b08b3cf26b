"""`flowsim.simulate`: the exact gradient flow of the user's own model (Equinox, Flax NNX,
Flax Linen with its variables, or a plain `(apply_fn, params)`), with gradient descent
beside it, every checkpoint archived.

    archive = flowsim.simulate(model, data=(X, y), loss="mse", solvers=["tsit5", "gd-lr1"],
                               t_end=100.0, output="runs/mine.h5")

It writes the archive `flowsim run` writes (DESIGN.md §5; `flowsim inspect|plot|compare`
read it) and returns it opened as `flowsim.open` does. It builds the `Config` a scenario
file would give: the run settings (solvers, checkpoints, observe, seeds, dtype) are checked
by the specs their classes declare, and the runs by a scenario's rules (filippov's misfits,
kink warnings); the data, model and loss are Python-valued variants recorded by their
sizes, names and a digest (`ArraysData`, `ModuleModel`), so that resuming with other
arrays or another model is refused. Every model is first made a parameter pytree and a pure
apply (`flowsim.models.foreign`): the rest of this module treats all kinds alike. Every
argument is checked before anything is computed: a bad one raises `ValueError` naming the
argument and what is allowed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .models.foreign import ALLOWED, Adapted, adapt, from_flax
from .nn.losses import LOSSES
from .observe.observables import OBSERVABLES
from .run.precision import users_precision, users_precision_name

_SOURCE = "flowsim.simulate"


def _bad(argument: str, value: Any, what: str, allowed: str) -> ValueError:
    if isinstance(value, Adapted):
        shown = value.shown
    elif isinstance(value, eqx.Module) or from_flax(value):
        shown = f"<{type(value).__name__} module>"
    else:
        shown = " ".join(repr(value).split())
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return ValueError(f"{_SOURCE}: `{argument}` = {shown} {what}; allowed: {allowed}")


def _pair(value: Any, argument: str) -> tuple[np.ndarray, np.ndarray]:
    """(X (n, d) as float64, y (n, k) or (n,) as given): numeric, finite, as many rows."""
    allowed = "a pair (X, y) of finite arrays, X of shape (n, d) and y of shape (n, k) or (n,)"
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise _bad(argument, value, "is not a pair of arrays", allowed)
    try:
        X, y = (np.asarray(v) for v in value)
        X = X.astype(np.float64)
        y.astype(np.float64)
    except (TypeError, ValueError) as err:
        raise _bad(argument, value, f"does not convert to float arrays ({err})", allowed) from None
    if X.ndim > 2 and X.shape[0] == y.shape[0]:
        # images (n, c, h, w): the model's input is one flat vector, so that the NTG, the
        # weights and every archive series keep one layout whatever the network
        shape = X.shape[1:]
        raise _bad(argument, value, f"has X of shape {X.shape}: images or other inputs of shape {shape} "
                   "must be flattened", f"X of shape (n, d): pass X.reshape(len(X), -1) and reshape each "
                   f"input inside the model (x.reshape{shape} at the start of its __call__)")
    if X.ndim != 2 or y.ndim not in (1, 2) or X.shape[0] != y.shape[0] or X.shape[0] == 0 or X.shape[1] == 0:
        raise _bad(argument, value, f"has shapes X {X.shape}, y {y.shape}", allowed)
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(y.astype(np.float64)))):
        raise _bad(argument, value, "holds NaN or infinite values", allowed)
    return X, y


def _targets(y: np.ndarray, argument: str, loss: Any, outputs: int | None) -> np.ndarray:
    """y as float64 (n, k). With cross-entropy, 1-D y holds class labels, one-hot encoded
    to the model's `outputs` classes (as an npz scenario's `classes` does); otherwise a
    1-D y is one output column."""
    if y.ndim == 2:
        return y.astype(np.float64)
    labels = y.astype(np.int64) if np.all(np.mod(y, 1) == 0) else None
    if loss == "cross-entropy":
        k = outputs or 0
        if k < 2 or labels is None or labels.min(initial=0) < 0 or labels.max(initial=0) >= k:
            got = f"labels {labels.min(initial=0)}..{labels.max(initial=0)}" if labels is not None else \
                "non-integer values"
            raise _bad(argument, y, f"holds 1-D targets ({got}) for cross-entropy with a model of "
                       f"{outputs} output(s)", "integer class labels in [0, k) for a model of k ≥ 2 outputs "
                       "(one-hot encoded for you), or one-hot rows (n, k)")
        from .data import one_hot

        return one_hot(labels, k)
    if np.issubdtype(y.dtype, np.integer) and outputs is not None and outputs > 1:
        raise _bad(argument, y, f"holds integer labels (n,) but the model has {outputs} outputs",
                   f"for classification loss=\"cross-entropy\" (labels one-hot encoded to {outputs} "
                   f"classes); for regression targets of shape (n, {outputs})")
    return y.astype(np.float64)[:, None]


def _adapted(model: Any, named: Any, what: str) -> Adapted | None:
    """`model` as a parameter pytree and its apply (`foreign.adapt`), a refusal worded for
    `simulate` (`named`: the argument as given, `what`: where `model` came from)."""
    try:
        return adapt(model)
    except TypeError as err:
        raise _bad("model", named, f"{what}{err}", ALLOWED) from None


def _instances(model: Any, seeds: list[int], dtype) -> tuple[list[Adapted], str, bool]:
    """One model per seed (an instance is used as given; a factory is called with
    `jax.random.PRNGKey(seed)` in the user's precision), its inexact arrays (parameters and
    fixed state) cast to the run's dtype; what it was; whether it was a factory."""
    given = _adapted(model, model, "is ")
    if given is not None:
        made, source = [given] * len(seeds), _name(model)
    elif callable(model):
        source = f"{getattr(model, '__module__', '?')}.{getattr(model, '__qualname__', repr(model))}"
        made = []
        for seed in seeds:
            with users_precision():     # the factory's weights as the user's session makes them
                m = model(jax.random.PRNGKey(seed))
            a = _adapted(m, model, f"returned, for seed {seed}, ")
            if a is None:
                raise _bad("model", model, f"returned {type(m).__name__} for seed {seed}", ALLOWED)
            made.append(a)
    else:
        raise _bad("model", model, "is neither a model nor a factory", ALLOWED)
    cast = lambda x: x.astype(dtype) if eqx.is_inexact_array(x) else x  # noqa: E731
    return [dataclasses.replace(a, params=jax.tree.map(cast, a.params), apply=jax.tree.map(cast, a.apply))
            for a in made], source, given is None


def _name(model: Any) -> str:
    """A model instance's class by qualified name; a pair's, with what the pair holds."""
    if isinstance(model, tuple):
        first = model[0]
        name = getattr(first, "__qualname__", None) or type(first).__qualname__
        return f"({getattr(first, '__module__', type(first).__module__)}.{name}, {type(model[1]).__name__})"
    return f"{type(model).__module__}.{type(model).__qualname__}"


def _check_model(model: Adapted, X: np.ndarray, k: int, dtype) -> None:
    allowed = f"{model.kind} mapping one input of shape ({X.shape[1]},) to outputs of shape ({k},)"
    try:
        out = jax.eval_shape(jax.vmap(lambda x: model.apply(model.params, x)), jax.ShapeDtypeStruct(X.shape, dtype))
    except Exception as err:  # noqa: BLE001 - whatever the user's code raises, named
        raise _bad("model", model, f"fails on the inputs ({type(err).__name__}: {err})", allowed) from None
    if not hasattr(out, "shape") or out.shape != (X.shape[0], k):
        shape = out.shape[1:] if hasattr(out, "shape") else out
        raise _bad("model", model, f"maps one input to outputs of shape {shape!r}", allowed)


def _outputs(model: Adapted, d: int, dtype) -> int | None:
    """The number of outputs of `model` on one input (d,); None where it does not map one
    to a vector (`_check_model` then says what is wrong)."""
    try:
        out = jax.eval_shape(lambda x: model.apply(model.params, x), jax.ShapeDtypeStruct((d,), dtype))
    except Exception:  # noqa: BLE001 - reported by _check_model
        return None
    return out.shape[0] if getattr(out, "shape", None) is not None and len(out.shape) == 1 else None


_TRAINABLE = ("an Equinox filter: a predicate on leaves (eqx.is_inexact_array), a pytree of booleans shaped "
              "like the model, or a function of the model returning the leaves or sub-modules to train "
              "(as eqx.tree_at's `where`, e.g. lambda m: m.layers[-1]); for a Flax model or an (apply_fn, "
              "params) pair, the model is its parameter pytree (lambda p: p[\"Dense_1\"])")


def _filter(trainable: Any, model: Any, source: str) -> Any:
    """`trainable` as a filter `eqx.partition` takes, on the model's parameter pytree (an
    Equinox module itself; a Flax model's parameters as a dict). A callable is first tried as a
    function of the model (`where`, the Equinox habit of eqx.tree_at): when it returns part
    of the model, the floating leaves under what it returns train. Otherwise it is a
    predicate on leaves."""
    if not callable(trainable):
        try:
            eqx.partition(model, trainable)
        except Exception as err:  # noqa: BLE001 - a mis-shaped pytree: named
            raise _bad("trainable", trainable, f"is not a filter of {source} ({type(err).__name__}: {err})",
                       _TRAINABLE) from None
        return trainable
    as_where = "it returned None"
    try:
        chosen = trainable(model)
    except Exception as err:  # noqa: BLE001 - a predicate on leaves fails on a module
        as_where = f"{type(err).__name__}: {err}"
        chosen = None
    if chosen is not None and not isinstance(chosen, bool | np.bool_):
        spec = jax.tree.map(lambda _: False, model)
        try:
            spec = eqx.tree_at(trainable, spec, replace_fn=lambda node: jax.tree.map(lambda _: True, node))
        except Exception as err:  # noqa: BLE001
            raise _bad("trainable", trainable, f"returns something that is not part of {source} "
                       f"({type(err).__name__}: {err})", _TRAINABLE) from None
        return jax.tree.map(lambda train, leaf: train and eqx.is_inexact_array(leaf), spec, model)
    try:
        eqx.partition(model, trainable)
    except Exception as err:  # noqa: BLE001
        how = f"as a function of the model ({as_where}) and " if chosen is None else ""
        raise _bad("trainable", trainable, f"fails {how}as a predicate on its leaves ({type(err).__name__}: "
                   f"{err})", _TRAINABLE) from None
    return trainable


def _loss(loss: Any, k: int, n: int, dtype) -> tuple[str, Callable | None, str | None]:
    """(loss kind, the callable or None, its name)."""
    allowed = f"one of {', '.join(map(repr, LOSSES))}, or a function (pred (n, k), y (n, k)) -> scalar"
    if isinstance(loss, str):
        if loss not in LOSSES:
            raise _bad("loss", loss, "is not a loss of the catalog", allowed)
        return loss, None, None
    if not callable(loss):
        raise _bad("loss", loss, "is neither a name nor a function", allowed)
    arg = jax.ShapeDtypeStruct((n, k), dtype)
    try:
        out = jax.eval_shape(loss, arg, arg)
    except Exception as err:  # noqa: BLE001
        raise _bad("loss", loss, f"fails on (n, k) arrays ({type(err).__name__}: {err})", allowed) from None
    if getattr(out, "shape", None) != ():
        raise _bad("loss", loss, f"returns shape {getattr(out, 'shape', out)!r}, not a scalar", allowed)
    return "callable", loss, f"{getattr(loss, '__module__', '?')}.{getattr(loss, '__qualname__', repr(loss))}"


def _digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.shape, a.dtype.str)).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def _settings(*, name, seeds, dtype, t_end, checkpoints, solvers, observe, ntg_points, stop_loss) -> dict:
    """The scenario-level settings and the [run] table, checked by the specs their classes
    declare (`flowsim.config.Config`, `Run`) as a scenario's are; the argument names are the
    keys, so that each message names the argument."""
    from .config import Config, to_dict
    from .config.declare import spec_of
    from .config.schema import RUN
    from .config.spec import Ctx

    ctx = Ctx(file=_SOURCE, base_dir=Path.cwd(), stem=str(name))
    solvers, given = _given_solvers(solvers)
    if given and "preconditioned_sharpness" in observe:
        # its P is a leg's own denominator, which a transformation handed in does not declare
        i = min(given)
        raise _bad("observe", observe, f"asks for 'preconditioned_sharpness', whose preconditioner solver "
                   f"{solvers[i].get('name')!r} (`solvers[{i}]`, a given optax transformation) does not declare",
                   "the kinds rmsprop and adam and their flows for a preconditioned sharpness, or leave it out "
                   "beside a given transformation")
    run: dict[str, Any] = {"t_end": t_end, "observe": observe,
                           "solvers": [to_dict(p) if dataclasses.is_dataclass(p) else p for p in solvers]}
    for key, value in (("checkpoints", checkpoints), ("ntg_points", ntg_points), ("stop_loss", stop_loss)):
        if value is not None:
            run[key] = value
    out = {key: spec_of(Config, key).check(value, key, ctx)
           for key, value in (("name", name), ("seeds", seeds), ("dtype", dtype))}
    out["run"] = RUN.check(run, "", ctx)
    for i, transformation in given.items():
        out["run"]["solvers"][i] |= {"kind": "optax", "transformation": transformation}
    return out


_GIVEN = "an optax.GradientTransformation given to flowsim.simulate"


def _given_solvers(solvers: list) -> tuple[list, dict]:
    """`solvers` with each optax leg (a dict or `flowsim.config.OptaxPreset` of kind "optax",
    its `transformation` an optax.GradientTransformation) as the GD preset of its keys, which
    validation checks as any GD leg's (name, learning_rate, divergence_factor, perturbation: the
    step η places its step k at t = kη); and those legs' transformations, `Given`, by position."""
    from .config.typed import Given, OptaxPreset
    from .kinds.solvers import GIVEN_KINDS

    out, given = [], {}
    for i, p in enumerate(solvers):
        if isinstance(p, OptaxPreset):
            p = {f.name: getattr(p, f.name) for f in dataclasses.fields(p) if getattr(p, f.name) is not None}
        if isinstance(p, dict) and p.get("kind") in GIVEN_KINDS:
            import optax

            p = dict(p)
            transformation = p.pop("transformation", None)
            transformation = transformation.value if isinstance(transformation, Given) else transformation
            if not isinstance(transformation, optax.GradientTransformation):
                raise _bad(f"solvers[{i}].transformation", transformation, "is not an optax.GradientTransformation",
                           "an optax transformation such as optax.adam(1e-3), with the leg's `name` and its "
                           "`learning_rate` η (step k is compared with the flow at t = kη)")
            given[i] = Given(transformation, _GIVEN)
            p["kind"] = "gd"
        out.append(p)
    return out, given


def _check_output(out: Path, *, resume: bool, overwrite: bool) -> None:
    from .archive import ArchiveError
    from .archive.recovery import check_replaceable
    from .run.session import InputError, check_output_folder

    if resume and overwrite:
        raise ValueError(f"{_SOURCE}: `resume` and `overwrite` exclude each other")
    try:
        check_output_folder(out, named=f"{_SOURCE}: `output` = {str(out)!r}")
        check_replaceable(out, replace="overwrite=True", resume="resume=True")
    except InputError as err:
        raise ValueError(str(err)) from None
    except ArchiveError as err:
        raise ValueError(f"{_SOURCE}: `output`: {err}") from None
    if out.exists() and not (resume or overwrite):
        raise _bad("output", str(out), "exists", "a new path, or resume=True to continue it, or "
                   "overwrite=True to replace it")
    if resume and not out.exists():
        raise _bad("output", str(out), "does not exist (resume=True)", "an archive to resume")


def simulate(model: Any, data: tuple, *,
             test: tuple | None = None, loss: str | Callable = "half-sse",
             solvers: Sequence[str | dict] = ("auto", "gd-lr1"), t_end: float,
             checkpoints: dict | None = None,
             observe: Sequence[str] = ("loss", "ntg_eig", "weight_change"),
             seeds: Sequence[int] = (0,), trainable: Any = eqx.is_inexact_array,
             output: str | Path | None = None, name: str = "simulate", dtype: str = "float64",
             ntg_points: int | None = None, stop_loss: float | None = None,
             resume: bool = False, overwrite: bool = False, progress: bool | None = None,
             report: Callable[[str], None] = lambda s: print(s, file=sys.stderr)):
    """Integrate dθ/dt = −∇L(θ) over the `trainable` leaves of `model` with each of
    `solvers` (flow presets and gradient descent alike), for each seed, into an archive;
    returns it opened (`flowsim.open`).

    model        an `eqx.Module` mapping one input x (d,) to outputs (k,), used as given (its
                 weights are the initial point, for every seed); the same as a Flax NNX
                 module, as a pair (Flax Linen module, its variables), or as a pair
                 (apply_fn, params) with apply_fn(params, x) -> outputs (k,) (a Flax model's
                 non-trainable state, e.g. BatchNorm statistics, is held fixed; a module
                 that changes it when called is refused); or a factory of any of these, called with
                 `jax.random.PRNGKey(seed)` for each seed, in the precision the session had
                 before flowsim turned float64 on (float32 unless you turned it on): it draws
                 the weights it draws outside flowsim for the same key. Its floating arrays
                 are then cast to `dtype`. For other exact weights, pass the module itself.
    data, test   (X (n, d), y (n, k) or (n,)); `test` is optional. With cross-entropy, y may
                 hold integer class labels (n,), one-hot encoded to the model's k outputs.
                 Images must be flattened: X.reshape(n, -1), reshaped inside the model.
    loss         a catalog loss ("half-sse", "mse", "cross-entropy") or a function
                 (pred (n, k), y (n, k)) -> scalar (SGD takes it for a mean over samples).
    solvers      preset names (`flowsim list`; by default "auto", the flow stiff or not, and
                 "gd-lr1"), dicts shaped like a solver file with "name", or
                 preset objects: flowsim.config.FlowPreset(method="tsit5", rtol=1e-8),
                 DescentPreset(learning_rate=0.1); or any optax transformation, full batch, as
                 {"name": "adam", "kind": "optax", "transformation": optax.adam(1e-3),
                 "learning_rate": 1e-3} (or OptaxPreset(...) with these keys): η = learning_rate
                 places step k at t = kη (docs/optimizers.md). The archive records the leg by
                 its name: resume it with the same transformation.
    checkpoints  {"count": N, "spacing": "linear" | "log"}, {"every": T} or {"times": [...]}.
    observe      loss, test_loss, accuracy, test_accuracy, ntg, ntg_eig, ntg_change,
                 weight_change (per trainable leaf), unit_change (per unit of every dense
                 layer: the rows of each 2-D leaf), weights (the trainable leaves as one
                 vector), sharpness, gn_sharpness, preconditioned_sharpness (RMSProp's
                 and Adam's own P; refused beside a given transformation).
    trainable    the leaves the flow moves (the others never move): a predicate on leaves,
                 a pytree of booleans shaped like the model (as `eqx.partition` takes), or a
                 function of the model returning the leaves or sub-modules to train (as
                 `eqx.tree_at`'s `where`: lambda m: m.layers[-1] trains the last layer). For
                 a Flax model or a pair, "the model" is its parameter pytree (a dict:
                 lambda p: p["Dense_1"]), whose paths name the archive's leaves.
    output       the archive (default runs/<name>.h5); `resume` continues it, `overwrite`
                 replaces it.

    Ctrl-C or SIGTERM stops the run after its last committed checkpoint and raises
    KeyboardInterrupt; the same call with `resume=True` completes the archive exactly as an
    uninterrupted run would have.
    """
    from .archive import open as open_archive_file
    from .run.precision import enable_x64

    enable_x64(for_run=True)
    observe = _observed(seeds, observe, test)
    resolved = _settings(name=name, seeds=[int(s) for s in seeds], dtype=dtype, t_end=t_end,
                         checkpoints=checkpoints, solvers=list(solvers), observe=observe, ntg_points=ntg_points,
                         stop_loss=stop_loss)
    jdtype = jnp.float32 if resolved["dtype"] == "float32" else jnp.float64
    inputs = _inputs(model, data, test, loss, trainable, resolved["seeds"], jdtype)
    settings = _config(resolved, inputs)
    runs = _runs(settings, report)
    out = Path(output) if output is not None else Path("runs") / f"{settings.name}.h5"
    _check_output(out, resume=resume, overwrite=overwrite)
    if inputs.factory and users_precision_name() != resolved["dtype"]:
        report(f"{_SOURCE}: {inputs.source} was called with PRNGKey(seed) in {users_precision_name()}, your "
               f"session's precision (the weights it makes outside flowsim), and its weights cast to "
               f"{resolved['dtype']}; to start from other exact weights, pass the module itself")
    _drive_stoppable(_job(settings, runs, inputs, jdtype, out, resume=resume, overwrite=overwrite),
                     progress=progress, report=report)
    return open_archive_file(out)


def _observed(seeds: Any, observe: Sequence[str] | str, test: tuple | None) -> list[str]:
    """`observe` as a list, checked against the model (any: no family's observables) and the
    data (a test measure needs `test`); `seeds` checked to be integers first."""
    if isinstance(seeds, int | str) or not all(isinstance(s, int | np.integer) for s in seeds):
        raise _bad("seeds", seeds, "is not a list of integers", "a list of non-negative integers, e.g. [0, 1]")
    observe = [observe] if isinstance(observe, str) else list(observe)
    for name_ in observe:
        entry = OBSERVABLES.get(name_)
        if entry is not None and entry.family:
            raise _bad("observe", observe, f"asks for {name_!r}, defined for the {entry.family} networks "
                       "of the catalog only", "observables of any model: " +
                       ", ".join(o for o, e in OBSERVABLES.items() if not e.family))
    if {"test_loss", "test_accuracy"} & set(observe) and test is None:
        raise _bad("observe", observe, "asks for a test measure without test data",
                   "pass `test` = (X_test, y_test)")
    return observe


@dataclasses.dataclass(frozen=True)
class _Inputs:
    """The Python-valued arguments, checked: the arrays (X float64, y float64 (n, k)), each
    seed's model split into its trainable leaves and the rest, and the loss."""

    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    splits: list[tuple[Any, Any]]     # (trainable, frozen) per seed: the parameter pytree split
    applies: list[Callable]           # per seed: apply(params, x) (`foreign.Adapted`)
    unit_axis: int                    # a 2-D leaf's axis of units (`foreign.Adapted`)
    source: str                       # the model's class or factory, by qualified name
    factory: bool                     # whether `model` was a factory (called per seed)
    trainable: str                    # the filter, by name
    loss_kind: str
    loss_fn: Callable | None
    loss_name: str | None


def _inputs(model: Any, data: tuple, test: tuple | None, loss: Any, trainable: Any, seeds: list[int],
            dtype) -> _Inputs:
    X, y = _pair(data, "data")
    X_test, y_test = _pair(test, "test") if test is not None else (X[:0], y[:0])
    if X_test.shape[1:] != X.shape[1:] or y_test.shape[1:] != y.shape[1:]:
        raise _bad("test", test, f"has X {X_test.shape}, y {y_test.shape} against data X {X.shape}, y {y.shape}",
                   "test arrays with the columns of `data`")
    n, d = X.shape
    models, source, factory = _instances(model, seeds, dtype)
    outputs = _outputs(models[0], d, dtype)
    y, y_test = _targets(y, "data", loss, outputs), _targets(y_test, "test", loss, outputs)
    k = y.shape[1]
    loss_kind, loss_fn, loss_name = _loss(loss, k, n, dtype)
    splits = [_split(m, trainable, source, X, k, dtype) for m in models]
    filter_name = getattr(trainable, "__name__", repr(trainable)) if callable(trainable) else \
        "a pytree of booleans"
    return _Inputs(X=X, y=y, X_test=X_test, y_test=y_test, splits=splits, applies=[m.apply for m in models],
                   unit_axis=models[0].unit_axis, source=source, factory=factory, trainable=filter_name,
                   loss_kind=loss_kind, loss_fn=loss_fn, loss_name=loss_name)


def _split(model: Adapted, trainable: Any, source: str, X: np.ndarray, k: int, dtype) -> tuple[Any, Any]:
    """(the trainable leaves, the rest) of one seed's parameter pytree, checked on the inputs."""
    _check_model(model, X, k, dtype)
    params, frozen = eqx.partition(model.params, _filter(trainable, model.params, source))
    leaves = jax.tree.leaves(params)
    if not leaves or not all(eqx.is_inexact_array(v) for v in leaves):
        raise _bad("trainable", trainable, f"selects {len(leaves)} leaves of {source}"
                   + (", not all floating arrays" if leaves else ""),
                   "an Equinox filter selecting at least one floating-point array (eqx.is_inexact_array)")
    return params, frozen


def _config(resolved: dict, inputs: _Inputs):
    """The `Config` a scenario file would give, the data and model recorded by their sizes,
    names and digests (so that resuming with other ones is refused)."""
    from .config import ArraysData, Config, Loss, ModuleModel, Run, from_dict
    from .models.module import leaf_paths

    first = inputs.splits[0][0]
    (n, d), k = inputs.X.shape, inputs.y.shape[1]
    return Config(
        name=resolved["name"], seeds=tuple(resolved["seeds"]), dtype=resolved["dtype"],
        data=ArraysData(seed=0, n=n, d=d, n_test=inputs.X_test.shape[0], outputs=k,
                        digest=_digest(inputs.X, inputs.y, inputs.X_test, inputs.y_test)),
        model=ModuleModel(source=inputs.source, trainable=inputs.trainable,
                          parameters=int(sum(v.size for v in jax.tree.leaves(first))),
                          leaves=tuple(leaf_paths(first)),
                          digest=_digest(*(np.asarray(v) for p, _ in inputs.splits for v in jax.tree.leaves(p)))),
        loss=Loss(kind=inputs.loss_kind, function=inputs.loss_name), run=from_dict(Run, resolved["run"]))


def _runs(settings, report: Callable[[str], None]) -> list:
    """One run per seed, under the rules a scenario file's runs obey (filippov's misfits
    refused, kink warnings reported)."""
    from .config import RunSpec, ScenarioError
    from .config.load import kink_warnings, refuse_filippov_misfits

    runs = [RunSpec(name=f"seed{s}", point=0, seed=s, label="", settings=settings) for s in settings.seeds]
    try:
        refuse_filippov_misfits(runs, _SOURCE, run_key="")
    except ScenarioError as err:
        raise ValueError(str(err)) from None
    for warning in kink_warnings(runs, _SOURCE):
        report(warning)
    return runs


def _job(settings, runs: list, inputs: _Inputs, dtype, out: Path, *, resume: bool, overwrite: bool):
    """The `Job` of the runs, each built on the arrays and its seed's model, with the scenario
    text the archive records; refused where the loss is not finite at t = 0."""
    from .config import Scenario, to_dict, to_toml
    from .data import Dataset
    from .models.module import module_network
    from .run.build import assemble, start_problem
    from .run.session import Job

    text = ("# Written by flowsim.simulate: the data, model and loss came from Python (recorded here\n"
            "# by sizes, names and digests); resume with flowsim.simulate(..., resume=True).\n"
            + to_toml(to_dict(settings)))
    k = inputs.y.shape[1]
    ds = Dataset(inputs.X, inputs.y, inputs.X_test, inputs.y_test, classes=k if _one_hot(inputs.y) else 0)
    built = {r.name: assemble(module_network(params, frozen, key=jax.random.fold_in(jax.random.PRNGKey(r.seed), 1),
                                             apply=apply, unit_axis=inputs.unit_axis),   # the key: SGD's batches
                              ds, dtype=dtype, loss_kind=inputs.loss_kind, custom_loss=inputs.loss_fn,
                              ntg_points=settings.run.ntg_points)
             for r, (params, frozen), apply in zip(runs, inputs.splits, inputs.applies)}
    for r in runs:
        why = start_problem(built[r.name])
        if why:
            raise ValueError(f"{_SOURCE}: the loss or its gradient is not finite at t = 0 (seed {r.seed}): {why}; "
                             "allowed: `model`, `data` and `loss` whose loss and gradient are finite at the "
                             "initial weights (nothing was run)")
    return Job(scenario=Scenario(path=_SOURCE, text=text, settings=settings, runs=runs), runs=runs, shard=None,
               out=out, built=built, resume=resume, overwrite=overwrite)


def _drive_stoppable(job, **kwargs) -> None:
    """The job's archive opened (created or resumed) and driven: `drive`, with Ctrl-C and
    SIGTERM handled as `flowsim run` handles them: the first
    stops within a quarter second, after the last committed checkpoint (the segment being
    computed is abandoned), and raises KeyboardInterrupt saying how to resume; a second one
    stops at once. Handlers can only be set from the main thread: elsewhere (a worker
    thread of the caller's) the caller's own signal handling applies."""
    import threading

    from .cli.lifecycle import StopRequest
    from .run.session import InputError, drive, open_archive

    try:
        writer = open_archive(job)
    except InputError as err:     # resumed with other data, model or settings
        raise ValueError(f"{_SOURCE}: {str(err).replace('--overwrite', 'overwrite=True')}") from None
    stop = StopRequest()
    stop.install()
    try:
        drive(job, writer, should_stop=stop, stop_now=stop, **kwargs)
    except KeyboardInterrupt:
        # The abandoned segment may still be computing on its thread; the interpreter must
        # not be torn down under it (a C++ abort), so its exit waits for it (`_on_exit`).
        if any(t.name == "flowsim-segment" and t.is_alive() for t in threading.enumerate()):
            _wait_for_segments_at_exit()
        # KeyboardInterrupt itself, not a subclass: uncaught, Python then exits as a
        # program stopped by Ctrl-C does (by SIGINT, status 130 in a shell)
        raise KeyboardInterrupt(f"{_SOURCE}: interrupted; {job.out} holds every finished checkpoint: "
                                "continue it by calling flowsim.simulate again with the same model, data "
                                "and arguments and resume=True") from None
    finally:
        stop.restore()


_exit_hook_registered = False


def _wait_for_segments_at_exit() -> None:
    global _exit_hook_registered
    if not _exit_hook_registered:
        import atexit

        atexit.register(_on_exit)
        _exit_hook_registered = True


def _on_exit() -> None:
    """At interpreter exit, before daemon threads are stopped: a segment abandoned by an
    interrupt that is still computing would be torn down inside XLA (`terminate called`,
    SIGABRT). If the interrupt ended the program (uncaught), the archive is closed and
    nothing is left to do: die of SIGINT at once, as Python does after finalising when a
    KeyboardInterrupt ends the program. Otherwise the program went on and ends as it chose:
    wait for the segment, then finalise."""
    import os
    import signal
    import threading

    alive = [t for t in threading.enumerate() if t.name == "flowsim-segment" and t.is_alive()]
    if not alive:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    if type(getattr(sys, "last_value", None)) is KeyboardInterrupt:    # uncaught (and printed)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    for t in alive:
        t.join()


def _one_hot(y: np.ndarray) -> bool:
    return y.shape[1] >= 2 and bool(np.all((y == 0) | (y == 1))) and bool(np.all(y.sum(axis=1) == 1))
