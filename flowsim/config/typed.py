"""Typed configs: the resolved scenario and solver presets as frozen, hashable objects.

Validation (`flowsim.config.schema`) turns a raw TOML table into the *resolved* dict: every
default filled in, presets inlined, paths made absolute.  The classes here are the same
information read by attribute: `from_dict` builds them from a resolved dict and `to_dict`
gives that dict back exactly, key order included (the archive stores it as JSON and
``--resume`` compares it).  Tagged tables are one class per `kind` (`SphereSineData`,
`AsymmetricScaling`, `ShallowModel` ...); solver presets are `FlowPreset` for the
continuous kinds and `DescentPreset` for the discrete ones, as `flowsim.integrate.registry`
declares them.  Keys that only some kinds of a class have (`FlowPreset.learning_rate`,
`DescentPreset.beta`) are None for the others; so are tables the scenario may leave out
([sweep], [analysis], [plot]) and digits' `n` / `n_test` (None = every point).  Lists are
tuples, so that every object is hashable; change one with `dataclasses.replace`.

Why frozen dataclasses and not pydantic models: the message contract (file, dotted key,
value, what is allowed, did-you-mean, the `--set` origin) is produced by the declarative
`Spec` validator in `flowsim.config.spec`, and the tests pin its wording.  Pydantic would
validate a second time and word its errors its own way; keeping the contract would mean
translating each of its error types back into ours, with the did-you-mean and `--set`
logic rewritten around it.  Here validation stays one pass with one set of messages, and
the typed layer is a lossless view of its output: no second validator, no translation.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Union

import numpy as np

from ..integrate.registry import DISCRETE_KINDS, FLOW_KINDS
from .times import checkpoint_times

__all__ = [
    "Frozen", "from_dict", "to_dict", "table_class",
    "Config", "Data", "Model", "Scaling", "Checkpoints", "Preset",
    "SphereSineData", "SingleReluData", "RandomLabelsData", "XorNoiseData",
    "QuadraticTeacherData", "UciData", "Split", "DigitsData", "CsvData", "NpzData", "ArraysData",
    "NtkScaling", "AsymmetricScaling", "SingleScaling", "FiniteScaling", "CustomScaling",
    "MeanFieldScaling", "StandardScaling", "ShallowModel", "EmbeddedModel", "MlpModel", "PythonModel",
    "ModuleModel", "Loss",
    "CheckpointEvery", "CheckpointCount", "CheckpointTimes", "FlowPreset", "DescentPreset",
    "Run", "Sweep", "PruneAnalysis", "TransferAnalysis", "PcaAnalysis", "Analysis", "Plot",
]

_frozen = dataclass(frozen=True, kw_only=True)
#: Field metadata: None stands for the empty string in the resolved dict (not for absence).
_NONE_IS_EMPTY = {"none": ""}


class Frozen(Mapping):
    """An immutable, hashable table: how a [sweep] keeps the values it lists (any TOML)."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, Any] = ()):
        self._items = dict(items)

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(tuple(self._items.items()))

    def __repr__(self) -> str:
        return f"Frozen({self._items!r})"


def _freeze(v: Any) -> Any:
    if isinstance(v, Mapping):
        return Frozen({k: _freeze(x) for k, x in v.items()})
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    return v


# --------------------------------------------------------------------------------------
# [data]: one class per kind
# --------------------------------------------------------------------------------------


@_frozen
class _DataBase:
    kind: str
    seed: int | Literal["run"]  # "run": the run's seed


@_frozen
class SphereSineData(_DataBase):
    kind: Literal["sphere-sine"] = "sphere-sine"
    n: int
    d: int
    noise: float
    n_test: int


@_frozen
class SingleReluData(_DataBase):
    kind: Literal["single-relu"] = "single-relu"
    n: int
    d: int
    noise: float
    n_test: int


@_frozen
class RandomLabelsData(_DataBase):
    kind: Literal["random-labels"] = "random-labels"
    n: int
    d: int
    n_test: int
    low: float
    high: float


@_frozen
class XorNoiseData(_DataBase):
    kind: Literal["xor-noise"] = "xor-noise"
    n: int
    d: int
    n_test: int


@_frozen
class QuadraticTeacherData(_DataBase):
    kind: Literal["quadratic-teacher"] = "quadratic-teacher"
    n: int
    d: int
    n_test: int
    teacher_width: int
    noise: float


@_frozen
class Split:
    train: float
    test: float
    valid: float


@_frozen
class UciData(_DataBase):
    kind: Literal["uci"] = "uci"
    name: str
    split: Split
    permute_seed: int
    standardize: bool


@_frozen
class DigitsData(_DataBase):
    kind: Literal["digits"] = "digits"
    n: int | None = None  # None: every training point
    n_test: int | None = None  # None: every test point
    standardize: bool


@_frozen
class CsvData(_DataBase):
    kind: Literal["csv"] = "csv"
    path: str
    target: str | tuple[str, ...]
    test_fraction: float
    standardize: bool


@_frozen
class NpzData(_DataBase):
    kind: Literal["npz"] = "npz"
    path: str


@_frozen
class ArraysData(_DataBase):
    """Arrays passed to `flowsim.simulate` (no scenario file names this kind): their sizes and
    a digest, so that resuming with other arrays is refused."""

    kind: Literal["arrays"] = "arrays"
    n: int
    d: int
    n_test: int
    outputs: int
    digest: str


Data = Union[SphereSineData, SingleReluData, RandomLabelsData, XorNoiseData,
             QuadraticTeacherData, UciData, DigitsData, CsvData, NpzData, ArraysData]


# --------------------------------------------------------------------------------------
# [model], with its scaling
# --------------------------------------------------------------------------------------


@_frozen
class NtkScaling:
    kind: Literal["ntk"] = "ntk"


@_frozen
class AsymmetricScaling:
    kind: Literal["asymmetric"] = "asymmetric"
    gamma: float
    alpha: float


@_frozen
class SingleScaling:
    kind: Literal["single"] = "single"
    gamma: float


@_frozen
class FiniteScaling:
    kind: Literal["finite"] = "finite"
    k: int
    gamma: float


@_frozen
class CustomScaling:
    kind: Literal["custom"] = "custom"
    path: str
    gamma: float


@_frozen
class MeanFieldScaling:
    kind: Literal["mean-field"] = "mean-field"


@_frozen
class StandardScaling:
    kind: Literal["standard"] = "standard"


Scaling = Union[NtkScaling, AsymmetricScaling, SingleScaling, FiniteScaling, CustomScaling,
                MeanFieldScaling, StandardScaling]


@_frozen
class _ModelBase:
    kind: str
    width: int
    activation: str
    init_std: float


@_frozen
class ShallowModel(_ModelBase):
    kind: Literal["shallow"] = "shallow"
    output: str  # "fixed" | "trained"
    zeroed: bool
    init_path: str  # "" = none
    scaling: Scaling


@_frozen
class EmbeddedModel(_ModelBase):
    kind: Literal["embedded"] = "embedded"
    zeroed: bool
    embedding: str
    chen_scaling: str
    c_hat: float
    features: int | None = None  # D of the random-features embedding; None for the others


@_frozen
class MlpModel:
    kind: Literal["mlp"] = "mlp"
    widths: tuple[int, ...]     # hidden layers
    activation: str
    parameterisation: str       # "standard" | "ntk" | "mean-field" | "mup"
    init_std: float
    bias: bool
    train: str | tuple[int, ...]   # "all", or the indices of the layers that train


@_frozen
class PythonModel:
    kind: Literal["python"] = "python"
    factory: str      # "package.module:name": factory(key, d, k) -> an Equinox module


@_frozen
class ModuleModel:
    """A user's Equinox model passed to `flowsim.simulate` (no scenario file names this
    kind): what it was, how many parameters train, and a digest of every seed's initial
    weights, so that resuming with another model is refused."""

    kind: Literal["module"] = "module"
    source: str       # the model's class (an instance) or the factory's qualified name
    trainable: str    # the Equinox filter's name
    parameters: int   # trainable parameters
    leaves: tuple[str, ...]   # the trainable leaves' paths (the `weight_change` axis)
    digest: str


Model = Union[ShallowModel, EmbeddedModel, MlpModel, PythonModel, ModuleModel]


@_frozen
class Loss:
    kind: str
    function: str | None = None   # kind "callable": the function's qualified name


# --------------------------------------------------------------------------------------
# [run]: checkpoints (one of three forms) and solver presets
# --------------------------------------------------------------------------------------


@_frozen
class CheckpointEvery:
    every: float


@_frozen
class CheckpointCount:
    count: int
    spacing: str  # "linear" | "log"


@_frozen
class CheckpointTimes:
    times: tuple[float, ...]


Checkpoints = Union[CheckpointEvery, CheckpointCount, CheckpointTimes]


@_frozen
class FlowPreset:
    """A continuous solver: the exact gradient flow, or GD's modified flow at `learning_rate`."""

    KINDS: ClassVar[tuple[str, ...]] = FLOW_KINDS
    name: str
    kind: str
    description: str
    learning_rate: float | None = None  # modified-flow and central-flow only
    max_eigen: int | None = None  # central-flow only
    track_threshold: float | None = None  # central-flow only
    method: str
    rtol: float
    atol: float
    dtmin: float
    dtmax: float
    max_steps: int
    linear_rtol: float
    linear_atol: float
    newton_rtol: float
    newton_atol: float
    krylov_restart: int
    krylov_max_steps: int
    pcoeff: float
    icoeff: float
    slots: int
    rho_every: int
    rho_safety: float
    reference: FlowPreset | None = field(default=None, metadata=_NONE_IS_EMPTY)

    def __post_init__(self):
        _check_kind(self)


@_frozen
class DescentPreset:
    """A discrete solver: GD, heavy-ball momentum (`beta`) or SGD (`batch_size`)."""

    KINDS: ClassVar[tuple[str, ...]] = DISCRETE_KINDS
    name: str
    kind: str
    description: str
    learning_rate: float
    beta: float | None = None  # momentum only
    batch_size: int | None = None  # sgd only
    divergence_factor: float

    def __post_init__(self):
        _check_kind(self)


def _check_kind(preset) -> None:
    if preset.kind not in preset.KINDS:
        raise ValueError(f"`kind` = {preset.kind!r} is not a kind of {type(preset).__name__}; "
                         f"allowed: {', '.join(preset.KINDS)}")


Preset = Union[FlowPreset, DescentPreset]


@_frozen
class Run:
    t_end: float
    checkpoints: Checkpoints
    solvers: tuple[Preset, ...]
    observe: tuple[str, ...]
    ntg_points: int
    stop_loss: float  # 0 = no stop event

    def checkpoint_times(self) -> np.ndarray:
        """The checkpoint times (see `flowsim.config.checkpoint_times`)."""
        return checkpoint_times(to_dict(self))


# --------------------------------------------------------------------------------------
# [sweep], [analysis], [plot] and the whole scenario
# --------------------------------------------------------------------------------------


@_frozen
class Sweep:
    """`axes` maps each swept dotted key to its values (as validated), in file order."""

    mode: str  # "product" | "zip"
    axes: Frozen


@_frozen
class PruneAnalysis:
    enabled: bool
    points: int
    importance: tuple[str, ...]


@_frozen
class TransferAnalysis:
    enabled: bool
    k: tuple[int, ...]
    hidden: int
    steps: int
    learning_rate: float
    importance: tuple[str, ...]
    standardize: bool


@_frozen
class PcaAnalysis:
    enabled: bool
    points: int


@_frozen
class Analysis:
    solvers: tuple[str, ...]  # () = every solver
    prune: PruneAnalysis
    transfer: TransferAnalysis
    pca: PcaAnalysis


@_frozen
class Plot:
    figure: str


@_frozen
class Config:
    """A resolved scenario: the whole file (`Scenario.settings`) or one sweep point
    (`RunSpec.settings`, whose `sweep` is None)."""

    name: str
    description: str
    seeds: tuple[int, ...]
    dtype: str
    data: Data
    model: Model
    loss: Loss
    run: Run
    sweep: Sweep | None = None
    analysis: Analysis | None = None
    plot: Plot | None = None


# --------------------------------------------------------------------------------------
# Resolved dict <-> typed
# --------------------------------------------------------------------------------------


@functools.cache
def _fields(cls: type) -> tuple[tuple[dataclasses.Field, Any], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f, hints[f.name]) for f in dataclasses.fields(cls))


@functools.cache
def _kinds(cls: type) -> tuple[str, ...]:
    """The `kind` values a tagged class stands for."""
    return getattr(cls, "KINDS", None) or typing.get_args(typing.get_type_hints(cls)["kind"])


def _union(hint: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(hint) in (Union, types.UnionType):
        return typing.get_args(hint)
    return None


def table_class(union: Any, value: Mapping) -> type:
    """The class of `union` (e.g. `Data`) that a resolved table stands for: chosen by its
    `kind`, or (checkpoints) by the keys it has."""
    classes = [o for o in typing.get_args(union) if dataclasses.is_dataclass(o)] or [union]
    if len(classes) == 1:
        return classes[0]
    if "kind" in value:
        found = [c for c in classes if value["kind"] in _kinds(c)]
    else:
        found = [c for c in classes if set(value) == {f.name for f, _ in _fields(c)}]
    if len(found) != 1:
        names = ", ".join(c.__name__ for c in classes)
        raise ValueError(f"{dict(value)!r} is not a resolved table of one of {names}")
    return found[0]


def from_dict(hint: Any, value: Any) -> Any:
    """The typed form of a resolved value; `hint` is a class above or a union of them.

    `from_dict(Config, scenario.resolved)`, `from_dict(Preset, load_solver("tsit5"))`.
    """
    options = _union(hint)
    if options is not None:
        if isinstance(value, Mapping):
            return from_dict(table_class(hint, value), value)
        if isinstance(value, list):
            return from_dict(next(o for o in options if typing.get_origin(o) is tuple), value)
        return value
    if typing.get_origin(hint) is tuple:
        item = typing.get_args(hint)[0]
        return tuple(from_dict(item, v) for v in value)
    if hint is Sweep:
        return Sweep(mode=value["mode"],
                     axes=Frozen({k: _freeze(v) for k, v in value.items() if k != "mode"}))
    if dataclasses.is_dataclass(hint):
        fields = _fields(hint)
        unknown = set(value) - {f.name for f, _ in fields}
        if unknown:
            raise ValueError(f"{hint.__name__} has no field {', '.join(sorted(unknown))}")
        kwargs = {}
        for f, h in fields:
            if f.name not in value:
                continue
            v = value[f.name]
            kwargs[f.name] = None if "none" in f.metadata and v == f.metadata["none"] \
                else from_dict(h, v)
        return hint(**kwargs)
    return value


def to_dict(obj: Any) -> Any:
    """The resolved form of a typed value: dicts and lists, exactly as validation gives it."""
    if isinstance(obj, Sweep):
        return {"mode": obj.mode, **to_dict(obj.axes)}
    if dataclasses.is_dataclass(obj):
        out = {}
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if v is not None:
                out[f.name] = to_dict(v)
            elif "none" in f.metadata:
                out[f.name] = f.metadata["none"]
        return out
    if isinstance(obj, Mapping):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return [to_dict(v) for v in obj]
    return obj
