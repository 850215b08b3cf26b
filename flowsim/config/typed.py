"""The configuration tables of a scenario and a solver preset, each declared once.

Each table is a frozen, hashable class whose keys are `setting`s (`flowsim.config.declare`
says what a setting carries and what is derived from the classes). The few rules that
relate two keys (``low < high``, ``k <= width``, checkpoint times within ``t_end`` ...) are
named in the class's `RULES` (`flowsim.config.rules`). The machinery a few keys validate
with lives apart: a plug-in's import and probe (`plugin_probe`), a preset's loading by name
(`presets`), what a [sweep] may say (`sweep_grammar`). The kinds accepted come from the registries where
they are declared (`flowsim.kinds`: activations, losses, observables, models; solver kinds
and flow methods in `flowsim.kinds.solvers`): no JAX is imported here.

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
from typing import Any, ClassVar, Literal, Union

import numpy as np

from ..kinds.solvers import ADAPTIVE_FLOW_KINDS, CENTRAL_KINDS, DISCRETE_KINDS, FLOW_KINDS, GD_FLOW_KINDS, GIVEN_KINDS
from ..kinds.solvers import FLOW_METHODS as _FLOW_METHOD_REGISTRY
from ..kinds.solvers import SOLVER_KINDS as _SOLVER_KIND_REGISTRY
from ..kinds import ACTIVATIONS as _ACTIVATION_REGISTRY
from ..kinds import LOSSES as _LOSS_REGISTRY
from ..kinds import OBSERVABLES as _OBSERVABLE_REGISTRY
from ..kinds import SHALLOW_KINDS as SHALLOW_KINDS
from ..kinds import EIGEN_RTOL, HESSIAN_K
from .data_tables import (ArraysData, CifarData, CsvData, Data, DigitsData, MnistData, NpzData,
                          QuadraticTeacherData, RandomLabelsData, SingleReluData, SphereSineData, Split,
                          SyntheticImagesData, UciData, XorNoiseData)
from .declare import Frozen, file_setting, fraction, freeze, positive, setting, table, table_spec, tagged_spec, to_dict
from .plugin_probe import Plugin, callable_probe, shape_probe
from .presets import check_reference, check_solvers
from .rules import (MAX_CHECKPOINTS, SEED_MAX, adaptive_fits, central_fits, check_seeds,
                    checkpoints_fit, dt_bounds, embedded_keys, k_within_width,
                    observables_fit_model, rtol_within_dtype, t_end_on_every_grid,
                    times_increasing, train_within_layers)
from .spec import (ABSENT, REQUIRED, Bool, Ctx, Custom, FilePath, Float, Int, ListOf, OneOf, Str, Table, Tagged,
                   join)
from .sweep_grammar import SWEEP_MODES, check_sweep
from .times import checkpoint_times

MAX_RUNS = 100_000

# The kinds the registries declare, in their order (the order of every "allowed: ..." text).
ACTIVATIONS = tuple(_ACTIVATION_REGISTRY)
LOSSES = tuple(_LOSS_REGISTRY)
SOLVER_KINDS = tuple(k for k, v in _SOLVER_KIND_REGISTRY.items() if not v.given)    # (a file's)
FLOW_METHODS = tuple(_FLOW_METHOD_REGISTRY)
OBSERVABLES = tuple(_OBSERVABLE_REGISTRY)
DEFAULT_OBSERVE = ["loss", "test_loss", "ntg_eig", "ntg_change", "weight_change"]
EMBEDDINGS = ("identity", "quadratic", "random-features")
CHEN_SCALINGS = ("theirs", "ntk", "mean-field")
MLP_PARAMETERISATIONS = ("standard", "ntk", "mean-field", "mup")   # flowsim/models/mlp.py
# `flowsim plot` layout: "default" (Caron Fig. 1 panels) or a paper figure (flowsim/plots/chen.py).
PLOT_FIGURES = ("default", "chen-exp1", "chen-exp2", "chen-exp3")

__all__ = [
    "Config", "Data", "Model", "Scaling", "Checkpoints", "Preset",
    "SphereSineData", "SingleReluData", "RandomLabelsData", "XorNoiseData",
    "QuadraticTeacherData", "UciData", "Split", "DigitsData", "CsvData", "NpzData", "MnistData", "CifarData",
    "SyntheticImagesData", "ArraysData",
    "NtkScaling", "AsymmetricScaling", "SingleScaling", "FiniteScaling", "CustomScaling",
    "MeanFieldScaling", "StandardScaling", "ShallowModel", "EmbeddedModel", "MlpModel", "PythonModel",
    "ModuleModel", "Loss",
    "CheckpointEvery", "CheckpointCount", "CheckpointTimes", "FlowPreset", "DescentPreset", "OptaxPreset",
    "Run", "Sweep", "PruneAnalysis", "TransferAnalysis", "PcaAnalysis", "Analysis", "Plot",
]


# --------------------------------------------------------------------------------------
# [model], with its scaling
# --------------------------------------------------------------------------------------


def _gamma(default: float) -> Any:
    return setting(fraction(default), "share γ of the symmetric (NTK) part of the scaling")


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
    path: str = file_setting("an .npy or .npz holding the m scalings λ_j")
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
                          probe=shape_probe(((3,),), (3,), "an elementwise function")),
                   "σ, by name or as a plug-in \"package.module:function\"")


def _init_std() -> Any:
    return setting(positive(1.0), "standard deviation of the Gaussian initial weights")


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


# Chen, Vanden-Eijnden & Bruna: f = (1/m) Σ c_i σ(D^{-1/2} Σ_j W_ij φ_j(x)), c_i = ±ĉ
# (flowsim/embedding.py); chen_scaling picks a column of their Table 1.
@table
class EmbeddedModel(_ModelBase):
    RULES: ClassVar = (embedded_keys,)
    kind: Literal["embedded"] = "embedded"
    zeroed: bool = _zeroed()
    embedding: Literal[EMBEDDINGS] = setting(
        "identity", "features φ(x) the hidden layer sees (Chen et al.): x itself, quadratic monomials, or random "
        "features")
    chen_scaling: Literal[CHEN_SCALINGS] = setting(
        "theirs", "which column of Chen et al.'s Table 1 sets the output scale (theirs = the paper's code)")
    c_hat: float = setting(positive(1.0), "magnitude ĉ of the fixed output weights c_i = ±ĉ")
    # last: the default D (filled in by embedded_keys) lands there too, so the resolved
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


# A fully connected network of any depth (flowsim/models/mlp.py).
@table
class MlpModel:
    RULES: ClassVar = (train_within_layers,)
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
        Plugin(what="a function (key, d, k) -> an Equinox module", probe=callable_probe),
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
               "over samples", probe=shape_probe(((4, 2), (4, 2)), (), "a loss")),
        "the training loss, by name or as a plug-in \"package.module:function\" (pred, y) -> scalar")
    function: str | None = None   # kind "callable" (`flowsim.simulate`): the function's qualified name


# --------------------------------------------------------------------------------------
# Solver presets (a file in solvers/, or an inline table in run.solvers)
# --------------------------------------------------------------------------------------


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
    return setting(positive(), "the step η (modified-flow: the GD step whose modified equation it solves; "
                   "central-flow: the GD step whose central flow it solves; rmsprop-flow, adam-flow, rmsprop-central: the "
                   "step of "
                   "the method whose stable flow it solves, in time t = kη)", kinds=kinds)


# RMSProp's and Adam's hyper-parameters, each declared once for the discrete kind and its
# stable flow (flowsim.integrate.optimizers, flowsim.integrate.adaptive_flows; docs/optimizers.md)
_RMSPROP, _ADAM = ("rmsprop", "rmsprop-flow", "rmsprop-central"), ("adam", "adam-flow")


def _beta1() -> Any:
    return setting(Float(lo=0.0, hi=1.0, lo_open=True, hi_open=True, default=0.9),
                   "β₁: the decay of the gradient's moving average m", kinds=_ADAM)


def _beta2() -> Any:
    return setting(Float(lo=0.0, hi=1.0, lo_open=True, hi_open=True, default=0.999),
                   "β₂: the decay of the squared gradient's moving average ν (PyTorch's RMSProp `alpha`, "
                   "optax's `decay`)", kinds=(*_RMSPROP, *_ADAM))


def _eps() -> Any:
    return setting(Float(lo=0.0, default=1e-8), "ε of the denominator √ν + ε", kinds=(*_RMSPROP, *_ADAM))


def _eps_in_sqrt() -> Any:
    return setting(Bool(default=False), "true: the denominator is √(ν + ε), as optax's default; false: √ν + ε, "
                   "as PyTorch and the central-flow papers", kinds=_RMSPROP)


@table
class FlowPreset:
    """A continuous solver: the exact gradient flow, GD's modified or central flow at
    `learning_rate`, or RMSProp's or Adam's stable flow."""

    KINDS: ClassVar[tuple[str, ...]] = FLOW_KINDS
    RULES: ClassVar = (dt_bounds, central_fits, adaptive_fits)
    name: str = _name()
    kind: Literal[FLOW_KINDS] = "flow"
    description: str = _description()
    learning_rate: float | None = _learning_rate(kinds=GD_FLOW_KINDS + ADAPTIVE_FLOW_KINDS)
    beta1: float | None = _beta1()
    beta2: float | None = _beta2()
    eps: float | None = _eps()
    eps_in_sqrt: bool | None = _eps_in_sqrt()
    # central-flow: the eigen-directions tracked, and the share of the edge 2/η from which a
    # tracked direction enters the complementarity problem
    max_eigen: int | None = setting(Int(lo=1, hi=16, default=5), "central-flow, rmsprop-central: Hessian "
                                    "eigen-directions "
                                    "tracked (by warm-started LOBPCG), at most; `flowsim compare` notes where all of "
                                    "them reach track_threshold (nothing beneath them is watched then)",
                                    kinds=CENTRAL_KINDS)
    track_threshold: float | None = setting(
        Float(lo=0.0, hi=1.0, lo_open=True, default=0.9), "central-flow, rmsprop-central: a tracked "
        "direction whose ηλ/2 "
        "reaches this enters the complementarity problem that holds it at 2/η (third derivatives are "
        "computed for it); below, it is taken as free: a higher threshold pays fewer third-derivative products "
        "and leaves out directions that can still couple in (bench/bench_central_threshold.py)",
        kinds=CENTRAL_KINDS)
    # the registry's names when the preset is read (the view, not a copy: a method registered
    # after this import, `flowsim.kinds.solvers.register_flow_method`, is allowed too)
    method: str = setting(
        Str(choices=_FLOW_METHOD_REGISTRY.keys(), default="tsit5"), "the Diffrax method (explicit Runge–Kutta, or "
        "kvaerno5: implicit, matrix-free), rock4: stabilised "
        "explicit Runge–Kutta–Chebyshev for stiff flows (its cost grows like √sharpness, an explicit "
        "method's like sharpness), rkc2: its second-order sibling for rtol 1e-3 … 1e-5, auto: tsit5 while "
        "accuracy holds the step and rock4 while stability does, switched per step, or filippov: "
        "event-driven through ReLU kinks")
    # The keys of the settings groups a flow method reads (`flowsim.kinds.solvers`:
    # its records hold these names; each meaning names the methods that read it).
    rtol: float = setting(positive(1e-8), _read_by("accuracy", "relative tolerance of the adaptive step control"))
    atol: float = setting(positive(1e-10), _read_by("accuracy", "absolute tolerance of the adaptive step control"))
    dtmin: float = setting(Float(lo=0.0, default=0.0), _read_by("step_control", "smallest step allowed (0 = none)"))
    dtmax: float = setting(Float(lo=0.0, default=0.0), _read_by("step_control", "largest step allowed (0 = none)"))
    max_steps: int = setting(Int(lo=1, default=1_000_000), _read_by("accuracy", "steps allowed over the whole run; "
                             "reaching it ends the flow with status `max_steps`"))
    # Implicit methods (kvaerno5) solve their stages by matrix-free Newton-Krylov:
    linear_rtol: float = setting(positive(1e-10), _read_by("newton_krylov", "GMRES relative tolerance inside "
                                                            "implicit stages"))
    linear_atol: float = setting(positive(1e-10), _read_by("newton_krylov", "GMRES absolute tolerance inside "
                                                            "implicit stages"))
    newton_rtol: float = setting(positive(1e-8), _read_by("newton_krylov", "Newton relative tolerance of "
                                                           "implicit stages"))
    newton_atol: float = setting(positive(1e-10), _read_by("newton_krylov", "Newton absolute tolerance of "
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
        # (the preset specs are declared below: `solver_spec` is looked up when a file is read)
        Custom(fn=lambda value, key, ctx: check_reference(value, key, ctx, solver_spec),
               text="\"\" (none), or the name or inline table of a `flow` preset", types=(str, dict), default=""),
        "a tighter flow preset solved beside this one: the archive then holds this flow's global-error "
        "estimate (`flow_error`)", none="")

    def __post_init__(self):
        _check_kind(self)


_DIVERGENCE = Float(lo=1.0, lo_open=True, default=1e8)


@table
class DescentPreset:
    """A discrete solver: GD, heavy-ball momentum (`beta`), SGD (`batch_size`), or RMSProp and Adam
    by optax."""

    KINDS: ClassVar[tuple[str, ...]] = DISCRETE_KINDS
    name: str = _name()
    kind: Literal[DISCRETE_KINDS] = "gd"
    description: str = _description()
    learning_rate: float = _learning_rate()
    beta: float | None = setting(Float(lo=0.0, hi=1.0, hi_open=True, default=0.9),
                                 "heavy-ball momentum coefficient", kinds=("momentum",))
    batch_size: int | None = setting(Int(lo=1, default=64), "minibatch size (sampled with the run's seed)",
                                     kinds=("sgd",))
    beta1: float | None = _beta1()
    beta2: float | None = _beta2()
    eps: float | None = _eps()
    eps_in_sqrt: bool | None = _eps_in_sqrt()
    nu0: Literal["zero", "grad-squared"] | None = setting(
        Str(choices=("zero", "grad-squared"), default="zero"), "the second moment's start ν₀: zero, as optax and "
        "PyTorch start it, or grad-squared, g₀ ⊙ g₀, as the stable flow starts", kinds=("rmsprop",))
    # Diverged when the loss exceeds factor × initial loss (or is not finite).
    divergence_factor: float = setting(_DIVERGENCE, "the run is `diverged` once the loss exceeds this × the "
                                       "initial loss")
    perturbation: float = setting(Float(lo=0.0, default=0.0), "start from θ0 + perturbation·z, z a standard normal "
                                  "draw fixed by the run's seed (0 = off): a twin GD at 1e-12 gives `compare` the "
                                  "noise floor of distances to GD's iterates")

    def __post_init__(self):
        _check_kind(self)


class Given:
    """A Python object a preset holds (an optax transformation handed to `flowsim.simulate`):
    its resolved form, in the archive's scenario text, is the description only."""

    def __init__(self, value: Any, description: str):
        self.value, self.description = value, description

    def to_resolved(self) -> str:
        return self.description


@table
class OptaxPreset(DescentPreset):
    """A discrete leg by an optax transformation handed to `flowsim.simulate` (no file names
    this kind): full batch, step k at t = k·`learning_rate`. Read back from an archive,
    `transformation` is its description (the archive stores no Python object)."""

    IN_FILES: ClassVar = False
    KINDS: ClassVar[tuple[str, ...]] = GIVEN_KINDS
    kind: Literal[GIVEN_KINDS] = "optax"
    transformation: Any = None      # a `Given` optax.GradientTransformation, or its description


Preset = Union[FlowPreset, DescentPreset, OptaxPreset]
SOLVER_KIND_MEANING = ("flow (the exact gradient flow), modified-flow (the flow GD follows to second order), "
                       "central-flow (the path GD's time average follows at the edge of stability), gd, "
                       "momentum, sgd, rmsprop and adam (by optax), rmsprop-flow and adam-flow (their stable flows, "
                       "docs/optimizers.md)")


@functools.cache
def solver_spec(inline: bool) -> Tagged:
    """An inline preset carries its own name and an optional description; a preset file's
    name is its stem and its description is required."""
    if inline:
        return tagged_spec(Preset, common=("name", "description"))
    return tagged_spec(Preset, common=("description",), replace={"description": Str()}, exclude=("name",))


# --------------------------------------------------------------------------------------
# [run]: checkpoints (one of three forms) and solvers
# --------------------------------------------------------------------------------------


@table
class CheckpointEvery:
    every: float = setting(positive(), "a row every T units of flow time")


@table
class CheckpointCount:
    count: int = setting(Int(lo=1, hi=MAX_CHECKPOINTS, default=50), "N rows after t = 0, up to t_end")
    spacing: Literal["linear", "log"] = setting("linear", "linear, or log (from t_end/1000)")


@table
class CheckpointTimes:
    RULES: ClassVar = (times_increasing,)
    times: tuple[float, ...] = setting(ListOf(item=positive(), nonempty=True, max_len=MAX_CHECKPOINTS),
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


@table
class Run:
    RULES: ClassVar = (checkpoints_fit, t_end_on_every_grid)
    t_end: float = setting(positive(), "the horizon in flow time; GD reaches it in t_end/η steps (a whole "
                           "number for every discrete solver)")
    checkpoints: Checkpoints = setting(
        Custom(fn=_check_checkpoints, text=_CHECKPOINTS_TEXT, types=(dict,),
               kids={k: s for form in CHECKPOINT_FORMS.values() for k, s in form.fields.items()},
               default={"count": 50, "spacing": "linear"}),
        "when rows are recorded: {every = T}, {count = N, spacing} or {times = [...]} (t = 0 is always row 0)")
    solvers: tuple[Preset, ...] = setting(
        Custom(fn=lambda value, key, ctx: check_solvers(value, key, ctx, solver_spec),
               text="a non-empty list of solver preset names or inline tables",
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
    learning_rate: float = setting(positive(0.1), "its GD step (the text's 1.0 diverges)")
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


@table
class Config:
    """A resolved scenario: the whole file (`Scenario.settings`) or one sweep point
    (`RunSpec.settings`, whose `sweep` is None)."""

    RULES: ClassVar = (k_within_width, rtol_within_dtype, observables_fit_model)
    name: str = setting(Str(nonempty=True, default=lambda ctx: ctx.stem),
                        "the scenario's name: the archive defaults to runs/<name>.h5")
    description: str = setting("", "one line shown by `flowsim list` and stored in the archive")
    seeds: tuple[int, ...] = setting(
        Custom(fn=check_seeds, types=(list, dict), default=[0],
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
        # (the keys a sweep names are the scenario's: its spec is declared below)
        Custom(fn=lambda value, key, ctx: check_sweep(value, key, ctx, scenario_spec()), types=(dict,),
               default=ABSENT,
               text='a table: mode = "product" | "zip" and "dotted.key" = [values, ...]',
               kids={"mode": Str(choices=SWEEP_MODES)}),
        "lists of values for dotted keys, combined as a product or zipped; each combination is a sweep point "
        "run for every seed")
    analysis: Analysis | None = setting(table_spec(Analysis, default=ABSENT))
    plot: Plot | None = setting(table_spec(Plot, default=ABSENT))


@functools.cache
def scenario_spec() -> Table:
    return table_spec(Config, default=REQUIRED)
