"""`flowsim.simulate`: a user's Equinox model through the whole pipeline, against oracles.

Oracles: an independent Diffrax solve of dθ/dt = −∇L at rtol 1e-12 (the flow), a plain JAX
loop θ ← θ − η∇L (GD), J Jᵀ from `jax.jacrev` (the NTG at t = 0). The archive is then read
by `flowsim inspect`, `plot` and `compare`, and resumed.
"""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

import flowsim
import flowsim.archive
from flowsim.models.module import leaf_paths
from flowsim.run.precision import enable_x64

from tests.helpers import run_cli

enable_x64()

D, K, N = 3, 2, 12


def data(n=N, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D))
    return X, np.stack([np.sin(X[:, 0]), np.cos(X[:, 1] * X[:, 2])], axis=1)


def mlp(key):
    return eqx.nn.MLP(D, K, 8, 2, activation=jnp.tanh, key=key)


def my_loss(pred, y):     # a callable loss (not the catalog's): ½ mean squared error
    return 0.5 * jnp.mean((pred - y) ** 2)


def total_loss(params, frozen, X, y):
    return my_loss(jax.vmap(eqx.combine(params, frozen))(jnp.asarray(X)), jnp.asarray(y))


def freeze_last_bias(model):
    """A filter tree: every floating leaf trains except the output layer's bias."""
    spec = jax.tree.map(eqx.is_inexact_array, model)
    return eqx.tree_at(lambda m: m.layers[-1].bias, spec, replace=False)


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    X, y = data()
    model = mlp(jax.random.PRNGKey(3))
    out = tmp_path_factory.mktemp("sim") / "mine.h5"
    arch = flowsim.simulate(model, data=(X, y), test=data(5, seed=1), loss=my_loss,
                            solvers=["tsit5", "gd-lr0.1"], t_end=3.0, checkpoints={"count": 6},
                            observe=["loss", "test_loss", "ntg_eig", "weight_change", "weights", "sharpness"],
                            trainable=freeze_last_bias(model), output=out, progress=False)
    return model, out, arch


@pytest.mark.slow
def test_flow_gd_and_ntg_against_independent_oracles(archive):
    model, out, arch = archive
    X, y = data()
    params0, frozen = eqx.partition(model, freeze_last_bias(model))
    run = arch.runs["seed0"]
    flow, gd = run.solvers["tsit5"], run.solvers["gd-lr0.1"]
    assert flow.status == gd.status == "done"

    # the flow: an independent Diffrax solve at rtol 1e-12 (Dopri8), to 1e-6 relative
    flat0, unravel = ravel_pytree(params0)
    grad = jax.grad(lambda p: total_loss(unravel(p), frozen, X, y))
    t = np.asarray(flow.t)
    sol = diffrax.diffeqsolve(diffrax.ODETerm(lambda s, p, args: -grad(p)), diffrax.Dopri8(), 0.0, float(t[-1]),
                              None, flat0, stepsize_controller=diffrax.PIDController(rtol=1e-12, atol=1e-14),
                              saveat=diffrax.SaveAt(ts=jnp.asarray(t)), max_steps=100_000)
    exact = np.array([total_loss(unravel(p), frozen, X, y) for p in sol.ys])
    np.testing.assert_allclose(np.asarray(flow["loss"]), exact, rtol=1e-6)
    assert exact[-1] < 0.8 * exact[0]          # the flow really moved

    # GD: a plain JAX loop θ ← θ − η∇L, to 1e-9 relative at every checkpoint step
    p, losses = flat0, {}
    steps = np.asarray(gd.step)
    for k in range(int(steps.max()) + 1):
        losses[k] = float(total_loss(unravel(p), frozen, X, y))
        p = p - 0.1 * grad(p)
    np.testing.assert_allclose(np.asarray(gd["loss"]), [losses[int(k)] for k in steps], rtol=1e-9)

    # the NTG at t = 0: eigenvalues of J Jᵀ (first output, trainable leaves) from jax.jacrev
    J = jax.jacrev(lambda q: jax.vmap(eqx.combine(unravel(q), frozen))(jnp.asarray(X))[:, 0])(flat0)
    eig = np.linalg.eigvalsh(np.asarray(J @ J.T))
    np.testing.assert_allclose(np.asarray(flow["ntg_eig"])[0], eig, rtol=1e-8, atol=1e-8 * eig.max())

    # the frozen output bias never moved: it is not a trainable leaf, and the weights are
    # the trainable ones only
    leaves = run.params["model"]["leaves"]
    assert "layers.2.bias" not in leaves and "layers.2.weight" in leaves
    assert np.asarray(flow["weights"]).shape[1] == flat0.size == run.params["model"]["parameters"]
    assert np.asarray(flow["weight_change"]).shape[1] == len(leaves)
    np.testing.assert_allclose(np.asarray(flow["weights"])[-1], np.asarray(sol.ys[-1]), rtol=1e-5, atol=1e-8)


@pytest.mark.slow
def test_inspect_plot_compare_and_resume_read_it(archive, tmp_path):
    model, out, _ = archive
    text = run_cli("inspect", out)
    assert "tsit5" in text and "gd-lr0.1" in text and "done" in text
    run_cli("plot", out, "-o", tmp_path / "figs")
    assert any(p.suffix == ".png" for p in (tmp_path / "figs").iterdir())
    report = run_cli("compare", out)
    assert "gd-lr0.1" in report and "tsit5" in report
    X, y = data()
    kwargs = dict(loss=my_loss, solvers=["tsit5", "gd-lr0.1"], t_end=3.0, checkpoints={"count": 6},
                  observe=["loss", "test_loss", "ntg_eig", "weight_change", "weights", "sharpness"],
                  trainable=freeze_last_bias(model), output=out, progress=False)
    with pytest.raises(flowsim.archive.ArchiveError, match=r"open for reading in this process.*close it"):
        flowsim.simulate(model, data=(X, y), test=data(5, seed=1), resume=True, **kwargs)
    archive[2].close()
    with flowsim.open(out) as arch:
        before = np.asarray(arch.runs["seed0"].solvers["tsit5"]["loss"])
    again = flowsim.simulate(model, data=(X, y), test=data(5, seed=1), resume=True, **kwargs)
    np.testing.assert_array_equal(np.asarray(again.runs["seed0"].solvers["tsit5"]["loss"]), before)
    again.close()
    with pytest.raises(ValueError, match=r"`data.digest`"):
        flowsim.simulate(model, data=(X + 1.0, y), test=data(5, seed=1), resume=True, **kwargs)


@pytest.mark.slow
def test_a_factory_draws_one_model_per_seed_and_a_catalog_loss(tmp_path):
    X, y = data()
    arch = flowsim.simulate(mlp, data=(X, y), loss="half-sse", solvers=["gd-lr0.1"], t_end=1.0, seeds=[0, 1],
                            checkpoints={"count": 2}, observe=["loss"], output=tmp_path / "f.h5", progress=False)
    init = {s: arch.runs[f"seed{s}"].init["layers.0.weight"] for s in (0, 1)}
    np.testing.assert_array_equal(init[0], np.asarray(mlp(jax.random.PRNGKey(0)).layers[0].weight, float))
    assert not np.allclose(init[0], init[1])
    assert arch.runs["seed0"].params["loss"]["kind"] == "half-sse"


# ---------------------------------------------------------------------------------------
# Bad arguments: a ValueError naming the argument and what is allowed, nothing written
# ---------------------------------------------------------------------------------------

def _call(tmp_path, **over):
    X, y = data()
    kw = dict(model=mlp(jax.random.PRNGKey(0)), data=(X, y), t_end=1.0, solvers=["gd-lr0.1"],
              observe=["loss"], output=tmp_path / "bad.h5", progress=False)
    kw.update(over)
    return flowsim.simulate(kw.pop("model"), **kw)


@pytest.mark.parametrize("over, named, allowed", [
    (dict(model=eqx.nn.MLP(D, 3, 4, 1, key=jax.random.PRNGKey(0))), "model", "outputs of shape (2,)"),
    (dict(model=eqx.nn.MLP(5, K, 4, 1, key=jax.random.PRNGKey(0))), "model", "input of shape (3,)"),
    (dict(model="mlp"), "model", "an eqx.Module"),
    (dict(model=(3, 4)), "model", "a pair (apply_fn, params)"),      # (Flax's kinds: tests/test_flax.py)
    (dict(loss="l2"), "loss", "'half-sse'"),
    (dict(loss=lambda pred, y: (pred - y) ** 2), "loss", "-> scalar"),
    (dict(data=(np.ones((4, D)), np.ones((5, K)))), "data", "X of shape (n, d)"),
    (dict(data=(np.full((4, D), np.nan), np.ones((4, K)))), "data", "finite"),
    (dict(solvers=["tsit6"]), "solvers", "tsit5"),
    (dict(solvers=["filippov", "gd-lr0.1"]), "solvers", "flow methods for any model"),
    (dict(t_end=-1.0), "t_end", ""),
    (dict(checkpoints={"count": 0}), "checkpoints", ""),
    (dict(observe=["importance"]), "observe", "weight_change"),
    (dict(observe=["test_loss"]), "observe", "test"),
    (dict(seeds=3), "seeds", "list"),
    (dict(dtype="float16"), "dtype", "float64"),
    (dict(trainable=lambda x: False), "trainable", "at least one floating-point array"),
    (dict(trainable=lambda m: m.conv), "trainable", "a function of the model returning the leaves"),
    (dict(data=(np.ones((N, 1, 2, 2)), np.ones((N, K)))), "data", "X.reshape(len(X), -1)"),
    (dict(data=(data()[0], np.arange(N) % 2)), "data", 'loss="cross-entropy"'),
    (dict(data=(data()[0], np.arange(N) % 3), loss="cross-entropy"), "data", "integer class labels in [0, k)"),
])
def test_bad_arguments_name_the_argument(tmp_path, over, named, allowed):
    with pytest.raises(ValueError) as err:
        _call(tmp_path, **over)
    text = str(err.value)
    assert text.startswith("flowsim.simulate: ") and f"`{named}" in text and allowed in text, text
    assert "allowed" in text
    assert not (tmp_path / "bad.h5").exists()


@pytest.mark.slow
def test_a_factory_draws_the_weights_it_draws_in_the_users_float32_session(tmp_path):
    """In a session where JAX is float32 (its default), the factory's initial weights are the
    ones it gives there for the key, cast to float64 exactly, and the log says so: called
    after float64 is on, jax.random draws other numbers."""
    import subprocess
    import sys

    script = f"""
import jax, jax.numpy as jnp, numpy as np, equinox as eqx, flowsim
factory = lambda k: eqx.nn.MLP(3, 1, 8, 1, activation=jnp.tanh, key=k)
mine = [np.asarray(factory(jax.random.PRNGKey(s)).layers[0].weight) for s in (0, 1)]
assert mine[0].dtype == np.float32
X = np.random.default_rng(0).normal(size=(10, 3))
a = flowsim.simulate(factory, data=(X, X[:, 0]), t_end=0.1, solvers=["gd-lr0.1"], seeds=[0, 1],
                     checkpoints={{"count": 1}}, observe=["loss"], output=r"{tmp_path / 'f.h5'}", progress=False)
for s in (0, 1):
    np.testing.assert_array_equal(a.runs[f"seed{{s}}"].init["layers.0.weight"], mine[s].astype(np.float64))
with jax.enable_x64(True):
    other = np.asarray(factory(jax.random.PRNGKey(0)).layers[0].weight)
assert not np.allclose(other, mine[0])      # what a factory called after float64 is on would give
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "was called with PRNGKey(seed) in float32, your session's precision" in proc.stderr
    assert "cast to float64" in proc.stderr


def test_an_existing_archive_is_not_overwritten(tmp_path):
    (tmp_path / "bad.h5").write_bytes(b"precious")
    with pytest.raises(ValueError, match="`output`.*exists.*resume=True.*overwrite=True"):
        _call(tmp_path)
    assert (tmp_path / "bad.h5").read_bytes() == b"precious"


@pytest.mark.slow
def test_the_readme_example_runs_as_written(tmp_path, monkeypatch):
    """The README's `flowsim.simulate` example, executed as written, then its plot and compare."""
    import re
    from pathlib import Path

    text = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    section = text.split("## Your own network: `flowsim.simulate`", 1)[1].split("\n## ", 1)[0]
    python, shell = re.findall(r"```(?:python|bash)\n(.*?)```", section, re.S)[:2]
    monkeypatch.chdir(tmp_path)
    exec(compile(python, "README.md", "exec"), {})
    for command in shell.strip().split(" && "):
        run_cli(*command.split()[1:])
    with flowsim.open(tmp_path / "runs" / "mine.h5") as arch:
        gd = arch.runs["seed1"].solvers["gd-lr1"]
        assert gd.status == "done" and np.asarray(gd["loss"])[-1] < np.asarray(gd["loss"])[0]


# ---------------------------------------------------------------------------------------
# Ctrl-C and SIGTERM inside `simulate`: a clean interrupt, and resume=True goes on exactly
# ---------------------------------------------------------------------------------------

_INTERRUPTIBLE = """
import sys
import equinox as eqx, jax, jax.numpy as jnp, numpy as np
import flowsim
from flowsim.cli.lifecycle import compilation_cache
from flowsim.run.progress import Progress

# The suite's compilation cache (conftest sets FLOWSIM_CACHE_DIR), as the CLI turns it on:
# the script is compiled once, not once per process (about 17 s each here); what is tested
# is the interrupt.
compilation_cache()
out, resume, log, count = sys.argv[1], sys.argv[2] == "resume", sys.argv[3], int(sys.argv[4])
t_end = float(sys.argv[5])
rng = np.random.default_rng(0)
X = rng.normal(size=(256, 4))
y = np.sin(X[:, :1] * X[:, 1:2])
model = eqx.nn.MLP(4, 1, 64, 2, activation=jnp.tanh, key=jax.random.PRNGKey(0))
flowsim.simulate(model, data=(X, y), loss="mse", solvers=["tsit5"], t_end=t_end, checkpoints={"count": count},
                 observe=["loss", "weights"], output=out, resume=resume, progress=Progress(False, jsonl=log))
"""


def _simulate_until(tmp_path, out, *, resume: bool, signum=None, after: int = 3, count: int = 40, t_end: float = 40.0):
    """Run the script above in a fresh process (`count` checkpoints to `t_end`); with `signum`,
    send it once the JSON log shows `after` more committed checkpoints. Returns (exit status, stderr)."""
    import json
    import subprocess
    import sys
    import time

    script, log = tmp_path / "interruptible.py", tmp_path / f"{out.stem}.jsonl"
    script.write_text(_INTERRUPTIBLE)
    seen = len(log.read_text().splitlines()) if log.exists() else 0
    proc = subprocess.Popen([sys.executable, script, out, "resume" if resume else "new", log, str(count), str(t_end)],
                            stderr=subprocess.PIPE, text=True)
    if signum is not None:
        while proc.poll() is None:
            records = [json.loads(r) for r in log.read_text().splitlines()[seen:]] if log.exists() else []
            if sum(r["event"] == "checkpoint" for r in records) >= after:
                proc.send_signal(signum)
                break
            time.sleep(0.05)
    _, err = proc.communicate(timeout=600)
    return proc.returncode, err


def _flow(path):
    with flowsim.open(path) as arch:
        sv = arch.runs["seed0"].solvers["tsit5"]
        return sv.state, {"t": np.asarray(sv.t), **{k: np.asarray(sv[k]) for k in ("loss", "weights")}}, \
            dict(sv.stats)


@pytest.mark.slow
def test_an_interrupted_simulate_says_how_to_resume_and_resumes_exactly(tmp_path):
    import signal

    whole = tmp_path / "whole.h5"
    assert _simulate_until(tmp_path, whole, resume=False)[0] == 0
    state, expected, stats = _flow(whole)
    assert state == "done" and expected["t"].size == 41

    cut = tmp_path / "cut.h5"
    for signum, resume in ((signal.SIGINT, False), (signal.SIGTERM, True)):
        code, err = _simulate_until(tmp_path, cut, resume=resume, signum=signum)
        # an uncaught KeyboardInterrupt: Python's own exit (death by SIGINT), no C++ abort
        assert code == -signal.SIGINT, (code, err)
        assert "terminate called" not in err and "FATAL" not in err and "Aborted" not in err, err
        assert "\nKeyboardInterrupt: flowsim.simulate: interrupted" in err and "resume=True" in err, err
        state, part, _ = _flow(cut)
        assert state == "interrupted" and 0 < part["t"].size < 41, (state, part["t"].size)
    assert _simulate_until(tmp_path, cut, resume=True)[0] == 0
    state, got, resumed_stats = _flow(cut)
    assert state == "done"
    for key in expected:     # bit for bit: a resumed run is the uninterrupted computation
        np.testing.assert_array_equal(got[key], expected[key], err_msg=key)
    assert {k: resumed_stats[k] for k in ("steps", "rejected")} == {k: stats[k] for k in ("steps", "rejected")}


@pytest.mark.slow
def test_an_interrupt_during_a_long_segment_leaves_without_an_abort(tmp_path):
    """The stop abandons a segment that goes on computing on its thread: the process must
    not be torn down under it (it was: `terminate called`, SIGABRT)."""
    import signal

    out = tmp_path / "long.h5"
    code, err = _simulate_until(tmp_path, out, resume=False, signum=signal.SIGINT, after=1, count=1, t_end=120.0)
    assert code == -signal.SIGINT and "terminate called" not in err and "resume=True" in err, (code, err)
    state, part, _ = _flow(out)
    assert state == "interrupted" and part["t"].size == 1     # t = 0 only: the segment was abandoned
    advice = run_cli("inspect", out).split("interrupted: ", 1)[1]
    assert advice.startswith(f"resume with `flowsim.simulate(..., output={str(out)!r}, resume=True)`"), advice


# ---------------------------------------------------------------------------------------
# Classification as Equinox users write it: integer labels, a trainable head
# ---------------------------------------------------------------------------------------

def test_integer_labels_with_cross_entropy_are_one_hot_encoded(tmp_path):
    X = data()[0]
    labels = np.array([0, 1] * (N // 2))
    model = mlp(jax.random.PRNGKey(0))      # K = 2 logits
    arch = flowsim.simulate(model, data=(X, labels), test=(X[:4], labels[:4]), loss="cross-entropy",
                            solvers=["gd-lr0.1"], t_end=0.2, observe=["loss", "accuracy", "ntg_eig"],
                            output=tmp_path / "ce.h5", progress=False)
    with arch:
        np.testing.assert_array_equal(arch.data["y_train"], np.eye(2)[labels])
        gd = arch.runs["seed0"].solvers["gd-lr0.1"]
        logits = jax.vmap(model)(jnp.asarray(X))
        expected = -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(N), labels])
        np.testing.assert_allclose(np.asarray(gd["loss"])[0], float(expected), rtol=1e-12)
        accuracy = float(np.mean(np.argmax(np.asarray(logits), axis=1) == labels))
        assert np.asarray(gd["accuracy"])[0] == pytest.approx(accuracy, abs=1e-12)
    with flowsim.open(tmp_path / "ce.h5") as arch:     # its NTG is the first logit's, and the plot says so
        from flowsim import plots

        fig = plots.figure_fig1(plots.gather(arch), "ce")
    assert fig.axes[-1].get_title(loc="left") == "(b) smallest NTG eigenvalue (of output 0 of 2)"


@pytest.mark.parametrize("trainable, leaves", [
    (lambda m: m.layers[-1], ["layers.2.weight", "layers.2.bias"]),                  # a sub-module
    (lambda m: (m.layers[0].bias, m.layers[-1].bias), ["layers.0.bias", "layers.2.bias"]),  # leaves
    (lambda x: eqx.is_inexact_array(x) and x.ndim == 1,                                # a predicate
     ["layers.0.bias", "layers.1.bias", "layers.2.bias"]),
])
def test_trainable_as_a_function_of_the_model_or_a_predicate(tmp_path, trainable, leaves):
    """`where` functions are applied to each seed's model (a factory needs no instance)."""
    X, y = data()
    arch = flowsim.simulate(mlp, data=(X, y), seeds=[0, 1], solvers=["gd-lr0.1"], t_end=0.3,
                            checkpoints={"count": 1}, observe=["loss", "weight_change"], trainable=trainable,
                            output=tmp_path / "head.h5", progress=False)
    with arch:
        for s in (0, 1):
            run = arch.runs[f"seed{s}"]
            assert run.params["model"]["leaves"] == leaves
            model = mlp(jax.random.PRNGKey(s))
            by_path = dict(zip(leaf_paths(model), jax.tree.leaves(model)))
            for path in leaves:      # the initial values are the seed's model's
                np.testing.assert_array_equal(run.init[path], np.asarray(by_path[path]))
            moved = np.asarray(run.solvers["gd-lr0.1"]["weight_change"])[-1]
            assert moved.shape == (len(leaves),) and np.all(moved > 0)


@pytest.mark.slow
def test_the_readme_classifier_runs_as_written(tmp_path, monkeypatch):
    """The README's CNN (integer labels, flattened images, a trainable head), as written."""
    import re
    from pathlib import Path

    text = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    section = text.split("### A classifier: integer labels, images, a trainable head", 1)[1].split("\n#", 1)[0]
    (python,) = re.findall(r"```python\n(.*?)```", section, re.S)
    monkeypatch.chdir(tmp_path)
    exec(compile(python, "README.md", "exec"), {})
    with flowsim.open(tmp_path / "runs" / "cnn.h5") as arch:
        run = arch.runs["seed0"]
        assert run.params["model"]["leaves"] == ["head.weight", "head.bias"]      # the head alone trains
        assert arch.data["y_train"].shape == (200, 10)                             # labels one-hot
        for solver in ("tsit5", "gd-lr1"):
            loss = np.asarray(run.solvers[solver]["loss"])
            assert run.solvers[solver].status == "done" and loss[-1] < 0.8 * loss[0]


def test_presets_written_in_python_are_checked_as_inline_tables(tmp_path):
    from flowsim.config import FlowPreset

    with pytest.raises(ValueError) as err:
        _call(tmp_path, solvers=[FlowPreset(method="tsit5", rtol=-1.0)])
    assert str(err.value) == ("flowsim.simulate: key `solvers[0].rtol` = -1.0 is out of range; "
                              "allowed: a number > 0")
    assert not (tmp_path / "bad.h5").exists()
