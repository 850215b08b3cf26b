"""Figures and claim numbers of Chen, Vanden-Eijnden & Bruna (ICLR 2022), from an archive.

A scenario opts in with ``[plot] figure = "chen-exp1" | "chen-exp2" | "chen-exp3"``;
`flowsim.plots.plot_archive` then hands the archive to :func:`plot_archive` here.

- exp1 (their Fig. 1): training loss vs t per n (log y) with the overlay
  L_0 exp(−r ĉ² λ_min(G) t) where λ_min(G) > 0, and the fitted linear rate of log L vs n;
- exp2 (their Fig. 2 and 6): relative test error ‖f − y‖²/‖y‖² at the end vs n, embedded
  (quadratic) vs plain (identity), and its curves in time;
- exp3 (their Fig. 4): per scaling, training loss and test error (1 − sign accuracy) vs t,
  and the scatter of (h_i(x₁), h_i(x₂)) over neurons i at the start and at the end.

The claim numbers the tests assert are the public ``exp*_summary`` functions, so the
figure and the test read the same quantities.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from flowsim import archive as _archive
from flowsim.archive.dataset import blocks
from flowsim.config.declare import from_dict
from flowsim.config.typed import Config, Preset
from flowsim.kinds.solvers import DISCRETE_KINDS
from flowsim.nn.theory import chen_loss_bound

from .traces import safe_name, scenario_config
from .style import PALETTE, mean_band, plain_multiples

__all__ = ["figure_kind", "plot_archive", "read_runs", "fitted_rate", "exp1_summary",
           "exp2_summary", "exp3_summary", "ChenRun"]

FIGURES = ("chen-exp1", "chen-exp2", "chen-exp3")
RATE_FLOOR = 1e-12   # fit log L only where L > RATE_FLOOR · L_0 (below: round-off floor)
_SCALING_NAMES = {"theirs": "P-3L NN (theirs)", "ntk": "P-3L NN (NTK)", "mean-field": "P-3L NN (MF)"}


def figure_kind(arch: _archive.Archive) -> str:
    """The archive's ``[plot] figure`` ("" when absent or "default")."""
    settings = scenario_config(arch)
    kind = settings.plot.figure if settings is not None and settings.plot is not None else ""
    return kind if kind in FIGURES else ""


# --------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------

@dataclass
class ChenRun:
    """One run (sweep point × seed) with every solver's series as numpy arrays."""

    name: str
    point: int
    seed: int
    label: str
    params: Config
    init: dict[str, np.ndarray]
    y_test_sq: float                       # ½ Σ y_test² (the relative-error denominator)
    solvers: dict[str, dict] = field(default_factory=dict)   # name -> {t, kind, status, series}

    def scalar(self, key: str) -> float:
        v = self.init.get(key)
        return float(np.asarray(v)) if v is not None else float("nan")


def read_runs(arch: _archive.Archive) -> list[ChenRun]:
    """Every run of an open archive, its series from the archive's one reader (`blocks`);
    the `hidden` series keeps its first and last rows, read alone (it is n × m per row)."""
    runs: dict[str, ChenRun] = {}
    for b in blocks(arch, series=("loss", "test_loss", "test_accuracy")):
        for i, name in enumerate(b.runs):
            if name not in runs:
                run = arch.runs[name]
                y_test = run.data.get("y_test", np.zeros(0))
                runs[name] = ChenRun(name=name, point=b.point, seed=b.seeds[i], label=b.label,
                                     params=from_dict(Config, b.params),
                                     init={k: np.asarray(v) for k, v in b.init[i].items() if k not in ("W0", "z")},
                                     y_test_sq=0.5 * float(np.sum(np.asarray(y_test, float) ** 2)))
            series = {n: b.own(i, n) for n in b.series}
            view = arch.runs[name].solvers[b.solver]
            if "hidden" in view and view.n_checkpoints:
                series["hidden"] = np.asarray(view["hidden"][[0, view.n_checkpoints - 1]], float)
            runs[name].solvers[b.solver] = {"t": b.t[b.rows[i]], "kind": from_dict(Preset, b.preset).kind,
                                            "status": b.statuses[i], "series": series}
    return sorted(runs.values(), key=lambda r: (r.point, r.seed))


def _solver_names(runs: list[ChenRun]) -> list[str]:
    names: list[str] = []
    for r in runs:
        names += [s for s in r.solvers if s not in names]
    return names


def _points(runs: list[ChenRun]) -> dict[int, list[ChenRun]]:
    out: dict[int, list[ChenRun]] = {}
    for r in runs:
        out.setdefault(r.point, []).append(r)
    return out


# --------------------------------------------------------------------------------------
# Claim numbers
# --------------------------------------------------------------------------------------

def fitted_rate(t: np.ndarray, loss: np.ndarray, floor: float = RATE_FLOOR) -> float:
    """−slope of the least-squares line through log L(t) at the checkpoints where
    L > floor · L_0 (the linear, i.e. exponential, convergence rate)."""
    t, loss = np.asarray(t, float), np.asarray(loss, float)
    ok = np.isfinite(loss) & (loss > floor * loss[0])
    if ok.sum() < 2:
        return float("nan")
    return float(-np.polyfit(t[ok], np.log(loss[ok]), 1)[0])


def relative_test_error(run: ChenRun, solver: str) -> np.ndarray:
    """‖f − y‖²/‖y‖² on the test set at each checkpoint (= test_loss / ½Σy² for half-sse)."""
    s = run.solvers[solver]["series"]
    return s["test_loss"] / run.y_test_sq if "test_loss" in s and run.y_test_sq > 0 else np.full(1, np.nan)


def test_error(run: ChenRun, solver: str) -> np.ndarray:
    """Classification test error 1 − (sign accuracy) at each checkpoint."""
    s = run.solvers[solver]["series"]
    return 1.0 - s["test_accuracy"] if "test_accuracy" in s else np.full(1, np.nan)


def feature_movement(run: ChenRun, solver: str) -> float:
    """RMS over neurons and probes of h_i(x) at the end minus at the start."""
    h = run.solvers[solver]["series"].get("hidden")
    return float(np.sqrt(np.mean((h[-1] - h[0]) ** 2))) if h is not None else float("nan")


def exp1_summary(runs: list[ChenRun]) -> dict[str, dict[int, float]]:
    """solver -> {n: fitted rate of log L, mean over seeds}."""
    out: dict[str, dict[int, float]] = {}
    for s in _solver_names(runs):
        for pt, group in _points(runs).items():
            rates = [fitted_rate(r.solvers[s]["t"], r.solvers[s]["series"]["loss"])
                     for r in group if s in r.solvers]
            out.setdefault(s, {})[int(group[0].params.data.n)] = float(np.nanmean(rates))
    return out


def exp2_summary(runs: list[ChenRun]) -> dict[str, dict[str, dict[int, tuple[float, float]]]]:
    """solver -> embedding -> {n: (mean, std) over seeds of the final relative test error}."""
    out: dict = {}
    for s in _solver_names(runs):
        for pt, group in _points(runs).items():
            errs = [relative_test_error(r, s)[-1] for r in group if s in r.solvers]
            emb, n = group[0].params.model.embedding, int(group[0].params.data.n)
            out.setdefault(s, {}).setdefault(emb, {})[n] = (float(np.mean(errs)), float(np.std(errs)))
    return out


def exp3_summary(runs: list[ChenRun]) -> dict[str, dict[str, dict[str, float]]]:
    """solver -> scaling -> {test_error, min_test_error, movement, loss_ratio}, seed means."""
    out: dict = {}
    for s in _solver_names(runs):
        for pt, group in _points(runs).items():
            g = [r for r in group if s in r.solvers]
            errs = [test_error(r, s) for r in g]
            loss = [r.solvers[s]["series"]["loss"] for r in g]
            out.setdefault(s, {})[group[0].params.model.chen_scaling] = {
                "test_error": float(np.mean([e[-1] for e in errs])),
                "min_test_error": float(np.mean([np.nanmin(e) for e in errs])),
                "movement": float(np.mean([feature_movement(r, s) for r in g])),
                "loss_ratio": float(np.mean([lv[-1] / lv[0] for lv in loss])),
            }
    return out


# --------------------------------------------------------------------------------------
# Drawing helpers
# --------------------------------------------------------------------------------------

def _line_style(kind: str, i: int) -> object:
    flow = ["-", (0, (8, 1.5))]
    disc = ["--", "-.", (0, (2, 1))]
    styles = disc if kind in DISCRETE_KINDS else flow
    return styles[i % len(styles)]


def _styles(runs: list[ChenRun]) -> dict[str, object]:
    seen: dict[str, int] = {}
    out = {}
    for s in _solver_names(runs):
        kind = next(r.solvers[s]["kind"] for r in runs if s in r.solvers)
        fam = "d" if kind in DISCRETE_KINDS else "f"
        out[s] = _line_style(kind, seen.get(fam, 0))
        seen[fam] = seen.get(fam, 0) + 1
    return out


def _band(ax, t, ys: list[np.ndarray], colour, ls, label=None, lw=1.6):
    """`mean_band` over seeds cut to the shortest."""
    k = min(len(y) for y in ys)
    mean_band(ax, t[:k], [y[:k] for y in ys], colour, ls=ls, lw=lw, label=label)


def _solver_legend(fig, styles: dict[str, object], runs: list[ChenRun], extra=()):
    handles = []
    for s, ls in styles.items():
        status = sorted({r.solvers[s]["status"] for r in runs if s in r.solvers} - {"done"})
        handles.append(Line2D([], [], color="0.2", ls=ls, label=s + (f" ({', '.join(status)})" if status else "")))
    handles += list(extra)
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 5), fontsize=9)


def _seeds(runs: list[ChenRun]) -> str:
    k = len({r.seed for r in runs})
    return f"{k} seed{'s' if k != 1 else ''}"


def _loss_overlay(ax, group: list[ChenRun], t: np.ndarray, colour) -> bool:
    """Chen et al.'s rate L_0 exp(−r ĉ² λ_min(G) t) (flowsim/models/embedded.py) where λ_min(G) > 0."""
    r = group[0]
    lam, rr, c = (np.mean([g.scalar(k) for g in group]) for k in ("G_lambda_min", "chen_r", "c_hat"))
    if not (lam > 1e-10 and math.isfinite(rr)) or r.params.loss.kind != "half-sse":
        return False
    l0 = np.mean([g.scalar("loss0") for g in group])
    ax.plot(t, chen_loss_bound(t, l0, rr, c, lam), color=colour, ls=":", lw=1.2)
    return True


# --------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------

def figure_exp1(runs: list[ChenRun], name: str) -> Figure:
    """(a) training loss vs t per n, log y; (b) fitted rate of log L vs n, n = d marked."""
    fig = Figure(figsize=(12, 5.2), layout="constrained", dpi=110)
    ax, bx = fig.subplots(1, 2)
    styles = _styles(runs)
    points = _points(runs)
    d = int(runs[0].params.data.d)
    overlay = False
    for i, (pt, group) in enumerate(points.items()):
        colour = PALETTE[i % len(PALETTE)]
        n = int(group[0].params.data.n)
        for s, ls in styles.items():
            g = [r for r in group if s in r.solvers]
            if g:
                _band(ax, g[0].solvers[s]["t"], [r.solvers[s]["series"]["loss"] for r in g], colour, ls,
                      label=f"n = {n}" if s == next(iter(styles)) else None)
        t = max((r.solvers[s]["t"] for r in group for s in r.solvers), key=len)
        if n <= d:
            overlay |= _loss_overlay(ax, group, t, colour)
    ax.set_yscale("log", nonpositive="mask")
    lo = min(np.nanmin(np.where(r.solvers[s]["series"]["loss"] > 0, r.solvers[s]["series"]["loss"], np.nan))
             for r in runs for s in r.solvers)
    ax.set_ylim(bottom=max(lo / 3, 1e-30))
    ax.set_xlabel("t (flow time = GD steps × δ)")
    ax.set_ylabel(r"training loss $L_t = \frac{1}{2}\sum_a (f(x_a) - y_a)^2$")
    ax.set_title(f"(a) training loss, d = {d}", loc="left")
    ax.legend(fontsize=9, loc="upper right")
    summary = exp1_summary(runs)
    for s, ls in styles.items():
        ns = sorted(summary[s])
        bx.plot(ns, [summary[s][n] for n in ns], ls=ls, marker="o", color="0.2")
    bx.axvline(d, color="tab:red", lw=1, ls=":")
    bx.text(d, 0.98, " n = d", color="tab:red", transform=bx.get_xaxis_transform(), va="top")
    bx.set_xscale("log")
    bx.set_yscale("log", nonpositive="mask")
    bx.set_xlabel("n (training points)")
    bx.set_ylabel("fitted rate: −slope of log L vs t")
    bx.set_title("(b) linear convergence rate", loc="left")
    for a in (ax, bx):
        a.grid(True, alpha=0.3)
    extra = [Line2D([], [], color="0.2", ls=":", label=r"$L_0 e^{-r\hat c^2\lambda_{min}(G)t}$ (n ≤ d)")] \
        if overlay else []
    _solver_legend(fig, styles, runs, extra)
    fig.suptitle(f"{name}: Chen et al. exp. 1, random labels, shallow MF net ({_seeds(runs)})")
    return fig


def figure_exp2(runs: list[ChenRun], name: str) -> Figure:
    """(a) final relative test error vs n, embedded vs plain; (b) its curves vs t (first solver)."""
    fig = Figure(figsize=(12, 5.2), layout="constrained", dpi=110)
    ax, bx = fig.subplots(1, 2)
    styles = _styles(runs)
    summary = exp2_summary(runs)
    names = {"quadratic": "shallow + quadratic embedding", "identity": "plain shallow",
             "random-features": "random features"}
    colours = {"quadratic": "tab:blue", "identity": "tab:orange", "random-features": "tab:green"}
    for s, ls in styles.items():
        for emb, per_n in summary[s].items():
            ns = sorted(per_n)
            ax.errorbar(ns, [per_n[n][0] for n in ns], yerr=[per_n[n][1] for n in ns], ls=ls, marker="o",
                        capsize=3, color=colours.get(emb, "0.3"))
    ax.set_xlabel("n (training points)")
    ax.set_ylabel(r"relative test error $\|f - y\|^2 / \|y\|^2$ at the end")
    ax.set_title("(a) test error at the end vs n", loc="left")
    first = next(iter(styles))
    ns = sorted({int(r.params.data.n) for r in runs})
    widths = np.linspace(0.8, 2.4, len(ns))
    for pt, group in _points(runs).items():
        g = [r for r in group if first in r.solvers]
        emb, n = group[0].params.model.embedding, int(group[0].params.data.n)
        _band(bx, g[0].solvers[first]["t"], [relative_test_error(r, first) for r in g], colours.get(emb, "0.3"),
              "-", lw=float(widths[ns.index(n)]))
    bx.set_xscale("symlog", linthresh=1.0)
    bx.set_xlim(0, max(r.solvers[first]["t"][-1] for r in runs if first in r.solvers))
    bx.set_xlabel("t (flow time = GD steps × δ)")
    bx.set_ylabel("relative test error")
    bx.set_title(f"(b) test error vs t ({first}; thicker = larger n)", loc="left")
    for a in (ax, bx):
        a.grid(True, alpha=0.3)
    extra = [Line2D([], [], color=c, lw=2, label=names[e]) for e, c in colours.items()
             if any(r.params.model.embedding == e for r in runs)]
    _solver_legend(fig, styles, runs, extra)
    fig.suptitle(f"{name}: Chen et al. exp. 2, benefit of an embedding, d = {runs[0].params.data.d} "
                 f"({_seeds(runs)})")
    return fig


def figure_exp3(runs: list[ChenRun], name: str) -> Figure:
    """Row 1 per scaling: loss (solid axis, left) and test error (right); row 2: the scatter
    of (h_i(x₁), h_i(x₂)) at the start (grey) and at the end (colour), first seed."""
    points = _points(runs)
    fig = Figure(figsize=(4.3 * len(points), 8.6), layout="constrained", dpi=110)
    axes = fig.subplots(2, len(points), squeeze=False)
    styles = _styles(runs)
    solvers = list(styles)
    scatter_solver = next((s for s in solvers if any(r.solvers[s]["kind"] == "gd" for r in runs if s in r.solvers)),
                          solvers[0])
    summary = exp3_summary(runs)
    for j, (pt, group) in enumerate(points.items()):
        scaling = group[0].params.model.chen_scaling
        ax, sx = axes[0, j], axes[1, j]
        ex = ax.twinx()
        for s, ls in styles.items():
            g = [r for r in group if s in r.solvers]
            t = g[0].solvers[s]["t"]
            _band(ax, t, [r.solvers[s]["series"]["loss"] for r in g], "tab:blue", ls)
            _band(ex, t, [test_error(r, s) for r in g], "tab:red", ls)
        _loss_overlay(ax, group, max((r.solvers[s]["t"] for r in group for s in r.solvers), key=len), "0.4")
        ax.set_yscale("log", nonpositive="mask")
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlim(0, max(r.solvers[s]["t"][-1] for r in group for s in r.solvers))
        ax.set_xlabel("t (flow time = GD steps × δ)")
        ax.set_ylabel("training loss", color="tab:blue")
        ex.set_ylabel("test error (1 − accuracy)", color="tab:red")
        ex.set_ylim(0, max(0.55, ex.get_ylim()[1]))
        e = summary[scatter_solver][scaling]
        ax.set_title(f"{_SCALING_NAMES.get(scaling, scaling)}\nfinal test error {e['test_error']:.3f}",
                     fontsize=10)
        ax.grid(True, alpha=0.3)
        r0 = next(r for r in group if scatter_solver in r.solvers)
        h = r0.solvers[scatter_solver]["series"].get("hidden")
        if h is None:
            sx.text(0.5, 0.5, "hidden not recorded", ha="center", transform=sx.transAxes)
            continue
        sx.scatter(h[-1][:, 0], h[-1][:, 1], s=6, color="tab:purple", alpha=0.6, lw=0)
        sx.scatter(h[0][:, 0], h[0][:, 1], s=2, color="0.35", alpha=0.7, lw=0)
        sx.set_xlabel(r"$h_i(x_1)$ ($x_1$: first training point)")
        sx.set_ylabel(r"$h_i(x_2)$ ($x_2$: first test point)")
        sx.set_title(f"neurons' features ({scatter_solver}, seed {r0.seed}); "
                     f"RMS move {e['movement']:.3g}", fontsize=9)
        sx.grid(True, alpha=0.3)
    extra = [Line2D([], [], color="tab:blue", label="training loss"),
             Line2D([], [], color="tab:red", label="test error"),
             Line2D([], [], color="0.4", ls=":", label=r"$L_0 e^{-r\hat c^2\lambda_{min}(G)t}$"),
             Line2D([], [], color="0.6", marker="o", ls="none", label="h at t = 0"),
             Line2D([], [], color="tab:purple", marker="o", ls="none", label="h at the end")]
    _solver_legend(fig, styles, runs, extra)
    n, m = runs[0].params.data.n, runs[0].params.model.width
    fig.suptitle(f"{name}: Chen et al. exp. 3, P-3L net, XOR + noise, n = {n}, m = D = {m} ({_seeds(runs)})")
    return fig


_FIGURE = {"chen-exp1": figure_exp1, "chen-exp2": figure_exp2, "chen-exp3": figure_exp3}


def plot_archive(path, out_dir, *, formats=("png", "pdf"), name: str | None = None) -> list[Path]:
    """Draw the archive's Chen figure into ``out_dir`` as ``<name>-<exp>.<fmt>``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with _archive.open(path) as arch:
        kind = figure_kind(arch)
        settings = scenario_config(arch)
        name = name or (settings.name if settings is not None else "") or Path(path).stem
        runs = read_runs(arch)
    if not kind or not runs:
        return []
    fig = plain_multiples(_FIGURE[kind](runs, name))
    stem = safe_name(name)
    written = []
    for fmt in formats:
        target = out / f"{stem}-{kind.removeprefix('chen-')}.{fmt.lstrip('.')}"
        fig.savefig(target, dpi=150 if fmt == "png" else None)
        written.append(target)
    return written
