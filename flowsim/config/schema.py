"""flowsim's scenario and solver-preset schema (DESIGN.md §4), built from `flowsim.config.spec`.

A scenario file says *what* to simulate, a solver preset (``solvers/NAME.toml``) says *how*.
The schema below is declarative; the few rules that relate two keys (``low < high``,
``k <= width``, checkpoint times within ``t_end`` ...) are small functions attached to the
table they concern.  The kinds it accepts come from the registries where they are
implemented (solver kinds and flow methods from `flowsim.integrate.registry`, activations
from `flowsim.activations`, losses from `flowsim.losses`); the keys each kind takes are
specified here.

Resolution details worth knowing:

- ``seeds = {count = 3, start = 5}`` resolves to ``seeds = [5, 6, 7]``.
- ``run.checkpoints`` resolves to exactly one form: ``{every}``, ``{count, spacing}`` or
  ``{times}``; an empty table means the default ``{count = 50, spacing = "linear"}``.
- ``run.solvers`` resolves to a list of full preset tables, each with its ``name``.
- digits' ``n`` / ``n_test`` stay absent when not given (absent = all points).
- ``data.seed = "run"`` is kept as is: the consumer substitutes the run's seed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import plugins
from ..activations import ACTIVATIONS as _ACTIVATION_REGISTRY
from ..integrate.registry import FLOW_METHODS as _FLOW_METHOD_REGISTRY
from ..integrate.registry import SOLVER_KINDS as _SOLVER_KIND_REGISTRY
from ..losses import LOSSES as _LOSS_REGISTRY
from ..observe import OBSERVABLES as _OBSERVABLE_REGISTRY
from .catalog import solvers_dir
from .files import display, read_toml
from .spec import (
    ABSENT,
    REQUIRED,
    Bool,
    Ctx,
    Custom,
    FilePath,
    Float,
    Int,
    ListOf,
    OneOf,
    Spec,
    Str,
    Table,
    Tagged,
    did_you_mean,
    join,
    num,
    show,
    toml_key,
    toml_string,
)
from ..toml_text import sweep_axes as sweep_axes
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


# ======================================================================================
# Cross-key rules: each sees the normalised table it is attached to
# ======================================================================================


def _low_below_high(t: dict, key: str, ctx: Ctx) -> None:
    if not t["low"] < t["high"]:
        low = join(key, "low")
        raise ctx.bad(join(key, "high"), t["high"], f"is not above `{low}` = {show(t['low'])}",
                      f"a number > {low}")


def _split_sums_to_one(t: dict, key: str, ctx: Ctx) -> None:
    total = t["train"] + t["test"] + t["valid"]
    if abs(total - 1.0) > 1e-9:
        raise ctx.bad(key, t, f"sums to {total!r}, not 1",
                      "train, test and valid, each in [0, 1], summing to 1 (within 1e-9)")


def _times_increasing(t: dict, key: str, ctx: Ctx) -> None:
    times = t["times"]
    for i in range(1, len(times)):
        if not times[i] > times[i - 1]:
            raise ctx.bad(join(key, "times"), times,
                          f"is not strictly increasing (item {i} = {show(times[i])} "
                          f"follows {show(times[i - 1])})",
                          "strictly increasing times in (0, t_end]")


def _t_end_on_every_grid(run: dict, key: str, ctx: Ctx) -> None:
    """A discrete solver's last step is round(t_end/η)·η: refuse a t_end it would miss, rather
    than report `done` short of (or past) the horizon."""
    t_end = run["t_end"]
    for i, p in enumerate(run["solvers"]):
        if _SOLVER_KIND_REGISTRY[p["kind"]].discrete:
            eta = p["learning_rate"]
            last = round(t_end / eta) * eta
            if abs(last - t_end) > 1e-9 * t_end:
                raise ctx.bad(join(key, "t_end"), t_end, f"is not a multiple of the step "
                              f"{show(eta)} of solver {toml_string(p['name'])} "
                              f"(`{key}.solvers[{i}]`): it would end at t = {last:.10g}",
                              f"a t_end that is a whole number of steps of every discrete "
                              f"solver (e.g. {max(round(t_end / eta), 1) * eta:.10g})")


def _dt_bounds(t: dict, key: str, ctx: Ctx) -> None:
    if t["dtmax"] > 0 and t["dtmin"] > t["dtmax"]:
        raise ctx.bad(join(key, "dtmin"), t["dtmin"], f"exceeds `{join(key, 'dtmax')}` = "
                      f"{show(t['dtmax'])}", "dtmin <= dtmax (0 means no bound)")


def _central_fits(t: dict, key: str, ctx: Ctx) -> None:
    """A central flow is stepped by an explicit Runge–Kutta method (its eigenvectors ride in
    the method's state: flowsim.integrate.central), and has no reference flow of its own."""
    spec = _FLOW_METHOD_REGISTRY[t["method"]]
    if spec.implicit or spec.filippov or spec.stabilised:
        allowed = [m for m, s in _FLOW_METHOD_REGISTRY.items() if not (s.implicit or s.filippov or s.stabilised)]
        raise ctx.bad(join(key, "method"), t["method"], "cannot step a central flow",
                      "an explicit Runge–Kutta method: " + ", ".join(allowed))
    if t["reference"] != "":
        raise ctx.bad(join(key, "reference"), t["reference"], "is not supported by a central flow",
                      "\"\" (none)")


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


def _k_within_width(top: dict, key: str, ctx: Ctx) -> None:
    model = top.get("model", {})          # validation reads the raw tables: keys may be missing
    scaling = model.get("scaling", {})
    if scaling.get("kind") == "finite" and scaling["k"] > model["width"]:
        raise ctx.bad("model.scaling.k", scaling["k"],
                      f"exceeds `model.width` = {model['width']}",
                      f"an integer in [1, model.width = {model['width']}]")


# float32 resolves about 1.2e-7 relative; an error target within ~100 units of it makes the
# step-size controller chase rounding noise (tens of times more steps, and no better answer).
FLOAT32_MIN_RTOL = 1e-5


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


# ======================================================================================
# The schema
# ======================================================================================


def _n(default: int) -> Int:
    return Int(lo=1, default=default)


def _n_test(default: int) -> Int:
    return Int(lo=0, default=default)


def _fraction(default: float) -> Float:
    return Float(lo=0.0, hi=1.0, default=default)


def _positive(default: Any = REQUIRED) -> Float:
    return Float(lo=0.0, lo_open=True, default=default)


_SEED = Int(lo=0, hi=SEED_MAX)

SPLIT = Table(
    fields={"train": _fraction(0.4), "test": _fraction(0.2), "valid": _fraction(0.4)},
    rules=(_split_sums_to_one,),
    default={"train": 0.4, "test": 0.2, "valid": 0.4},
    what="a table {train, test, valid} of fractions summing to 1",
)

DATA = Tagged(
    common={"seed": OneOf(options=(_SEED, Str(choices=("run",))), default=0)},
    variants={
        "sphere-sine": {"n": _n(100), "d": _n(50), "noise": Float(lo=0, default=1.0),
                        "n_test": _n_test(100)},
        "single-relu": {"n": _n(100), "d": _n(50), "noise": Float(lo=0, default=0.0),
                        "n_test": _n_test(1000)},
        "random-labels": {"n": _n(20), "d": _n(20), "n_test": _n_test(0),
                          "low": Float(default=-0.5), "high": Float(default=0.5)},
        # xor-noise embeds the XOR pattern in 2 coordinates plus at least one noise one.
        "xor-noise": {"n": _n(600), "d": Int(lo=3, default=50), "n_test": _n_test(500)},
        "quadratic-teacher": {"n": _n(100), "d": _n(30), "n_test": _n_test(500),
                              "teacher_width": _n(5), "noise": Float(lo=0, default=0.0)},
        "uci": {"name": Str(choices=UCI_NAMES), "split": SPLIT,
                "permute_seed": Int(lo=0, hi=SEED_MAX, default=10),
                "standardize": Bool(default=True)},
        "digits": {"n": Int(lo=1, default=ABSENT), "n_test": Int(lo=0, default=ABSENT),
                   "standardize": Bool(default=True)},
        "csv": {"path": FilePath(),
                "target": OneOf(options=(Str(nonempty=True),
                                         ListOf(item=Str(nonempty=True), nonempty=True,
                                                distinct=True))),
                "test_fraction": Float(lo=0.0, hi=1.0, hi_open=True, default=0.2),
                "standardize": Bool(default=True)},
        "npz": {"path": FilePath()},
    },
    rules={"random-labels": (_low_below_high,)},
    default=REQUIRED,
)
DATA_KINDS = tuple(DATA.variants)


def _gamma(default: float) -> Float:
    return _fraction(default)


SCALING = Tagged(
    variants={
        "ntk": {},
        "asymmetric": {"gamma": _gamma(0.5),
                       "alpha": Float(lo=0.0, hi=1.0, lo_open=True, hi_open=True, default=0.5)},
        "single": {"gamma": _gamma(0.0)},
        "finite": {"k": Int(lo=1), "gamma": _gamma(0.0)},
        "custom": {"path": FilePath(), "gamma": _gamma(0.0)},
        "mean-field": {},
        "standard": {},
    },
    tag_default="ntk",
)

EMBEDDINGS = ("identity", "quadratic", "random-features")
CHEN_SCALINGS = ("theirs", "ntk", "mean-field")


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


MLP_PARAMETERISATIONS = ("standard", "ntk", "mean-field", "mup")   # flowsim/models/mlp.py
SHALLOW_KINDS = ("shallow", "embedded")     # the one-hidden-layer networks (ShallowNet)


def _train_within_layers(t: dict, key: str, ctx: Ctx) -> None:
    layers = len(t["widths"]) + 1
    if t["train"] != "all" and max(t["train"]) >= layers:
        raise ctx.bad(join(key, "train"), t["train"], f"names a layer past the last ({layers} layers: "
                      f"{len(t['widths'])} hidden and the output)",
                      f'"all", or layer indices in [0, {layers - 1}]')


def _activation(default: str) -> Plugin:
    return Plugin(choices=ACTIVATIONS, default=default, what="an elementwise function z -> σ(z)",
                  probe=_probe(((3,),), (3,), "an elementwise function"))


_MODEL_COMMON: dict[str, Spec] = {
    "width": Int(lo=1, default=1000),
    "activation": _activation("relu"),
    "init_std": _positive(1.0),
}
MODEL = Tagged(
    variants={
        # Caron et al.: f = Σ_j c_j a_j σ(w_j·x/√d) with a node scaling.
        "shallow": {**_MODEL_COMMON,
                    "output": Str(choices=("fixed", "trained"), default="fixed"),
                    "zeroed": Bool(default=False),
                    "init_path": FilePath(empty_ok=True, default=""),
                    "scaling": SCALING},
        # Chen, Vanden-Eijnden & Bruna: f = (1/m) Σ c_i σ(D^{-1/2} Σ_j W_ij φ_j(x)), c_i = ±ĉ
        # (flowsim/embedding.py); chen_scaling picks a column of their Table 1.
        "embedded": {**_MODEL_COMMON,
                     "zeroed": Bool(default=False),
                     "embedding": Str(choices=EMBEDDINGS, default="identity"),
                     "chen_scaling": Str(choices=CHEN_SCALINGS, default="theirs"),
                     "c_hat": _positive(1.0),
                     # last: the default D (filled in by _embedded_keys) lands there too,
                     # so the resolved table has one key order, given or not
                     "features": Int(lo=1, default=ABSENT)},
        # A fully connected network of any depth (flowsim/models/mlp.py); `train`: "all",
        # or the indices of the layers that train (0 = the input layer).
        "mlp": {"widths": ListOf(item=Int(lo=1), nonempty=True, default=[100, 100]),
                "activation": _activation("tanh"),
                "parameterisation": Str(choices=MLP_PARAMETERISATIONS, default="standard"),
                "init_std": _positive(1.0),
                "bias": Bool(default=True),
                "train": OneOf(options=(Str(choices=("all",)),
                                        ListOf(item=Int(lo=0), nonempty=True, distinct=True)),
                               default="all")},
        # The user's own network: factory(key, d, k) -> an Equinox module mapping one input
        # (d,) to outputs (k,); every floating array trains (flowsim/models/module.py).
        "python": {"factory": Plugin(what="a function (key, d, k) -> an Equinox module", probe=_callable)},
    },
    tag_default="shallow",
    rules={"embedded": (_embedded_keys,), "mlp": (_train_within_layers,)},
    default=REQUIRED,
)

LOSS = Table(fields={"kind": Plugin(choices=LOSSES, default="half-sse",
                                    what="a function (pred (n, k), y (n, k)) -> scalar, a mean over samples",
                                    probe=_probe(((4, 2), (4, 2)), (), "a loss"))})

# Exactly one checkpoint form; each form is its own small table.
CHECKPOINT_FORMS: dict[str, Table] = {
    "every": Table(fields={"every": _positive()}),
    "count": Table(fields={"count": Int(lo=1, hi=MAX_CHECKPOINTS, default=50),
                           "spacing": Str(choices=("linear", "log"), default="linear")}),
    "times": Table(fields={"times": ListOf(item=_positive(), nonempty=True,
                                           max_len=MAX_CHECKPOINTS)},
                   rules=(_times_increasing,)),
}
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


CHECKPOINTS = Custom(
    fn=_check_checkpoints, text=_CHECKPOINTS_TEXT, types=(dict,),
    kids={k: s for form in CHECKPOINT_FORMS.values() for k, s in form.fields.items()},
    default={"count": 50, "spacing": "linear"},
)

# --- solver presets -------------------------------------------------------------------

_FLOW_KEYS: dict[str, Spec] = {
    "method": Str(choices=FLOW_METHODS, default="tsit5"),
    "rtol": _positive(1e-8),
    "atol": _positive(1e-10),
    "dtmin": Float(lo=0.0, default=0.0),  # 0 = no lower bound on the step
    "dtmax": Float(lo=0.0, default=0.0),  # 0 = no upper bound on the step
    "max_steps": Int(lo=1, default=1_000_000),
    # Implicit methods (kvaerno5) solve their stages by matrix-free Newton-Krylov:
    "linear_rtol": _positive(1e-10),
    "linear_atol": _positive(1e-10),
    "newton_rtol": _positive(1e-8),
    "newton_atol": _positive(1e-10),
    "krylov_restart": Int(lo=1, default=20),      # GMRES restart length
    "krylov_max_steps": Int(lo=1, default=200),   # GMRES iterations per linear solve
    # PID step control (Diffrax's PIDController): pcoeff ≈ 0.2–0.4, icoeff ≈ 0.3–0.4 suit
    # stiff problems; the defaults (0, 1) are plain integral control.
    "pcoeff": Float(lo=0.0, default=0.0),
    "icoeff": Float(lo=0.0, lo_open=True, default=1.0),
    # filippov: kink surfaces one node may slide on at once (the state holds m × slots²)
    "slots": Int(lo=1, default=8),
    # rock4: accepted steps between estimates of the spectral radius ρ, and ρ's safety factor
    "rho_every": Int(lo=1, default=10),
    "rho_safety": Float(lo=1.0, default=1.2),
    # A second, tighter flow solved beside this one: the archive then holds this flow's
    # global-error estimate at every checkpoint (series `flow_error`).
    "reference": Custom(fn=lambda v, k, c: _check_reference(v, k, c),
                        text="\"\" (none), or the name or inline table of a `flow` preset",
                        types=(str, dict), default=""),
}
# Diverged when the loss exceeds factor × initial loss (or is not finite).
_DIVERGENCE = Float(lo=1.0, lo_open=True, default=1e8)
_SOLVER_KEYS: dict[str, dict[str, Spec]] = {
    "flow": _FLOW_KEYS,
    "modified-flow": {"learning_rate": _positive(), **_FLOW_KEYS},
    # central-flow: GD's step η, the eigen-directions tracked at most, and the share of the
    # edge 2/η from which a tracked direction enters the complementarity problem
    "central-flow": {"learning_rate": _positive(), "max_eigen": Int(lo=1, hi=16, default=5),
                     "track_threshold": Float(lo=0.0, hi=1.0, lo_open=True, default=0.9), **_FLOW_KEYS},
    "gd": {"learning_rate": _positive(), "divergence_factor": _DIVERGENCE},
    "momentum": {"learning_rate": _positive(),
                 "beta": Float(lo=0.0, hi=1.0, hi_open=True, default=0.9),
                 "divergence_factor": _DIVERGENCE},
    "sgd": {"learning_rate": _positive(), "batch_size": Int(lo=1, default=64),
            "divergence_factor": _DIVERGENCE},
}
# The registry decides which kinds exist and their order; the keys of each are specified above.
_SOLVER_VARIANTS = {kind: _SOLVER_KEYS[kind] for kind in SOLVER_KINDS}
_SOLVER_RULES = {"flow": (_dt_bounds,), "modified-flow": (_dt_bounds,), "central-flow": (_dt_bounds, _central_fits)}

#: A preset file: the name is the file's stem; the description is required.
SOLVER_FILE = Tagged(variants=_SOLVER_VARIANTS, rules=_SOLVER_RULES,
                     common={"description": Str()})
#: An inline preset in a scenario: carries its own name; the description is optional.
SOLVER_INLINE = Tagged(variants=_SOLVER_VARIANTS, rules=_SOLVER_RULES,
                       common={"name": Str(nonempty=True), "description": Str(default="")})


def load_preset(spec: Any, key: str, ctx: Ctx) -> dict:
    """A preset by name (a file in solvers/) or inline, validated, with defaults and name."""
    if isinstance(spec, str):
        names = sorted(p.name[: -len(".toml")] for p in solvers_dir().glob("*.toml"))
        if spec not in names:
            guess = did_you_mean(spec, names)
            raise ctx.bad(key, spec, "is not a solver preset",
                          "one of " + ", ".join(toml_string(n) for n in names)
                          + " (files in solvers/), or an inline table",
                          f"did you mean {toml_string(guess)}?" if guess else "")
        path = solvers_dir() / f"{spec}.toml"
        shown = display(path)
        raw = read_toml(path, shown)
        preset = SOLVER_FILE.check(raw, "", Ctx(file=shown, base_dir=path.parent))
        return {"name": spec, **preset}
    if isinstance(spec, dict):
        preset = SOLVER_INLINE.check(spec, key, ctx)
        name = preset.pop("name")
        return {"name": name, **preset}
    raise ctx.wrong_type(key, spec, "a solver preset name or an inline table with `name` "
                         "and `kind`")


def _check_reference(value: Any, key: str, ctx: Ctx) -> str | dict:
    if value == "":
        return ""
    preset = load_preset(value, key, ctx)
    if preset["kind"] != "flow" or preset["reference"]:
        raise ctx.bad(key, value, "is not a plain `flow` preset",
                      "the name or inline table of a `flow` preset without a reference of its own")
    return preset


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


SOLVERS = Custom(fn=_check_solvers, text="a non-empty list of solver preset names or inline "
                 "tables", types=(list,), default=["tsit5"])

RUN = Table(
    fields={
        "t_end": _positive(),
        "checkpoints": CHECKPOINTS,
        "solvers": SOLVERS,
        "observe": ListOf(item=Str(choices=OBSERVABLES), distinct=True,
                          default=DEFAULT_OBSERVE),
        "ntg_points": Int(lo=1, default=100),  # the consumer clips it to n
        "stop_loss": Float(lo=0.0, default=0.0),  # 0 = no stop event
    },
    rules=(_checkpoints_fit, _t_end_on_every_grid),
    default=REQUIRED,
)


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


SEEDS = Custom(fn=_check_seeds, types=(list, dict), default=[0],
               text=f"a non-empty list of distinct integers in [0, {SEED_MAX}] or a table "
                    "{count = N >= 1, start = S >= 0}",
               kids={"count": Int(lo=1), "start": Int(lo=0)})

SWEEP_MODES = ("product", "zip")
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
    spec: Spec = SCENARIO
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


SWEEP = Custom(fn=_check_sweep, types=(dict,), default=ABSENT,
               text='a table: mode = "product" | "zip" and "dotted.key" = [values, ...]',
               kids={"mode": Str(choices=SWEEP_MODES)})


def _analysis_tables(t: dict, key: str, ctx: Ctx) -> None:
    """`prune = true` is shorthand for the table with its defaults (`false`: disabled)."""
    for name, spec in ANALYSIS_TABLES.items():
        if isinstance(t.get(name), bool):
            t[name] = spec.check({"enabled": t[name]}, join(key, name), ctx)


_IMPORTANCE = Str(choices=("weight", "lambda"))  # λ_j‖w_j‖² (as written) | λ_j‖a_j‖² (as run)
ANALYSIS_TABLES = {
    "prune": Table(fields={"enabled": Bool(default=True), "points": Int(lo=2, hi=100_000, default=41),
                           "importance": ListOf(item=_IMPORTANCE, nonempty=True, distinct=True,
                                                default=["weight", "lambda"])}),
    "transfer": Table(fields={"enabled": Bool(default=True),
                              "k": ListOf(item=Int(lo=1), nonempty=True, distinct=True,
                                          default=[1, 2, 5, 10, 20, 50, 100, 200, 500]),
                              "hidden": Int(lo=1, default=64), "steps": Int(lo=1, default=5000),
                              # the text's η = 1.0 diverges (see flowsim.analysis.transfer)
                              "learning_rate": _positive(0.1),
                              "importance": ListOf(item=_IMPORTANCE, nonempty=True, distinct=True,
                                                   default=["weight"]),
                              "standardize": Bool(default=True)}),
    "pca": Table(fields={"enabled": Bool(default=True), "points": Int(lo=2, default=1000)}),
}
# Caron et al. analyses of the trained networks (flowsim.analysis.caron), run by the driver
# when a solver finishes; absent = none.
ANALYSIS = Table(
    fields={"solvers": ListOf(item=Str(nonempty=True), distinct=True, default=[]),
            **{name: OneOf(options=(Bool(), spec), default=False) for name, spec in ANALYSIS_TABLES.items()}},
    rules=(_analysis_tables,),
    default=ABSENT,
)

# `flowsim plot` layout: "default" (Caron Fig. 1 panels) or a paper figure (flowsim/plots_chen.py).
PLOT_FIGURES = ("default", "chen-exp1", "chen-exp2", "chen-exp3")
PLOT = Table(fields={"figure": Str(choices=PLOT_FIGURES, default="default")}, default=ABSENT)

SCENARIO = Table(
    fields={
        "name": Str(nonempty=True, default=lambda ctx: ctx.stem),
        "description": Str(default=""),
        "seeds": SEEDS,
        "dtype": Str(choices=("float64", "float32"), default="float64"),
        "data": DATA,
        "model": MODEL,
        "loss": LOSS,
        "run": RUN,
        "sweep": SWEEP,
        "analysis": ANALYSIS,
        "plot": PLOT,
    },
    rules=(_k_within_width, _rtol_within_dtype, _observables_fit_model),
    default=REQUIRED,
)


