"""Property tests: any TOML value at any key either loads into a consistent Scenario or
raises ScenarioError, never another exception."""

from __future__ import annotations

import datetime as dt
import json
import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowsim.config import (
    Config,
    ScenarioError,
    checkpoint_times,
    from_dict,
    loads_scenario,
    to_dict,
    to_toml,
)
from flowsim.config import schema as sc
from flowsim.config.spec import toml_key, toml_value

VALID = {
    "name": "prop",
    "seeds": [0, 1],
    "data": {"kind": "sphere-sine", "n": 20, "d": 5},
    "model": {"width": 50, "activation": "relu",
              "scaling": {"kind": "asymmetric", "gamma": 0.5, "alpha": 0.5}},
    "loss": {"kind": "half-sse"},
    "run": {"t_end": 10.0, "checkpoints": {"count": 5}, "solvers": ["tsit5"]},
}

# Keys of the schema (and a few that are not) where random values are put.
KEYS = [
    "name", "description", "seeds", "seeds.count", "seeds.start", "dtype", "bogus",
    "data", "data.kind", "data.seed", "data.n", "data.d", "data.noise", "data.n_test",
    "data.low", "data.high", "data.name", "data.split", "data.path", "data.target",
    "model", "model.kind", "model.width", "model.activation", "model.init_std",
    "model.output", "model.zeroed", "model.init_path", "model.scaling", "model.scaling.kind",
    "model.scaling.gamma", "model.scaling.alpha", "model.scaling.k", "model.scaling.path",
    "loss", "loss.kind", "run", "run.t_end", "run.checkpoints", "run.checkpoints.every",
    "run.checkpoints.count", "run.checkpoints.spacing", "run.checkpoints.times",
    "run.solvers", "run.observe", "run.ntg_points", "run.stop_loss", "sweep", "sweep.mode",
    'sweep."model.width"', 'sweep."model.scaling"', 'sweep."run.solvers"', 'sweep."nope"',
]

WORDS = ["ntk", "asymmetric", "finite", "single", "custom", "relu", "tsit5", "gd-lr1", "zip",
         "product", "float32", "uci", "energy", "digits", "sphere-sine", "random-labels",
         "log", "linear", "loss", "run", ""]

scalars = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-3, max_value=60),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-2.0, max_value=2.0),
    st.booleans(),
    st.sampled_from(WORDS),
    st.text(max_size=8),
    st.dates(min_value=dt.date(1900, 1, 1), max_value=dt.date(2100, 1, 1)),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(["kind", "gamma", "k", "every", "count", "name",
                                         "learning_rate", "alpha", "x", "train"]),
                        inner, max_size=3),
    ),
    max_leaves=8,
)


# Mostly-valid values per key, so that many examples load and the consistency checks run.
_scaling = st.fixed_dictionaries(
    {"kind": st.sampled_from(list(sc.SCALING.variants))},
    optional={"gamma": st.floats(0, 1), "alpha": st.floats(0.01, 0.99), "k": st.integers(1, 60)})
_checkpoints = st.one_of(
    st.fixed_dictionaries({"every": st.floats(0.01, 100)}),
    st.fixed_dictionaries({}, optional={"count": st.integers(1, 80),
                                        "spacing": st.sampled_from(["linear", "log"])}),
    st.fixed_dictionaries({"times": st.lists(st.floats(0.001, 10), min_size=1, max_size=5,
                                             unique=True).map(sorted)}),
)
_solvers = st.lists(st.one_of(
    st.sampled_from(["tsit5", "gd-lr1", "momentum", "sgd", "kvaerno5"]),
    st.fixed_dictionaries({"name": st.sampled_from(["a", "b"]),
                           "kind": st.sampled_from(["gd", "momentum"]),
                           "learning_rate": st.floats(0.01, 2)})), min_size=1, max_size=3)
TARGETED = {
    "name": st.text(min_size=1, max_size=5),
    "seeds": st.one_of(st.lists(st.integers(0, 9), min_size=1, max_size=3, unique=True),
                       st.fixed_dictionaries({"count": st.integers(1, 3)},
                                             optional={"start": st.integers(0, 9)})),
    "dtype": st.sampled_from(["float64", "float32"]),
    "data.kind": st.sampled_from(sc.DATA_KINDS),
    "data.seed": st.one_of(st.integers(0, 9), st.just("run")),
    "data.n": st.integers(1, 200), "data.d": st.integers(1, 60), "data.n_test": st.integers(0, 50),
    "data.noise": st.floats(0, 2),
    "model.width": st.integers(1, 100),
    "model.activation": st.sampled_from(sc.ACTIVATIONS),
    "model.init_std": st.floats(0.1, 3),
    "model.output": st.sampled_from(["fixed", "trained"]),
    "model.zeroed": st.booleans(),
    "model.scaling": _scaling,
    "model.scaling.kind": st.sampled_from(list(sc.SCALING.variants)),
    "model.scaling.gamma": st.floats(0, 1),
    "model.scaling.alpha": st.floats(0.01, 0.99),
    "model.scaling.k": st.integers(1, 60),
    "loss.kind": st.sampled_from(sc.LOSSES),
    "run.t_end": st.one_of(st.floats(1e-3, 1e4), st.integers(1, 100)),
    "run.checkpoints": _checkpoints,
    "run.checkpoints.every": st.floats(0.01, 100),
    "run.checkpoints.count": st.integers(1, 100),
    "run.solvers": _solvers,
    "run.observe": st.lists(st.sampled_from(sc.OBSERVABLES), max_size=4, unique=True),
    "run.ntg_points": st.integers(1, 300),
    "run.stop_loss": st.floats(0, 1),
    "sweep.mode": st.sampled_from(["product", "zip"]),
    'sweep."model.width"': st.lists(st.integers(1, 100), min_size=1, max_size=3),
    'sweep."model.scaling"': st.lists(_scaling, min_size=1, max_size=3),
    'sweep."run.solvers"': st.lists(_solvers, min_size=1, max_size=2),
}


def _edit(key: str):
    target = TARGETED.get(key)
    return st.tuples(st.just(key), values if target is None else st.one_of(target, target, values))


def put(tree: dict, key: str, value) -> None:
    """Set a dotted key (a quoted last part is one key) in a nested dict."""
    if '."' in key:
        head, _, last = key.partition('."')
        parts = head.split(".") + [last.rstrip('"')]
    else:
        parts = key.split(".")
    for p in parts[:-1]:
        if not isinstance(tree.get(p), dict):
            tree[p] = {}
        tree = tree[p]
    tree[parts[-1]] = value


def render(tree: dict) -> str:
    """A nested dict as TOML: scalars first, then one [section] per table, inline below."""
    lines = [f"{toml_key(k)} = {toml_value(v)}" for k, v in tree.items() if not isinstance(v, dict)]
    for k, v in tree.items():
        if isinstance(v, dict):
            lines.append(f"[{toml_key(k)}]")
            lines.extend(f"{toml_key(kk)} = {toml_value(vv)}" for kk, vv in v.items())
    return "\n".join(lines) + "\n"


def check_consistent(s) -> None:
    """What every successfully loaded scenario must satisfy."""
    json.dumps(s.resolved, allow_nan=False)
    assert s.runs
    names = [r.name for r in s.runs]
    assert len(set(names)) == len(names)
    for r in s.runs:
        assert "sweep" not in r.config
        json.dumps(r.config, allow_nan=False)
        ts = checkpoint_times(r.config["run"])
        assert ts.dtype == np.float64 and ts[0] > 0 and np.all(np.diff(ts) > 0)
        assert ts[-1] == r.config["run"]["t_end"]
        assert all(math.isfinite(x) for x in ts)
    # The resolved form is itself a valid scenario, and a fixed point.
    again = loads_scenario(to_toml(s.resolved))
    assert again.resolved == s.resolved
    assert [r.config for r in again.runs] == [r.config for r in s.runs]


SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def test_valid_base_loads():
    check_consistent(loads_scenario(render(VALID)))


@SETTINGS
@given(edits=st.lists(st.sampled_from(KEYS).flatmap(_edit), min_size=1, max_size=3))
def test_random_values_at_random_keys(edits):
    tree = json.loads(json.dumps(VALID))
    for key, value in edits:
        put(tree, key, value)
    try:
        s = loads_scenario(render(tree))
    except ScenarioError as e:
        assert str(e).startswith("<string>: ")
        return
    check_consistent(s)


@SETTINGS
@given(edits=st.lists(st.sampled_from(KEYS).flatmap(_edit), min_size=1, max_size=3))
def test_typed_round_trip_of_random_scenarios(edits):
    """Whatever validation accepts, the typed form gives back exactly (key order included)."""
    tree = json.loads(json.dumps(VALID))
    for key, value in edits:
        put(tree, key, value)
    try:
        s = loads_scenario(render(tree))
    except ScenarioError:
        return
    assert json.dumps(to_dict(s.settings)) == json.dumps(s.resolved)
    assert from_dict(Config, to_dict(s.settings)) == s.settings
    hash(s.settings)
    for r in s.runs:
        assert json.dumps(to_dict(r.settings)) == json.dumps(r.config)


@SETTINGS
@given(key=st.one_of(st.sampled_from(KEYS), st.text(max_size=12)),
       value=st.one_of(values.map(toml_value), st.text(max_size=12)))
def test_random_overrides(key, value):
    try:
        s = loads_scenario(render(VALID), overrides=[f"{key}={value}"])
    except ScenarioError as e:
        assert e.file in ("<string>", "--set")
        return
    check_consistent(s)


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=60))
def test_random_text(text):
    try:
        loads_scenario(render(VALID) + text)
    except ScenarioError:
        pass
