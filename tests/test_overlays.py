"""The theory lines on the figures are `flowsim.nn.theory`'s values, to 1e-12 relative:
Caron's γκ_n/4 and L_0 exp(−γκ_n t/2) on Fig. 1, Chen's L_0 exp(−r ĉ² λ_min(G) t) on exp. 1."""

from __future__ import annotations

import numpy as np
import pytest
from test_plots import make_archive

from flowsim import archive
from flowsim.nn import theory
from flowsim.plots import chen, figure_fig1, gather
from flowsim.config import scenarios_dir

RTOL = 1e-12


def dotted(ax):
    return [ln for ln in ax.lines if ln.get_linestyle() == ":"]


def point_constants(arch) -> list[tuple[float, float, float]]:
    """(γ, κ_n seed-mean, L_0 seed-mean) per sweep point, read from the archive."""
    out = {}
    for run in arch.runs.values():
        sc = run.params["model"]["scaling"]
        gamma = 1.0 if sc["kind"] == "ntk" else float(sc["gamma"])
        k, l0 = float(run.init["kappa_n"]), float(run.init["loss0"])
        out.setdefault(run.point, (gamma, [], []))[1].append(k)
        out[run.point][2].append(l0)
    return [(g, float(np.mean(k)), float(np.mean(l))) for _, (g, k, l) in sorted(out.items())]


def test_caron_overlays_are_the_theory_bounds(tmp_path):
    path = make_archive(tmp_path / "fig1.h5")
    with archive.open(path) as arch:
        fig = figure_fig1(gather(arch), "overlays")
        constants = point_constants(arch)
    eig_lines, loss_lines = dotted(fig.axes[3]), dotted(fig.axes[0])
    assert len(eig_lines) == len(loss_lines) == len(constants) == 2
    for (gamma, kappa, l0), eig, loss in zip(constants, eig_lines, loss_lines):
        np.testing.assert_allclose(eig.get_ydata(), theory.caron_eig_bound(gamma, kappa), rtol=RTOL, atol=0)
        t = np.asarray(loss.get_xdata(), float)
        assert t[0] == 0.0 and t[-1] == 2000.0
        np.testing.assert_allclose(loss.get_ydata(), theory.caron_loss_bound(t, l0, gamma, kappa), rtol=RTOL, atol=0)


@pytest.mark.slow
def test_chen_overlay_is_the_theory_rate(tmp_path, capsys, monkeypatch):
    from flowsim.cli import command as cli

    monkeypatch.setenv("FLOWSIM_CACHE_DIR", "")   # leave this process's JAX config alone
    out = tmp_path / "exp1.h5"
    sets = ["model.width=8", "data.d=4", 'sweep={"data.n"=[3, 8]}', "run.t_end=2.0",
            "run.checkpoints={count=4}", 'run.solvers=["gd-lr1"]']
    rc = cli.main(["run", str(scenarios_dir() / "chen-exp1-quick.toml"), "-o", str(out), "-q",
                   *(a for s in sets for a in ("--set", s))])
    assert rc == 0, capsys.readouterr().err[-3000:]
    with archive.open(out) as arch:
        runs = chen.read_runs(arch)
    fig = chen.figure_exp1(runs, "exp1")
    (line,) = dotted(fig.axes[0])            # only the point with n ≤ d has the overlay
    group = [r for r in runs if r.params.data.n == 3]
    assert len(group) == 2                   # two seeds, averaged
    lam, rate, c_hat, l0 = (float(np.mean([r.scalar(k) for r in group]))
                            for k in ("G_lambda_min", "chen_r", "c_hat", "loss0"))
    assert lam > 1e-10
    t = np.asarray(line.get_xdata(), float)
    assert t[-1] == pytest.approx(2.0)
    np.testing.assert_allclose(line.get_ydata(), theory.chen_loss_bound(t, l0, rate, c_hat, lam), rtol=RTOL, atol=0)
