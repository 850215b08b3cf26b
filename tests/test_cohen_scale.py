"""The papers' scale: `cohen-scale-quick` (Cohen et al.'s fc-tanh shrunk to 192-200-200-10 on 500
synthetic images) and `cohen-scale` (784-200-200-10 on the shipped 5 000 MNIST images).

Fast: both load, with the parameter counts of the networks they name. Slow: cohen-scale-quick
runs end to end (a few minutes on 2 cores) and shows its claims on the archive.
"""

import numpy as np
import pytest

import flowsim
from flowsim.cli import main
from flowsim.config import find_scenario, load_scenario
from flowsim.run.resources import point_estimates


def mlp_parameters(sizes):
    return sum(a * b + b for a, b in zip(sizes, sizes[1:]))


@pytest.mark.parametrize("name, sizes, n", [("cohen-scale-quick", [192, 200, 200, 10], 500),
                                            ("cohen-scale", [784, 200, 200, 10], 5000)])
def test_the_scale_scenarios_load_with_their_parameter_counts(name, sizes, n):
    scenario = load_scenario(find_scenario(name))
    ((runs, estimate),) = point_estimates(scenario)
    assert estimate["params"] == mlp_parameters(sizes) == {"cohen-scale-quick": 80_810, "cohen-scale": 199_210}[name]
    assert (estimate["n"], estimate["d"]) == (n, sizes[0])
    cfg = runs[0].settings
    assert cfg.loss.kind == "half-sse-mean" and cfg.model.activation == "tanh"
    flow = [s for s in cfg.run.solvers if s.kind == "flow"]
    assert [(s.method, s.pcoeff, s.icoeff) for s in flow] == [("rock4", 0.3, 0.3)]


def test_show_prints_the_parameter_count(capsys):
    assert main(["show", "cohen-scale"]) == 0
    assert "199210 parameters per seed" in capsys.readouterr().out


@pytest.mark.slow
def test_cohen_scale_quick_sharpens_past_the_edge_of_gd(tmp_path):
    """The flow sharpens; GD at η = 0.04 reaches 2/η = 50 and stays within 20 % of it, its loss
    still falling; the flow's leg is done, error-controlled, for about GD's gradients."""
    out = tmp_path / "cohen-scale-quick.h5"
    assert main(["run", "cohen-scale-quick", "-o", str(out), "-q"]) == 0
    with flowsim.open(out) as arch:
        run = arch.runs["seed0"]
        flow = run.solvers["rock4-pi"]
        sharp, status, stats = np.asarray(flow["sharpness"]), flow.status, flow.stats
        gd = run.solvers["gd-0.04"]
        gd_sharp, gd_loss = np.asarray(gd["sharpness"]), np.asarray(gd["loss"])
    assert status == "done"
    assert sharp[-1] > 2.0 * sharp[0] and sharp[-1] > 2 / 0.04, sharp
    assert gd_sharp[0] < 2 / 0.04 and abs(gd_sharp[-1] - 2 / 0.04) <= 0.2 * (2 / 0.04), gd_sharp
    assert gd_loss[-1] < gd_loss[gd_loss.size // 2] < gd_loss[1], gd_loss
    assert stats["vf_evals"] + stats.get("hvps", 0) < 4 * 1000, stats
