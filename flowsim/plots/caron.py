"""Caron et al. (2023) figures drawn from an archive's stored analyses and runs.

``caron_figures(path, name)`` returns the figures that apply to the archive (tag -> Figure):

- ``prune``: test risk (accuracy for one-hot targets) vs fraction of nodes removed, in
  increasing importance: solid λ_j‖w_j‖² (as written), dashed λ_j‖a_j‖² (as run); §8.2 Fig. 4/5;
- ``transfer``: external-network test risk (accuracy) vs number k of top features; Fig. 3;
- ``pca``: first two principal components of the learned features, at init and trained,
  coloured by class, one row per node scaling; appendix M, Fig. S.16;
- ``accuracy``: train and test accuracy through training (when recorded);
- ``lr-transfer``: final training loss vs step size, one curve per width, one panel per
  parameterisation; appendix N, Fig. S.18.

Mean over seeds with a min–max band; one colour per node scaling, as in the other figures.
"""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from flowsim import archive as _archive
from flowsim.archive.dataset import blocks
from flowsim.config.declare import from_dict
from flowsim.config.typed import Config, DescentPreset, Preset

from .labels import scaling_label, short_label
from .traces import gather, run_config, scenario_config
from .style import PALETTE, Style, draw, legends, mean_band

_IMP_STYLE = {"weight": "-", "lambda": "--"}
_IMP_NAME = {"weight": "λ‖w‖² (as written)", "lambda": "λ‖a‖² (as run)"}


def _mean_band(ax, x, ys, colour, ls="-", label=None):
    """`mean_band` at the pruning and transfer figures' line width."""
    mean_band(ax, x, ys, colour, ls=ls, lw=1.7, label=label)


def collect(arch) -> dict:
    """name -> {(point, solver): {"label", "params", "results": [(arrays, attrs) per seed]}}."""
    out: dict = defaultdict(dict)
    for run in arch.runs.values():
        config = run_config(run)
        for sname, view in run.solvers.items():
            for name, res in view.analysis.items():
                d = out[name].setdefault((run.point, sname), {"label": short_label(config, run.label),
                                                              "params": config, "results": []})
                d["results"].append(res)
    return out


def _classification(results) -> bool:
    return any("test_accuracy" in arr for arr, _ in results)


def figure_prune(groups: dict, name: str) -> Figure:
    first = next(iter(groups.values()))["results"]
    clf = _classification(first)
    keys = [("test_accuracy", "test accuracy"), ("train_accuracy", "train accuracy")] if clf else \
        [("test_risk", "test risk (mean squared error)"), ("train_risk", "train risk (mean squared error)")]
    if first[0][1]["loss_kind"] == "cross-entropy" and not clf:
        keys = [("test_risk", "test risk (cross-entropy)"), ("train_risk", "train risk (cross-entropy)")]
    fig = Figure(figsize=(12, 5), layout="constrained", dpi=110)
    axes = fig.subplots(1, 2)
    for c, ((point, solver), g) in enumerate(sorted(groups.items())):
        arr0, attrs = g["results"][0]
        imps = json.loads(attrs["importance"])
        m = arr0["counts"][-1]
        x = arr0["counts"] / m
        for ax, (key, title) in zip(axes, keys):
            if key not in arr0:
                continue
            for i, imp in enumerate(imps):
                ys = [arr[key][i] for arr, _ in g["results"]]
                _mean_band(ax, x, ys, PALETTE[c % 10], _IMP_STYLE.get(imp, ":"),
                           label=f"{g['label']}" if i == 0 else None)
            ax.set_title(title)
    for ax, (key, title) in zip(axes, keys):
        ax.set_xlabel("fraction of hidden nodes pruned (least important first)")
        ax.set_ylabel(title)
        ax.grid(True, alpha=0.3)
        if "risk" in key:
            ax.set_yscale("log")
    axes[0].legend(fontsize=8, loc="best", title="node scaling")
    axes[1].legend([Line2D([], [], color="k", ls=s) for s in _IMP_STYLE.values()],
                   list(_IMP_NAME.values()), fontsize=8, title="importance", loc="best")
    fig.suptitle(f"{name}: pruning (Caron et al. §8.2)", fontsize=13)
    return fig


def figure_transfer(groups: dict, name: str) -> Figure:
    first = next(iter(groups.values()))["results"]
    clf = _classification(first)
    panels = [("test_risk", "external net test risk")] + ([("test_accuracy", "external net test accuracy")] if clf else [])
    fig = Figure(figsize=(6.5 * len(panels), 5), layout="constrained", dpi=110)
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    for c, ((point, solver), g) in enumerate(sorted(groups.items())):
        arr0, attrs = g["results"][0]
        for ax, (key, title) in zip(axes, panels):
            ys = [arr[key][0] for arr, _ in g["results"]]
            _mean_band(ax, arr0["k"], ys, PALETTE[c % 10], label=g["label"])
            ax.set_title(title)
    src = first[0][1]
    for ax, (key, title) in zip(axes, panels):
        ax.set_xscale("log")
        if key == "test_risk":
            ax.set_yscale("log")
        ax.set_xlabel("number k of top features (importance λ‖w‖²)")
        ax.set_ylabel(title)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8, title="node scaling")
    fig.suptitle(f"{name}: transfer of the top-k features to a {src['hidden']}-unit ReLU net\n"
                 f"({src['steps']} GD steps, η = {src['learning_rate']}, "
                 f"{src['source']} split halved)", fontsize=11)
    return fig


def figure_pca(groups: dict, name: str) -> Figure:
    items = sorted(groups.items())
    fig = Figure(figsize=(8, 3.6 * len(items)), layout="constrained", dpi=100)
    axes = np.atleast_2d(fig.subplots(len(items), 2))
    for row, ((point, solver), g) in zip(axes, items):
        arr, _ = g["results"][0]
        labels = arr["labels"]
        discrete = np.allclose(labels, np.round(labels)) and len(np.unique(labels)) <= 20
        for ax, (key, ek, when) in zip(row, [("scores_init", "explained_init", "init"), ("scores", "explained", "trained")]):
            s = arr[key]
            ax.scatter(s[:, 0], s[:, 1], c=labels, cmap="tab10" if discrete else "viridis", s=6,
                       vmin=0 if discrete else None, vmax=9 if discrete else None)
            sep = arr["separation"][0 if when == "init" else 1]
            ax.set_title(f"{g['label']} · {when}\nPC var {arr[ek][0]:.2f}, {arr[ek][1]:.2f}; "
                         f"class separation {sep:.2f}", fontsize=9)
            ax.set_xticks([]); ax.set_yticks([])
    fig.suptitle(f"{name}: PCA of the hidden features (Caron et al. app. M)", fontsize=12)
    return fig


def figure_accuracy(arch, name: str) -> Figure | None:
    traces = gather(arch)
    if not any("test_accuracy" in tr.series for tr in traces):
        return None
    fig = Figure(figsize=(12, 5.5), layout="constrained", dpi=110)
    axes = fig.subplots(1, 2)
    style = Style.of(traces)
    for ax, key, title in zip(axes, ("accuracy", "test_accuracy"), ("train accuracy", "test accuracy")):
        for tr in traces:
            if key in tr.series:
                draw(ax, tr, tr.series[key], style)
        ax.set_xscale("log")
        ax.set_xlabel("t (flow time; GD: step × η)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"{name}: accuracy through training", fontsize=13)
    legends(fig, traces, style)
    return fig


def lr_transfer_table(arch) -> dict:
    """(scaling label, width) -> {learning_rate: [final loss per seed]} for a width×η sweep."""
    table: dict = defaultdict(lambda: defaultdict(list))
    for b in blocks(arch, series=("loss",)):
        preset = from_dict(Preset, b.preset)
        if not isinstance(preset, DescentPreset):
            continue
        model = from_dict(Config, b.params).model
        for i, status in enumerate(b.statuses):
            loss = b.own(i, "loss")
            if loss.size:
                final = float(loss[-1]) if status == "done" else float("nan")
                table[(scaling_label(model.scaling), int(model.width))][float(preset.learning_rate)].append(final)
    return table


def is_lr_sweep(arch) -> bool:
    settings = scenario_config(arch)
    sweep = settings.sweep if settings is not None else None
    return sweep is not None and "model.width" in sweep.axes and "run.solvers" in sweep.axes


def figure_lr_transfer(table: dict, name: str) -> Figure:
    kinds = sorted({k for k, _ in table})
    fig = Figure(figsize=(6 * len(kinds), 5), layout="constrained", dpi=110)
    axes = np.atleast_1d(fig.subplots(1, len(kinds), sharey=True))
    for ax, kind in zip(axes, kinds):
        widths = sorted(w for k, w in table if k == kind)
        cmap = [PALETTE[i % 10] for i in range(len(widths))]
        for c, w in zip(cmap, widths):
            row = table[(kind, w)]
            lrs = np.array(sorted(row))
            ys = np.array([np.nanmean(row[lr]) if np.isfinite(row[lr]).any() else np.nan for lr in lrs])
            ax.plot(lrs, ys, marker="o", color=c, label=f"m = {w}")
            if np.isfinite(ys).any():
                j = int(np.nanargmin(ys))
                ax.plot([lrs[j]], [ys[j]], marker="*", ms=16, color=c, mec="k")
            bad = ~np.isfinite(ys)
            if bad.any():
                top = np.nanmax(ys) if np.isfinite(ys).any() else 1.0
                ax.plot(lrs[bad], np.full(bad.sum(), top), "x", color=c, ms=9, mew=2)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("learning rate η")
        ax.set_title(kind)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("final training loss (× diverged, ★ best η)")
    fig.suptitle(f"{name}: learning-rate transfer across widths (Caron et al. app. N)", fontsize=12)
    return fig


def caron_figures(path, name: str) -> dict[str, Figure]:
    """The Caron figures that apply to the archive at `path` (tag -> Figure)."""
    figs: dict[str, Figure] = {}
    with _archive.open(path) as arch:
        analyses = collect(arch)
        if "prune" in analyses:
            figs["prune"] = figure_prune(analyses["prune"], name)
        if "transfer" in analyses:
            figs["transfer"] = figure_transfer(analyses["transfer"], name)
        if "pca" in analyses:
            figs["pca"] = figure_pca(analyses["pca"], name)
        acc = figure_accuracy(arch, name)
        if acc is not None:
            figs["accuracy"] = acc
        if is_lr_sweep(arch):
            figs["lr-transfer"] = figure_lr_transfer(lr_transfer_table(arch), name)
    return figs
