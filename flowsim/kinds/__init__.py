"""The registry of kinds: every kind flowsim knows, declared once with what validation needs
to know of it, and no JAX, so that validating a scenario or reading an archive does not
import it. Here the activations, losses, observables and model kinds;

    solvers.py    the solver kinds and flow methods (each method's settings groups and
                  integrator factory), and t = kη

`flowsim.nn.activations`, `flowsim.nn.losses` and `flowsim.observe.observables` attach an implementation to
each name here, in this order (the order of every "allowed: ..." text); a name without one
fails `tests/test_registries.py`.
"""

from dataclasses import dataclass

LEAKY_RELU_SLOPE = 0.01


@dataclass(frozen=True)
class ActivationKind:
    name: str
    # σ' continuous: κ_n uses Gauss–Hermite quadrature. The others are piecewise linear
    # (relu, leaky-relu), whose κ_n has the arc-cosine closed form.
    smooth: bool
    # σ' on the negative side of a piecewise-linear activation (σ' is 1 on the positive
    # side): what the Filippov integrator needs to know of it. None for the others.
    low_slope: float | None = None


ACTIVATIONS: dict[str, ActivationKind] = {a.name: a for a in (
    ActivationKind("relu", smooth=False, low_slope=0.0),
    ActivationKind("leaky-relu", smooth=False, low_slope=LEAKY_RELU_SLOPE),
    *(ActivationKind(name, smooth=True) for name in ("swish", "tanh", "sigmoid", "softplus", "gelu", "identity")),
)}
# The names whose κ_n needs quadrature (flowsim.nn.theory picks its method by this set).
SMOOTH = frozenset(name for name, a in ACTIVATIONS.items() if a.smooth)
# The piecewise-linear ones, with σ' on the negative side (flowsim.integrate.filippov).
PIECEWISE_LINEAR = {name: a.low_slope for name, a in ACTIVATIONS.items() if a.low_slope is not None}


@dataclass(frozen=True)
class LossKind:
    name: str
    # A sum over samples: a mini-batch of size B estimates it after scaling by n/B; the
    # mean-type losses need no scaling.
    sum_over_samples: bool


LOSSES: dict[str, LossKind] = {k.name: k for k in (
    LossKind("half-sse", sum_over_samples=True),
    LossKind("mse", sum_over_samples=False),
    LossKind("half-sse-mean", sum_over_samples=False),
    LossKind("cross-entropy", sum_over_samples=False),
)}


@dataclass(frozen=True)
class ObservableKind:
    name: str
    family: str = ""     # "shallow": defined for the one-hidden-layer networks only


OBSERVABLES: dict[str, ObservableKind] = {o.name: o for o in (
    *map(ObservableKind, ("loss", "test_loss", "accuracy", "test_accuracy", "ntg", "ntg_eig", "ntg_change",
                          "weight_change", "unit_change")),
    ObservableKind("importance", family="shallow"),
    *map(ObservableKind, ("weights", "sharpness", "gn_sharpness", "preconditioned_sharpness", "hessian_top",
                          "hessian_density")),
    ObservableKind("hidden", family="shallow"),
)}
# The Hessian eigen-tracker's settings (`run.hessian_k`, `run.eigen_rtol`; flowsim.observe.eigen):
# `hessian_top` records the HESSIAN_K largest eigenvalues, and every tracked eigenvalue
# (`sharpness` too) is computed to a relative accuracy of EIGEN_RTOL.
HESSIAN_K = 5
EIGEN_RTOL = 1e-4


@dataclass(frozen=True)
class ModelKind:
    name: str
    # "shallow": one hidden layer, a `ShallowNet` (per-node series, the shallow-family
    # observables, the Filippov flow of a ReLU net, the NTG in closed form); "module": an
    # Equinox module run through `ModuleNet` (per-leaf series, the NTG by autodiff).
    family: str
    size_key: str            # the scenario key that sets the network's size
    # "module:function" of the builder a scenario's `model.kind` runs (flowsim.models.MODELS
    # imports it: this is the one list of the builders, and of their modules); "" for the
    # kind no scenario names (`module`: flowsim.simulate's own)
    builder: str = ""
    sized: bool = True       # its size is known before it is built (`python`: once its factory ran)

    @property
    def in_files(self) -> bool:
        """Whether a scenario may name it."""
        return bool(self.builder)


MODELS: dict[str, ModelKind] = {m.name: m for m in (
    ModelKind("shallow", family="shallow", size_key="model.width", builder="flowsim.models.shallow:build_shallow"),
    ModelKind("embedded", family="shallow", size_key="model.width",
              builder="flowsim.models.embedded:build_embedded"),
    ModelKind("mlp", family="module", size_key="model.widths", builder="flowsim.models.mlp:build_mlp"),
    ModelKind("python", family="module", size_key="model.factory", builder="flowsim.models.module:build_python",
              sized=False),
    ModelKind("module", family="module", size_key="model"),
)}
# The one-hidden-layer networks (ShallowNet), in the registry's order (every message's order).
SHALLOW_KINDS = tuple(name for name, m in MODELS.items() if m.family == "shallow")
# The models whose `weight_change` is per trainable leaf (ModuleNet), not per node.
PER_LEAF_MODELS = tuple(name for name, m in MODELS.items() if m.family == "module")
