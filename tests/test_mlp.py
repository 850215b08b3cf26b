"""Deep networks: `model.kind = "mlp"` and the generic (`ModuleNet`) path it shares with
`flowsim.simulate`.

Oracles: a hand-written forward pass per parameterisation; the shallow network's closed-form
NTG and gradient against the same network as an Equinox module through the generic path (to
1e-12); the two-layer linear network from a balanced initialisation, whose flow is a logistic
curve per mode (Saxe, McClelland & Ganguli 2014).
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flowsim
from flowsim.nn.activations import activation
from flowsim.run.build import build_run
from flowsim.config import ScenarioError, loads_scenario
from flowsim.models.mlp import MLP, init_mlp
from flowsim.models.module import ModuleNet
from flowsim.nn.ntg import jacobian_ntg, ntg_strategy, vector_product_ntg
from flowsim.run.precision import enable_x64
from tests.conftest import make_problem

enable_x64()

SCENARIO = """
name = "mlp-test"
[data]
kind = "sphere-sine"
n = 12
d = 4
n_test = 0
[model]
kind = "mlp"
widths = [6, 5]
activation = "tanh"
[run]
t_end = 1.0
solvers = ["gd-lr0.1"]
observe = ["loss"]
"""


def scenario(*sets):
    return loads_scenario(SCENARIO, overrides=list(sets))


@pytest.mark.parametrize("parameterisation", ["standard", "ntk", "mean-field", "mup"])
def test_forward_pass_matches_the_formulas(parameterisation):
    sizes = [4, 6, 5, 2]
    key = jax.random.PRNGKey(1)
    net = init_mlp(key, sizes, parameterisation=parameterisation, init_std=1.3, bias=True, activation_name="tanh")
    x = np.random.default_rng(0).normal(size=4)
    h = x
    for i, k in enumerate(jax.random.split(key, 3)):
        W = 1.3 * np.asarray(jax.random.normal(k, (sizes[i + 1], sizes[i])))
        fan_in = sizes[i]
        if parameterisation == "standard":
            pre = W @ h / math.sqrt(fan_in)
        elif parameterisation == "mup":      # input ×√n₁ with W/√n₁; hidden W/√fan_in; output W/fan_in
            pre = {0: W @ h, 1: W @ h / math.sqrt(fan_in), 2: W @ h / fan_in}[i]
        elif parameterisation == "mean-field" and i == 2:
            pre = W @ h / fan_in
        else:
            pre = W @ h / math.sqrt(fan_in)
        b = np.full(sizes[i + 1], 0.5 * (i + 1))
        h = pre + b
        h = np.tanh(h) if i < 2 else h
    net = eqx.tree_at(lambda m: m.biases, net, tuple(jnp.full(n, 0.5 * (i + 1)) for i, n in enumerate(sizes[1:])))
    np.testing.assert_allclose(np.asarray(net(jnp.asarray(x))), h, rtol=1e-12)


def test_standard_and_ntk_are_one_function_at_init_with_rescaled_tangent_kernels():
    """Same draw: W_std = W_ntk/√fan_in, so f is the same; the NTK of the weights of layer l
    scales by 1/fan_in (∂f/∂W_ntk = ∂f/∂W_std/√fan_in)."""
    X = jnp.asarray(np.random.default_rng(2).normal(size=(7, 4)))
    nets = {p: init_mlp(jax.random.PRNGKey(0), [4, 6, 1], parameterisation=p, init_std=1.0, bias=False,
                        activation_name="tanh") for p in ("standard", "ntk")}
    f = {p: jax.vmap(n)(X) for p, n in nets.items()}
    np.testing.assert_allclose(f["ntk"], f["standard"], rtol=1e-12)
    for layer, fan_in in ((0, 4), (1, 6)):
        ntk = {}
        for p, net in nets.items():
            spec = eqx.tree_at(lambda m: m.weights, jax.tree.map(lambda _: False, net),
                               tuple(i == layer for i in range(2)))
            params, frozen = eqx.partition(net, spec)
            ntk[p] = ModuleNet(frozen=frozen).ntg(params, X)
        np.testing.assert_allclose(ntk["ntk"], ntk["standard"] / fan_in, rtol=1e-10)


def test_the_ntg_strategy_is_the_one_measured_faster_on_each_backend():
    """bench_deep: the vector products on CPU (0.51–0.63× the contraction's time), the
    Jacobian contraction on a GPU (the vector products took 5.74× its time on an H200)."""
    assert ntg_strategy("cpu") is vector_product_ntg
    for accelerator in ("gpu", "cuda", "rocm", "tpu"):
        assert ntg_strategy(accelerator) is jacobian_ntg


@pytest.mark.parametrize("backend", ["cpu", "gpu"])
def test_the_shallow_network_through_the_generic_path_matches_its_closed_form(backend, monkeypatch):
    """ShallowNet's closed-form NTG and its gradient, against the same network as an Equinox
    module (ModuleNet: NTG by the strategy of each backend, gradient by autodiff of the
    module), to 1e-12."""
    monkeypatch.setattr(jax, "default_backend", lambda: backend)
    prob, p0 = make_problem(n=15, d=4, m=30, activation="swish")
    net = prob.net

    class Shallow(eqx.Module):          # the same function, as a user would write it
        W: jax.Array

        def __call__(self, x):
            return net({"W": self.W}, x[None])[0]

    params, frozen = eqx.partition(Shallow(W=p0["W"]), eqx.is_inexact_array)
    generic = eqx.tree_at(lambda p: p.net, prob, ModuleNet(frozen=frozen))
    np.testing.assert_allclose(generic.ntg(params), prob.ntg(p0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(generic.grad(params).W, prob.grad(p0)["W"], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(generic.loss(params), prob.loss(p0), rtol=1e-13)


def test_train_picks_the_layers_that_move():
    built = build_run(scenario("model.train=[1]").runs[0].settings, seed=0)
    assert sorted(k for k in built.init if k != "loss0") == ["biases.1", "weights.1"]
    assert len(jax.tree.leaves(built.params)) == 2
    built = build_run(scenario("model.bias=false").runs[0].settings, seed=0)
    assert sorted(k for k in built.init if k != "loss0") == ["weights.0", "weights.1", "weights.2"]


@pytest.mark.parametrize("override, key, allowed", [
    ("model.train=[3]", "model.train", "layer indices in [0, 2]"),
    ("model.parameterisation='mu-p'", "model.parameterisation", '"mup"'),
    ("model.widths=[]", "model.widths", ""),
    ("run.observe=['hidden']", "run.observe", "observables of any model"),
])
def test_bad_mlp_keys_are_refused_naming_them(override, key, allowed):
    with pytest.raises(ScenarioError) as err:
        scenario(override)
    assert f"`{key}`" in str(err.value) and allowed in str(err.value), str(err.value)


@pytest.mark.slow
def test_two_layer_linear_network_follows_the_logistic_closed_form(tmp_path):
    """f(x) = W₂W₁x on whitened inputs (X = I), targets Y = diag(s), balanced and aligned
    initialisation W₁ = W₂ = diag(√u₀): each mode's strength u = (W₂W₁)_ii solves
    du/dt = 2u(s − u) under L = ½‖W₂W₁ − Y‖², i.e. u(t) = s / (1 + (s/u₀ − 1) e^{−2st})."""
    s, u0 = np.array([3.0, 1.0, 0.5]), 0.01
    start = jnp.diag(jnp.full(3, math.sqrt(u0)))
    model = MLP(weights=(start, start), biases=(None, None), multipliers=(1.0, 1.0), activation="identity")
    assert activation("identity")(2.0) == 2.0
    arch = flowsim.simulate(model, data=(np.eye(3), np.diag(s)), loss="half-sse", solvers=["tsit5"], t_end=6.0,
                            checkpoints={"count": 12}, observe=["loss", "weights"], output=tmp_path / "lin.h5",
                            progress=False)
    with arch:
        flow = arch.runs["seed0"].solvers["tsit5"]
        t, loss = np.asarray(flow.t), np.asarray(flow["loss"])
    u = s / (1 + (s / u0 - 1) * np.exp(-2 * s * t[:, None]))
    np.testing.assert_allclose(loss, 0.5 * np.sum((u - s) ** 2, axis=1), rtol=1e-6, atol=1e-12)
    assert loss[-1] < 1e-3 * loss[0]


def test_unit_change_is_per_unit_of_every_dense_layer():
    net = init_mlp(jax.random.PRNGKey(0), [4, 6, 5, 2], parameterisation="ntk", init_std=1.0, bias=True,
                   activation_name="tanh")
    params, frozen = eqx.partition(net, eqx.is_inexact_array)
    moved = jax.tree.map(lambda x: x + 0.1 * jnp.arange(x.size, dtype=x.dtype).reshape(x.shape), params)
    module = ModuleNet(frozen=frozen)
    expected = np.concatenate([np.linalg.norm(np.asarray(a - b), axis=1)
                               for a, b in zip(moved.weights, params.weights)])
    np.testing.assert_allclose(module.unit_change(moved, params), expected, rtol=1e-14)
    assert module.unit_change(moved, params).shape == (6 + 5 + 2,)
    assert module.weight_change(moved, params).shape == (6,)        # per leaf: 3 weights, 3 biases
    prob, p0 = make_problem(n=5, d=3, m=7)
    p1 = {"W": p0["W"] + 1.0}
    np.testing.assert_allclose(prob.net.unit_change(p1, p0), np.full(7, np.sqrt(3.0)), rtol=1e-14)
