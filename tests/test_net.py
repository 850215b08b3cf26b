"""The network protocol (`flowsim.nn.net.AbstractNet`): every shipped model kind and a user's
plug-in network satisfy it, its measures are the quantities they claim to be, and a network
that leaves part of it out is refused by name."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from flowsim.run.build import build_run
from flowsim.config import load_scenario, scenarios_dir
from flowsim.models import ModuleNet, ShallowNet
from flowsim.nn.net import NET_SERIES, AbstractNet
from flowsim.observe.observables import observe, reference, series_axes
from flowsim.nn.problem import Problem

QUICKSTART = scenarios_dir() / "quickstart.toml"
TOY = ["data.n=6", "data.d=3", "data.n_test=4", "seeds=[0]", "run.t_end=0.5", "run.checkpoints={count=2}",
       'run.solvers=["gd-lr0.1"]', "run.ntg_points=5", "sweep={}"]
# every shipped model kind, at toy size (the `python` kind: a plug-in factory of the tests)
KINDS = {
    "shallow": ["model.width=8"],
    "shallow-zeroed-trained": ["model.width=8", 'model.activation="relu"', 'model.output="trained"',
                               "model.zeroed=true"],
    "embedded": ['model={kind="embedded", embedding="quadratic", chen_scaling="ntk", width=8, activation="relu"}'],
    "mlp": ['model={kind="mlp", widths=[5, 4], activation="tanh"}'],
    "python": ['model={kind="python", factory="tests.helpers:mlp_factory"}'],
}


def _built(kind):
    cfg = load_scenario(QUICKSTART, [*TOY, *KINDS[kind]]).runs[0].settings
    return build_run(cfg, 0)


def _jacobian(net, params, X):
    """The first output's Jacobian (n, P) by autodiff: the oracle of the closed-form NTGs."""
    flat, unravel = ravel_pytree(params)
    return jax.jacobian(lambda v: net(unravel(v), X)[:, 0])(flat)


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_shipped_model_is_an_abstract_net_whose_measures_are_what_they_say(kind):
    built = _built(kind)
    net, params, X = built.problem.net, built.params, built.problem.X
    assert isinstance(net, AbstractNet)
    assert set(net.series_axes) == set(NET_SERIES)
    # the NTG is J Jᵀ of the first output (closed form for the shallow nets, J Jᵀ by
    # products for the modules): against the dense Jacobian, to round-off
    J = _jacobian(net, params, X)
    np.testing.assert_allclose(net.ntg(params, X), J @ J.T, rtol=1e-10, atol=1e-12)
    # a move of one group of weights changes exactly that group's `weight_change`, by its size
    leaves, treedef = jax.tree.flatten(params)
    moved = jax.tree.unflatten(treedef, [leaves[0].at[(0,) * leaves[0].ndim].add(0.25), *leaves[1:]])
    change = np.asarray(net.weight_change(moved, params))
    assert change[0] == pytest.approx(0.25, rel=1e-12) and not change[1:].any()
    assert not np.asarray(net.unit_change(params, params)).any()
    assert np.asarray(net.unit_change(moved, params)).max() == pytest.approx(0.25, rel=1e-12)
    # `weights` holds every trainable weight of the hidden layer (shallow) or of the model
    P = ravel_pytree(params)[0].size
    assert np.asarray(net.weights(params)).size == (P if isinstance(net, ModuleNet) else params["W"].size)
    # the observables record the measures on the axes the network names
    names = ("weights", "weight_change", "unit_change")
    out = observe(built.problem, params, reference(built.problem, params), names)
    axes = series_axes(names, net)
    assert axes == {s: net.series_axes[s] for s in names}
    for s in names:
        assert out[s].ndim == len(axes[s]), s


class Linear(AbstractNet):
    """A user's own network beside the shipped ones: f(x) = x·w, its NTG X Xᵀ."""

    series_axes = {"weights": ("feature",), "weight_change": ("leaf",), "unit_change": ("unit",)}

    def __call__(self, params, X):
        return (X @ params["w"])[:, None]

    def ntg(self, params, X):
        return X @ X.T

    def weights(self, params):
        return params["w"]

    def weight_change(self, params, params0):
        return jnp.linalg.norm(params["w"] - params0["w"])[None]

    def unit_change(self, params, params0):
        return jnp.abs(params["w"] - params0["w"])


def test_a_plug_in_network_satisfies_the_protocol_and_runs_the_problem():
    X = jnp.asarray(np.random.default_rng(0).standard_normal((5, 3)))
    y = X @ jnp.asarray([1.0, -2.0, 0.5])[:, None]
    problem = Problem(net=Linear(), X=X, y=y, X_test=X[:2], y_test=y[:2], rate=1.0, loss_kind="half-sse",
                      ntg_points=5)
    params = {"w": jnp.zeros(3)}
    # ½‖Xw − y‖² at w = 0, its gradient −Xᵀy, and the NTG on the first 5 points
    assert float(problem.loss(params)) == pytest.approx(0.5 * float(jnp.sum(y**2)), rel=1e-14)
    np.testing.assert_allclose(problem.grad(params)["w"], -(X.T @ y)[:, 0], rtol=1e-13)
    J = _jacobian(problem.net, params, X)
    np.testing.assert_allclose(problem.ntg(params), J @ J.T, rtol=1e-13)
    out = observe(problem, params, reference(problem, params), ("weights", "weight_change"))
    assert series_axes(("weights", "weight_change"), problem.net) == {"weights": ("feature",),
                                                                       "weight_change": ("leaf",)}
    assert out["weight_change"].shape == (1,) and float(out["weight_change"][0]) == 0.0


def test_the_plug_in_module_of_a_user_is_carried_by_module_net():
    model = eqx.nn.MLP(3, 2, 4, 1, key=jax.random.PRNGKey(1))
    params, frozen = eqx.partition(model, eqx.is_inexact_array)
    net = ModuleNet(frozen=frozen)
    X = jnp.asarray(np.random.default_rng(1).standard_normal((4, 3)))
    assert isinstance(net, AbstractNet)
    np.testing.assert_allclose(net(params, X), jax.vmap(model)(X), rtol=1e-15)
    # two dense layers of 4 and 2 units; one entry per trainable leaf (2 weights, 2 biases)
    assert net.unit_change(params, params).shape == (6,) and net.weight_change(params, params).shape == (4,)


class _NoUnitChange(AbstractNet):
    series_axes = Linear.series_axes
    __call__, ntg, weights, weight_change = Linear.__call__, Linear.ntg, Linear.weights, Linear.weight_change


class _NoAxes(AbstractNet):
    __call__, ntg, weights = Linear.__call__, Linear.ntg, Linear.weights
    weight_change, unit_change = Linear.weight_change, Linear.unit_change


def test_a_network_missing_part_of_the_protocol_is_refused_naming_it():
    with pytest.raises(TypeError, match="unit_change"):
        _NoUnitChange()
    with pytest.raises(TypeError, match="series_axes"):
        _NoAxes()


def test_a_problem_refuses_what_is_not_a_network_naming_what_it_needs():
    class Duck(eqx.Module):   # callable as a network, but not one: no NTG, no measures
        def __call__(self, params, X):
            return X

    X = jnp.ones((2, 2))
    with pytest.raises(TypeError, match=r"Problem.net: a .*Duck is not a network; allowed: a subclass of "
                                        r"flowsim.nn.net.AbstractNet, with the methods __call__, ntg, unit_change, "
                                        r"weight_change, weights and the class attribute series_axes"):
        Problem(net=Duck(), X=X, y=X, X_test=X, y_test=X, rate=1.0, loss_kind="half-sse", ntg_points=2)


def test_the_shallow_net_offers_the_parts_of_its_field():
    """What the exact ReLU flow assembles its field from (`preactivations`, `output_layer`,
    `frozen_output`) gives the network's own predictions back: f = (c a)ᵀ σ(s) − f_frozen."""
    built = _built("shallow-zeroed-trained")
    net, X = built.problem.net, built.problem.X
    assert isinstance(net, ShallowNet)
    moved = jax.tree.map(lambda w: w * 1.5, built.params)
    s = net.preactivations(moved["W"], X)
    np.testing.assert_allclose(s, moved["W"] @ X.T / np.sqrt(X.shape[1]), rtol=1e-14)
    # trained output layer: f uses the moved a; the fixed `output_layer` is the initial one
    sigma = jax.nn.relu(s)
    frozen = net.frozen_output(X)
    np.testing.assert_allclose(frozen, (net.output_layer().T @ jax.nn.relu(net.preactivations(net.ref["W"], X))).T,
                               rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(net(moved, X), ((net.c[:, None] * moved["a"]).T @ sigma).T - frozen,
                               rtol=1e-13, atol=1e-14)
    # at the start the zeroed network is identically 0
    np.testing.assert_allclose(net(built.params, X), 0.0, atol=1e-15)
