"""Every entry of every registry is usable: each activation, loss, model kind, observable,
solver kind and flow method is accepted by validation, estimated, run and stored or drawn.
A name added to a registry is covered here without touching this file."""

from __future__ import annotations

import dataclasses
import functools
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flowsim import archive, plots
from flowsim.nn import theory
from flowsim.nn.activations import ACTIVATIONS
from flowsim.run.build import build_run
from flowsim.run.resources import estimate_resources, point_estimates
from flowsim.cli import show as show_module
from flowsim.integrate.central_flow import make_central_integrator
from flowsim.kinds.solvers import (CENTRAL_METHODS, CENTRAL_READS, FLOW_METHODS, SETTING_GROUPS, SOLVER_KINDS,
                                        group_keys, settings_of, state_copies)
from flowsim.run.integrators import factory
from flowsim.nn.losses import LOSSES
from flowsim.kinds import MODELS as MODEL_KINDS, SHALLOW_KINDS
from flowsim.models import MODELS, ModuleNet, ShallowNet, init_shallow
from flowsim.observe.observables import NET_AXES, OBSERVABLES, observe, reference, series_axes
from flowsim.nn.problem import Problem
from flowsim.nn.scaling import output_scale
from flowsim.config import Config, FlowPreset, load_scenario, loads_scenario, to_dict
from flowsim.config import scenarios_dir
from tests.helpers import leaf_count

QUICKSTART = scenarios_dir() / "quickstart.toml"
# quickstart.toml at toy size: one sweep point, one seed, two checkpoints
SMALL = ["data.n=6", "data.d=3", "data.n_test=4", "model.width=8", "seeds=[0]", "run.t_end=0.5",
         "run.checkpoints={count=2}", 'run.solvers=["gd-lr0.1"]', "run.ntg_points=5",
         'sweep={"model.scaling"=[{kind="asymmetric", gamma=0.5, alpha=0.7}]}']


def small_problem(activation="swish", loss="half-sse", outputs=1, n=6, d=3, m=8, seed=0):
    kx, ky, kn = jax.random.split(jax.random.PRNGKey(seed), 3)
    X = jax.random.normal(kx, (n, d))
    y = jax.nn.one_hot(jnp.arange(n) % outputs, outputs) if outputs > 1 else jax.random.normal(ky, (n, 1))
    scale = output_scale("asymmetric", m, gamma=0.5, alpha=0.7)
    net, params = init_shallow(kn, d=d, outputs=outputs, scale=scale, scaling_kind="asymmetric",
                               activation_name=activation, init_std=1.0, train_output=False, zeroed=False)
    problem = Problem(net=net, X=X, y=y, X_test=X[:2], y_test=y[:2], rate=scale.rate, loss_kind=loss,
                      ntg_points=n)
    return problem, params


def estimate(cfg: Config) -> dict[str, float]:
    return estimate_resources(cfg, 6, 4, 3, 1)


# ------------------------------------------------------------------------ activations


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_every_activation_runs_a_flow_step_that_lowers_the_loss(name):
    entry = ACTIVATIONS[name]
    z = jnp.linspace(-2.0, 2.0, 9) + 0.05            # no kink of relu at a sample
    assert np.allclose(entry.derivative(z), jax.vmap(jax.grad(entry.fn))(z), rtol=1e-12, atol=1e-14)
    problem, params = small_problem(activation=name)
    v = problem.velocity(params)
    step = jax.tree.map(lambda w, dw: w + 1e-3 * dw, params, v)   # one explicit Euler step of the flow
    before, after = float(problem.loss(params)), float(problem.loss(step))
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(v))
    assert after < before
    # κ_n has a method for it (closed form for the piecewise-linear ones, quadrature otherwise)
    assert math.isfinite(theory.kappa_n(np.asarray(problem.X), name))


# ------------------------------------------------------------------------ losses


@pytest.mark.parametrize("kind", list(LOSSES))
def test_every_loss_gives_a_finite_value_and_gradient_and_an_unbiased_batch(kind):
    problem, params = small_problem(loss=kind, outputs=2)
    value = problem.loss(params)
    grad = problem.grad(params)
    assert bool(jnp.isfinite(value)) and all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(grad))
    idx = jnp.arange(3)
    scale = problem.X.shape[0] / 3 if LOSSES[kind].sum_over_samples else 1.0
    assert math.isclose(float(problem.batch_loss(params, idx)),
                        scale * float(problem.loss(params, problem.X[idx], problem.y[idx])), rel_tol=1e-12)


# ------------------------------------------------------------------------ models


# the keys a kind needs beside its defaults (a factory; narrower networks than the defaults)
MODEL_KEYS = {"shallow": "width = 8", "embedded": "width = 8", "mlp": "widths = [8]",
              "python": 'factory = "tests.helpers:mlp_factory"'}


@pytest.mark.parametrize("kind", list(MODELS))
def test_every_model_kind_validates_and_builds(kind):
    """Each kind a scenario names builds a network of its registry family, whose trainable
    leaves number what `flowsim show` prints (its config's `size`, where known before
    building), and whose loss and NTG evaluate."""
    sc = loads_scenario(f"""
seeds = [0]
[data]
kind = "sphere-sine"
n = 6
d = 3
n_test = 2
[model]
kind = "{kind}"
{MODEL_KEYS.get(kind, "")}
[run]
t_end = 0.5
solvers = ["gd-lr0.1"]
observe = ["loss"]
""")
    r = sc.runs[0]
    built = build_run(r.settings, r.seed)
    assert math.isclose(float(built.problem.loss(built.params)), float(built.init["loss0"]), rel_tol=1e-12)
    assert built.problem.ntg(built.params).shape == (6, 6)
    assert isinstance(built.problem.net, ShallowNet if kind in SHALLOW_KINDS else ModuleNet)
    (_, est), = point_estimates(sc)     # the config's `size`, as `flowsim show` and the resource check use it
    assert (est is None) == (not MODEL_KINDS[kind].sized)
    if est is not None:
        assert int(est["params"]) == leaf_count(built.params)
        assert f"{leaf_count(built.params)} parameters per seed" in show_module.show(sc)


# ------------------------------------------------------------------------ observables


@pytest.mark.slow
@pytest.mark.parametrize("name", list(OBSERVABLES))
def test_every_observable_validates_is_estimated_and_observed(name):
    cfg = load_scenario(QUICKSTART, [*SMALL, f'run.observe=["{name}"]']).runs[0].settings
    base = load_scenario(QUICKSTART, [*SMALL, "run.observe=[]"]).runs[0].settings
    entry = OBSERVABLES[name]
    m, p, d = 8, 5, 3
    rows = 2 + 1                                      # two checkpoints and t = 0
    extra = estimate(cfg)["disk"] - estimate(base)["disk"]
    assert extra == 8 * 1 * 1 * 2 * rows * entry.row_size(m, p, d)   # float64, 1 seed, 1 solver

    built = build_run(cfg, 0)
    out = observe(built.problem, built.params, reference(built.problem, built.params), (name,))
    axes_of = series_axes((name,), built.problem.net)
    assert set(out) == set(entry.series) == set(axes_of)
    for series, axes in axes_of.items():
        assert out[series].ndim == len(axes), series
        assert bool(jnp.all(jnp.isfinite(out[series]))), series
    # the disk estimate is an upper bound on what one checkpoint row holds
    assert sum(int(np.prod(v.shape)) for v in out.values()) <= entry.row_size(m, p, d)


@pytest.mark.slow
def test_every_observable_is_stored_and_plotted(tmp_path, capsys, monkeypatch):
    """One in-process run observing everything: each series is in the archive with its
    declared axes, and the figures draw."""
    from flowsim.cli import command as cli

    monkeypatch.setenv("FLOWSIM_CACHE_DIR", "")   # leave this process's JAX config alone
    out = tmp_path / "all.h5"
    sets = [*SMALL, f"run.observe={json.dumps(list(OBSERVABLES))}"]
    rc = cli.main(["run", str(QUICKSTART), "-o", str(out), "-q", *(a for s in sets for a in ("--set", s))])
    assert rc == 0, capsys.readouterr().err[-3000:]
    with archive.open(out) as arch:
        (run,) = arch.runs.values()
        (view,) = run.solvers.values()
        assert view.status == "done"
        for entry in OBSERVABLES.values():
            for series, axes in entry.series.items():
                # the weight measures' axes are the network's (quickstart: a shallow net)
                axes = ShallowNet.series_axes[series] if axes is NET_AXES else axes
                assert series in view, series
                assert np.asarray(view[series]).ndim == 1 + len(axes), series
    files = plots.plot_archive(out, tmp_path / "figs", formats=("png",))
    assert {f.name for f in files} >= {"quickstart-fig1.png", "quickstart-test.png"}


# ------------------------------------------------------------------------ solvers


def _presets():
    """(an inline preset of every kind and flow method, the --set its network needs)."""
    for kind, entry in SOLVER_KINDS.items():
        if entry.given:
            continue     # flowsim.simulate's: tests/test_optimizers.py
        if entry.discrete:
            extra = {"sgd": ", batch_size = 2"}.get(kind, "")
            yield f'{{name = "x", kind = "{kind}", learning_rate = 0.1{extra}}}', ()
        else:
            eta = ", learning_rate = 0.1" if entry.of_gd or entry.flow_of else ""
            for method, entry in FLOW_METHODS.items():
                if entry.filippov and kind != "flow":
                    continue     # refused: tests/test_filippov.py, tests/test_optimizers.py
                if SOLVER_KINDS[kind].central and (entry.implicit or not entry.central):
                    continue     # refused: tests/test_central.py
                # the Filippov integrator takes shallow ReLU nets only (the loader refuses others)
                network = ("model.activation=relu",) if entry.filippov else ()
                yield f'{{name = "x", kind = "{kind}", method = "{method}"{eta}}}', network


@pytest.mark.parametrize("preset, network", list(_presets()))
def test_every_solver_kind_and_flow_method_validates_and_is_estimated(preset, network):
    cfg = load_scenario(QUICKSTART, [*SMALL, *network, f"run.solvers=[{preset}]"]).runs[0].settings
    (solver,) = cfg.run.solvers
    est = estimate(cfg)
    assert est["copies"] == state_copies(solver) > 0
    assert est["memory"] > 0 and est["disk"] > 0


def _reading(record, read: set[str]):
    """`record` (a settings group's record) as a copy that notes each key read into `read`."""
    keys = {f.name for f in dataclasses.fields(record)}

    class Reading(type(record)):
        def __getattribute__(self, name):
            if name in keys:
                read.add(name)
            return super().__getattribute__(name)

    return Reading(**dataclasses.asdict(record))


def _keys_read(build, groups: tuple[str, ...], preset: FlowPreset) -> set[str]:
    """The preset keys that `build` (an integrator factory, given the records of `groups`
    filled from `preset`, by group name) reads."""
    read: set[str] = set()
    build(**{g: _reading(r, read) for g, r in settings_of(preset, groups).items()})
    return read


@pytest.mark.parametrize("method", list(FLOW_METHODS))
def test_each_flow_method_reads_exactly_the_keys_its_entry_declares(method):
    """The registry entry declares the settings groups its factory reads; the factory reads
    every key of them and needs no other group (it is called with those alone), and `flowsim
    show` shows a preset of the method exactly its keys beside the method-free ones."""
    spec = FLOW_METHODS[method]
    build = functools.partial(factory(spec), spec, stop_loss=0.0)
    assert _keys_read(build, spec.reads, FlowPreset(method=method)) == set(spec.keys())
    resolved = {"run": {"solvers": [to_dict(FlowPreset(method=method))]}}
    shown = {k for k in resolved["run"]["solvers"][0] if not show_module._unused(resolved, ("run", "solvers", 0, k))}
    method_keys = {k for m in FLOW_METHODS.values() for k in m.keys()}
    assert shown == set(spec.keys()) | (set(resolved["run"]["solvers"][0]) - method_keys)


def test_every_settings_group_key_is_a_flow_preset_key():
    assert {k for g in SETTING_GROUPS for k in group_keys(g)} <= set(FlowPreset.__dataclass_fields__)


@pytest.mark.parametrize("method", [m for m in FLOW_METHODS if m in CENTRAL_METHODS])
def test_the_central_flow_reads_exactly_its_declared_keys(method):
    preset = FlowPreset(kind="central-flow", method=method, learning_rate=0.1)
    build = functools.partial(make_central_integrator, method, stop_loss=0.0)
    assert _keys_read(build, CENTRAL_READS, preset) == {k for g in CENTRAL_READS for k in group_keys(g)}


def test_every_declared_kind_has_its_implementation_in_order():
    """flowsim.kinds declares the names (and what validation knows of them) without JAX;
    the implementing registries hold exactly those names, in that order."""
    from flowsim import kinds

    for declared, implemented in ((kinds.ACTIVATIONS, ACTIVATIONS), (kinds.LOSSES, LOSSES),
                                  (kinds.OBSERVABLES, OBSERVABLES)):
        assert list(implemented) == list(declared)
    assert all(ACTIVATIONS[n].smooth == k.smooth and ACTIVATIONS[n].low_slope == k.low_slope
               for n, k in kinds.ACTIVATIONS.items())
    assert [n for n, o in OBSERVABLES.items() if o.family] == ["importance", "hidden"]


def test_the_configuration_imports_no_jax():
    import subprocess
    import sys

    code = ("import sys, flowsim.config, flowsim.config.scenario_keys\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'jaxlib', 'equinox')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
