"""`cohen-eos-quick`: Cohen et al. (ICLR 2021)'s two findings on a deep tanh network, asserted
on the archive the catalog scenario writes (slow: about a minute on 2 cores);
`cohen-eos-long-quick`, 5× longer, whose flow is stiff and solved by rock4; and
`central-cohen-eos`, the same network with GD's central flow.

1. Progressive sharpening: the flow's sharpness rises (after its first dip).
2. Edge of stability: each GD whose 2/η lies below the flow's final sharpness ends with its
   sharpness within 20 % of 2/η, while its loss still falls over the long run.
"""

import numpy as np
import pytest

import flowsim
from flowsim.cli.command import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    out = tmp_path_factory.mktemp("eos") / "cohen-eos-quick.h5"
    assert main(["run", "cohen-eos-quick", "-o", str(out), "-q"]) == 0
    return out


def test_progressive_sharpening_then_gd_at_the_edge_of_stability(archive):
    with flowsim.open(archive) as arch:
        run = arch.runs["seed0"]
        flow = np.asarray(run.solvers["rock4"]["sharpness"])
        gds = {s.name: (s.preset["learning_rate"], np.asarray(s["sharpness"]), np.asarray(s["loss"]))
               for s in run.solvers.values() if s.discrete}
    assert flow[-1] > 1.25 * flow.min() and flow[-1] > flow[0], flow
    at_edge = {name: v for name, v in gds.items() if 2 / v[0] < flow[-1]}
    assert len(at_edge) >= 3, (flow[-1], list(gds))
    for name, (eta, sharp, loss) in at_edge.items():
        assert sharp[0] < 2 / eta, (name, sharp[0])                   # it starts stable
        assert abs(sharp[-1] - 2 / eta) <= 0.2 * (2 / eta), (name, eta, sharp[-1])
        half = loss.size // 2
        assert loss[-1] < loss[half] < loss[1], (name, loss[[1, half, -1]])


def test_compare_draws_the_sharpness_against_two_over_eta(archive, tmp_path, capsys):
    assert main(["compare", str(archive), "-o", str(tmp_path / "figs")]) == 0
    table = capsys.readouterr().out
    assert "stability gd-1.0" in table
    assert any(p.suffix == ".png" for p in (tmp_path / "figs").iterdir())


def test_plot_draws_loss_and_sharpness_with_each_stability_limit(archive, tmp_path):
    from flowsim.plots import figure_sharpness, gather, plot_archive

    written = plot_archive(archive, tmp_path, formats=("png",))
    assert tmp_path / "cohen-eos-quick-sharpness.png" in written
    with flowsim.open(archive) as arch:
        fig = figure_sharpness(gather(arch), "cohen-eos-quick")
    sharp = fig.axes[1]
    limits = sorted(round(line.get_ydata()[0], 9) for line in sharp.lines if line.get_linestyle() == ":")
    assert limits == sorted(round(2 / eta, 9) for eta in (0.9, 1.0, 1.1))


def test_a_long_stiff_flow_by_rock4_beside_gd_at_the_edge(tmp_path):
    """cohen-eos-long-quick (t = 9 900): the flow's sharpness ends ≥ 15 % above every GD's 2/η
    (measured 2.61 against 2.22, 2.0, 1.82), each GD's within 20 % of its 2/η; rock4 reaches
    the end for no more evaluations and HVPs than GD η = 0.9's gradients (measured 0.92×),
    none of its steps held by stability, and its ρ estimate (safety 1.2) stays between the
    sharpness and 1.25× it (measured 1.17–1.20)."""
    out = tmp_path / "long.h5"
    assert main(["run", "cohen-eos-long-quick", "-o", str(out), "-q"]) == 0
    with flowsim.open(out) as arch:
        run = arch.runs["seed0"]
        flow = run.solvers["rock4"]
        sharp, rho, stats = np.asarray(flow["sharpness"]), np.asarray(flow["rho"]), flow.stats
        gds = {s.name: (s.preset["learning_rate"], np.asarray(s["sharpness"]), s.stats)
               for s in run.solvers.values() if s.discrete}
    assert flow.status == "done" and stats["stiff_steps"] == 0
    for name, (eta, gd_sharp, _) in gds.items():
        assert sharp[-1] >= 1.15 * 2 / eta, (name, sharp[-1])
        assert abs(gd_sharp[-1] - 2 / eta) <= 0.2 * (2 / eta), (name, gd_sharp[-1])
    assert stats["vf_evals"] + stats["hvps"] <= gds["gd-0.9"][2]["steps"], stats
    assert np.all((rho >= sharp) & (rho <= 1.25 * sharp)), rho / sharp


def test_central_flow_at_the_edge_on_cohen_eos(tmp_path):
    """`central-cohen-eos` at η = 1.1 (its other legs left out, and rows every 19.8 time units
    instead of 9.9, still finer than the 50 GD steps GD's loss is smoothed over: observing
    the sharpness is most of each leg's time): the central
    flow holds its sharpness at 2/η where the flow's rises to 2.31, predicts GD's smoothed loss
    after the onset (measured 3.6 %; the issue's bound 10 %), and is closer to GD's weights
    than the flow at the end (0.57 against 0.66) and from the onset on (compare's headline:
    the ratio of the mean distances 0.915, the median per-row ratio 0.910), though not by the
    issue's factor 4: GD is 0.29 from both at the onset (module docstring of
    scenarios/central-cohen-eos.toml)."""
    from flowsim.analysis.compare import compare_archive
    keep = ('run.solvers = ["rock4", {name = "gd-1.1", kind = "gd", learning_rate = 1.1}, '
            '{name = "gd-1.1-twin", kind = "gd", learning_rate = 1.1, perturbation = 1e-12}, '
            '{name = "central-1.1", kind = "central-flow", learning_rate = 1.1, method = "rock4", '
            'rtol = 1e-5, atol = 1e-7, pcoeff = 0.3, icoeff = 0.3}]')
    out = tmp_path / "central-cohen-eos.h5"
    assert main(["run", "central-cohen-eos", "-o", str(out), "-q", "--set", keep,
                 "--set", "run.checkpoints={count=100}"]) == 0
    (track,) = compare_archive(out).central
    assert track.twin == "gd-1.1-twin" and track.onset is not None
    edge = 2 / 1.1
    assert abs(track.sharp_central[-1] - edge) <= 1e-3 * edge        # held at 2/η
    assert track.sharp_flow[-1] > 1.2 * edge                          # the flow sharpens past it
    assert abs(track.sharp_gd[-1] - edge) <= 0.05 * edge              # GD at its edge
    assert track.mean_after(track.loss_error) <= 0.10
    assert track.d_central[-1] < 0.95 * track.d_flow[-1]
    assert track.ratio_of_means < 1 and track.median_ratio < 1
    # the noise floor: the twin leaves GD in the catapults (up to 0.21) and ends 0.033 from it,
    # well below the central flow's distance
    assert track.floor[0] < 1e-9 and track.floor[-1] < 0.2 * track.d_central[-1]
