"""Model kinds, declared once (`flowsim.kinds.MODELS`, no JAX), each model config answering its
own size (`size(d, k)` of each class of `flowsim.config.typed.Model`): `flowsim show`'s
parameter count is the built network's trainable leaves, for every scenario of the catalog."""

import dataclasses
import typing

import pytest

from flowsim import kinds
from flowsim.cli.show import show
from flowsim.config import find_scenario, list_scenarios, load_scenario, typed
from flowsim.models import MODELS, ModuleNet, ShallowNet
from flowsim.run.build import _dataset
from flowsim.run.resources import point_estimates
from tests.helpers import leaf_count


def test_the_model_kinds_are_declared_once_and_implemented_in_order():
    assert [c.kind for c in typing.get_args(typed.Model)] == list(kinds.MODELS)
    assert list(MODELS) == [n for n, k in kinds.MODELS.items() if k.in_files]
    assert kinds.SHALLOW_KINDS == ("shallow", "embedded") and typed.SHALLOW_KINDS is kinds.SHALLOW_KINDS
    # the families part the kinds (each builder's network is its family's:
    # tests/test_registries.py builds every kind)
    assert {"mlp", "python", "module"} <= set(kinds.PER_LEAF_MODELS)
    assert set(kinds.PER_LEAF_MODELS) == set(kinds.MODELS) - set(kinds.SHALLOW_KINDS)
    assert all(k.size_key.startswith("model") for k in kinds.MODELS.values())


@pytest.mark.parametrize("name", [n for n, _ in list_scenarios()])
def test_show_counts_the_parameters_of_the_built_network(name):
    """Every sweep point of every catalog scenario: the count `show` prints (and the resource
    estimate uses) is the trainable leaves' size of the network its config builds (the model
    alone, on the first rows of its data: the size depends on the data's d and k, not on n)."""
    sc = load_scenario(find_scenario(name))
    points = point_estimates(sc)
    built: dict = {}
    for runs, est in points:
        cfg, seed = runs[0].settings, runs[0].seed
        assert est is not None and kinds.MODELS[cfg.model.kind].sized
        key = (cfg.model, cfg.data)
        if key not in built:
            ds = _dataset(cfg, seed)
            few = dataclasses.replace(ds, X_train=ds.X_train[:8], y_train=ds.y_train[:8],
                                      X_test=ds.X_test[:2], y_test=ds.y_test[:2])
            network = MODELS[cfg.model.kind].build(cfg, few, seed)
            shallow = kinds.MODELS[cfg.model.kind].family == "shallow"
            assert isinstance(network.net, ShallowNet if shallow else ModuleNet)
            built[key] = leaf_count(network.params)
        assert int(est["params"]) == built[key], (name, runs[0].label)
    text = show(sc)
    assert all(f"{int(est['params'])} parameters per seed" in text for _, est in points)


def test_show_counts_an_mlp_s_output_layer():
    """cohen-eos-quick: 64 digits inputs, widths [64, 64], 10 classes, biases:
    64·64 + 64 + 64·64 + 64 + 64·10 + 10 = 8 970 (the count once assumed one output: 8 385)."""
    assert "cohen-eos-quick: memory" in (text := show(load_scenario(find_scenario("cohen-eos-quick"))))
    assert "8970 parameters per seed" in text


def test_each_model_config_answers_its_size():
    mlp = typed.MlpModel(widths=(4, 3), bias=True, train=(0, 2))
    assert mlp.size(5, 2) == (5 * 4 + 4) + (3 * 2 + 2) and mlp.hidden() == 7
    assert typed.MlpModel(widths=(4,), bias=False).size(5, 2) == 5 * 4 + 4 * 2
    assert typed.ShallowModel(width=6).size(3, 2) == 18
    assert typed.ShallowModel(width=6, output="trained").size(3, 2) == 18 + 12
    assert typed.EmbeddedModel(width=6, embedding="quadratic").size(3, 1) == 6 * 9
    assert typed.EmbeddedModel(width=6, embedding="random-features", features=11).inputs(3) == 11
    assert typed.PythonModel(factory="tests.helpers:mlp_factory").size(3, 1) is None
