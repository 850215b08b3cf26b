"""Figures drawn from a flowsim archive (DESIGN.md §5): matplotlib, Agg, no display.

``plot_archive(path, out_dir)`` writes the scenario's figures and returns the files:

- ``<name>-fig1.<fmt>``: the four panels of Caron et al. Fig. 1 -- (a) training loss,
  (b) ``‖w_tj − w_0j‖`` of the largest movers, (c) ``‖Θ̂_t − Θ̂_0‖₂``, (d) ``eig_min Θ̂_t``;
- ``<name>-test.<fmt>`` when ``test_loss`` is recorded: train and test loss;
- ``<name>-sharpness.<fmt>`` when ``sharpness`` is recorded: loss and sharpness with each
  GD's stability limit 2/η (Cohen et al. 2021);
- ``<name>-hessian.<fmt>`` when ``hessian_top`` or ``hessian_density`` is recorded: the
  top-k Hessian eigenvalues against 2/η and the spectral density as a heat map over time,
  one per sweep point × solver (`hessian.py`);
- ``<name>-central.<fmt>`` when a ``central-flow`` leg runs beside GD at its η: GD's loss
  (raw and smoothed), the central flow's predicted loss and the gradient flow's, the three
  sharpnesses with 2/η, and GD's distances to the central flow, the flow and its twin
  (`central.py`, from `flowsim.analysis.compare_central`'s numbers);
- Caron et al.'s pruning, transfer, PCA, accuracy and learning-rate figures where the
  archive holds them (`caron.py`); a scenario with ``[plot] figure = "chen-exp…"`` gets
  Chen et al.'s layouts instead (`chen.py`).

`flowsim compare -o` draws its own figures (`compare.py`, from `flowsim.analysis.compare`'s
numbers).

Styling (`style.py`): one colour per sweep point (without a sweep, per solver), one line
style per solver (flow solid, discrete dashed, modified flow dotted), mean over seeds with a
min–max band over seeds, a ``×`` where a run ended early or is unfinished (any status but
done, `interrupted` included: `traces.EARLY_END`; the status is noted in the solver legend);
the legend's text (sweep-point labels, node scalings, solvers) is `labels.py`'s; a log axis
of a decade or two is labelled in plain numbers as the figures are written
(`style.plain_multiples`).

The pieces are small and public for reuse and tests: :func:`gather` (`traces.py`) reads an archive
into :class:`Trace` objects (one per sweep point and solver, seeds stacked) through the
archive's one series reader (`flowsim.archive.dataset.blocks`, also under `to_xarray`),
:func:`figure_fig1` / :func:`figure_test` (`fig1.py`) build ``matplotlib.figure.Figure`` objects,
one ``panel_*`` function draws each panel.  No pyplot: figures are plain ``Figure``
objects rendered by the Agg canvas, so nothing global is touched.
"""

from __future__ import annotations

from pathlib import Path

from flowsim import archive as _archive
from flowsim.analysis.compare_central import archive_tracks

from . import chen
from .central import figure_central
from .hessian import figure_hessian
from .caron import caron_figures
from .fig1 import (
    figure_fig1,
    figure_sharpness,
    figure_test,
    panel_eig_min,
    panel_loss,
    panel_ntg_change,
    panel_weight_change,
)
from .labels import short_label
from .style import plain_multiples
from .traces import TOP_NODES, Trace, gather, safe_name, scenario_name

__all__ = ["plot_archive", "short_label", "gather", "Trace", "figure_fig1", "figure_test", "figure_sharpness",
           "panel_loss", "panel_weight_change", "panel_ntg_change", "panel_eig_min",
           "TOP_NODES"]


def plot_archive(path, out_dir, *, formats=("png", "pdf")) -> list[Path]:
    """Draw the scenario's figures from the archive at ``path`` into ``out_dir``.

    Writes ``<name>-fig1.<fmt>`` (and ``<name>-test.<fmt>`` when test loss is recorded)
    for each format; returns the paths written.
    """
    out = Path(out_dir)
    with _archive.open(path) as arch:
        name = scenario_name(arch, path)
        kind = chen.figure_kind(arch)
        traces = [] if kind else gather(arch)
        tracks = [] if kind else archive_tracks(arch)
    out.mkdir(parents=True, exist_ok=True)    # once the archive has opened: a missing one leaves nothing
    if kind:  # `[plot] figure = "chen-exp…"`: Chen et al.'s paper layouts
        return chen.plot_archive(path, out, formats=formats, name=name)
    figures = {"fig1": figure_fig1(traces, name), "test": figure_test(traces, name),
               "sharpness": figure_sharpness(traces, name), "hessian": figure_hessian(traces, name),
               "central": figure_central(tracks, name)}
    figures.update(caron_figures(path, name))   # pruning, transfer, PCA, lr transfer
    written = []
    for tag, fig in figures.items():
        if fig is None:
            continue
        plain_multiples(fig)
        for fmt in formats:
            target = out / f"{safe_name(name)}-{tag}.{fmt.lstrip('.')}"
            fig.savefig(target, dpi=150 if fmt == "png" else None)
            written.append(target)
    return written
