"""The Hessian's spectrum over time (issue 53): the k largest eigenvalues (`hessian_top`, in
the units of `sharpness`: rate · λ, descending) against each GD's stability limit 2/η, and
the spectral density (`hessian_density`, on each row's own grid `hessian_density_grid`) as a
heat map over time, one panel per solver.

`flowsim plot` draws them from its traces (:func:`figure_hessian`: a sweep point × solver
each, seeds averaged), `flowsim compare -o` from one run's solvers (`compare.py`); both build
:class:`Spectrum` objects and hand them to :func:`figure_spectra`, which returns None where no
solver recorded either series (an optional figure, like the test-loss one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .labels import solver_label
from .style import Style, mean_band, quiet, seeds_note, set_time_axis
from .traces import HESSIAN_SERIES, Trace

TOP, DENSITY, GRID = HESSIAN_SERIES
MAX_DENSITY_PANELS = 6     # heat maps drawn; the title says how many more there are
HEAT_ROWS = 240            # cells along the eigenvalue axis (the density is 128 points a row)
# The colour scale spans this many decades under the largest density: one eigenvalue of n
# parameters weighs 1/n (a tracked one is deflated at exactly that weight), so the outliers
# at 2/η of a network of 10⁵–10⁷ parameters lie 5–7 decades under the bulk.
DECADES = 8
HEAT_MAP = colormaps["magma"].with_extremes(under="black", bad="black")


@dataclass
class Spectrum:
    """One solver's (or sweep point × solver's) Hessian series, seeds first: `top` (seeds, k, K),
    `density` and `grid` (seeds, k, G); None where not recorded. `eta`: the step whose 2/η
    is drawn (GD, and the flows of GD at η), None for a gradient flow."""

    label: str
    t: np.ndarray
    colour: object
    ls: object
    eta: float | None
    top: np.ndarray | None = None
    density: np.ndarray | None = None
    grid: np.ndarray | None = None

    @property
    def has_top(self) -> bool:
        return self.top is not None and bool(np.isfinite(self.top).any())

    @property
    def has_density(self) -> bool:
        return self.density is not None and self.grid is not None and bool(np.isfinite(self.density).any())


def _limits(spectra: Sequence[Spectrum]) -> list[float]:
    return sorted({s.eta for s in spectra if s.eta is not None and s.eta > 0})


def panel_top(ax: Axes, spectra: Sequence[Spectrum], letter: str = "a") -> None:
    """Each spectrum's K eigenvalues against t (the largest bold with its band over seeds,
    the others thin), and each step's 2/η dotted and labelled."""
    have = [s for s in spectra if s.has_top]
    k = max(s.top.shape[2] for s in have)
    ax.set_title(f"({letter}) the {k} largest Hessian eigenvalues (bold: the largest); dotted: 2/η",
                 loc="left", fontsize=11)
    for s in have:
        for r in range(s.top.shape[2] - 1, 0, -1):
            mean_band(ax, s.t, s.top[:, :, r], s.colour, ls=s.ls, lw=0.8, alpha=0.55, band=False)
        mean_band(ax, s.t, s.top[:, :, 0], s.colour, ls=s.ls)
    for eta in _limits(spectra):
        ax.axhline(2 / eta, color="0.35", ls=":", lw=1.2)
        ax.annotate(f"2/η, η = {eta:g}", (0.01, 2 / eta), xycoords=("axes fraction", "data"), ha="left",
                    va="bottom", fontsize=8, color="0.35")
    set_time_axis(ax, have)
    ax.set_ylabel(r"rate $\cdot\ \lambda_i(\nabla^2 L)$")
    ax.legend([Line2D([], [], color=s.colour, ls=s.ls, lw=1.6) for s in have], [s.label for s in have],
              fontsize=8, loc="best")


def heat(s: Spectrum, y: np.ndarray) -> np.ndarray:
    """The density (k, len(y)) on the common eigenvalue grid `y`: each row interpolated from
    its own grid (0 outside it), then averaged over the seeds that have the row."""
    seeds, rows, _ = s.density.shape
    out = np.full((seeds, rows, y.size), np.nan)
    for i in range(seeds):
        for j in range(rows):
            g, d = s.grid[i, j], s.density[i, j]
            if np.isfinite(g).all() and np.isfinite(d).all():
                out[i, j] = np.interp(y, g, d, left=0.0, right=0.0)
    return quiet(np.nanmean, out, axis=0)


def _edges(x: np.ndarray) -> np.ndarray:
    """Cell edges around the points `x` (midpoints; the end cells end at the end points)."""
    mid = 0.5 * (x[1:] + x[:-1])
    return np.concatenate([x[:1], mid, x[-1:]])


def panel_density(ax: Axes, s: Spectrum, y: np.ndarray, norm: LogNorm, letter: str):
    """The spectral density of `s` over time (log colour), with its own 2/η dotted in white;
    returns the mesh (for the figure's colour bar)."""
    d = heat(s, y)
    rows = np.isfinite(d).all(axis=1)
    t = s.t[rows]
    mesh = ax.pcolormesh(_edges(t) if t.size > 1 else np.array([t[0], t[0] + 1.0]), _edges(y), d[rows].T,
                         cmap=HEAT_MAP, norm=norm, shading="flat", rasterized=True)
    if s.eta is not None and y[0] <= 2 / s.eta <= y[-1]:
        ax.axhline(2 / s.eta, color="w", ls=":", lw=1.2)
        ax.annotate(f"2/η = {2 / s.eta:g}", (0.01, 2 / s.eta), xycoords=("axes fraction", "data"), ha="left",
                    va="bottom", fontsize=8, color="w")
    set_time_axis(ax, [s])
    ax.set_ylim(y[0], y[-1])
    ax.set_ylabel(r"rate $\cdot\ \lambda(\nabla^2 L)$")
    ax.set_title(f"({letter}) spectral density: {s.label}", loc="left", fontsize=10)
    return mesh


def figure_spectra(spectra: Sequence[Spectrum], title: str) -> Figure | None:
    """The top-K panel (where any spectrum has `hessian_top`) and a density heat map per
    spectrum that has `hessian_density` (at most MAX_DENSITY_PANELS), on one eigenvalue range
    and one colour scale; None where there is neither."""
    tops = [s for s in spectra if s.has_top]
    dens = [s for s in spectra if s.has_density]
    if not tops and not dens:
        return None
    shown = dens[:MAX_DENSITY_PANELS]
    count = bool(tops) + len(shown)
    cols = min(count, 2 if count <= 4 else 3)
    rows = -(-count // cols)
    fig = Figure(figsize=(max(6.5 * cols, 8.0), 4.6 * rows + 0.6), layout="constrained", dpi=110)
    grid = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in grid[count:]:
        ax.remove()
    letters = iter("abcdefghij")
    if tops:
        panel_top(grid[0], tops, next(letters))
    if shown:
        lo = min(float(np.nanmin(s.grid)) for s in shown)
        hi = max(float(np.nanmax(s.grid)) for s in shown)
        y = np.linspace(lo, hi, HEAT_ROWS)
        peak = max(float(np.nanmax(s.density)) for s in shown)
        norm = LogNorm(vmin=peak * 10.0 ** -DECADES, vmax=peak, clip=False)
        axes = list(grid[bool(tops):count])
        mesh = None
        for ax, s in zip(axes, shown):
            mesh = panel_density(ax, s, y, norm, next(letters))
        fig.colorbar(mesh, ax=axes, label="spectral density (1/n) Σ δ(x − λᵢ), broadened", extend="min",
                     shrink=0.9)
    if tops:
        grid[0].grid(True, which="major", alpha=0.3)     # (no grid over a heat map)
    more = f"   ({len(dens) - len(shown)} more density panel(s) not drawn)" if len(dens) > len(shown) else ""
    fig.suptitle(title + more, fontsize=13)
    return fig


def spectra_of_traces(traces: list[Trace], style: Style) -> list[Spectrum]:
    """A spectrum per sweep point × solver, in the figures' colours and line styles."""
    out = []
    for tr in traces:
        if not any(n in tr.series for n in HESSIAN_SERIES):
            continue
        name = solver_label(tr.solver, tr.preset)
        eta = tr.preset.learning_rate
        out.append(Spectrum(label=f"{tr.label}, {name}" if tr.label else name, t=tr.t, colour=style.of_trace(tr),
                            ls=style.line[tr.solver], eta=float(eta) if eta is not None else None,
                            top=tr.series.get(TOP), density=tr.series.get(DENSITY), grid=tr.series.get(GRID)))
    return out


def figure_hessian(traces: list[Trace], name: str) -> Figure | None:
    """`flowsim plot`'s Hessian figure (None where no run recorded `hessian_top` or
    `hessian_density`)."""
    spectra = spectra_of_traces(traces, Style.of(traces)) if traces else []
    return figure_spectra(spectra, f"{name}: the Hessian's spectrum   ({seeds_note(traces)})") if spectra else None
