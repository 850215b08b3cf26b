"""`flowsim.simulate` with a Flax NNX module, a Flax Linen module with its variables, or a
plain `(apply_fn, params)` pair (`flowsim.models.foreign`).

Oracle: the Equinox twin, the same network with the same weights (Flax's (in, out) kernels
are the transposes of Equinox's (out, in) weights), run through `simulate` with the same
arguments: every series (loss, NTG eigenvalues and change, weights, weight change per leaf,
unit change), the time grid and the step counts agree to 1e-12, leaf by leaf under each
one's path. Its own oracles are tests/test_simulate.py's. An interrupted NNX run, resumed,
is the uninterrupted one bit for bit. Non-trainable state is held fixed: its loss at t = 0
is the module's own prediction's.
"""

from __future__ import annotations

import itertools

import equinox as eqx
import flax.linen as linen      # the optional extra flowsim[flax], in the test extra
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import flowsim
from flowsim.run.precision import enable_x64

enable_x64()

D, H, K, N = 3, 6, 2, 10
SOLVERS = ["tsit5", "gd-lr0.1"]
OBSERVE = ["loss", "ntg_eig", "ntg_change", "weight_change", "unit_change", "weights"]
ARGS = dict(solvers=SOLVERS, t_end=2.0, checkpoints={"count": 4}, observe=OBSERVE, progress=False)


def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, D))
    return X, np.stack([np.sin(X[:, 0]), np.cos(X[:, 1] * X[:, 2])], axis=1)


def twin() -> eqx.nn.MLP:
    """The Equinox network every foreign one copies: D -> H -> K, tanh."""
    return eqx.nn.MLP(D, K, H, 1, activation=jnp.tanh, key=jax.random.PRNGKey(7))


def eqx_weights() -> list[tuple[np.ndarray, np.ndarray]]:
    """(weight (out, in), bias) per layer of the twin, float64."""
    return [(np.asarray(layer.weight, float), np.asarray(layer.bias, float)) for layer in twin().layers]


class NNXMLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.layers = nnx.List([nnx.Linear(D, H, rngs=rngs), nnx.Linear(H, K, rngs=rngs)])

    def __call__(self, x):
        return self.layers[1](jnp.tanh(self.layers[0](x)))


def nnx_twin() -> NNXMLP:
    model = NNXMLP(nnx.Rngs(0))
    for layer, (w, b) in zip(model.layers, eqx_weights(), strict=True):
        layer.kernel.set_value(jnp.asarray(w.T))       # float64, as the twin (an assignment [...] would cast)
        layer.bias.set_value(jnp.asarray(b))
    return model


class LinenMLP(linen.Module):
    @linen.compact
    def __call__(self, x):
        hidden = jnp.tanh(linen.Dense(H)(x))        # Dense_0
        return linen.Dense(K)(hidden)               # Dense_1


def linen_twin() -> tuple[LinenMLP, dict]:
    (w0, b0), (w1, b1) = eqx_weights()
    variables = LinenMLP().init(jax.random.PRNGKey(0), jnp.ones(D))
    assert variables["params"]["Dense_0"]["kernel"].shape == w0.T.shape
    params = {"Dense_0": {"kernel": w0.T, "bias": b0}, "Dense_1": {"kernel": w1.T, "bias": b1}}
    return LinenMLP(), {"params": jax.tree.map(jnp.asarray, params)}


def apply_fn(params, x):
    """A plain JAX network, Equinox's layout: weights (out, in)."""
    return params["w2"] @ jnp.tanh(params["w1"] @ x + params["b1"]) + params["b2"]


def pair_twin() -> tuple:
    (w0, b0), (w1, b1) = eqx_weights()
    return apply_fn, {"w1": w0, "b1": b0, "w2": w1, "b2": b1}


# Each kind's leaf paths, mapped to the twin's leaf and whether it is the transpose
TO_TWIN = {
    "nnx": {"layers.0.kernel": ("layers.0.weight", True), "layers.0.bias": ("layers.0.bias", False),
            "layers.1.kernel": ("layers.1.weight", True), "layers.1.bias": ("layers.1.bias", False)},
    "linen": {"Dense_0.kernel": ("layers.0.weight", True), "Dense_0.bias": ("layers.0.bias", False),
              "Dense_1.kernel": ("layers.1.weight", True), "Dense_1.bias": ("layers.1.bias", False)},
    "pair": {"w1": ("layers.0.weight", False), "b1": ("layers.0.bias", False),
             "w2": ("layers.1.weight", False), "b2": ("layers.1.bias", False)},
    "twin": {leaf: (leaf, False) for leaf in ("layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias")},
}
MAKERS = {"nnx": nnx_twin, "linen": linen_twin, "pair": pair_twin}


def read(path) -> dict:
    """Per solver: the series, the time grid and steps; and the run's leaves and shapes."""
    with flowsim.open(path) as arch:
        run = arch.runs["seed0"]
        out = {"leaves": list(run.params["model"]["leaves"]), "shapes": {k: v.shape for k, v in run.init.items()}}
        for name, sv in run.solvers.items():
            assert sv.status == "done", (name, sv.status)
            out[name] = {"t": np.asarray(sv.t), "step": None if sv.step is None else np.asarray(sv.step),
                         "series": {key: np.asarray(sv[key]) for key in sv.series_names},
                         "stats": {k: sv.stats[k] for k in ("steps", "rejected")}}
        return out


def as_twin(row: np.ndarray, leaves: list[str], shapes: dict, kind: str) -> dict[str, np.ndarray]:
    """A `weights` row (the trainable leaves raveled in leaf order) as the twin's leaves."""
    out, start = {}, 0
    for leaf in leaves:
        size = int(np.prod(shapes[leaf]))
        value = row[start:start + size].reshape(shapes[leaf])
        start += size
        name, transposed = TO_TWIN[kind][leaf]
        out[name] = value.T if transposed else value
    assert start == row.size
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The twin's archive and each foreign kind's, from the same weights and arguments."""
    folder = tmp_path_factory.mktemp("flax")
    X, y = data()
    paths = {"twin": folder / "twin.h5", **{kind: folder / f"{kind}.h5" for kind in MAKERS}}
    flowsim.simulate(twin(), data=(X, y), output=paths["twin"], **ARGS).close()
    for kind, make in MAKERS.items():
        flowsim.simulate(make(), data=(X, y), output=paths[kind], **ARGS).close()
    return paths


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(MAKERS))
def test_a_foreign_model_gives_its_equinox_twins_archive(runs, kind):
    twin_run, got = read(runs["twin"]), read(runs[kind])
    assert sorted(got["leaves"]) == sorted(TO_TWIN[kind])        # named by the parameter tree's paths
    tol = dict(rtol=1e-12, atol=1e-12)
    for solver in SOLVERS:
        a, b = twin_run[solver], got[solver]
        np.testing.assert_array_equal(b["t"], a["t"])
        assert b["stats"] == a["stats"], solver                   # the same steps, the same rejections
        if a["step"] is not None:
            np.testing.assert_array_equal(b["step"], a["step"])
        a, b = {**a, **a.pop("series")}, {**b, **b.pop("series")}
        for key in ("loss", "ntg_eig", "ntg_change_spectral", "ntg_change_frobenius", "unit_change"):
            np.testing.assert_allclose(b[key], a[key], **tol, err_msg=f"{solver} {key}")
        # per leaf, matched by name: weight change and every checkpoint's weights (the last: the final ones)
        for row, (a_row, b_row) in enumerate(zip(a["weights"], b["weights"], strict=True)):
            mine = as_twin(b_row, got["leaves"], got["shapes"], kind)
            theirs = as_twin(a_row, twin_run["leaves"], twin_run["shapes"], "twin")
            for leaf in theirs:
                np.testing.assert_allclose(mine[leaf], theirs[leaf], **tol, err_msg=f"{solver} row {row} {leaf}")
        change = dict(zip([TO_TWIN[kind][leaf][0] for leaf in got["leaves"]], b["weight_change"].T))
        for leaf, series in zip(twin_run["leaves"], a["weight_change"].T, strict=True):
            np.testing.assert_allclose(change[leaf], series, **tol, err_msg=f"{solver} weight_change {leaf}")
        assert a["loss"][-1] < 0.9 * a["loss"][0]                  # the run really moved


@pytest.mark.slow
def test_an_interrupted_nnx_run_resumes_bit_for_bit(runs, tmp_path, monkeypatch):
    """Stopped after its third stop check (as Ctrl-C stops it: `flowsim.cli.lifecycle.StopRequest`),
    then resumed: every series, grid and step count is the uninterrupted run's, to the bit;
    resumed with other weights, refused."""
    from flowsim.cli import lifecycle

    checks = itertools.count()

    class StopSoon(lifecycle.StopRequest):
        def __call__(self) -> bool:
            return next(checks) >= 3

    X, y = data()
    cut = tmp_path / "cut.h5"
    with monkeypatch.context() as patch:
        patch.setattr(lifecycle, "StopRequest", StopSoon)
        with pytest.raises(KeyboardInterrupt, match="resume=True"):
            flowsim.simulate(nnx_twin(), data=(X, y), output=cut, **ARGS)
    with flowsim.open(cut) as arch:
        rows = {name: len(sv.t) for name, sv in arch.runs["seed0"].solvers.items()}
        states = {name: sv.state for name, sv in arch.runs["seed0"].solvers.items()}
    assert "interrupted" in states.values() and sum(rows.values()) < 2 * 5, (states, rows)
    other = nnx_twin()           # other weights: refused, nothing computed
    other.layers[0].bias.set_value(other.layers[0].bias[...] + 1.0)
    with pytest.raises(ValueError, match="`model.digest`"):
        flowsim.simulate(other, data=(X, y), output=cut, resume=True, **ARGS)
    flowsim.simulate(nnx_twin(), data=(X, y), output=cut, resume=True, **ARGS).close()
    whole, resumed = read(runs["nnx"]), read(cut)
    for solver in SOLVERS:
        assert resumed[solver]["stats"] == whole[solver]["stats"]
        for key in ("t", "step"):
            if whole[solver][key] is not None:
                np.testing.assert_array_equal(resumed[solver][key], whole[solver][key], err_msg=f"{solver} {key}")
        assert resumed[solver]["series"].keys() == whole[solver]["series"].keys()
        for key, series in whole[solver]["series"].items():
            np.testing.assert_array_equal(resumed[solver]["series"][key], series, err_msg=f"{solver} {key}")


class Normed(nnx.Module):
    """BatchNorm with running statistics and Dropout, both in evaluation mode: fixed state."""

    def __init__(self, rngs: nnx.Rngs, train: bool = False):
        self.dense = nnx.Linear(D, H, rngs=rngs)
        self.norm = nnx.BatchNorm(H, use_running_average=not train, rngs=rngs)
        self.drop = nnx.Dropout(0.5, deterministic=not train, rngs=rngs)
        self.head = nnx.Linear(H, K, rngs=rngs)

    def __call__(self, x):
        return self.head(self.drop(jnp.tanh(self.norm(self.dense(x)[None])[0])))


@pytest.mark.slow
def test_non_trainable_state_is_held_fixed(tmp_path):
    X, y = data()
    model = Normed(nnx.Rngs(0))
    mean, var = np.linspace(-1, 1, H), np.linspace(0.5, 2, H)
    model.norm.mean.set_value(jnp.asarray(mean))
    model.norm.var.set_value(jnp.asarray(var))
    arch = flowsim.simulate(model, data=(X, y), solvers=["gd-lr0.1"], t_end=0.3, checkpoints={"count": 1},
                            observe=["loss", "weights"], output=tmp_path / "n.h5", progress=False)
    with arch:
        run = arch.runs["seed0"]
        # the statistics are not parameters: only Params train (BatchNorm's scale and bias among them)
        assert run.params["model"]["leaves"] == ["dense.bias", "dense.kernel", "head.bias", "head.kernel",
                                                 "norm.bias", "norm.scale"]
        graph, state = nnx.split(model)       # the module in float64, as simulate casts it
        as64 = nnx.merge(graph, jax.tree.map(lambda v: v.astype(float) if eqx.is_inexact_array(v) else v, state))
        pred = np.asarray(jax.vmap(as64)(jnp.asarray(X)))
        loss = np.asarray(run.solvers["gd-lr0.1"]["loss"])
        np.testing.assert_allclose(loss[0], 0.5 * np.sum((pred - y) ** 2), rtol=1e-12)
        assert loss[-1] < loss[0]
    # the caller's module is untouched: its statistics are the ones it was given
    np.testing.assert_array_equal(np.asarray(model.norm.mean[...]), mean)


@pytest.mark.slow
def test_a_factory_of_nnx_modules_draws_one_per_seed(tmp_path):
    """key -> NNX module, called per seed; the seeds run as one vmapped batch, their fixed
    states (BatchNorm statistics, Dropout's RNG keys, which differ by seed) stacked."""
    X, y = data()
    factory = lambda key: Normed(nnx.Rngs(key))  # noqa: E731
    arch = flowsim.simulate(factory, data=(X, y), solvers=["gd-lr0.1"], t_end=0.5, seeds=[0, 1],
                            checkpoints={"count": 1}, observe=["loss"], output=tmp_path / "f.h5", progress=False)
    with arch:
        for seed in (0, 1):
            run = arch.runs[f"seed{seed}"]
            model = factory(jax.random.PRNGKey(seed))
            np.testing.assert_array_equal(run.init["dense.kernel"], np.asarray(model.dense.kernel[...], float))
            pred = np.asarray(jax.vmap(model)(jnp.asarray(X, jnp.float32)), float)
            np.testing.assert_allclose(run.solvers["gd-lr0.1"]["loss"][0], 0.5 * np.sum((pred - y) ** 2), rtol=1e-5)
        assert not np.allclose(arch.runs["seed0"].init["dense.kernel"], arch.runs["seed1"].init["dense.kernel"])


# ---------------------------------------------------------------------------------------
# Bad models: a ValueError naming `model`, what was given and what is allowed; nothing written
# ---------------------------------------------------------------------------------------

class Trainable(linen.Module):
    @linen.compact
    def __call__(self, x):
        return linen.Dense(K)(linen.BatchNorm(use_running_average=False)(linen.Dense(H)(x)[None])[0])


@pytest.mark.parametrize("make, said", [
    (lambda: Normed(nnx.Rngs(0), train=True),
     "changes its non-trainable state (drop.rngs.count, norm.mean, norm.var) when called"),
    (lambda: (Trainable(), Trainable().init(jax.random.PRNGKey(0), jnp.ones(D))),
     'collection "batch_stats" is immutable'),
    (lambda: LinenMLP(), "a Flax Linen module (LinenMLP) without its variables: pass model=(module, module.init"),
    (lambda: (LinenMLP(), {"kernel": np.ones(3)}), "with variables ['kernel'], not the dict module.init(key, x)"),
    (lambda: (3, 4), "a pair (int, int): neither (Flax Linen module, variables) nor (apply_fn, params)"),
    (lambda: (apply_fn, {}), "a pair (apply_fn, params) whose params hold no arrays"),
    (lambda: (lambda p, x: p @ x, np.ones((D, D))), "maps one input to outputs of shape (3,)"),
    (lambda: lambda key: (LinenMLP(),), "returned tuple for seed 0"),
    (lambda: lambda key: LinenMLP(), "returned, for seed 0, a Flax Linen module (LinenMLP) without its variables"),
])
def test_bad_models_are_named(tmp_path, make, said):
    from flowsim.models.foreign import ALLOWED

    X, y = data()
    with pytest.raises(ValueError) as err:
        flowsim.simulate(make(), data=(X, y), solvers=["gd-lr0.1"], t_end=0.1, output=tmp_path / "bad.h5",
                         progress=False)
    text = str(err.value)
    assert text.startswith("flowsim.simulate: `model` = ") and said in text and "; allowed: " in text, text
    assert not (tmp_path / "bad.h5").exists()
    assert "a pair (apply_fn, params)" in ALLOWED and "Flax NNX" in ALLOWED


@pytest.mark.slow
def test_a_foreign_models_trainable_filter_takes_its_parameter_tree(tmp_path):
    """`trainable` as a function of the parameters (Linen's dict): the first layer stays as given."""
    X, y = data()
    module, variables = linen_twin()
    arch = flowsim.simulate((module, variables), data=(X, y), solvers=["gd-lr0.1"], t_end=0.2,
                            checkpoints={"count": 1}, observe=["loss", "weight_change"],
                            trainable=lambda p: p["Dense_1"], output=tmp_path / "head.h5", progress=False)
    with arch:
        run = arch.runs["seed0"]
        assert run.params["model"]["leaves"] == ["Dense_1.bias", "Dense_1.kernel"]
        np.testing.assert_array_equal(run.init["Dense_1.kernel"], np.asarray(variables["params"]["Dense_1"]["kernel"]))
        assert np.all(np.asarray(run.solvers["gd-lr0.1"]["weight_change"])[-1] > 0)


@pytest.mark.slow
def test_the_readme_block_runs_as_written(tmp_path, monkeypatch, capsys):
    """The README's "A Flax model, or a plain function" block, executed as written."""
    import re
    from pathlib import Path

    text = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    section = text.split("### A Flax model, or a plain function", 1)[1].split("\n### ", 1)[0]
    (python,) = re.findall(r"```python\n(.*?)```", section, re.S)
    monkeypatch.chdir(tmp_path)
    exec(compile(python, "README.md", "exec"), {})
    assert "['b1', 'w1', 'w2']" in capsys.readouterr().out
    expected = {"nnx": ["hidden.bias", "hidden.kernel", "out.bias", "out.kernel"],
                "linen": ["Dense_1.bias", "Dense_1.kernel"], "pair": ["b1", "w1", "w2"]}
    for name, leaves in expected.items():
        with flowsim.open(tmp_path / "runs" / f"{name}.h5") as arch:
            run = arch.runs["seed0"]
            assert run.params["model"]["leaves"] == leaves
            for solver in ("tsit5", "gd-lr0.1"):
                loss = np.asarray(run.solvers[solver]["loss"])
                assert run.solvers[solver].status == "done" and loss[-1] < 0.5 * loss[0], (name, solver, loss)


@pytest.mark.slow
def test_flax_is_imported_only_when_a_flax_model_is_given():
    """An Equinox model or a pair goes through the adapter without importing Flax (an
    optional extra: flowsim runs without it)."""
    import subprocess
    import sys

    script = """
import sys, equinox as eqx, jax, jax.numpy as jnp
import flowsim.simulation
from flowsim.models.foreign import adapt
assert adapt(eqx.nn.Linear(2, 1, key=jax.random.PRNGKey(0))).kind == "an Equinox module"
assert adapt((lambda p, x: p @ x, jnp.ones((1, 2)))).kind == "a pair (apply_fn, params)"
assert adapt(lambda key: None) is None
print(sorted(m for m in sys.modules if m.split(".")[0] == "flax"))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", (proc.stdout, proc.stderr[-2000:])
