"""GD beside its central flow (Cohen et al. 2025): for each GD / central-flow pair of the same
η, the loss (GD raw and smoothed, the central flow's predicted loss, the gradient flow), the
sharpness (GD, the central flow's tracked top eigenvalue, the gradient flow) with the line
2/η, and GD's distances to the central flow, to the gradient flow and to its twin (the noise
floor) over time; the numbers are `flowsim.analysis.compare_central`'s, so the figure shows what
`flowsim compare` reports."""

from __future__ import annotations

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from flowsim.analysis.compare_central import SMOOTH_STEPS, CentralTrack

MAX_ROWS = 6      # pairs drawn (one row each); the title says how many more the archive holds
GD, SMOOTHED, CENTRAL, FLOW = "tab:orange", "tab:red", "tab:blue", "0.2"


def _onset(ax: Axes, tr: CentralTrack) -> None:
    if tr.onset is not None:
        ax.axvline(tr.t[tr.onset], color="0.5", ls=":", lw=1.0)


def _flow_kind(tr: CentralTrack) -> str:
    """What the pair's flow is: GD's gradient flow, or an adaptive method's stable flow."""
    return "gradient flow" if tr.sharpness == "sharpness" else "stable flow"


def panel_loss(ax: Axes, tr: CentralTrack) -> None:
    """GD's loss at its checkpoints and smoothed, the central flow's predicted loss, the flow's."""
    drawn = []
    if tr.loss_gd is not None:
        drawn += [ax.plot(tr.t, tr.loss_gd, color=GD, lw=0.8, alpha=0.6, label=f"{tr.gd} (raw)"),
                  ax.plot(tr.t, tr.loss_smoothed, color=SMOOTHED, lw=1.8,
                          label=f"{tr.gd} smoothed (Gaussian, σ = {SMOOTH_STEPS:g} steps)")]
    if tr.predicted is not None:
        drawn.append(ax.plot(tr.t, tr.predicted, color=CENTRAL, lw=1.6, ls="--",
                             label=f"{tr.central}: predicted loss L + ½⟨∇²L, Σ⟩"))
    if tr.loss_flow is not None:
        drawn.append(ax.plot(tr.t, tr.loss_flow, color=FLOW, lw=1.4, ls=":", label=f"{tr.flow} ({_flow_kind(tr)})"))
    _onset(ax, tr)
    if drawn:
        values = np.concatenate([a for a in (tr.loss_gd, tr.predicted, tr.loss_flow) if a is not None])
        if np.any(values[np.isfinite(values)] > 0):
            ax.set_yscale("log")
        ax.legend(fontsize=8, loc="upper right")
    ax.set_ylabel("training loss")


def panel_sharpness(ax: Axes, tr: CentralTrack) -> None:
    """GD's sharpness, the central flow's (its `sharpness` observable where recorded, and its
    top tracked eigenvalue central_eig1), the flow's, and 2/η."""
    for values, colour, ls, label in ((tr.sharp_gd, GD, "-", tr.gd),
                                      (tr.sharp_central_observed, CENTRAL, "-", f"{tr.central} (`{tr.sharpness}`)"),
                                      (tr.sharp_central, CENTRAL, "--", f"{tr.central} (central_eig1: tracked)"),
                                      (tr.sharp_flow, FLOW, ":", f"{tr.flow} ({_flow_kind(tr)})")):
        if values is not None:
            ax.plot(tr.t, values, color=colour, ls=ls, lw=1.4, label=label)
    ax.axhline(2 / tr.eta, color="0.35", ls=":", lw=1.2)
    ax.annotate(f"2/η = {2 / tr.eta:.4g}", (0.01, 2 / tr.eta), xycoords=("axes fraction", "data"), ha="left",
                va="bottom", fontsize=8, color="0.35")
    # a flow far past the edge (RMSProp's stable flow: 143 × 2/η on central-rmsprop) would
    # flatten the held line on a linear axis
    if tr.sharp_flow is not None and np.nanmax(tr.sharp_flow) > 10 * 2 / tr.eta:
        ax.set_yscale("log")
    _onset(ax, tr)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_ylabel(r"rate $\cdot\ \lambda_{\max}(\nabla^2 L)$" if tr.sharpness == "sharpness"
                  else r"rate $\cdot\ \lambda_{\max}(P^{-1/2}\nabla^2 L P^{-1/2})$")


def panel_distances(ax: Axes, tr: CentralTrack) -> None:
    """‖GD − central‖, ‖GD − flow‖ and the noise floor ‖GD − twin‖ at the matched times, with
    compare's headline (the ratio of the mean distances and the median per-row ratio from the
    onset on) in the legend. t = 0, where every distance is 0, is left off the log scale."""
    later = tr.t > 0
    drawn = False
    for values, colour, ls, label in ((tr.d_central, CENTRAL, "-", f"‖{tr.gd} − {tr.central}‖"),
                                      (tr.d_flow, FLOW, ":", f"‖{tr.gd} − {tr.flow}‖ ({_flow_kind(tr)})"),
                                      (tr.floor, "0.6", "-", f"‖{tr.gd} − {tr.twin}‖ (noise floor)")):
        if values is not None:
            ax.plot(tr.t[later], values[later], color=colour, ls=ls, lw=1.4, label=label)
            drawn = True
    _onset(ax, tr)
    if drawn:
        ax.set_yscale("log")
        if tr.onset is not None and tr.d_flow is not None:
            # an invisible line carries the headline into the legend
            ax.plot([], [], " ", label=f"from the onset on: ratio of the means {tr.ratio_of_means:.3g}, "
                                       f"median ratio {tr.median_ratio:.3g}")
        ax.legend(fontsize=8, loc="lower right")
    ax.set_ylabel(rf"$\|\theta_{{\mathrm{{{tr.method}}}}} - \theta\|$")


def figure_central(tracks: list[CentralTrack], name: str) -> Figure | None:
    """One row (loss, sharpness, distances) per GD / central-flow pair, at most MAX_ROWS; None
    without a pair. A dotted vertical line marks the onset (GD's sharpness first at 2/η)."""
    if not tracks:
        return None
    shown = tracks[:MAX_ROWS]
    fig = Figure(figsize=(18, 4.4 * len(shown) + 0.6), layout="constrained", dpi=110)
    grid = fig.subplots(len(shown), 3, squeeze=False)
    for (ax_l, ax_s, ax_d), tr in zip(grid, shown):
        head = f"{tr.run}: {tr.gd} beside {tr.central} (η = {tr.eta:g})"
        panel_loss(ax_l, tr)
        panel_sharpness(ax_s, tr)
        panel_distances(ax_d, tr)
        ax_l.set_title(f"{head}: loss", loc="left", fontsize=10)
        ax_s.set_title(f"{head}: sharpness", loc="left", fontsize=10)
        ax_d.set_title(f"{head}: distances in weights", loc="left", fontsize=10)
        for ax in (ax_l, ax_s, ax_d):
            ax.set_xlabel("flow time t = kη")
            ax.grid(True, which="major", alpha=0.3)
    more = f"   ({len(tracks) - len(shown)} more pair(s) not drawn)" if len(tracks) > len(shown) else ""
    fig.suptitle(f"{name}: each discrete leg beside its central flow; dotted vertical: the onset{more}", fontsize=13)
    return fig
