"""Caron et al. Fig. 1 and the train/test loss figure, from `Trace` objects.

- ``fig1``: the four panels -- (a) training loss, (b) ``‖w_tj − w_0j‖`` of the largest
  movers, (c) ``‖Θ̂_t − Θ̂_0‖₂``, (d) ``eig_min Θ̂_t`` -- with the theory overlays of
  Caron Thm 4.1/5.1 (`flowsim.theory.caron_eig_bound` on (d), `caron_loss_bound` on (a));
- ``test``: train and test loss, when ``test_loss`` is recorded.

One ``panel_*`` function draws each panel; the figures are plain ``Figure`` objects.
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from flowsim import theory
from flowsim.config.typed import Config, ShallowModel
from flowsim.integrate.registry import DISCRETE_KINDS

from .reader import TOP_NODES, Trace
from .style import (
    Style,
    draw,
    legends,
    not_recorded,
    one_per_point,
    quiet,
    seeds_note,
    set_time_axis,
    set_y_auto_log,
    with_series,
)


def _theory_gamma(params: Config) -> float | None:
    """γ of Caron's bounds: 1 for NTK, the scaling's gamma for the asymmetric families;
    None for the other scalings and for models without node scaling (embedded)."""
    if not isinstance(params.model, ShallowModel):
        return None
    sc = params.model.scaling
    if sc.kind == "ntk":
        return 1.0
    if sc.kind in ("asymmetric", "single", "finite", "custom"):
        return float(sc.gamma)
    return None


def theory_constants(tr: Trace) -> tuple[float, float] | None:
    """(γ, κ_n) of the run's Caron bounds; None when not available or γκ_n is not positive."""
    gamma, kappa = _theory_gamma(tr.params), tr.init.get("kappa_n")
    if gamma is None or kappa is None or not math.isfinite(kappa) or gamma * kappa <= 0:
        return None
    return gamma, kappa


def panel_loss(ax: Axes, traces: list[Trace], style: Style, *, name: str = "loss",
               title: str = "(a) training loss", bound: bool = True) -> None:
    """Loss vs t (log y) with the flow bound L_0 exp(−γκ_n t/2) for half-sse losses."""
    ax.set_title(title, loc="left", fontsize=11)
    have = with_series(traces, name)
    if not have:
        not_recorded(ax, name.replace("_", " "))
        return
    for tr in have:
        draw(ax, tr, tr.series[name], style)
    set_time_axis(ax, have)
    ax.set_yscale("log", nonpositive="mask")
    ax.set_ylabel("test loss" if name == "test_loss" else r"$L(W_t)$")
    _clip_top(ax, have, name)
    if bound:
        _loss_bound(ax, have, style)


def _clip_top(ax: Axes, have: list[Trace], name: str) -> None:
    """Keep a diverging run from squashing the others: top at 100 × the largest L_0
    (an early-end × beyond it is drawn on the top edge)."""
    start = [np.nanmax(tr.series[name][:, 0]) for tr in have if np.isfinite(tr.series[name][:, 0]).any()]
    peak = max(float(np.nanmax(tr.series[name])) for tr in have)
    if not (start and peak > 100 * max(start) > 0):
        return
    top = 100 * max(start)
    ax.set_ylim(top=top)
    for line in ax.lines:
        if line.get_marker() == "x":
            line.set_ydata(np.minimum(np.asarray(line.get_ydata(), float), top))


def _loss_bound(ax: Axes, have: list[Trace], style: Style) -> None:
    ylim = ax.get_ylim()
    for tr in one_per_point(have):
        loss_kind = tr.params.loss.kind
        constants = theory_constants(tr)
        if loss_kind != "half-sse" or constants is None:
            continue
        l0 = tr.init.get("loss0")
        if l0 is None:
            l0 = float(quiet(np.nanmean, tr.series["loss"][:, 0]))
        t = np.geomspace(max(tr.t[tr.t > 0].min(initial=1.0) / 10, 1e-12), tr.t.max(), 200) \
            if ax.get_xscale() == "symlog" else np.linspace(0, tr.t.max(), 200)
        t = np.concatenate([[0.0], t])
        ax.plot(t, theory.caron_loss_bound(t, l0, *constants), color=style.colour[tr.point], ls=":",
                lw=1.2, alpha=0.8)
    ax.set_ylim(ylim)


def panel_weight_change(ax: Axes, traces: list[Trace], style: Style) -> None:
    """The largest mover's ‖w_tj − w_0j‖ (bold, band over seeds) and ranks 2–5 (thin): hidden
    nodes of a shallow network, trainable leaves of a user's model (flowsim.simulate)."""
    per_leaf = any(tr.params.model.kind == "module" for tr in traces)
    unit, symbol = ("trainable leaves", r"\theta_{\ell}") if per_leaf else ("nodes", "w_{j}")
    ax.set_title(f"(b) weight change of the top-{TOP_NODES} {unit} (per seed, by final value)",
                 loc="left", fontsize=11)
    have = with_series(traces, "weight_change_top")
    if not have:
        not_recorded(ax, "weight change")
        return
    for tr in have:
        top = tr.series["weight_change_top"]            # (seeds, k, r)
        for r in range(1, top.shape[2]):
            draw(ax, tr, top[:, :, r], style, band=False, lw=0.7, alpha=0.45, mark=False)
        draw(ax, tr, top[:, :, 0], style)
    set_time_axis(ax, have)
    set_y_auto_log(ax, [tr.series["weight_change_top"][:, 1:] for tr in have])
    ax.set_ylabel(rf"$\|{symbol}(t) - {symbol}(0)\|$" + "\n"
                  f"(bold: largest mover, thin: ranks 2–{TOP_NODES})")


def panel_ntg_change(ax: Axes, traces: list[Trace], style: Style) -> None:
    """Spectral norm of the NTG change since t = 0."""
    ax.set_title("(c) NTG change", loc="left", fontsize=11)
    have = with_series(traces, "ntg_change")
    if not have:
        not_recorded(ax, "NTG change")
        return
    for tr in have:
        draw(ax, tr, tr.series["ntg_change"], style)
    set_time_axis(ax, have)
    set_y_auto_log(ax, [tr.series["ntg_change"][:, 1:] for tr in have])
    ax.set_ylabel(r"$\|\hat\Theta_t - \hat\Theta_0\|_2$  (spectral)")


def panel_eig_min(ax: Axes, traces: list[Trace], style: Style) -> None:
    """Smallest NTG eigenvalue, with Caron's lower bound γκ_n/4 (dotted) per point."""
    ax.set_title("(d) smallest NTG eigenvalue", loc="left", fontsize=11)
    have = with_series(traces, "eig_min")
    if not have:
        not_recorded(ax, "NTG eigenvalues")
        return
    for tr in have:
        draw(ax, tr, tr.series["eig_min"], style)
    for tr in one_per_point(have):
        constants = theory_constants(tr)
        if constants is not None:
            ax.axhline(theory.caron_eig_bound(*constants), color=style.colour[tr.point], ls=":", lw=1.2,
                       alpha=0.9)
    set_time_axis(ax, have)
    set_y_auto_log(ax, [tr.series["eig_min"] for tr in have], decades=1.5)
    ax.set_ylabel(r"$\lambda_{\min}(\hat\Theta_t)$")


def figure_fig1(traces: list[Trace], name: str) -> Figure:
    """The four-panel figure of Caron et al. Fig. 1 (a Figure with four axes)."""
    fig = Figure(figsize=(12, 9.5), layout="constrained", dpi=110)
    axes = fig.subplots(2, 2).ravel()
    style = Style.of(traces)
    panel_loss(axes[0], traces, style)
    panel_weight_change(axes[1], traces, style)
    panel_ntg_change(axes[2], traces, style)
    panel_eig_min(axes[3], traces, style)
    for ax in axes:
        if ax.has_data():
            ax.grid(True, which="major", alpha=0.3)
    fig.suptitle(f"{name}   ({seeds_note(traces)})" if traces else name, fontsize=13)
    if traces:
        legends(fig, traces, style, theory=any(theory_constants(tr) is not None for tr in traces))
    return fig


def figure_test(traces: list[Trace], name: str) -> Figure | None:
    """Train and test loss per point (None when test_loss is not recorded)."""
    if not with_series(traces, "test_loss"):
        return None
    fig = Figure(figsize=(12, 5.5), layout="constrained", dpi=110)
    axes = fig.subplots(1, 2)
    style = Style.of(traces)
    panel_loss(axes[0], traces, style, title="training loss", bound=False)
    panel_loss(axes[1], traces, style, name="test_loss", title="test loss", bound=False)
    for ax in axes:
        ax.grid(True, which="major", alpha=0.3)
    fig.suptitle(f"{name}: train and test loss   ({seeds_note(traces)})", fontsize=13)
    legends(fig, traces, style, theory=False)
    return fig


def panel_sharpness(ax: Axes, traces: list[Trace], style: Style) -> None:
    """rate·λ_max(∇²L) vs t, with each discrete solver's stability limit 2/η dotted and
    labelled: GD is linearly stable below it, and at the edge of stability it hovers there."""
    ax.set_title("(b) sharpness; dotted: 2/η of each GD", loc="left", fontsize=11)
    have = with_series(traces, "sharpness")
    for tr in have:
        draw(ax, tr, tr.series["sharpness"], style)
    limits = sorted({float(tr.preset.learning_rate) for tr in have if tr.preset.kind in DISCRETE_KINDS})
    for eta in limits:
        ax.axhline(2 / eta, color="0.35", ls=":", lw=1.2)
        ax.annotate(f"2/η, η = {eta:g}", (0.01, 2 / eta), xycoords=("axes fraction", "data"), ha="left",
                    va="bottom", fontsize=8, color="0.35")
    set_time_axis(ax, have)
    ax.set_ylabel(r"rate $\cdot\ \lambda_{\max}(\nabla^2 L)$")


def figure_sharpness(traces: list[Trace], name: str) -> Figure | None:
    """Training loss and sharpness against time, with the 2/η lines (Cohen et al. 2021's
    figure; None when sharpness is not recorded)."""
    if not with_series(traces, "sharpness"):
        return None
    fig = Figure(figsize=(12, 5.5), layout="constrained", dpi=110)
    axes = fig.subplots(1, 2)
    style = Style.of(traces)
    panel_loss(axes[0], traces, style, bound=False)
    panel_sharpness(axes[1], traces, style)
    for ax in axes:
        ax.grid(True, which="major", alpha=0.3)
    fig.suptitle(f"{name}: loss and sharpness   ({seeds_note(traces)})", fontsize=13)
    legends(fig, traces, style, theory=False)
    return fig
