"""A start the flow cannot leave, and archives whose solvers ended at t = 0.

`simulate` and `flowsim run` refuse a non-finite loss or gradient at the initial weights
before any solver runs, naming the first offending leaf or training sample; an archive an
earlier flowsim wrote from such a start (every solver ended at t = 0) reads everywhere:
inspect, compare (its table, CSV and figures), plot and `to_xarray`.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flowsim
from flowsim.run.precision import enable_x64

from tests.helpers import call_cli, run_cli

enable_x64()


def _data():
    rng = np.random.default_rng(0)
    X = np.abs(rng.normal(size=(8, 3)))
    return X, np.sin(X[:, :1])


class Scaled(eqx.Module):
    """lin(x) · sqrt(x₀) · sqrt(scale): NaN on a sample with x₀ < 0, an infinite gradient
    in `scale` at scale = 0 (where the output, 0, is finite)."""

    lin: eqx.nn.Linear
    scale: jax.Array

    def __call__(self, x):
        return self.lin(x) * jnp.sqrt(x[0]) * jnp.sqrt(self.scale)


def _scaled(scale):
    return Scaled(eqx.nn.Linear(3, 1, key=jax.random.PRNGKey(0)), jnp.asarray(scale))


def _nan_bias():
    model = eqx.nn.MLP(3, 1, 4, 1, activation=jnp.tanh, key=jax.random.PRNGKey(0))
    return eqx.tree_at(lambda m: m.layers[1].bias, model, jnp.full(1, jnp.nan))


def _negative_row(row):
    X, y = _data()
    X[row, 0] = -1.0
    return X, y


@pytest.mark.parametrize("model, data, named", [
    (_nan_bias, _data, "in leaf `layers.1.bias`"),
    (lambda: _scaled(1.0), lambda: _negative_row(5), "output is not finite on training sample 5 (row 5 of X)"),
    (lambda: _scaled(0.0), _data, "gradient is not finite in leaf `scale`"),
    (lambda: _scaled(1.0), _data, None),
])
def test_simulate_refuses_a_nonfinite_start_naming_the_leaf_or_sample(tmp_path, model, data, named):
    out = tmp_path / "start.h5"
    kwargs = dict(data=data(), solvers=["gd-lr0.1"], t_end=0.2, observe=["loss"], output=out, progress=False)
    if named is None:     # a finite start runs
        flowsim.simulate(model(), **kwargs).close()
        assert out.exists()
        return
    with pytest.raises(ValueError) as err:
        flowsim.simulate(model(), **kwargs)
    text = str(err.value)
    assert text.startswith("flowsim.simulate: the loss or its gradient is not finite at t = 0 (seed 0): "), text
    assert named in text and "allowed:" in text, text
    assert not out.exists()


def test_run_refuses_a_nonfinite_start_naming_the_leaf(tmp_path):
    scenario = tmp_path / "nan.toml"
    scenario.write_text("""
name = "nan"
[data]
kind = "sphere-sine"
n = 6
d = 3
[model]
kind = "python"
factory = "tests.helpers:nan_bias_factory"
[run]
t_end = 0.5
solvers = ["gd-lr0.1"]
observe = ["loss"]
""")
    out = tmp_path / "nan.h5"
    rc, _, err = call_cli("run", scenario, "-o", out, "-q")
    assert rc == 2, err
    assert "run seed0: the loss or its gradient is not finite at t = 0: the initial weights hold NaN or " \
           "infinite values in leaf `layers.0.bias`" in err, err
    assert not out.exists()


@pytest.fixture(scope="module")
def ended_at_zero(tmp_path_factory, request):
    """An archive as flowsim wrote it before the start was checked: a NaN bias, every
    solver ended at t = 0 (the flow `nonfinite`, GD `diverged`)."""
    out = tmp_path_factory.mktemp("t0") / "t0.h5"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("flowsim.run.build.start_problem", lambda built: None)
        flowsim.simulate(_nan_bias(), data=_data(), solvers=["tsit5", "gd-lr0.1"], t_end=2.0,
                         observe=["loss", "ntg_eig", "weight_change", "weights", "sharpness"], output=out,
                         progress=False).close()
    with flowsim.open(out) as arch:
        solvers = arch.runs["seed0"].solvers
        assert {n: (v.status, float(np.max(v.t))) for n, v in solvers.items()} == \
            {"tsit5": ("nonfinite", 0.0), "gd-lr0.1": ("diverged", 0.0)}
    return out


@pytest.mark.slow
def test_an_archive_ended_at_t0_is_inspected_compared_plotted_and_converted(ended_at_zero, tmp_path):
    text = run_cli("inspect", ended_at_zero)
    assert "nonfinite at t = 0" in text and "diverged at t = 0" in text
    report = run_cli("compare", ended_at_zero, "--csv", tmp_path / "gaps.csv", "-o", tmp_path / "cmp")
    row = next(line for line in report.splitlines() if line.strip().startswith("gd-lr0.1"))
    assert row.split()[3] == "0" and "[diverged]" in row      # no matched time after t = 0
    assert (tmp_path / "gaps.csv").read_text().count("\n") == 1     # the header alone
    figures = run_cli("plot", ended_at_zero, "-o", tmp_path / "figs").split()
    assert figures and all(p.endswith((".png", ".pdf")) for p in figures)
    with flowsim.open(ended_at_zero) as arch:
        ds = arch.to_xarray()
    assert ds["loss"].sizes["t"] >= 1 and np.isnan(ds["loss"].values).all()
