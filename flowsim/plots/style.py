"""Shared look of the figures: one colour per sweep point (per solver without a sweep), one
line style per solver (flow solid, discrete dashed, modified flow dotted), mean over seeds
with a min–max band, a ``×`` where a run ended early, and the two-column legend; and the
ticks and labels: a symlog time axis from 0, a log axis over a sweep's values ticked at
those values (`value_ticks`), plain numbers on a log axis of a decade or two
(`plain_multiples`), names at curves' ends (`name_ends`)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
from matplotlib.axes import Axes
from matplotlib.axis import Axis
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedFormatter, FixedLocator, LogFormatterSciNotation, NullFormatter

from .labels import is_discrete, solver_label
from .traces import Trace

PALETTE = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple",
           "tab:brown", "tab:pink", "tab:gray", "tab:olive", "tab:cyan"]
# Line styles per solver family; a second solver of the same family takes the next one.
_STYLES = {"flow": ["-", (0, (8, 1.5)), (0, (12, 2, 2, 2))],
           "discrete": ["--", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (2, 1))],
           "modified-flow": [":", (0, (1, 3)), (0, (3, 1, 1, 1, 1, 1))]}
_NOT_RECORDED = "not recorded"
THEORY_GREY = "0.4"
# A line of this many rows or fewer marks each row, so that the straight segments between rows
# are not read as dynamics (cohen-scale-quick: 11 rows, 100 GD steps apart, over an edge of
# stability whose oscillations take a few steps).
MARKED_ROWS = 20


@dataclass
class Style:
    """A colour per sweep point and a line style per solver; without a sweep (one point) a
    colour per solver as well, so that the solvers are told apart by more than their dashes."""

    colour: dict[int, str]
    line: dict[str, object]
    solver_colour: dict[str, str] = field(default_factory=dict)   # one point: a colour per solver

    @classmethod
    def of(cls, traces: list[Trace]) -> Style:
        points = sorted({tr.point for tr in traces})
        colour = {p: PALETTE[i % len(PALETTE)] for i, p in enumerate(points)}
        line, used = {}, {"flow": 0, "discrete": 0, "modified-flow": 0}
        for tr in traces:
            if tr.solver in line:
                continue
            fam = ("discrete" if is_discrete(tr.kind) else
                   "modified-flow" if tr.kind == "modified-flow" else "flow")
            styles = _STYLES[fam]
            line[tr.solver] = styles[used[fam] % len(styles)]
            used[fam] += 1
        by_solver = {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(line)} if len(points) == 1 else {}
        return cls(colour, line, by_solver)

    def of_trace(self, tr: Trace) -> str:
        """The colour of a sweep point × solver's lines."""
        return self.solver_colour.get(tr.solver, self.colour[tr.point])

    def of_point(self, point: int) -> str:
        """The colour of what belongs to a sweep point whatever the solver (a theory bound):
        grey where the colours name the solvers."""
        return THEORY_GREY if self.solver_colour else self.colour[point]


def quiet(fn: Callable, *args, **kw):
    """`fn(*args, **kw)` without numpy's RuntimeWarnings (all-NaN means over early ends)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(*args, **kw)


def row_marks(rows: int) -> dict:
    """Line keywords that mark each of `rows` points where they are few (`MARKED_ROWS`)."""
    return {"marker": "o", "ms": 3} if rows <= MARKED_ROWS else {}


def mean_band(ax: Axes, x: np.ndarray, ys, colour, *, ls: object = "-", lw: float = 1.6, alpha: float = 1.0,
              band: bool = True, **line) -> None:
    """The mean over the rows of `ys` (seeds), and their min–max band when there are several:
    the one way every figure draws seeds (NaN-aware, without numpy's all-NaN warnings). Few
    points are marked (`row_marks`)."""
    ys = np.asarray(ys, float)
    line = {**row_marks(len(x)), **line}
    ax.plot(x, quiet(np.nanmean, ys, axis=0), color=colour, ls=ls, lw=lw, alpha=alpha, **line)
    if band and ys.shape[0] > 1:
        lo, hi = quiet(np.nanmin, ys, axis=0), quiet(np.nanmax, ys, axis=0)
        ax.fill_between(x, lo, hi, color=colour, alpha=0.15 * alpha, lw=0)


def draw(ax: Axes, tr: Trace, y: np.ndarray, style: Style, *, band: bool = True,
         lw: float = 1.6, alpha: float = 1.0, mark: bool = True) -> None:
    """Mean over the seeds that ran to the end, with a min–max band over them; each seed
    that ended early is its own thin line ending in × (so no mean jumps where it stops)."""
    colour, ls = style.of_trace(tr), style.line[tr.solver]
    early = {i for i, _ in tr.early_ends}
    full = [i for i in range(y.shape[0]) if i not in early]
    if full:
        mean_band(ax, tr.t, y[full], colour, ls=ls, lw=lw, alpha=alpha, band=band)
    for i in sorted(early):
        ax.plot(tr.t, y[i], color=colour, ls=ls, lw=0.6 * lw, alpha=0.8 * alpha)
        good = np.flatnonzero(np.isfinite(y[i]))
        if mark and good.size:
            j = good[-1]
            ax.plot([tr.t[j]], [y[i, j]], marker="x", ms=9, mew=2.2, color=colour,
                    ls="none", zorder=5, clip_on=False)


def not_recorded(ax: Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"{what}\n{_NOT_RECORDED}", ha="center", va="center",
            transform=ax.transAxes, color="0.45", fontsize=11, style="italic")
    ax.set_xticks([])
    ax.set_yticks([])


def name_ends(ax: Axes, ends: list[tuple[float, str]], fontsize: float = 8) -> None:
    """Each ``(y, name)`` written just right of the axes at the height ``y`` (data) of its
    curve's end, the names pushed apart to a line and a quarter where ends are close and kept
    within the axes' height; a name whose ``y`` is not finite goes to the bottom. The
    spacing is figured on the axes' height before the layout, with a fifth to spare."""
    if not ends:
        return
    lo, hi = ax.get_ylim()                   # (autoscaled now: the transforms would read stale limits)
    scale = ax.yaxis.get_transform()
    a, b = scale.transform([lo, hi])

    def frac(y: float) -> float:
        drawable = np.isfinite(y) and (y > 0 or ax.get_yscale() != "log")
        return float((scale.transform([y])[0] - a) / (b - a)) if drawable else 0.0

    height = ax.get_position().height * ax.figure.get_figheight() * 72     # points
    gap = 1.25 * 1.2 * fontsize / height
    order = sorted(range(len(ends)), key=lambda i: frac(ends[i][0]))
    ys = [min(max(frac(ends[i][0]), gap / 2), 1 - gap / 2) for i in order]
    for j in range(1, len(ys)):                  # push up where close ...
        ys[j] = max(ys[j], ys[j - 1] + gap)
    top = 1 - gap / 2
    for j in reversed(range(len(ys))):           # ... and back down below the top
        ys[j] = min(ys[j], top)
        top = ys[j] - gap
    for i, y in zip(order, ys):
        ax.text(1.01, y, ends[i][1], transform=ax.transAxes, ha="left", va="center", fontsize=fontsize,
                color="0.25")


def value_ticks(axis: Axis, values) -> None:
    """Major ticks at ``values`` themselves, labelled as written (``0.125``, ``400``), on a
    log axis over a few chosen values (a sweep's widths, a ladder's steps), where the
    default locator labels decades and their multiples between them, or one tick. A value
    closer than a twelfth of the span (in log) to the last labelled one keeps a minor tick."""
    values = sorted({float(v) for v in values if np.isfinite(v) and v > 0})
    if not values:
        return
    logs = np.log10(values)
    span = max(float(logs[-1] - logs[0]), 1e-12)
    shown = [0]
    for i in range(1, len(values)):
        if logs[i] - logs[shown[-1]] >= span / 12:
            shown.append(i)
    axis.set_major_locator(FixedLocator([values[i] for i in shown]))
    axis.set_major_formatter(FixedFormatter([f"{values[i]:g}" for i in shown]))
    axis.set_minor_locator(FixedLocator([v for i, v in enumerate(values) if i not in shown]))
    axis.set_minor_formatter(NullFormatter())


class PlainMultiples(LogFormatterSciNotation):
    """matplotlib's log-axis labels, but a label between decades written as the number it
    is (``30``, ``0.04``) instead of ``3×10¹``, a third of its width, so that the labels of
    an axis spanning a decade or two do not run together on a narrow panel; on such an axis
    (under two decades) its decades too (``1``, ``0.1``), so that one axis reads one way.
    Numbers from 10⁻³ to 10⁴ only: others keep their powers of ten."""

    def __call__(self, x, pos=None):
        label = super().__call__(x, pos)
        lo, hi = sorted(self.axis.get_view_interval()) if self.axis is not None else (0.0, 0.0)
        narrow = lo > 0 and hi / lo < 100
        if label and ("times" in label or narrow) and 1e-3 <= abs(x) < 1e4:
            return rf"$\mathdefault{{{x:.4g}}}$"
        return label


def plain_multiples(fig: Figure) -> Figure:
    """Every log axis of `fig` left with matplotlib's own labels gets `PlainMultiples`
    (ticks a figure chose itself, as `value_ticks`, are kept); returns `fig`."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() != "log":
                continue
            base = axis.get_transform().base
            for get, put in ((axis.get_major_formatter, axis.set_major_formatter),
                             (axis.get_minor_formatter, axis.set_minor_formatter)):
                old = get()
                if type(old) is LogFormatterSciNotation:
                    put(PlainMultiples(base=base, labelOnlyBase=old.labelOnlyBase,
                                       minor_thresholds=old.minor_thresholds))
    return fig


def set_time_axis(ax: Axes, traces: Iterable[Trace]) -> None:
    """Symlog when the positive checkpoint times span three decades or more, else linear.
    The linear part ends at the power of ten at or below the first positive time, so that
    its end is a labelled decade a third of a decade from 0 (a threshold between decades put
    the decade below it, and its label, onto 0's)."""
    ts = np.concatenate([tr.t for tr in traces] or [np.zeros(1)])
    pos = ts[ts > 0]
    if pos.size and pos.max() / pos.min() >= 1e3:
        ax.set_xscale("symlog", linthresh=10.0 ** math.floor(math.log10(pos.min())), linscale=0.3)
    ax.set_xlabel("t (flow time; a discrete step × η)")   # GD's, RMSProp's, Adam's alike
    if pos.size:
        ax.set_xlim(0, float(pos.max()) * (1.15 if ax.get_xscale() == "symlog" else 1.0))


def set_y_auto_log(ax: Axes, values: list[np.ndarray], decades: float = 2.0) -> None:
    """Log y when the positive ``values`` span more than ``decades`` decades; the lower
    limit then comes from ``values`` (callers pass the rows after t = 0, so a change
    that is 0 or round-off at t = 0 does not stretch the axis)."""
    flat = np.concatenate([v[np.isfinite(v)].ravel() for v in values] or [np.zeros(0)])
    pos = flat[flat > 0]
    if pos.size and pos.max() / pos.min() > 10 ** decades:
        ax.set_yscale("log", nonpositive="mask")
        ax.set_ylim(bottom=float(pos.min()) / 1.5)


def with_series(traces: list[Trace], name: str) -> list[Trace]:
    """The traces that hold some finite value of the series `name`."""
    return [tr for tr in traces if name in tr.series and np.isfinite(tr.series[name]).any()]


def one_per_point(traces: list[Trace]) -> list[Trace]:
    seen, out = set(), []
    for tr in traces:
        if tr.point not in seen:
            seen.add(tr.point)
            out.append(tr)
    return out


def legends(fig: Figure, traces: list[Trace], style: Style, *, theory: str = "") -> None:
    """Colour legend (sweep points) and line-style legend (solvers, with early ends; with
    their colours where there is one point); the seed band is described where there is one."""
    points = one_per_point(traces)
    blank = Line2D([], [], ls="none")
    handles = [blank if style.solver_colour else Line2D([], [], color=style.colour[tr.point], lw=2.5)
               for tr in points]
    labels = [tr.label or f"point {tr.point}" for tr in points]
    solvers: dict[str, list[Trace]] = {}
    for tr in traces:
        solvers.setdefault(tr.solver, []).append(tr)
    s_handles, s_labels = [], []
    for name, trs in solvers.items():
        text = solver_label(name, trs[0].preset)
        ends: dict[str, int] = {}
        for tr in trs:
            for _, status in tr.early_ends:
                ends[status] = ends.get(status, 0) + 1
        n_runs = sum(len(tr.statuses) for tr in trs)
        if ends:
            text += " — " + ", ".join(f"{s} in {n} of {n_runs} runs (×)" for s, n in ends.items())
        s_handles.append(Line2D([], [], color=style.solver_colour.get(name, "0.2"), ls=style.line[name], lw=1.6,
                                marker="x" if ends else None, ms=7, mew=2))
        s_labels.append(text)
    if theory:                                   # the words for the dotted bounds drawn
        s_handles.append(Line2D([], [], color=THEORY_GREY, ls=":", lw=1.2))
        s_labels.append(theory)
    if any(len(tr.seeds) > 1 for tr in traces):     # one seed has no band to describe
        s_handles.append(Line2D([], [], color="0.6", lw=6, alpha=0.3))
        s_labels.append("line: mean over seeds, band: min–max")
    if len(points) == 1 and not points[0].label:   # no sweep: the solvers alone
        leg = fig.legend([blank, *s_handles], ["solver", *s_labels], loc="outside lower center", fontsize=9,
                         frameon=False, handlelength=3.0)
        leg.get_texts()[0].set_fontweight("bold")
        return
    # One legend, two columns (points | solvers) with a bold header row each, so the two
    # lists are top-aligned under the panels.
    rows = max(len(labels), len(s_labels))
    col1 = [(blank, "sweep point")] + list(zip(handles, labels))
    col2 = [(blank, "solver")] + list(zip(s_handles, s_labels))
    col1 += [(blank, "")] * (rows + 1 - len(col1))
    col2 += [(blank, "")] * (rows + 1 - len(col2))
    h, lab = zip(*(col1 + col2))
    leg = fig.legend(h, lab, loc="outside lower center", ncol=2, fontsize=9, frameon=False,
                     columnspacing=4.0, handlelength=3.0)
    for text in leg.get_texts():
        if text.get_text() in ("sweep point", "solver"):
            text.set_fontweight("bold")


def seeds_note(traces: list[Trace]) -> str:
    n = sorted({len(tr.seeds) for tr in traces})
    return f"{n[-1]} seed{'s' if n[-1] != 1 else ''}" if len(n) == 1 else f"{n[0]}–{n[-1]} seeds"
