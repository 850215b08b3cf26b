"""Caron et al. Fig. 1 and the train/test loss figure, from `Trace` objects.

- ``fig1``: the four panels -- (a) training loss, (b) ``‖w_tj − w_0j‖`` of the largest
  movers, (c) ``‖Θ̂_t − Θ̂_0‖₂``, (d) ``eig_min Θ̂_t`` -- with the theory overlays of
  Caron Thm 4.1/5.1 (`flowsim.nn.theory.caron_eig_bound` on (d), `caron_loss_bound` on (a));
- ``test``: train and test loss, when ``test_loss`` is recorded.

One ``panel_*`` function draws each panel; the figures are plain ``Figure`` objects.
"""

from __future__ import annotations

import math

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from flowsim.nn import theory
from flowsim.config.typed import Config, ShallowModel
from flowsim.kinds.solvers import DISCRETE_KINDS

from .traces import PER_LEAF_MODELS, TOP_NODES, Trace
from .style import (
    Style,
    draw,
    legends,
    name_ends,
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
        ax.plot(t, theory.caron_loss_bound(t, l0, *constants), color=style.of_point(tr.point), ls=":",
                lw=1.2, alpha=0.8)
    ax.set_ylim(ylim)


def panel_weight_change(ax: Axes, traces: list[Trace], style: Style, letter: str = "b") -> None:
    """The largest mover's ‖w_tj − w_0j‖ (bold, band over seeds) and ranks 2–5 (thin): hidden
    nodes of a shallow network, ranked per seed; or the trainable leaves of an Equinox
    model (flowsim.simulate, the mlp and python kinds), ranked over every run and named."""
    if any(tr.params.model.kind in PER_LEAF_MODELS for tr in traces):
        _leaf_change(ax, traces, style, letter)
        return
    ax.set_title(f"({letter}) weight change of the top-{TOP_NODES} nodes (per seed, by final value)",
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
    ax.set_ylabel(r"$\|w_{j}(t) - w_{j}(0)\|$" + "\n" f"(bold: largest mover, thin: ranks 2–{TOP_NODES})")


def _leaf_change(ax: Axes, traces: list[Trace], style: Style, letter: str) -> None:
    """‖θ_ℓ(t) − θ_ℓ(0)‖ of the leaves that moved most (largest final value over every run),
    each named at its curve's end."""
    have = with_series(traces, "weight_change")
    ax.set_title(f"({letter}) weight change per trainable leaf"
                 + (f" (top {TOP_NODES})" if have and have[0].series["weight_change"].shape[2] > TOP_NODES else ""),
                 loc="left", fontsize=11)
    if not have:
        not_recorded(ax, "weight change")
        return
    # a sweep of the depth changes the leaves: the runs shaped like the first are drawn
    have = [tr for tr in have if tr.series["weight_change"].shape[2] == have[0].series["weight_change"].shape[2]]
    # each leaf's largest final value over every run (NaN where every run ended early)
    final = quiet(np.nanmax, np.concatenate([tr.series["weight_change"][:, -1] for tr in have]), axis=0)
    top = np.argsort(np.where(np.isfinite(final), final, -np.inf))[::-1][:TOP_NODES]
    names = list(getattr(have[0].params.model, "leaves", ())) or [f"leaf {i}" for i in range(final.size)]
    for rank, leaf in enumerate(top):
        for tr in have:
            draw(ax, tr, tr.series["weight_change"][:, :, leaf], style, band=rank == 0,
                 lw=1.6 if rank == 0 else 0.9, alpha=1.0 if rank == 0 else 0.6, mark=rank == 0)
    set_time_axis(ax, have)
    set_y_auto_log(ax, [tr.series["weight_change"][:, 1:] for tr in have])
    # each name beside the axes at the height of its curve's end (the first run's)
    name_ends(ax, [(float(quiet(np.nanmean, have[0].series["weight_change"][:, -1, i])), names[i]) for i in top])
    ax.set_ylabel(r"$\|\theta_{\ell}(t) - \theta_{\ell}(0)\|$ (bold: the largest mover)")


def panel_ntg_change(ax: Axes, traces: list[Trace], style: Style, letter: str = "c") -> None:
    """Spectral norm of the NTG change since t = 0."""
    ax.set_title(f"({letter}) NTG change", loc="left", fontsize=11)
    have = with_series(traces, "ntg_change")
    if not have:
        not_recorded(ax, "NTG change")
        return
    for tr in have:
        draw(ax, tr, tr.series["ntg_change"], style)
    set_time_axis(ax, have)
    set_y_auto_log(ax, [tr.series["ntg_change"][:, 1:] for tr in have])
    ax.set_ylabel(r"$\|\hat\Theta_t - \hat\Theta_0\|_2$  (spectral)")


def panel_eig_min(ax: Axes, traces: list[Trace], style: Style, letter: str = "d") -> None:
    """Smallest NTG eigenvalue, with Caron's lower bound γκ_n/4 (dotted) per point. The NTG
    is that of the first output: the title says so where the model has several."""
    outputs = max((getattr(tr.params.data, "outputs", 1) for tr in traces), default=1)
    first = f" (of output 0 of {outputs})" if outputs > 1 else ""
    ax.set_title(f"({letter}) smallest NTG eigenvalue{first}", loc="left", fontsize=11)
    have = with_series(traces, "eig_min")
    if not have:
        not_recorded(ax, "NTG eigenvalues")
        return
    for tr in have:
        draw(ax, tr, tr.series["eig_min"], style)
    for tr in one_per_point(have):
        constants = theory_constants(tr)
        if constants is not None:
            ax.axhline(theory.caron_eig_bound(*constants), color=style.of_point(tr.point), ls=":", lw=1.2,
                       alpha=0.9)
    set_time_axis(ax, have)
    set_y_auto_log(ax, [tr.series["eig_min"] for tr in have], decades=1.5)
    ax.set_ylabel(r"$\lambda_{\min}(\hat\Theta_t)$")


def figure_fig1(traces: list[Trace], name: str) -> Figure:
    """The panels of Caron et al. Fig. 1 that the archive records (four at most): those whose
    series it lacks are left out, and named under the title."""
    panels = [("training loss", ("loss",), lambda ax, letter: panel_loss(ax, traces, style, title=f"({letter}) "
                                                                         "training loss")),
              ("weight change", ("weight_change_top",), lambda ax, letter: panel_weight_change(ax, traces, style,
                                                                                             letter)),
              ("NTG change", ("ntg_change",), lambda ax, letter: panel_ntg_change(ax, traces, style, letter)),
              ("NTG eigenvalues", ("eig_min",), lambda ax, letter: panel_eig_min(ax, traces, style, letter))]
    shown = [p for p in panels if any(with_series(traces, s) for s in p[1])] or panels[:1]
    missing = [p[0] for p in panels if p not in shown]
    rows, cols = (1, len(shown)) if len(shown) <= 2 else (2, 2)
    fig = Figure(figsize=(12 if cols == 2 else 7, 5.2 * rows + 0.6), layout="constrained", dpi=110)
    grid = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in grid[len(shown):]:    # three panels: the fourth cell stays empty, without axes
        ax.remove()
    style = Style.of(traces)
    for ax, (_, _, panel), letter in zip(grid, shown, "abcd"):
        panel(ax, letter)
        if ax.has_data():
            ax.grid(True, which="major", alpha=0.3)
    title = f"{name}   ({seeds_note(traces)})" if traces else name
    fig.suptitle(title + (f"\nnot recorded: {', '.join(missing)}" if missing else ""), fontsize=13)
    if traces:
        letters = {p[0]: letter for p, letter in zip(shown, "abcd")}
        legends(fig, traces, style, theory=_theory_words(traces, letters))
    return fig


def _theory_words(traces: list[Trace], letters: dict[str, str]) -> str:
    """The legend's words for the bounds drawn, naming their panels by letter: γκ_n/4 on the
    eigenvalue panel, L_0 e^{−γκ_n t/2} on the loss panel (half-sse losses only); "" for none."""
    bounded = [tr for tr in traces if theory_constants(tr) is not None]
    parts = []
    if bounded and "NTG eigenvalues" in letters:
        parts.append(rf"$\gamma\kappa_n/4$ on ({letters['NTG eigenvalues']})")
    if "training loss" in letters and any(tr.params.loss.kind == "half-sse" for tr in bounded):
        parts.append(rf"$L_0\,e^{{-\gamma\kappa_n t/2}}$ on ({letters['training loss']})")
    return "theory: " + ", ".join(parts) if parts else ""


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
    legends(fig, traces, style)
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
    legends(fig, traces, style)
    return fig
