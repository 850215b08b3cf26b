"""The configuration tables of a scenario and a solver preset, each declared once.

Each table is a frozen, hashable class whose keys are `setting`s (`flowsim.config.declare`
says what a setting carries and what is derived from the classes). The few rules that
relate two keys (``low < high``, ``k <= width``, checkpoint times within ``t_end`` ...) are
small functions in the class's `RULES`. The kinds accepted come from the registries where
they are declared (solver kinds and flow methods in `flowsim.integrate.registry`;
activations, losses and observables in `flowsim.kinds`): no JAX is imported here.

Tagged tables are one class per `kind` (`SphereSineData`, `AsymmetricScaling` ...); solver
presets are `FlowPreset` for the continuous kinds and `DescentPreset` for the discrete ones.
Keys only some kinds of a class take (`FlowPreset.learning_rate`, `DescentPreset.beta`) are
None for the others; so are tables a scenario may leave out ([sweep], [analysis], [plot])
and digits' `n` / `n_test` (None = every point). Lists are tuples. A few classes and fields
are filled by `flowsim.simulate` from Python objects, never by a file (`ArraysData`,
`ModuleModel`, `Loss.function`): they are plain fields, not settings.

Resolution details worth knowing:

- ``seeds = {count = 3, start = 5}`` resolves to ``seeds = [5, 6, 7]``.
- ``run.checkpoints`` resolves to exactly one form: ``{every}``, ``{count, spacing}`` or
  ``{times}``; an empty table means the default ``{count = 50, spacing = "linear"}``.
- ``run.solvers`` resolves to a list of full preset tables, each with its ``name``.
- ``data.seed = "run"`` is kept as is: the consumer substitutes the run's seed.

Why dataclasses and not pydantic: the message contract (file, dotted key, value, what is
allowed, did-you-mean, the `--set` origin) is produced by the declarative specs, and tests
pin its wording; pydantic would validate a second time and word its errors its own way.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Union

import numpy as np

from .. import plugins
from ..integrate.registry import CENTRAL_METHODS, DISCRETE_KINDS, FLOW_KINDS, GD_FLOW_KINDS
from ..integrate.registry import FLOW_METHODS as _FLOW_METHOD_REGISTRY
from ..integrate.registry import SOLVER_KINDS as _SOLVER_KIND_REGISTRY
from ..integrate.registry import steps
from ..kinds import ACTIVATIONS as _ACTIVATION_REGISTRY
from ..kinds import LOSSES as _LOSS_REGISTRY
from ..kinds import OBSERVABLES as _OBSERVABLE_REGISTRY
from ..kinds import SHALLOW_KINDS as SHALLOW_KINDS
from ..kinds import EIGEN_RTOL, HESSIAN_K
from ..toml_text import sweep_axes
from .catalog import solvers_dir
from .declare import Frozen, freeze, setting, table, table_spec, tagged_spec, to_dict
from .files import display, read_toml
from .spec import (ABSENT, REQUIRED, Bool, Ctx, Custom, FilePath, Float, Int, ListOf, OneOf, Spec, Str,
                   Table, Tagged, did_you_mean, join, num, show, toml_key, toml_string)
from .times import checkpoint_times

SEED_MAX = 2**32 - 1  # seeds feed jax.random.PRNGKey and numpy generators
MAX_SEEDS = 10_000
MAX_CHECKPOINTS = 1_000_000
MAX_POINTS = 10_000
MAX_RUNS = 100_000

# The kinds the registries declare, in their order (the order of every "allowed: ..." text).
ACTIVATIONS = tuple(_ACTIVATION_REGISTRY)
LOSSES = tuple(_LOSS_REGISTRY)
SOLVER_KINDS = tuple(_SOLVER_KIND_REGISTRY)
FLOW_METHODS = tuple(_FLOW_METHOD_REGISTRY)
OBSERVABLES = tuple(_OBSERVABLE_REGISTRY)
DEFAULT_OBSERVE = ["loss", "test_loss", "ntg_eig", "ntg_change", "weight_change"]
UCI_NAMES = ("concrete", "energy", "airfoil", "plant")
MNIST_IMAGES = 5000   # data/mnist_5k.npz: 500 images of each digit (flowsim/data/images.py)
EMBEDDINGS = ("identity", "quadratic", "random-features")
CHEN_SCALINGS = ("theirs", "ntk", "mean-field")
MLP_PARAMETERISATIONS = ("standard", "ntk", "mean-field", "mup")   # flowsim/models/mlp.py
SWEEP_MODES = ("product", "zip")
# `flowsim plot` layout: "default" (Caron Fig. 1 panels) or a paper figure (flowsim/plots/chen.py).
PLOT_FIGURES = ("default", "chen-exp1", "chen-exp2", "chen-exp3")
# float32 resolves about 1.2e-7 relative; an error target within ~100 units of it makes the
# step-size controller chase rounding noise (tens of times more steps, and no better answer).
FLOAT32_MIN_RTOL = 1e-5

__all__ = [
    "Config", "Data", "Model", "Scaling", "Checkpoints", "Preset",
    "SphereSineData", "SingleReluData", "RandomLabelsData", "XorNoiseData",
    "QuadraticTeacherData", "UciData", "Split", "DigitsData", "CsvData", "NpzData", "MnistData", "CifarData",
    "SyntheticImagesData", "ArraysData",
    "NtkScaling", "AsymmetricScaling", "SingleScaling", "FiniteScaling", "CustomScaling",
    "MeanFieldScaling", "StandardScaling", "ShallowModel", "EmbeddedModel", "MlpModel", "PythonModel",
    "ModuleModel", "Loss",
    "CheckpointEvery", "CheckpointCount", "CheckpointTimes", "FlowPreset", "DescentPreset",
    "Run", "Sweep", "PruneAnalysis", "TransferAnalysis", "PcaAnalysis", "Analysis", "Plot",
]


# --------------------------------------------------------------------------------------
# Validators of flowsim's own (the generic ones are in flowsim.config.spec)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plugin(Str):
    """One of `choices`, or a plug-in "package.module:name" that imports (from the scenario's
    folder first) and passes `probe` (which returns what is wrong with the object, or "")."""

    probe: Callable[[Any], str] = lambda obj: ""
    what: str = "a function"

    def allowed(self) -> str:
        plugin = f'a plug-in {plugins.FORM} naming {self.what}'
        return f"{super().allowed()}, or {plugin}" if self.choices else plugin

    def check(self, value, key, ctx):
        if not plugins.is_path(value):
            if not self.choices:
                raise ctx.bad(key, value, "is not an import path", self.allowed())
            return super().check(value, key, ctx)
        with plugins.running(key, value, "imported and probed"):
            try:
                obj = plugins.load(value, ctx.base_dir)
            except plugins.PluginError as err:
                raise ctx.bad(key, value, str(err), self.allowed()) from None
            wrong = self.probe(obj)
        if wrong:
            raise ctx.bad(key, value, wrong, self.allowed())
        return value


def _callable(obj) -> str:
    return "" if callable(obj) else f"is of type {type(obj).__name__}, not callable"


def _probe(shapes: tuple[tuple[int, ...], ...], want: tuple[int, ...], what: str):
    """A probe calling the object on zeros of `shapes` (abstractly, no compute) and asking
    for an output of shape `want`."""
    def probe(obj) -> str:
        import jax
        import jax.numpy as jnp

        if not callable(obj):
            return _callable(obj)
        try:
            out = jax.eval_shape(obj, *(jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes))
        except plugins.RAISED as err:  # the user's code may raise anything
            return f"fails on arrays of shapes {list(shapes)} ({plugins.describe(err)})"
        shape = getattr(out, "shape", None)
        return "" if shape == want else f"returns shape {shape} on {list(shapes)}; {what} returns {want}"
    return probe


def _positive(default: Any = REQUIRED) -> Float:
    return Float(lo=0.0, lo_open=True, default=default)


def _fraction(default: float) -> Float:
    return Float(lo=0.0, hi=1.0, default=default)


_SEED = Int(lo=0, hi=SEED_MAX)


# --------------------------------------------------------------------------------------
# [data]: one class per kind
# --------------------------------------------------------------------------------------

def _n(default: int) -> Any:
    return setting(Int(lo=1, default=default), "training points (digits: the first n of the shipped training "
                   "file; absent = all)")


def _d(default: int, lo: int = 1) -> Any:
    return setting(Int(lo=lo, default=default), "input dimension")


def _n_test(default: int) -> Any:
    return setting(Int(lo=0, default=default), "test points, drawn like the training points (digits: absent "
                   "= all)")


def _noise(default: float) -> Any:
    return setting(Float(lo=0, default=default), "standard deviation of the Gaussian noise added to the "
                   "targets")


def _standardize() -> Any:
    return setting(True, "standardise X and y with the training set's mean and deviation (kept in the "
                   "archive's /data attributes)")


def _file(meaning: str = "the file (csv: one header row, numeric columns; npz: X_train, y_train, optional "
                         "X_test, y_test and an integer `classes`)") -> Any:
    return setting(FilePath(), meaning)


@table
class _DataBase:
    kind: str
    seed: int | Literal["run"] = setting(
        OneOf(options=(_SEED, Str(choices=("run",))), default=0),
        "seed of the data's random draws and splits, shared by every run; \"run\": each run's own seed")


@table
class SphereSineData(_DataBase):
    kind: Literal["sphere-sine"] = "sphere-sine"
    n: int = _n(100)
    d: int = _d(50)
    noise: float = _noise(1.0)
    n_test: int = _n_test(100)


@table
class SingleReluData(_DataBase):
    kind: Literal["single-relu"] = "single-relu"
    n: int = _n(100)
    d: int = _d(50)
    noise: float = _noise(0.0)
    n_test: int = _n_test(1000)


def _low_below_high(t: dict, key: str, ctx: Ctx) -> None:
    if not t["low"] < t["high"]:
        low = join(key, "low")
        raise ctx.bad(join(key, "high"), t["high"], f"is not above `{low}` = {show(t['low'])}",
                      f"a number > {low}")


@table
class RandomLabelsData(_DataBase):
    RULES: ClassVar = (_low_below_high,)
    kind: Literal["random-labels"] = "random-labels"
    n: int = _n(20)
    d: int = _d(20)
    n_test: int = _n_test(0)
    low: float = setting(-0.5, "lower end of the uniform random labels")
    high: float = setting(0.5, "upper end of the uniform random labels")


@table
class XorNoiseData(_DataBase):
    kind: Literal["xor-noise"] = "xor-noise"
    n: int = _n(600)
    d: int = _d(50, lo=3)   # the XOR pattern in 2 coordinates plus at least one noise one
    n_test: int = _n_test(500)


@table
class QuadraticTeacherData(_DataBase):
    kind: Literal["quadratic-teacher"] = "quadratic-teacher"
    n: int = _n(100)
    d: int = _d(30)
    n_test: int = _n_test(500)
    teacher_width: int = setting(Int(lo=1, default=5), "hidden nodes of the quadratic teacher network")
    noise: float = _noise(0.0)


def _split_sums_to_one(t: dict, key: str, ctx: Ctx) -> None:
    total = t["train"] + t["test"] + t["valid"]
    if abs(total - 1.0) > 1e-9:
        raise ctx.bad(key, t, f"sums to {total!r}, not 1",
                      "train, test and valid, each in [0, 1], summing to 1 (within 1e-9)")


@table
class Split:
    RULES: ClassVar = (_split_sums_to_one,)
    train: float = setting(_fraction(0.4), "share of the rows in the training set")
    test: float = setting(_fraction(0.2), "share of the rows in the test set")
    valid: float = setting(_fraction(0.4), "share of the rows held out as validation (not used by the flow)")


@table
class UciData(_DataBase):
    kind: Literal["uci"] = "uci"
    name: Literal[UCI_NAMES] = setting(REQUIRED, "which shipped UCI regression dataset (data/<name>.csv)")
    split: Split = setting(table_spec(Split, what="a table {train, test, valid} of fractions summing to 1"))
    permute_seed: int = setting(Int(lo=0, hi=SEED_MAX, default=10),
                                "seed of the row permutation before the split (Caron et al. used 10)")
    standardize: bool = _standardize()


@table
class DigitsData(_DataBase):
    kind: Literal["digits"] = "digits"
    n: int | None = _n(ABSENT)   # None: every training point
    n_test: int | None = _n_test(ABSENT)   # None: every test point
    standardize: bool = _standardize()


@table
class CsvData(_DataBase):
    kind: Literal["csv"] = "csv"
    path: str = _file()
    target: str | tuple[str, ...] = setting(
        OneOf(options=(Str(nonempty=True), ListOf(item=Str(nonempty=True), nonempty=True, distinct=True))),
        "the column name(s) that form y; every other column is an input")
    test_fraction: float = setting(Float(lo=0.0, hi=1.0, hi_open=True, default=0.2),
                                   "share of the (permuted) rows held out as the test set; 0 = none")
    standardize: bool = _standardize()


@table
class NpzData(_DataBase):
    kind: Literal["npz"] = "npz"
    path: str = _file()


# Images preprocessed as Cohen et al. (2021) do in their cifar.py: pixels / 255, flattened, then
# centred and standardised per pixel; one-hot targets (flowsim/data/images.py).
def _cohen_standardize() -> Any:
    return setting(True, "centre and standardise every pixel by its training mean and deviation, as Cohen et "
                   "al. do (a pixel constant over the training images is centred only); false: pixels / 255")


def _mnist_fits(t: dict, key: str, ctx: Ctx) -> None:
    n = t.get("n") or MNIST_IMAGES   # absent: all of them
    if n + t["n_test"] > MNIST_IMAGES:
        n_key = join(key, "n")
        raise ctx.bad(join(key, "n_test"), t["n_test"], f"with `{n_key}` = {n} asks for {n + t['n_test']} of the "
                      f"{MNIST_IMAGES} shipped images", f"an integer in [0, {MNIST_IMAGES} - {n_key}] (absent "
                      f"`{n_key}` takes all {MNIST_IMAGES})")


@table
class MnistData(_DataBase):
    RULES: ClassVar = (_mnist_fits,)
    kind: Literal["mnist"] = "mnist"
    n: int | None = setting(Int(lo=1, hi=MNIST_IMAGES, default=ABSENT),
                            f"training images of the shipped {MNIST_IMAGES}-image MNIST subset, n/10 of each digit "
                            "(rounded), drawn with `seed`; absent = all")
    n_test: int = setting(Int(lo=0, hi=MNIST_IMAGES, default=0),
                          "test images, drawn like the training ones from the images they leave")
    standardize: bool = _cohen_standardize()


@table
class CifarData(_DataBase):
    kind: Literal["cifar"] = "cifar"
    path: str = _file("your .npz: X (n images, any shape such as (n, 32, 32, 3) or (n, 3072); uint8 pixels are "
                      "divided by 255) and y (n integer labels in [0, classes)), optionally X_test and y_test")
    n: int | None = setting(Int(lo=1, default=ABSENT),
                            "the first n images of X (Cohen et al. take the first 5 000); absent = all")
    n_test: int | None = setting(Int(lo=0, default=ABSENT),
                                 "the first n_test images of X_test; absent = all (none without X_test)")
    classes: int = setting(Int(lo=2, default=10), "the number of classes (one-hot columns of y)")
    standardize: bool = _cohen_standardize()


@table
class SyntheticImagesData(_DataBase):
    kind: Literal["synthetic-images"] = "synthetic-images"
    n: int = _n(500)
    n_test: int = _n_test(0)
    channels: int = setting(Int(lo=1, default=3), "channels of each synthetic image")
    size: int = setting(Int(lo=1, default=8), "height and width of each synthetic image, in pixels")
    blur: float = setting(Float(lo=0.0, default=1.0),
                          "standard deviation, in pixels, of the Gaussian blur of each random field (wrapping round)")
    shared: float = setting(Float(lo=0.0, default=1.5), "weight of the blurred field shared by every channel")
    classes: int = setting(Int(lo=2, default=10), "outputs of the random teacher; the labels are its argmax")
    teacher_widths: tuple[int, ...] = setting(ListOf(item=Int(lo=1), nonempty=True, default=[200, 200]),
                                              "hidden widths of the random fc-tanh teacher that labels the images")


@table
class ArraysData(_DataBase):
    """Arrays passed to `flowsim.simulate` (no scenario file names this kind): their sizes and
    a digest, so that resuming with other arrays is refused."""

    IN_FILES: ClassVar = False
    kind: Literal["arrays"] = "arrays"
    n: int
    d: int
    n_test: int
    outputs: int
    digest: str


Data = Union[SphereSineData, SingleReluData, RandomLabelsData, XorNoiseData,
             QuadraticTeacherData, UciData, DigitsData, CsvData, NpzData, MnistData, CifarData,
             SyntheticImagesData, ArraysData]


# --------------------------------------------------------------------------------------
# [model], with its scaling
# --------------------------------------------------------------------------------------


def _gamma(default: float) -> Any:
    return setting(_fraction(default), "share γ of the symmetric (NTK) part of the scaling")


@table
class NtkScaling:
    kind: Literal["ntk"] = "ntk"


@table
class AsymmetricScaling:
    kind: Literal["asymmetric"] = "asymmetric"
    gamma: float = _gamma(0.5)
    alpha: float = setting(Float(lo=0.0, hi=1.0, lo_open=True, hi_open=True, default=0.5),
                           "Zipf exponent α of the asymmetric part")


@table
class SingleScaling:
    kind: Literal["single"] = "single"
    gamma: float = _gamma(0.0)


@table
class FiniteScaling:
    kind: Literal["finite"] = "finite"
    k: int = setting(Int(lo=1), "the non-symmetric part is shared equally by the first k nodes")
    gamma: float = _gamma(0.0)


@table
class CustomScaling:
    kind: Literal["custom"] = "custom"
    path: str = _file("an .npy or .npz holding the m scalings λ_j")
    gamma: float = _gamma(0.0)


@table
class MeanFieldScaling:
    kind: Literal["mean-field"] = "mean-field"


@table
class StandardScaling:
    kind: Literal["standard"] = "standard"


Scaling = Union[NtkScaling, AsymmetricScaling, SingleScaling, FiniteScaling, CustomScaling,
                MeanFieldScaling, StandardScaling]


def _activation(default: str) -> Any:
    return setting(Plugin(choices=ACTIVATIONS, default=default, what="an elementwise function z -> σ(z)",
                          probe=_probe(((3,),), (3,), "an elementwise function")),
                   "σ, by name or as a plug-in \"package.module:function\"")


def _init_std() -> Any:
    return setting(_positive(1.0), "standard deviation of the Gaussian initial weights")


def _zeroed() -> Any:
    return setting(False, "subtract a frozen copy of the initial network so that f = 0 at t = 0 (Caron "
                   "Assumption 7.7)")


@table
class _ModelBase:
    kind: str
    width: int = setting(Int(lo=1, default=1000), "hidden nodes m")
    activation: str = _activation("relu")
    init_std: float = _init_std()


# Caron et al.: f = Σ_j c_j a_j σ(w_j·x/√d) with a node scaling.
@table
class ShallowModel(_ModelBase):
    kind: Literal["shallow"] = "shallow"
    output: Literal["fixed", "trained"] = setting(
        "fixed", "output weights a_j: fixed ±1 drawn once, or trained with the hidden layer")
    zeroed: bool = _zeroed()
    init_path: str = setting(FilePath(empty_ok=True, default=""),
                             "an .npz with W0 (m×d) and a (m) to start from instead of a random draw")
    scaling: Scaling = setting(tagged_spec(Scaling, tag_default="ntk"), "node scaling λ_j of Caron et al. (ntk: "
                               "all equal; asymmetric: a Zipf part; single, finite, custom; mean-field, standard: "
                               "1/m, 1)")

    def hidden(self) -> int:
        return self.width

    def inputs(self, d: int) -> int:
        """What each hidden node's weight vector sees: the data's d inputs."""
        return d

    def size(self, d: int, k: int) -> int:
        """Trainable parameters on d inputs and k outputs: W (m × d), and a (m × k) when trained."""
        return self.width * d + (self.width * k if self.output == "trained" else 0)


def _embedded_keys(t: dict, key: str, ctx: Ctx) -> None:
    """`features` is D of the random-features embedding only (default D = width, as in
    Chen et al.'s P-3L net); the NTK scaling pairs nodes, so it needs an even width."""
    fk = join(key, "features")
    if t["embedding"] == "random-features":
        t.setdefault("features", t["width"])
    elif "features" in t:
        raise ctx.bad(fk, t["features"], f"does not apply to `{join(key, 'embedding')}` = "
                      f"{toml_string(t['embedding'])} (its D is fixed by the embedding)",
                      'no `features` key, or `embedding` = "random-features"')
    if t["chen_scaling"] == "ntk" and t["width"] % 2:
        raise ctx.bad(join(key, "width"), t["width"], 'is odd; `chen_scaling` = "ntk" '
                      "symmetrises the initialisation with pairs of nodes",
                      "an even integer >= 2")


# Chen, Vanden-Eijnden & Bruna: f = (1/m) Σ c_i σ(D^{-1/2} Σ_j W_ij φ_j(x)), c_i = ±ĉ
# (flowsim/embedding.py); chen_scaling picks a column of their Table 1.
@table
class EmbeddedModel(_ModelBase):
    RULES: ClassVar = (_embedded_keys,)
    kind: Literal["embedded"] = "embedded"
    zeroed: bool = _zeroed()
    embedding: Literal[EMBEDDINGS] = setting(
        "identity", "features φ(x) the hidden layer sees (Chen et al.): x itself, quadratic monomials, or random "
        "features")
    chen_scaling: Literal[CHEN_SCALINGS] = setting(
        "theirs", "which column of Chen et al.'s Table 1 sets the output scale (theirs = the paper's code)")
    c_hat: float = setting(_positive(1.0), "magnitude ĉ of the fixed output weights c_i = ±ĉ")
    # last: the default D (filled in by _embedded_keys) lands there too, so the resolved
    # table has one key order, given or not; None for the other embeddings
    features: int | None = setting(Int(lo=1, default=ABSENT),
                                   "number D of random features (random-features embedding only)")

    def hidden(self) -> int:
        return self.width

    def inputs(self, d: int) -> int:
        """D, the number of features φ(x) the hidden layer sees on d inputs."""
        return {"identity": d, "quadratic": d * d}.get(self.embedding, self.features or 0)

    def size(self, d: int, k: int) -> int:
        """Trainable parameters: W (m × D); the output weights c_i are fixed."""
        return self.width * self.inputs(d)


def _train_within_layers(t: dict, key: str, ctx: Ctx) -> None:
    layers = len(t["widths"]) + 1
    if t["train"] != "all" and max(t["train"]) >= layers:
        raise ctx.bad(join(key, "train"), t["train"], f"names a layer past the last ({layers} layers: "
                      f"{len(t['widths'])} hidden and the output)",
                      f'"all", or layer indices in [0, {layers - 1}]')


# A fully connected network of any depth (flowsim/models/mlp.py).
@table
class MlpModel:
    RULES: ClassVar = (_train_within_layers,)
    kind: Literal["mlp"] = "mlp"
    widths: tuple[int, ...] = setting(ListOf(item=Int(lo=1), nonempty=True, default=[100, 100]),
                                      "hidden widths, input side first (the depth is their number)")
    activation: str = _activation("tanh")
    parameterisation: Literal[MLP_PARAMETERISATIONS] = setting(
        "standard", "how widths scale initial variances and the forward pass: standard, ntk, mean-field or µP (Yang & "
        "Hu's abc form)")
    init_std: float = _init_std()
    bias: bool = setting(True, "whether each dense layer has a bias")
    train: Literal["all"] | tuple[int, ...] = setting(
        OneOf(options=(Str(choices=("all",)), ListOf(item=Int(lo=0), nonempty=True, distinct=True)),
              default="all"),
        "\"all\", or the indices of the layers that train (0 = the input layer); the others stay at their "
        "initial values")

    def hidden(self) -> int:
        return sum(self.widths)

    def size(self, d: int, k: int) -> int:
        """Trainable parameters on d inputs and k outputs: the weights (and biases) of the layers
        that train."""
        sizes = [d, *self.widths, k]
        layers = range(len(sizes) - 1) if self.train == "all" else self.train
        return sum(sizes[i] * sizes[i + 1] + (sizes[i + 1] if self.bias else 0) for i in layers)


# The user's own network: factory(key, d, k) -> an Equinox module mapping one input (d,) to
# outputs (k,); every floating array trains (flowsim/models/module.py).
@table
class PythonModel:
    kind: Literal["python"] = "python"
    factory: str = setting(
        Plugin(what="a function (key, d, k) -> an Equinox module", probe=_callable),
        "\"package.module:function\" called as factory(key, d, k), returning an Equinox module that maps one "
        "input (d,) to outputs (k,)")

    def size(self, d: int, k: int) -> None:
        """Unknown until the factory has built the network."""
        return None


@table
class ModuleModel:
    """A user's Equinox model passed to `flowsim.simulate` (no scenario file names this
    kind): what it was, how many parameters train, and a digest of every seed's initial
    weights, so that resuming with another model is refused."""

    IN_FILES: ClassVar = False
    kind: Literal["module"] = "module"
    source: str       # the model's class (an instance) or the factory's qualified name
    trainable: str    # the Equinox filter's name
    parameters: int   # trainable parameters
    leaves: tuple[str, ...]   # the trainable leaves' paths (the `weight_change` axis)
    digest: str

    def size(self, d: int, k: int) -> int:
        return self.parameters


Model = Union[ShallowModel, EmbeddedModel, MlpModel, PythonModel, ModuleModel]


@table
class Loss:
    kind: str = setting(
        Plugin(choices=LOSSES, default="half-sse", what="a function (pred (n, k), y (n, k)) -> scalar, a mean "
               "over samples", probe=_probe(((4, 2), (4, 2)), (), "a loss")),
        "the training loss, by name or as a plug-in \"package.module:function\" (pred, y) -> scalar")
    function: str | None = None   # kind "callable" (`flowsim.simulate`): the function's qualified name


# --------------------------------------------------------------------------------------
# Solver presets (a file in solvers/, or an inline table in run.solvers)
# --------------------------------------------------------------------------------------


def _dt_bounds(t: dict, key: str, ctx: Ctx) -> None:
    if t["dtmax"] > 0 and t["dtmin"] > t["dtmax"]:
        raise ctx.bad(join(key, "dtmin"), t["dtmin"], f"exceeds `{join(key, 'dtmax')}` = "
                      f"{show(t['dtmax'])}", "dtmin <= dtmax (0 means no bound)")


def _central_fits(t: dict, key: str, ctx: Ctx) -> None:
    """A central flow is stepped by an explicit method, Runge–Kutta or rock4 (its eigenvectors
    ride in the method's state: flowsim.integrate.central_field), and has no reference flow of its own."""
    if t["kind"] != "central-flow":
        return
    if t["method"] not in CENTRAL_METHODS:
        raise ctx.bad(join(key, "method"), t["method"], "cannot step a central flow",
                      "an explicit method: " + ", ".join(CENTRAL_METHODS))
    if t["reference"] != "":
        raise ctx.bad(join(key, "reference"), t["reference"], "is not supported by a central flow",
                      "\"\" (none)")


def _read_by(group: str, meaning: str) -> str:
    """A flow-preset key's meaning after the methods whose registry entry reads its settings
    group (`FlowMethod.reads`), where not every method does: those methods where they are
    the fewer, else the others."""
    readers = [m.name for m in _FLOW_METHOD_REGISTRY.values() if group in m.reads]
    others = [m for m in _FLOW_METHOD_REGISTRY if m not in readers]
    if not others:
        return meaning
    return (", ".join(readers) if len(readers) <= len(others) else "all but " + ", ".join(others)) + ": " + meaning


def _check_kind(preset) -> None:
    if preset.kind not in preset.KINDS:
        raise ValueError(f"`kind` = {preset.kind!r} is not a kind of {type(preset).__name__}; "
                         f"allowed: {', '.join(preset.KINDS)}")
    if not preset.name:    # a preset written in Python: named after what it is
        object.__setattr__(preset, "name", getattr(preset, "method", preset.kind))


def _name() -> Any:
    return setting(Str(nonempty=True), "the preset's name in the archive (an inline table's own; a file's "
                   "is its stem)", default="")


def _description() -> Any:
    return setting("", "one line shown by `flowsim list`")


def _learning_rate(kinds: tuple[str, ...] = ()) -> Any:
    return setting(_positive(), "the step η (modified-flow: the GD step whose modified equation it solves; "
                   "central-flow: the GD step whose central flow it solves)", kinds=kinds)


def _check_reference(value: Any, key: str, ctx: Ctx) -> str | dict:
    if value == "":
        return ""
    preset = load_preset(value, key, ctx)
    if preset["kind"] != "flow" or preset["reference"]:
        raise ctx.bad(key, value, "is not a plain `flow` preset",
                      "the name or inline table of a `flow` preset without a reference of its own")
    return preset


@table
class FlowPreset:
    """A continuous solver: the exact gradient flow, or GD's modified or central flow at
    `learning_rate`."""

    KINDS: ClassVar[tuple[str, ...]] = FLOW_KINDS
    RULES: ClassVar = (_dt_bounds, _central_fits)
    name: str = _name()
    kind: Literal[FLOW_KINDS] = "flow"
    description: str = _description()
    learning_rate: float | None = _learning_rate(kinds=GD_FLOW_KINDS)
    # central-flow: the eigen-directions tracked, and the share of the edge 2/η from which a
    # tracked direction enters the complementarity problem
    max_eigen: int | None = setting(Int(lo=1, hi=16, default=5), "central-flow: Hessian eigen-directions "
                                    "tracked (by warm-started LOBPCG), at most; `flowsim compare` notes where all of "
                                    "them reach track_threshold (nothing beneath them is watched then)",
                                    kinds=("central-flow",))
    track_threshold: float | None = setting(
        Float(lo=0.0, hi=1.0, lo_open=True, default=0.9), "central-flow: a tracked direction whose ηλ/2 "
        "reaches this enters the complementarity problem that holds it at 2/η (third derivatives are "
        "computed for it); below, it is taken as free: a higher threshold pays fewer third-derivative products "
        "and leaves out directions that can still couple in (bench/bench_central_threshold.py)",
        kinds=("central-flow",))
    method: Literal[FLOW_METHODS] = setting(
        "tsit5", "the Diffrax method (explicit Runge–Kutta, or kvaerno5: implicit, matrix-free), rock4: stabilised "
        "explicit Runge–Kutta–Chebyshev for stiff flows (its cost grows like √sharpness, an explicit "
        "method's like sharpness), rkc2: its second-order sibling for rtol 1e-3 … 1e-5, auto: tsit5 while "
        "accuracy holds the step and rock4 while stability does, switched per step, or filippov: "
        "event-driven through ReLU kinks")
    # The keys of the settings groups a flow method reads (`flowsim.integrate.registry`:
    # its records hold these names; each meaning names the methods that read it).
    rtol: float = setting(_positive(1e-8), _read_by("accuracy", "relative tolerance of the adaptive step control"))
    atol: float = setting(_positive(1e-10), _read_by("accuracy", "absolute tolerance of the adaptive step control"))
    dtmin: float = setting(Float(lo=0.0, default=0.0), _read_by("step_control", "smallest step allowed (0 = none)"))
    dtmax: float = setting(Float(lo=0.0, default=0.0), _read_by("step_control", "largest step allowed (0 = none)"))
    max_steps: int = setting(Int(lo=1, default=1_000_000), _read_by("accuracy", "steps allowed over the whole run; "
                             "reaching it ends the flow with status `max_steps`"))
    # Implicit methods (kvaerno5) solve their stages by matrix-free Newton-Krylov:
    linear_rtol: float = setting(_positive(1e-10), _read_by("newton_krylov", "GMRES relative tolerance inside "
                                                            "implicit stages"))
    linear_atol: float = setting(_positive(1e-10), _read_by("newton_krylov", "GMRES absolute tolerance inside "
                                                            "implicit stages"))
    newton_rtol: float = setting(_positive(1e-8), _read_by("newton_krylov", "Newton relative tolerance of "
                                                           "implicit stages"))
    newton_atol: float = setting(_positive(1e-10), _read_by("newton_krylov", "Newton absolute tolerance of "
                                                            "implicit stages"))
    krylov_restart: int = setting(Int(lo=1, default=20), _read_by("newton_krylov", "GMRES restart length"))
    krylov_max_steps: int = setting(Int(lo=1, default=200), _read_by("newton_krylov", "GMRES iterations per "
                                                                     "linear solve"))
    # PID step control (Diffrax's PIDController): pcoeff ≈ 0.2–0.4, icoeff ≈ 0.3–0.4 suit
    # stiff problems; the defaults (0, 1) are plain integral control.
    pcoeff: float = setting(Float(lo=0.0, default=0.0), _read_by(
        "step_control", "proportional coefficient of the PID step control (0 = integral control only)"))
    icoeff: float = setting(Float(lo=0.0, lo_open=True, default=1.0), _read_by(
        "step_control", "integral coefficient of the PID step control"))
    slots: int = setting(Int(lo=1, default=8), _read_by(
        "filippov", "kink surfaces one node may slide on at once; a node that meets more ends the run with "
        "status `failed` (a larger value goes on, at a cost growing as slots² per node while more than 4 are in "
        "use; never more than min(n, d) are used)"))
    rho_every: int = setting(Int(lo=1, default=10), _read_by(
        "stabilised", "accepted steps between estimates of the spectral radius ρ of the flow's Jacobian (one "
        "power-iteration Hessian-vector product each; also estimated again after a rejected step)"))
    rho_safety: float = setting(Float(lo=1.0, default=1.2), _read_by(
        "stabilised", "the factor ρ's estimate is multiplied by (power iteration approaches ρ from below, slowly "
        "where the top of the Hessian spectrum is clustered)"))
    # A second, tighter flow solved beside this one: the archive then holds this flow's
    # global-error estimate at every checkpoint (series `flow_error`).
    reference: FlowPreset | None = setting(
        Custom(fn=_check_reference, text="\"\" (none), or the name or inline table of a `flow` preset",
               types=(str, dict), default=""),
        "a tighter flow preset solved beside this one: the archive then holds this flow's global-error "
        "estimate (`flow_error`)", none="")

    def __post_init__(self):
        _check_kind(self)


_DIVERGENCE = Float(lo=1.0, lo_open=True, default=1e8)


@table
class DescentPreset:
    """A discrete solver: GD, heavy-ball momentum (`beta`) or SGD (`batch_size`)."""

    KINDS: ClassVar[tuple[str, ...]] = DISCRETE_KINDS
    name: str = _name()
    kind: Literal[DISCRETE_KINDS] = "gd"
    description: str = _description()
    learning_rate: float = _learning_rate()
    beta: float | None = setting(Float(lo=0.0, hi=1.0, hi_open=True, default=0.9),
                                 "heavy-ball momentum coefficient", kinds=("momentum",))
    batch_size: int | None = setting(Int(lo=1, default=64), "minibatch size (sampled with the run's seed)",
                                     kinds=("sgd",))
    # Diverged when the loss exceeds factor × initial loss (or is not finite).
    divergence_factor: float = setting(_DIVERGENCE, "the run is `diverged` once the loss exceeds this × the "
                                       "initial loss")
    perturbation: float = setting(Float(lo=0.0, default=0.0), "start from θ0 + perturbation·z, z a standard normal "
                                  "draw fixed by the run's seed (0 = off): a twin GD at 1e-12 gives `compare` the "
                                  "noise floor of distances to GD's iterates")

    def __post_init__(self):
        _check_kind(self)


Preset = Union[FlowPreset, DescentPreset]
SOLVER_KIND_MEANING = ("flow (the exact gradient flow), modified-flow (the flow GD follows to second order), "
                       "central-flow (the path GD's time average follows at the edge of stability), gd, "
                       "momentum, sgd")


@functools.cache
def solver_spec(inline: bool) -> Tagged:
    """An inline preset carries its own name and an optional description; a preset file's
    name is its stem and its description is required."""
    if inline:
        return tagged_spec(Preset, common=("name", "description"))
    return tagged_spec(Preset, common=("description",), replace={"description": Str()}, exclude=("name",))


_GD_STEP = re.compile(r"gd-lr(\d+(?:\.\d*)?(?:e-?\d+)?)")   # "gd-lr0.5": GD at that step, any step
_DIGITS = re.compile(r"\d+(?:\.\d*)?(?:e-?\d+)?")


def _positive_number(text: str) -> bool:
    return math.isfinite(float(text)) and float(text) > 0


def load_preset(spec: Any, key: str, ctx: Ctx) -> dict:
    """A preset by name (a file in solvers/) or inline, validated, with defaults and name."""
    if isinstance(spec, str):
        names = sorted(p.name[: -len(".toml")] for p in solvers_dir().glob("*.toml"))
        step = _GD_STEP.fullmatch(spec)
        if spec not in names and step and _positive_number(step[1]):
            return load_preset({"name": spec, "kind": "gd", "learning_rate": float(step[1]),
                                "description": f"Full-batch gradient descent, step {step[1]}"}, key, ctx)
        if spec not in names:
            guess = did_you_mean(spec, names)
            if guess and (spec.startswith("gd-lr") or _DIGITS.sub("#", guess) == _DIGITS.sub("#", spec)):
                guess = None     # another step size or order is another solver, not a spelling
            raise ctx.bad(key, spec, "is not a solver preset",
                          "one of " + ", ".join(toml_string(n) for n in names)
                          + " (files in solvers/), gd-lr<η> for any step η > 0 (e.g. \"gd-lr0.5\"), or an "
                          "inline table such as { name = \"gd-0.5\", kind = \"gd\", learning_rate = 0.5 }",
                          f"did you mean {toml_string(guess)}?" if guess else "")
        path = solvers_dir() / f"{spec}.toml"
        shown = display(path)
        raw = read_toml(path, shown)
        preset = solver_spec(inline=False).check(raw, "", Ctx(file=shown, base_dir=path.parent))
        return {"name": spec, **preset}
    if isinstance(spec, dict):
        preset = solver_spec(inline=True).check(spec, key, ctx)
        name = preset.pop("name")
        return {"name": name, **preset}
    raise ctx.wrong_type(key, spec, "a solver preset name or an inline table with `name` "
                         "and `kind`")


# --------------------------------------------------------------------------------------
# [run]: checkpoints (one of three forms) and solvers
# --------------------------------------------------------------------------------------


@table
class CheckpointEvery:
    every: float = setting(_positive(), "a row every T units of flow time")


@table
class CheckpointCount:
    count: int = setting(Int(lo=1, hi=MAX_CHECKPOINTS, default=50), "N rows after t = 0, up to t_end")
    spacing: Literal["linear", "log"] = setting("linear", "linear, or log (from t_end/1000)")


def _times_increasing(t: dict, key: str, ctx: Ctx) -> None:
    times = t["times"]
    for i in range(1, len(times)):
        if not times[i] > times[i - 1]:
            raise ctx.bad(join(key, "times"), times,
                          f"is not strictly increasing (item {i} = {show(times[i])} "
                          f"follows {show(times[i - 1])})",
                          "strictly increasing times in (0, t_end]")


@table
class CheckpointTimes:
    RULES: ClassVar = (_times_increasing,)
    times: tuple[float, ...] = setting(ListOf(item=_positive(), nonempty=True, max_len=MAX_CHECKPOINTS),
                                       "explicit increasing times in (0, t_end]")


Checkpoints = Union[CheckpointEvery, CheckpointCount, CheckpointTimes]
# Exactly one checkpoint form; each form is its own small table.
CHECKPOINT_FORMS: dict[str, Table] = {"every": table_spec(CheckpointEvery), "count": table_spec(CheckpointCount),
                                      "times": table_spec(CheckpointTimes)}
_CHECKPOINTS_TEXT = ('exactly one of {every = T} | {count = N, spacing = "linear" | "log"} | '
                     '{times = [t1, t2, ...]}')


def _check_checkpoints(value: Any, key: str, ctx: Ctx) -> dict:
    if not isinstance(value, dict):
        raise ctx.wrong_type(key, value, _CHECKPOINTS_TEXT)
    known = {k for form in CHECKPOINT_FORMS.values() for k in form.fields}
    for name in value:
        if name not in known:
            raise ctx.unknown(join(key, name), name, known, f"[{key}]")
    forms = [f for f, t in CHECKPOINT_FORMS.items() if any(k in value for k in t.fields)]
    if len(forms) > 1:
        raise ctx.bad(key, value, f"mixes {len(forms)} forms ({', '.join(forms)})",
                      _CHECKPOINTS_TEXT)
    return CHECKPOINT_FORMS[forms[0] if forms else "count"].check(value, key, ctx)


def _check_solvers(value: Any, key: str, ctx: Ctx) -> list[dict]:
    allowed = "a non-empty list of distinct solver preset names or inline tables"
    if not isinstance(value, list):
        raise ctx.wrong_type(key, value, allowed)
    if not value:
        raise ctx.bad(key, value, "is empty", allowed)
    out: list[dict] = []
    for i, item in enumerate(value):
        preset = load_preset(item, f"{key}[{i}]", ctx)
        if any(p["name"] == preset["name"] for p in out):
            raise ctx.bad(key, value, f"names solver {toml_string(preset['name'])} twice",
                          allowed + " (give an inline solver its own `name`)")
        out.append(preset)
    return out


def _checkpoints_fit(run: dict, key: str, ctx: Ctx) -> None:
    """Checkpoints must lie in (0, t_end] and be few enough to allocate."""
    t_end, cp = run["t_end"], run["checkpoints"]
    ck = join(key, "checkpoints")
    if "times" in cp:
        for i, t in enumerate(cp["times"]):
            if t > t_end:
                raise ctx.bad(f"{ck}.times[{i}]", t, f"is beyond `{join(key, 't_end')}` = "
                              f"{show(t_end)}", f"times in (0, t_end = {show(t_end)}]")
    if "every" in cp and t_end / cp["every"] > MAX_CHECKPOINTS:
        raise ctx.bad(f"{ck}.every", cp["every"], f"gives {t_end / cp['every']:.3g} "
                      f"checkpoints up to t_end = {show(t_end)}",
                      f"at most {MAX_CHECKPOINTS} checkpoints")
    # The formulas can still collapse for absurd t_end (sub-normal floats): check the result.
    try:
        with np.errstate(all="ignore"):
            ts = checkpoint_times(run)
        ok = ts.size > 0 and bool(np.all(np.isfinite(ts)) and ts[0] > 0 and np.all(np.diff(ts) > 0))
    except (ValueError, ArithmeticError):
        ok = False
    if not ok:
        raise ctx.bad(ck, cp, f"does not give strictly increasing times in (0, t_end] for "
                      f"t_end = {show(t_end)}", "checkpoints that are distinct floats")


def _t_end_on_every_grid(run: dict, key: str, ctx: Ctx) -> None:
    """A discrete solver's last step is round(t_end/η)·η: refuse a t_end it would miss, rather
    than report `done` short of (or past) the horizon."""
    t_end = run["t_end"]
    for i, p in enumerate(run["solvers"]):
        if _SOLVER_KIND_REGISTRY[p["kind"]].discrete:
            eta = p["learning_rate"]
            last = steps(t_end, eta) * eta
            if abs(last - t_end) > 1e-9 * t_end:
                raise ctx.bad(join(key, "t_end"), t_end, f"is not a multiple of the step "
                              f"{show(eta)} of solver {toml_string(p['name'])} "
                              f"(`{join(key, f'solvers[{i}]')}`): it would end at t = {last:.10g}",
                              f"a t_end that is a whole number of steps of every discrete "
                              f"solver (e.g. {max(steps(t_end, eta), 1) * eta:.10g})")


@table
class Run:
    RULES: ClassVar = (_checkpoints_fit, _t_end_on_every_grid)
    t_end: float = setting(_positive(), "the horizon in flow time; GD reaches it in t_end/η steps (a whole "
                           "number for every discrete solver)")
    checkpoints: Checkpoints = setting(
        Custom(fn=_check_checkpoints, text=_CHECKPOINTS_TEXT, types=(dict,),
               kids={k: s for form in CHECKPOINT_FORMS.values() for k, s in form.fields.items()},
               default={"count": 50, "spacing": "linear"}),
        "when rows are recorded: {every = T}, {count = N, spacing} or {times = [...]} (t = 0 is always row 0)")
    solvers: tuple[Preset, ...] = setting(
        Custom(fn=_check_solvers, text="a non-empty list of solver preset names or inline tables",
               types=(list,), default=["auto"]),
        "solver presets by name (files in solvers/) or inline tables; each runs every seed of every sweep point",
        default=REQUIRED)    # (in Python: the preset objects; a name is resolved by validation)
    observe: tuple[str, ...] = setting(ListOf(item=Str(choices=OBSERVABLES), distinct=True, default=DEFAULT_OBSERVE),
                                       "the series recorded at every checkpoint (docs/scenarios.md lists the "
                                       "observables)")
    ntg_points: int = setting(Int(lo=1, default=100),   # the consumer clips it to n
                              "the NTG (and observables built on it) uses the first k training points")
    stop_loss: float = setting(Float(lo=0.0, default=0.0),
                               "> 0: a flow stops (status `stopped`) once the loss falls to this value")
    hessian_k: int = setting(Int(lo=1, hi=64, default=HESSIAN_K),
                             "`hessian_top` records the k largest Hessian eigenvalues")
    eigen_rtol: float = setting(Float(lo=1e-14, hi=0.1, default=EIGEN_RTOL),
                                "the relative accuracy of each Hessian eigenvalue recorded (`sharpness`, "
                                "`hessian_top`): its error bound over its value")

    def checkpoint_times(self) -> np.ndarray:
        """The checkpoint times (see `flowsim.config.checkpoint_times`)."""
        return checkpoint_times(to_dict(self))


# --------------------------------------------------------------------------------------
# [sweep], [analysis], [plot] and the whole scenario
# --------------------------------------------------------------------------------------


def _check_seeds(value: Any, key: str, ctx: Ctx) -> list[int]:
    spec = OneOf(options=(
        ListOf(item=_SEED, nonempty=True, distinct=True, max_len=MAX_SEEDS),
        Table(fields={"count": Int(lo=1, hi=MAX_SEEDS), "start": Int(lo=0, default=0)},
              what="a table {count, start}"),
    ))
    seeds = spec.check(value, key, ctx)
    if isinstance(seeds, dict):
        if seeds["start"] + seeds["count"] - 1 > SEED_MAX:
            raise ctx.bad(join(key, "start"), seeds["start"], "is out of range",
                          f"start + count - 1 <= {SEED_MAX}")
        seeds = list(range(seeds["start"], seeds["start"] + seeds["count"]))
    return seeds


_UNSWEEPABLE = {"sweep": "a sweep cannot sweep itself",
                "seeds": "every sweep point already runs every seed; list them in `seeds`"}


def point_count(sweep: dict) -> int:
    lengths = [len(sweep[k]) for k in sweep_axes(sweep)]
    if not lengths:
        return 1
    return math.prod(lengths) if sweep["mode"] == "product" else lengths[0]


def sweep_key(k: str) -> str:
    return f"sweep.{toml_key(k)}"


def check_dotted(dotted: str, key: str, ctx: Ctx) -> list[str]:
    """`dotted` must name a key or table of the scenario schema; returns its parts."""
    parts = dotted.split(".")
    spec: Spec = scenario_spec()
    for depth, part in enumerate(parts):
        kids = spec.children()
        if part not in kids:
            parent = ".".join(parts[:depth])
            names = sorted(kids)
            guess = did_you_mean(part, names)
            mean = f"; did you mean `{join(parent, guess)}`?" if guess else ";"
            table = f"[{parent}]" if parent else "the top level"
            allowed = ", ".join(names) if names else "(none: it is not a table)"
            raise ctx.error(f"unknown key `{key}`: `{dotted}` is not a scenario key{mean} "
                            f"allowed keys in {table}: {allowed}",
                            key=key, value=dotted, allowed=allowed)
        spec = kids[part]
    return parts


def _check_sweep(value: Any, key: str, ctx: Ctx) -> dict:
    """The [sweep] table's shape; each point is validated later, after expansion."""
    if not isinstance(value, dict):
        raise ctx.wrong_type(key, value, "a table")
    out: dict[str, Any] = {   # the raw [sweep] table: `mode` may be left out
        "mode": Str(choices=SWEEP_MODES).check(value.get("mode", "product"), join(key, "mode"), ctx)
    }
    axes = [k for k in value if k != "mode"]
    for k in axes:
        sk = sweep_key(k)
        parts = check_dotted(k, sk, ctx)
        if parts[0] in _UNSWEEPABLE:
            raise ctx.bad(sk, value[k], "cannot be swept", "dotted keys of the scenario other "
                          "than sweep and seeds", _UNSWEEPABLE[parts[0]])
        v = value[k]
        if not isinstance(v, list):
            raise ctx.wrong_type(sk, v, f"a non-empty list of values for `{k}`")
        if not v:
            raise ctx.bad(sk, v, "is empty", f"a non-empty list of values for `{k}`")
        out[k] = v
    for a, b in itertools.permutations(axes, 2):
        if b.startswith(a + "."):
            raise ctx.bad(sweep_key(b), value[b], f"overlaps `{sweep_key(a)}`",
                          "sweep keys none of which lies inside another")
    lengths = {k: len(out[k]) for k in axes}
    if out["mode"] == "zip" and len(set(lengths.values())) > 1:
        desc = ", ".join(f"{k}: {n}" for k, n in lengths.items())
        raise ctx.bad(key, value, f"has lists of different lengths ({desc}) in zip mode",
                      'lists of one length with mode = "zip" (or mode = "product")')
    count = point_count(out)
    if count > MAX_POINTS:
        raise ctx.bad(key, value, f"has {count} points", f"at most {MAX_POINTS} sweep points")
    return out


@table
class Sweep:
    """`axes` maps each swept dotted key to its values (as validated), in file order."""

    mode: Literal[SWEEP_MODES]
    axes: Frozen

    @classmethod
    def from_resolved(cls, value: dict) -> Sweep:
        return cls(mode=value["mode"], axes=Frozen({k: freeze(v) for k, v in value.items() if k != "mode"}))

    def to_resolved(self) -> dict:
        return {"mode": self.mode, **to_dict(self.axes)}


def _enabled() -> Any:
    return setting(True, "run this analysis")


def _importance(default: list[str], meaning: str) -> Any:
    # weight: λ_j‖w_j‖² (as written) | lambda: λ_j‖a_j‖² (as run)
    return setting(ListOf(item=Str(choices=("weight", "lambda")), nonempty=True, distinct=True, default=default),
                   meaning)


@table
class PruneAnalysis:
    enabled: bool = _enabled()
    points: int = setting(Int(lo=2, hi=100_000, default=41), "number of kept-node counts on the curve")
    importance: tuple[Literal["weight", "lambda"], ...] = _importance(
        ["weight", "lambda"], "node importance: weight = λ_j‖w_j‖² (the text), lambda = λ_j‖a_j‖² (their code)")


@table
class TransferAnalysis:
    enabled: bool = _enabled()
    k: tuple[int, ...] = setting(ListOf(item=Int(lo=1), nonempty=True, distinct=True,
                                        default=[1, 2, 5, 10, 20, 50, 100, 200, 500]), "the feature counts k tried")
    hidden: int = setting(Int(lo=1, default=64), "hidden width of the network trained on the transferred features")
    steps: int = setting(Int(lo=1, default=5000), "its GD steps")
    # the text's η = 1.0 diverges (see flowsim.analysis.transfer)
    learning_rate: float = setting(_positive(0.1), "its GD step (the text's 1.0 diverges)")
    importance: tuple[Literal["weight", "lambda"], ...] = _importance(["weight"], "how nodes are ranked (as in "
                                                                                  "prune)")
    standardize: bool = setting(True, "standardise the transferred features")


@table
class PcaAnalysis:
    enabled: bool = _enabled()
    points: int = setting(Int(lo=2, default=1000), "held-out points used (at most this many)")


ANALYSIS_TABLES = {"prune": table_spec(PruneAnalysis), "transfer": table_spec(TransferAnalysis),
                   "pca": table_spec(PcaAnalysis)}


def _analysis_tables(t: dict, key: str, ctx: Ctx) -> None:
    """`prune = true` is shorthand for the table with its defaults (`false`: disabled)."""
    for name, spec in ANALYSIS_TABLES.items():
        if isinstance(t.get(name), bool):
            t[name] = spec.check({"enabled": t[name]}, join(key, name), ctx)


def _analysis(name: str, meaning: str) -> Any:
    return setting(OneOf(options=(Bool(), ANALYSIS_TABLES[name]), default=False), meaning)


# Caron et al. analyses of the trained networks (flowsim.analysis.caron), run by the driver
# when a solver finishes; absent = none.
@table
class Analysis:
    RULES: ClassVar = (_analysis_tables,)
    solvers: tuple[str, ...] = setting(ListOf(item=Str(nonempty=True), distinct=True, default=[]),
                                       "which solvers' final networks are analysed (empty = all)")
    prune: PruneAnalysis = _analysis("prune", "pruning curves: test loss after keeping the most "
                                                    "important nodes")
    transfer: TransferAnalysis = _analysis("transfer", "transfer learning: a new network trained on "
                                                             "the k most important nodes' features")
    pca: PcaAnalysis = _analysis("pca", "principal components of the node outputs on held-out points, "
                                              "before and after training")


@table
class Plot:
    figure: Literal[PLOT_FIGURES] = setting(
        "default", "the layout `flowsim plot` draws: the default panels, or a Chen et al. figure")


def _k_within_width(top: dict, key: str, ctx: Ctx) -> None:
    model = top.get("model", {})          # validation reads the raw tables: keys may be missing
    scaling = model.get("scaling", {})
    if scaling.get("kind") == "finite" and scaling["k"] > model["width"]:
        raise ctx.bad("model.scaling.k", scaling["k"],
                      f"exceeds `model.width` = {model['width']}",
                      f"an integer in [1, model.width = {model['width']}]")


def _rtol_within_dtype(top: dict, key: str, ctx: Ctx) -> None:
    if top["dtype"] != "float32":
        return
    for i, preset in enumerate(top["run"]["solvers"]):
        for k, p in ((f"run.solvers[{i}]", preset), (f"run.solvers[{i}].reference", preset.get("reference"))):
            if (isinstance(p, dict) and not _SOLVER_KIND_REGISTRY[p["kind"]].discrete
                    and p["rtol"] < FLOAT32_MIN_RTOL):
                raise ctx.bad(k, p["name"], f"has rtol = {num(p['rtol'])}, below what dtype = \"float32\" "
                              "resolves (its epsilon is 1.2e-7: the step controller would chase "
                              "rounding noise)", f"with float32, flow presets with rtol >= "
                              f"{num(FLOAT32_MIN_RTOL)} (e.g. \"dopri5-fast\"), or dtype = \"float64\"")


def _observables_fit_model(top: dict, key: str, ctx: Ctx) -> None:
    """Observables of one model family (Caron's importance, the hidden preactivations) ask
    the network for what only that family has."""
    kind = top["model"]["kind"]
    for name in top["run"]["observe"]:
        if _OBSERVABLE_REGISTRY[name].family == "shallow" and kind not in SHALLOW_KINDS:
            raise ctx.bad("run.observe", top["run"]["observe"], f"asks for {toml_string(name)}, defined for "
                          f"the shallow networks ({', '.join(SHALLOW_KINDS)}), not `model.kind` = "
                          f"{toml_string(kind)}", "observables of any model: " +
                          ", ".join(n for n, o in _OBSERVABLE_REGISTRY.items() if not o.family))


@table
class Config:
    """A resolved scenario: the whole file (`Scenario.settings`) or one sweep point
    (`RunSpec.settings`, whose `sweep` is None)."""

    RULES: ClassVar = (_k_within_width, _rtol_within_dtype, _observables_fit_model)
    name: str = setting(Str(nonempty=True, default=lambda ctx: ctx.stem),
                        "the scenario's name: the archive defaults to runs/<name>.h5")
    description: str = setting("", "one line shown by `flowsim list` and stored in the archive")
    seeds: tuple[int, ...] = setting(
        Custom(fn=_check_seeds, types=(list, dict), default=[0],
               text=f"a non-empty list of distinct integers in [0, {SEED_MAX}] or a table "
                    "{count = N >= 1, start = S >= 0}",
               kids={"count": Int(lo=1), "start": Int(lo=0)}),
        "the runs' seeds (initial weights; data too with `data.seed = \"run\"`); `{count = N, start = S}` is "
        "shorthand for S … S+N−1")
    dtype: Literal["float64", "float32"] = setting(
        "float64", "floating-point precision of data, weights and solvers; float32 needs flow presets with rtol ≥ 1e-5, "
        "and not the filippov method (float64 only)")
    data: Data = setting(tagged_spec(Data, common=("seed",), default=REQUIRED),
                         "the dataset: a synthetic generator, a shipped dataset, or your own csv/npz file")
    model: Model = setting(tagged_spec(Model, tag_default="shallow", default=REQUIRED),
                           "the network: one hidden layer (shallow), on fixed embeddings (embedded), a deep MLP, "
                           "or your own Equinox module (python)")
    loss: Loss = setting(table_spec(Loss))
    run: Run = setting(table_spec(Run, default=REQUIRED))
    sweep: Sweep | None = setting(
        Custom(fn=_check_sweep, types=(dict,), default=ABSENT,
               text='a table: mode = "product" | "zip" and "dotted.key" = [values, ...]',
               kids={"mode": Str(choices=SWEEP_MODES)}),
        "lists of values for dotted keys, combined as a product or zipped; each combination is a sweep point "
        "run for every seed")
    analysis: Analysis | None = setting(table_spec(Analysis, default=ABSENT))
    plot: Plot | None = setting(table_spec(Plot, default=ABSENT))


@functools.cache
def scenario_spec() -> Table:
    return table_spec(Config, default=REQUIRED)
