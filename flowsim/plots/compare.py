"""`flowsim compare`'s figures: per run, the gaps against t, the sharpness and the step-size
ladders; per swept key, each gap's maximum against its values; GD beside its central flow
(`central.py`'s figure, where the archive has one) (the numbers are
`flowsim.analysis.compare`'s)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flowsim import archive as _archive
from flowsim.analysis.compare import (PRECONDITIONED, SUMMARY_GAPS, Ladder, Pair, Report, Stability, cell_text,
                                      series_of, sharp_source, sweep_summary)
from flowsim.config.declare import from_dict
from flowsim.config.typed import Preset
from flowsim.kinds.solvers import SOLVER_KINDS
from flowsim.toml_text import is_number

from .central import figure_central
from .hessian import Spectrum, figure_spectra
from .labels import solver_label
from .style import plain_multiples, value_ticks
from .traces import HESSIAN_SERIES


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", name).strip("_") or "flowsim"


def _colours(etas) -> dict[float, tuple]:
    from matplotlib import colormaps

    etas = sorted(set(etas), reverse=True)
    cmap = colormaps["plasma"]
    return {e: cmap(0.1 + 0.75 * i / max(1, len(etas) - 1)) for i, e in enumerate(etas)}


def _positive(a):
    a = np.asarray(a, float).copy()
    a[~(a > 0)] = np.nan
    return a


def _drawable(t: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The points a log-log panel can show: t > 0 and a finite value."""
    return (t > 0) & np.isfinite(values)


# each gap's panel: the flow's error estimate its certificate band scales (None: no band),
# the y label and the title; in the order of the table's columns (SUMMARY_GAPS)
_GAP_PANELS = {
    "weight_gap_rel": ("flow_error", "‖W_GD − W_flow‖ / ‖W_flow − W₀‖", "relative weight distance"),
    "loss_gap": ("flow_loss_error", "|L_GD − L_flow|", "loss gap"),
    "ntg_gap_rel": (None, "‖Θ̂_GD − Θ̂_flow‖ / ‖Θ̂_flow‖ (spectral)", "NTG gap"),
    "weight_change_gap": (None, "max |‖w_GD − w₀‖ − ‖w_flow − w₀‖|", "weight-change gap"),
}
# the line style of a gap against each kind of flow: a central flow's (GD's or RMSProp's) dash-dot,
# GD's modified flow dotted, a gradient or stable flow solid
_CENTRAL_STYLE, _MODIFIED_STYLE = (0, (6, 2, 1, 2)), (0, (1.5, 1.5))


def _flow_style(kind: str):
    return _CENTRAL_STYLE if SOLVER_KINDS[kind].central else _MODIFIED_STYLE if kind == "modified-flow" else "-"


def _method(f: "_RunFigure") -> str:
    """The discrete legs' method as the labels name it (GD, RMSProp, …; "discrete" where mixed)."""
    methods = {SOLVER_KINDS[p.discrete_kind].label for p in f.pairs} or {"GD"}
    return methods.pop() if len(methods) == 1 else "discrete"


@dataclass
class _RunFigure:
    """What one run's figure draws: its pairs, stability verdicts and ladders, a colour per
    step size, and the flow's own sharpness (times, values, solver name) where recorded."""

    rep: Report
    pairs: list[Pair]
    stab: list[Stability]
    lads: list[Ladder]
    col: dict[float, tuple]
    flow_sharp: tuple[np.ndarray, np.ndarray, str] | None


def _flow_sharpness(rep: Report, run: str) -> tuple[np.ndarray, np.ndarray, str] | None:
    """The first flow solver's recorded sharpness (times, values, its name): the gradient
    flow's, or where the run's discrete legs are judged by their preconditioned sharpness, an
    adaptive method's stable flow's; where it has a point a log-log panel can show."""
    preconditioned = any(s.preconditioned for s in rep.stability if s.run == run)
    with _archive.open(rep.path) as arch:
        found = next(((np.asarray(v.t, float), series_of(v, sharp_source(v, kind)), v.name)
                      for v in arch.runs[run].solvers.values()
                      for kind in (from_dict(Preset, v.preset).kind,)
                      if (kind in PRECONDITIONED and not SOLVER_KINDS[kind].discrete if preconditioned
                          else kind == "flow") and sharp_source(v, kind)), None)
    if found is not None and not _drawable(*found[:2]).any():
        return None      # a flow that ended at t = 0 has nothing to draw on a log axis
    return found


def _gather(rep: Report, run: str) -> _RunFigure:
    pairs = [p for p in rep.pairs if p.run == run]
    stab = [s for s in rep.stability if s.run == run]
    col = _colours([p.eta for p in pairs] + [s.eta for s in stab])    # before the undrawable are left out
    stab = [s for s in stab if s.sharp is None or _drawable(s.t, s.sharp).any()]
    return _RunFigure(rep=rep, pairs=pairs, stab=stab, lads=[x for x in rep.ladders if x.run == run], col=col,
                      flow_sharp=_flow_sharpness(rep, run))


def _shown(f: _RunFigure) -> list[str]:
    """The panels the figure shows, in order: a panel per gap the table reports (as its
    columns), then sharpness and the ladder, each only where there is something to draw."""
    shown = [g for g in SUMMARY_GAPS if any(p.gaps.get(g) is not None and p.t.size for p in f.pairs)]
    if f.flow_sharp is not None or any(s.sharp is not None for s in f.stab):
        shown.append("sharpness")
    return shown + ["ladder"] * bool(f.lads)


def _layout(f: _RunFigure, run: str, shown: list[str]):   # -> Figure, {panel: (Axes, letter)}
    """A grid of two columns (three past four panels) with the run's title; each shown
    panel gets an axes and its letter, in order."""
    from matplotlib.figure import Figure

    count = len(shown)
    cols = min(count, 2 if count <= 4 else 3)
    rows = -(-count // cols)
    fig = Figure(figsize=(max(6.5 * cols, 9.0), 4.6 * rows), layout="constrained")
    grid = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in grid[count:]:   # e.g. three panels: the fourth cell stays empty, without axes
        ax.remove()
    label = f.rep.runs.get(run, "")
    fig.suptitle(f"{f.rep.name} · {run} — {_method(f)} vs flow at t = kη" + (f"\n{label}" if label else ""),
                 fontsize=12)
    return fig, {key: (ax, letter) for key, ax, letter in zip(shown, grid, "abcdef")}


def _gap_panel(ax, f: _RunFigure, gap: str, letter: str) -> None:
    """One gap against t for every pair (unresolved points ringed), under the grey band of
    `factor` × the flow's error estimate (once per flow)."""
    err_name, ylabel, title = _GAP_PANELS[gap]
    title = f"({letter}) {title}"
    band_done = set()
    bands = []
    for p in f.pairs:
        g = p.gaps.get(gap)
        if g is None or not p.t.size:
            continue
        ax.plot(p.t, _positive(g), ls=_flow_style(p.flow_kind), color=f.col[p.eta], lw=1.6,
                marker="o", ms=3)
        if p.unresolved is not None and p.unresolved.any():
            u = p.unresolved
            ax.plot(p.t[u], _positive(g)[u], ls="none", marker="o", ms=8, mfc="none", mec="k", mew=1.0)
        err = {"flow_error": p.flow_error, "flow_loss_error": p.flow_loss_error}.get(err_name)
        if err is not None and p.flow not in band_done:
            band_done.add(p.flow)
            level = f.rep.factor * err
            if gap == "weight_gap_rel" and p.flow_displacement is not None:
                with np.errstate(divide="ignore", invalid="ignore"):
                    level = level / p.flow_displacement
            ax.fill_between(p.t, 1e-300, _positive(level), color="0.6", alpha=0.35, lw=0, zorder=0)
            if np.isfinite(_positive(level)).any():
                bands.append(float(np.nanmax(_positive(level))))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ys = np.concatenate([_positive(p.gaps[gap]) for p in f.pairs if p.gaps.get(gap) is not None])
    ys = ys[np.isfinite(ys)]
    if ys.size:
        lo = ys.min() / 20
        ax.set_ylim(lo, ys.max() * 3)
        if bands and max(bands) < lo:
            title += (f"\ngrey band ({f.rep.factor:g} × flow error, ≤ {max(bands):.2g}) lies below the axis: "
                      "every gap resolved")
    ax.set_xlabel("flow time t = kη")
    ax.set_ylabel(ylabel.replace("_GD", f"_{_method(f)}"))
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)


_SHARP_LABELS = {"sharpness": "rate · λ_max(∇²L)", "gn_sharpness": "rate · λ_max(Gauss–Newton)",
                 # mathtext: the exponents as written would print their braces
                 "preconditioned_sharpness": r"rate · $\lambda_{\max}(P^{-1/2}\nabla^2 L\,P^{-1/2})$"}


def _sharpness_panel(ax, f: _RunFigure, letter: str) -> None:
    """Sharpness of each discrete solver (an adaptive one's preconditioned sharpness) with its
    own stability line (2/η, 2(1+β)/η, 38/η for Adam at β₁ = 0.9; × where it diverged), over
    the flow's own as a wide grey line."""
    for s in f.stab:
        if s.sharp is None:
            continue
        ok = _drawable(s.t, s.sharp)
        ax.plot(s.t[ok], s.sharp[ok], color=f.col[s.eta], lw=1.6, ls="--")
        ax.axhline(s.limit / s.eta, color=f.col[s.eta], lw=1.0, ls=":", alpha=0.9)
        ax.annotate(f"{s.limit:g}/η, η={s.eta:g}", xy=(1.0, s.limit / s.eta),
                    xycoords=("axes fraction", "data"), xytext=(-4, 2), textcoords="offset points",
                    ha="right", va="bottom", fontsize=7, color=f.col[s.eta])
        if s.verdict == "diverged":
            ax.plot(s.t[ok][-1], s.sharp[ok][-1], marker="x", ms=9, mew=2, color=f.col[s.eta])
    if f.flow_sharp is not None:
        t, lam, flow_name = f.flow_sharp
        ok = _drawable(t, lam)
        ax.plot(t[ok], lam[ok], color="0.25", lw=4.0, alpha=0.45, zorder=0, solid_capstyle="butt")
        ax.annotate(f"flow `{flow_name}`", xy=(t[ok][0], lam[ok][0]), xytext=(2, 5),
                    textcoords="offset points", fontsize=8, color="0.3")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("flow time t")
    sources = {s.source for s in f.stab if s.source} or {"sharpness"}
    ax.set_ylabel(" / ".join(_SHARP_LABELS[s] for s in sorted(sources)))
    ax.set_title(f"({letter}) {'preconditioned ' if sources == {'preconditioned_sharpness'} else ''}sharpness; "
                 "dotted: each leg's stability limit (× marks divergence)", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)


def _ladder_panel(ax, f: _RunFigure, letter: str) -> None:
    """Each ladder's gap against η (open: left out of the fit) with its fitted order."""
    for lad in f.lads:
        mk = "o" if lad.flow_kind == "flow" else "s"
        c = "tab:blue" if lad.flow_kind == "flow" else "tab:red"
        ok = np.isfinite(lad.gaps) & (lad.gaps > 0)
        ax.plot(lad.etas[ok & lad.used], lad.gaps[ok & lad.used], ls="none", marker=mk, color=c, ms=7)
        ax.plot(lad.etas[ok & ~lad.used], lad.gaps[ok & ~lad.used], ls="none", marker=mk, mfc="none",
                mec=c, ms=7)
        name = "GD → flow" if lad.flow_kind == "flow" else "GD → modified flow"
        if math.isfinite(lad.order):
            e = np.geomspace(lad.etas.min(), lad.etas.max(), 20)
            se = f" ± {lad.stderr:.2g}" if math.isfinite(lad.stderr) else ""
            ax.plot(e, np.exp(lad.intercept) * e**lad.order, color=c, lw=1.2,
                    label=f"{name}: order {lad.order:.2f}{se}")
        else:
            ax.plot([], [], color=c, marker=mk, ls="none", label=f"{name}: not fitted")
    ax.set_xscale("log", base=2)
    value_ticks(ax.xaxis, np.concatenate([lad.etas for lad in f.lads]))   # the ladder's steps, labelled
    ax.set_yscale("log")
    ax.set_xlabel("step η")
    meas = f.lads[0].measure
    ax.set_ylabel("max_t ‖W_GD − W‖" if meas == "weight_gap" else "max_t |L_GD − L|")
    ax.set_title(f"({letter}) step-size ladder (open: left out of the fit)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")


def _legend(ax, f: _RunFigure) -> None:
    """On the first panel: colours = η, line styles = flow kind, grey band = certificate."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Line2D([], [], color=f.col[e], lw=2, label=f"η = {e:g}") for e in sorted(f.col, reverse=True)]
    kinds = sorted({p.flow_kind for p in f.pairs})
    handles += [Line2D([], [], color="0.2", ls=_flow_style(k), lw=1.6,
                       label=f"vs {SOLVER_KINDS[k].label}"
                             + (" (same η)" if SOLVER_KINDS[k].of_gd or SOLVER_KINDS[k].flow_of else ""))
                for k in kinds]
    if any(p.unresolved is not None for p in f.pairs):
        handles.append(Patch(color="0.6", alpha=0.35, label=f"≤ {f.rep.factor:g} × flow error (unresolved)"))
        handles.append(Line2D([], [], ls="none", marker="o", mfc="none", mec="k", ms=8, label="unresolved gap"))
    ax.legend(handles=handles, fontsize=8, loc="best", ncol=2, framealpha=0.85)


def figure_run(rep: Report, run: str):   # -> Figure | None
    """Up to six panels for one run, each only when the archive holds what it shows: each
    gap the table reports vs t (the weight and loss gaps with their certificate band),
    η-scaled sharpness with the stability line 2/η, and the step-size ladders with their
    orders."""
    f = _gather(rep, run)
    shown = _shown(f)
    if not shown:
        return None
    fig, panels = _layout(f, run, shown)
    for key, (ax, letter) in panels.items():
        if key in SUMMARY_GAPS:
            _gap_panel(ax, f, key, letter)
        elif key == "sharpness":
            _sharpness_panel(ax, f, letter)
        else:
            _ladder_panel(ax, f, letter)
    _legend(next(iter(panels.values()))[0], f)
    return fig


def figure_sweep(rep: Report, key: str):   # -> Figure | None
    """One panel per recorded gap: its max over t against the swept key's values, one line
    per discrete/flow pair (mean over the runs with that value, bars from min to max)."""
    from matplotlib.figure import Figure

    cells = [c for c in sweep_summary(rep) if c.key == key]
    gaps = [g for g in SUMMARY_GAPS if any(c.gap == g for c in cells)]
    if not gaps:
        return None
    values = list(dict.fromkeys(cell_text(c.value) for c in cells))
    numeric = all(is_number(c.value) for c in cells)
    fig = Figure(figsize=(max(4.6 * len(gaps), 7.0), 4.4), layout="constrained")
    fig.suptitle(f"{rep.name} — GD vs flow against `{key}`\nmax over t of each gap; mean over the runs "
                 "with that value, bars from min to max", fontsize=11)
    for ax, gap in zip(fig.subplots(1, len(gaps), squeeze=False)[0], gaps):
        for pair in dict.fromkeys((c.discrete, c.flow) for c in cells if c.gap == gap):
            mine = [c for c in cells if c.gap == gap and (c.discrete, c.flow) == pair]
            x = [float(c.value) if numeric else values.index(cell_text(c.value)) for c in mine]
            mean = np.array([c.mean for c in mine])
            lo, hi = mean - [min(c.maxima) for c in mine], [max(c.maxima) for c in mine] - mean
            ax.errorbar(x, mean, yerr=[lo, hi], marker="o", capsize=3, lw=1.5, ls="-" if numeric else "none",
                        label=f"{pair[0]} vs {pair[1]}")     # (no line between unordered values)
        if numeric and min(float(c.value) for c in cells) > 0 and \
                max(float(c.value) for c in cells) >= 10 * min(float(c.value) for c in cells):
            ax.set_xscale("log")
            value_ticks(ax.xaxis, [float(c.value) for c in cells])   # the swept values, labelled
        if not numeric:
            ax.set_xticks(range(len(values)), values, rotation=20, ha="right", fontsize=8)
        if all(c.mean > 0 for c in cells if c.gap == gap):
            ax.set_yscale("log")
        ax.set_xlabel(key)
        ax.set_title(f"max_t {SUMMARY_GAPS[gap]}", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    return fig


def figure_spectrum(rep: Report, run: str):   # -> Figure | None
    """One run's Hessian spectrum (`hessian.py`): each solver's top-k eigenvalues against
    2/η and its spectral density over time, in the run figure's colours (a colour per η,
    the gradient flow grey); None where no solver recorded `hessian_top` or `hessian_density`."""
    col = _gather(rep, run).col
    spectra = []
    with _archive.open(rep.path) as arch:
        for view in arch.runs[run].solvers.values():
            have = [n for n in HESSIAN_SERIES if n in view.series_names]
            if not have:
                continue
            preset = from_dict(Preset, view.preset)
            eta = float(preset.learning_rate) if preset.learning_rate is not None else None
            discrete = SOLVER_KINDS[preset.kind].discrete
            spectra.append(Spectrum(
                label=solver_label(view.name, preset), t=np.asarray(view.t, float),
                colour=col.get(eta, "0.5") if eta is not None else "0.25",
                ls="--" if discrete else _flow_style(preset.kind), eta=eta,
                **{key: np.asarray(view[n], float)[None] for key, n in zip(("top", "density", "grid"), HESSIAN_SERIES)
                   if n in have}))
    label = rep.runs.get(run, "")
    return figure_spectra(spectra, f"{rep.name} · {run}: the Hessian's spectrum" + (f"\n{label}" if label else ""))


def write_figures(rep: Report, out_dir, formats=("png",)) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for run in rep.runs:
        if not any(p.run == run for p in rep.pairs):
            continue
        for suffix, fig in (("", figure_run(rep, run)), ("-hessian", figure_spectrum(rep, run))):
            for fmt in formats if fig is not None else ():   # (None: nothing recorded that it shows)
                path = out / f"{_safe(rep.name)}-compare-{_safe(run)}{suffix}.{fmt}"
                plain_multiples(fig).savefig(path, dpi=110)
                written.append(path)
    fig = figure_central(rep.central, rep.name)
    for fmt in formats if fig is not None else ():
        path = out / f"{_safe(rep.name)}-compare-central.{fmt}"
        plain_multiples(fig).savefig(path, dpi=110)
        written.append(path)
    for key in rep.swept_keys:
        fig = figure_sweep(rep, key)
        if fig is None:
            continue
        for fmt in formats:
            path = out / f"{_safe(rep.name)}-compare-sweep-{_safe(key)}.{fmt}"
            plain_multiples(fig).savefig(path, dpi=110)
            written.append(path)
    return written
