"""The rules of the scenario's tables that a key's own validator cannot say: those relating two
keys (``low < high``, ``k <= width``, checkpoint times within ``t_end`` ...) or a key to the
registries (a central flow's method, a shallow network's observables), and the limits they
hold the values to.

Each rule is a function `(table, key, ctx)` on the raw table validation reads (keys may be
missing), raising `ctx.bad` with the message contract; a class of `flowsim.config.typed`
names its rules in `RULES`, and the `seeds` key validates with `check_seeds`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kinds.solvers import ADAPTIVE_FLOW_KINDS, CENTRAL_KINDS, CENTRAL_METHODS, FLOW_METHODS, steps
from ..kinds.solvers import SOLVER_KINDS as _SOLVER_KIND_REGISTRY
from ..kinds import OBSERVABLES as _OBSERVABLE_REGISTRY
from ..kinds import SHALLOW_KINDS
from .spec import Ctx, Int, ListOf, OneOf, Table, join, num, show, toml_string
from .times import checkpoint_times

SEED_MAX = 2**32 - 1  # seeds feed jax.random.PRNGKey and numpy generators
MAX_SEEDS = 10_000
MAX_CHECKPOINTS = 1_000_000
MNIST_IMAGES = 5000   # data/mnist_5k.npz: 500 images of each digit (flowsim/data/images.py)
# float32 resolves about 1.2e-7 relative; an error target within ~100 units of it makes the
# step-size controller chase rounding noise (tens of times more steps, and no better answer).
FLOAT32_MIN_RTOL = 1e-5

SEED = Int(lo=0, hi=SEED_MAX)


def check_seeds(value: Any, key: str, ctx: Ctx) -> list[int]:
    spec = OneOf(options=(
        ListOf(item=SEED, nonempty=True, distinct=True, max_len=MAX_SEEDS),
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


def low_below_high(t: dict, key: str, ctx: Ctx) -> None:
    if not t["low"] < t["high"]:
        low = join(key, "low")
        raise ctx.bad(join(key, "high"), t["high"], f"is not above `{low}` = {show(t['low'])}",
                      f"a number > {low}")


def split_sums_to_one(t: dict, key: str, ctx: Ctx) -> None:
    total = t["train"] + t["test"] + t["valid"]
    if abs(total - 1.0) > 1e-9:
        raise ctx.bad(key, t, f"sums to {total!r}, not 1",
                      "train, test and valid, each in [0, 1], summing to 1 (within 1e-9)")


def mnist_fits(t: dict, key: str, ctx: Ctx) -> None:
    n = t.get("n") or MNIST_IMAGES   # absent: all of them
    if n + t["n_test"] > MNIST_IMAGES:
        n_key = join(key, "n")
        raise ctx.bad(join(key, "n_test"), t["n_test"], f"with `{n_key}` = {n} asks for {n + t['n_test']} of the "
                      f"{MNIST_IMAGES} shipped images", f"an integer in [0, {MNIST_IMAGES} - {n_key}] (absent "
                      f"`{n_key}` takes all {MNIST_IMAGES})")


def embedded_keys(t: dict, key: str, ctx: Ctx) -> None:
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


def train_within_layers(t: dict, key: str, ctx: Ctx) -> None:
    layers = len(t["widths"]) + 1
    if t["train"] != "all" and max(t["train"]) >= layers:
        raise ctx.bad(join(key, "train"), t["train"], f"names a layer past the last ({layers} layers: "
                      f"{len(t['widths'])} hidden and the output)",
                      f'"all", or layer indices in [0, {layers - 1}]')


def dt_bounds(t: dict, key: str, ctx: Ctx) -> None:
    if t["dtmax"] > 0 and t["dtmin"] > t["dtmax"]:
        raise ctx.bad(join(key, "dtmin"), t["dtmin"], f"exceeds `{join(key, 'dtmax')}` = "
                      f"{show(t['dtmax'])}", "dtmin <= dtmax (0 means no bound)")


def central_fits(t: dict, key: str, ctx: Ctx) -> None:
    """A central flow is stepped by an explicit method, Runge–Kutta or rock4 (its eigenvectors
    ride in the method's state: flowsim.integrate.central_field), and has no reference flow of its own."""
    if t["kind"] not in CENTRAL_KINDS:
        return
    if t["method"] not in CENTRAL_METHODS:
        raise ctx.bad(join(key, "method"), t["method"], "cannot step a central flow",
                      "an explicit method: " + ", ".join(CENTRAL_METHODS))
    if t["reference"] != "":
        raise ctx.bad(join(key, "reference"), t["reference"], "is not supported by a central flow",
                      "\"\" (none)")


def adaptive_fits(t: dict, key: str, ctx: Ctx) -> None:
    """An adaptive method's stable flow (rmsprop-flow, adam-flow) is integrated in the weights
    and the method's moments by a method of the flow engine (not filippov's event-driven
    integrator of the weights alone), and has no reference flow of its own."""
    if t["kind"] not in ADAPTIVE_FLOW_KINDS:
        return
    if FLOW_METHODS[t["method"]].filippov:
        raise ctx.bad(join(key, "method"), t["method"], f"cannot step a {t['kind']}",
                      "a method of the flow engine: " + ", ".join(m for m, s in FLOW_METHODS.items() if not s.filippov))
    if t["reference"] != "":
        raise ctx.bad(join(key, "reference"), t["reference"], f"is not supported by a {t['kind']}", "\"\" (none)")


def times_increasing(t: dict, key: str, ctx: Ctx) -> None:
    times = t["times"]
    for i in range(1, len(times)):
        if not times[i] > times[i - 1]:
            raise ctx.bad(join(key, "times"), times,
                          f"is not strictly increasing (item {i} = {show(times[i])} "
                          f"follows {show(times[i - 1])})",
                          "strictly increasing times in (0, t_end]")


def checkpoints_fit(run: dict, key: str, ctx: Ctx) -> None:
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


def t_end_on_every_grid(run: dict, key: str, ctx: Ctx) -> None:
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


def k_within_width(top: dict, key: str, ctx: Ctx) -> None:
    model = top.get("model", {})          # validation reads the raw tables: keys may be missing
    scaling = model.get("scaling", {})
    if scaling.get("kind") == "finite" and scaling["k"] > model["width"]:
        raise ctx.bad("model.scaling.k", scaling["k"],
                      f"exceeds `model.width` = {model['width']}",
                      f"an integer in [1, model.width = {model['width']}]")


def rtol_within_dtype(top: dict, key: str, ctx: Ctx) -> None:
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


def observables_fit_model(top: dict, key: str, ctx: Ctx) -> None:
    """Observables of one model family (Caron's importance, the hidden preactivations) ask
    the network for what only that family has."""
    kind = top["model"]["kind"]
    for name in top["run"]["observe"]:
        if _OBSERVABLE_REGISTRY[name].family == "shallow" and kind not in SHALLOW_KINDS:
            raise ctx.bad("run.observe", top["run"]["observe"], f"asks for {toml_string(name)}, defined for "
                          f"the shallow networks ({', '.join(SHALLOW_KINDS)}), not `model.kind` = "
                          f"{toml_string(kind)}", "observables of any model: " +
                          ", ".join(n for n, o in _OBSERVABLE_REGISTRY.items() if not o.family))
