"""Figures drawn from a flowsim archive (DESIGN.md §5): matplotlib, Agg, no display.

``plot_archive(path, out_dir)`` writes the scenario's figures and returns the files:

- ``<name>-fig1.<fmt>``: the four panels of Caron et al. Fig. 1 -- (a) training loss,
  (b) ``‖w_tj − w_0j‖`` of the largest movers, (c) ``‖Θ̂_t − Θ̂_0‖₂``, (d) ``eig_min Θ̂_t``;
- ``<name>-test.<fmt>`` when ``test_loss`` is recorded: train and test loss.

Styling: one colour per sweep point, one line style per solver (flow solid, discrete
dashed, modified flow dotted), mean over seeds with a min–max band over seeds, a ``×``
where a run ended early (status ``diverged``, ``max_steps``, ``nonfinite``, ``stopped``,
``failed``; the status is noted in the solver legend).

The pieces are small and public for reuse and tests: :func:`gather` reads an archive
into :class:`Trace` objects (one per sweep point and solver, seeds stacked),
:func:`figure_fig1` / :func:`figure_test` build ``matplotlib.figure.Figure`` objects,
one ``panel_*`` function draws each panel.  No pyplot: figures are plain ``Figure``
objects rendered by the Agg canvas, so nothing global is touched.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from flowsim import archive as _archive

__all__ = ["plot_archive", "short_label", "gather", "Trace", "figure_fig1", "figure_test",
           "panel_loss", "panel_weight_change", "panel_ntg_change", "panel_eig_min",
           "TOP_NODES"]

TOP_NODES = 5                    # panel (b): the nodes that moved most, per seed
EARLY_END = ("diverged", "max_steps", "nonfinite", "stopped", "failed")
DISCRETE_KINDS = ("gd", "momentum", "sgd")
_KIND_NAMES = {"flow": "flow", "modified-flow": "modified flow", "gd": "GD",
               "momentum": "momentum", "sgd": "SGD"}
# Line styles per solver family; a second solver of the same family takes the next one.
_STYLES = {"flow": ["-", (0, (8, 1.5)), (0, (12, 2, 2, 2))],
           "discrete": ["--", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (2, 1))],
           "modified-flow": [":", (0, (1, 3)), (0, (3, 1, 1, 1, 1, 1))]}
_GREEK = {"gamma": "γ", "alpha": "α", "lam": "λ", "eta": "η", "learning_rate": "η",
          "beta": "β", "kappa": "κ", "width": "m", "sigma": "σ"}
_NOT_RECORDED = "not recorded"


# --------------------------------------------------------------------------------------
# Labels
# --------------------------------------------------------------------------------------

def _num(x) -> str:
    """Compact number: 0.5, 1e-05, 2000."""
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, (float, np.floating)):
        return f"{float(x):g}"
    return str(x)


def _scaling_label(sc: dict) -> str:
    """`{kind="asymmetric", gamma=0.5, alpha=0.7}` -> "asymmetric γ=0.5 α=0.7"."""
    kind = str(sc.get("kind", "ntk"))
    if kind == "ntk":
        return "NTK"
    words = {"single": "single node", "custom": "custom λ"}.get(kind, kind)
    parts = [words]
    if kind == "finite" and "k" in sc:
        parts.append(f"K={_num(sc['k'])}")
    for key in ("gamma", "alpha"):
        if key in sc:
            parts.append(f"{_GREEK[key]}={_num(sc[key])}")
    if kind == "custom" and sc.get("path"):
        parts.append(Path(str(sc["path"])).stem)
    return " ".join(parts)


def _split_top(text: str, sep: str) -> list[str]:
    """Split on `sep` outside brackets and quotes."""
    out, depth, quote, cur, i = [], 0, None, "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        elif depth == 0 and text.startswith(sep, i):
            out.append(cur)
            cur, i = "", i + len(sep)
            continue
        cur += ch
        i += 1
    out.append(cur)
    return [s.strip() for s in out if s.strip()]


def _value_text(value: str) -> str:
    """A TOML inline value made readable: strip quotes, unpack tables."""
    value = value.strip()
    if value.startswith("{") and value.endswith("}"):
        items = [_split_top(p, "=") for p in _split_top(value[1:-1], ",")]
        words = []
        for kv in items:
            if len(kv) != 2:
                continue
            key, val = kv[0].strip().strip('"'), _value_text(kv[1])
            words.append(val if key == "kind" else f"{_GREEK.get(key, key)}={val}")
        return " ".join(words)
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    try:
        return _num(float(value)) if re.fullmatch(r"[-+0-9.eE]+", value) else value
    except ValueError:
        return value


def _get_dotted(params: dict, key: str):
    cur = params
    for part in key.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def short_label(params: dict, label: str) -> str:
    """A readable sweep-point label for legends.

    ``model.scaling={kind="asymmetric", gamma=0.5, alpha=0.7}`` becomes
    "asymmetric γ=0.5 α=0.7", ``{kind="ntk"}`` becomes "NTK", other swept keys keep
    their last component (``model.width=200`` -> "m=200"); parts are joined by ", ".
    Without a sweep (empty label) the point is named by its node scaling.
    """
    params = params or {}
    parts = []
    for item in _split_top(label or "", ";"):
        key, _, value = item.partition("=")
        key = key.strip().strip('"')
        resolved = _get_dotted(params, key)
        if key == "model.scaling" or key.endswith(".scaling"):
            sc = resolved if isinstance(resolved, dict) else None
            parts.append(_scaling_label(sc) if sc else _value_text(value))
            continue
        name = key.rsplit(".", 1)[-1]
        text = _value_text(value)
        if key == "model.scaling.kind" and isinstance(_get_dotted(params, "model.scaling"), dict):
            parts.append(_scaling_label(_get_dotted(params, "model.scaling")))
        elif name == "kind":
            parts.append(text)
        else:
            parts.append(f"{_GREEK.get(name, name)}={text}")
    if parts:
        return ", ".join(parts)
    sc = _get_dotted(params, "model.scaling")
    return _scaling_label(sc) if isinstance(sc, dict) else (label or "")


def _solver_label(name: str, preset: dict) -> str:
    kind = str(preset.get("kind", "flow"))
    text = f"{name}: {_KIND_NAMES.get(kind, kind)}"
    if kind in DISCRETE_KINDS or "learning_rate" in preset:
        if "learning_rate" in preset:
            text += f" η={_num(preset['learning_rate'])}"
    elif preset.get("method") and preset["method"] != name:
        text += f" ({preset['method']})"
    return text


# --------------------------------------------------------------------------------------
# Gathering: (point, solver) -> seeds stacked
# --------------------------------------------------------------------------------------

@dataclass
class Trace:
    """One sweep point × one solver, every seed stacked along axis 0 (NaN-padded)."""

    point: int
    solver: str
    label: str                     # the short point label
    params: dict
    preset: dict
    t: np.ndarray                  # (k,) the longest seed's checkpoint times
    seeds: list[int] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    series: dict[str, np.ndarray] = field(default_factory=dict)   # name -> (seeds, k[, r])
    init: dict[str, np.ndarray] = field(default_factory=dict)     # scalar inits, seed-mean

    @property
    def kind(self) -> str:
        return str(self.preset.get("kind", "flow"))

    @property
    def early_ends(self) -> list[tuple[int, str]]:
        """(seed index, status) of the seeds that ended early."""
        return [(i, s) for i, s in enumerate(self.statuses) if s in EARLY_END]


def _derived(view: _archive.SolverView) -> dict[str, np.ndarray]:
    """The per-seed quantities the figures need, each with time first."""
    names = set(view.series_names)
    out: dict[str, np.ndarray] = {}
    for name in ("loss", "test_loss", "accuracy", "test_accuracy"):
        if name in names:
            arr = np.asarray(view[name], dtype=float)
            out[name] = arr.reshape(arr.shape[0], -1).mean(axis=1) if arr.ndim > 1 else arr
    if "weight_change" in names:
        wc = np.asarray(view["weight_change"], dtype=float)
        if wc.shape[0]:
            final = np.where(np.isfinite(wc[-1]), wc[-1], -np.inf)
            top = np.argsort(final)[::-1][:TOP_NODES]
            out["weight_change_top"] = wc[:, top]          # (k, r), largest final first
    ntg = None
    if "ntg_change_spectral" in names:
        out["ntg_change"] = np.asarray(view["ntg_change_spectral"], dtype=float)
    elif "ntg" in names:
        ntg = np.asarray(view["ntg"], dtype=float)
        out["ntg_change"] = _spectral_change(ntg)
    if "ntg_eig" in names:
        out["eig_min"] = np.asarray(view["ntg_eig"], dtype=float)[:, 0]
    elif "ntg" in names:
        ntg = np.asarray(view["ntg"], dtype=float) if ntg is None else ntg
        out["eig_min"] = np.array([_eig_min(m) for m in ntg])
    return out


def _spectral_change(ntg: np.ndarray) -> np.ndarray:
    out = np.full(ntg.shape[0], np.nan)
    for i, m in enumerate(ntg):
        d = m - ntg[0]
        if np.all(np.isfinite(d)):
            out[i] = np.linalg.norm(d, ord=2)
    return out


def _eig_min(m: np.ndarray) -> float:
    if not np.all(np.isfinite(m)):
        return float("nan")
    return float(np.linalg.eigvalsh(0.5 * (m + m.T))[0])


def _stack(arrays: list[np.ndarray], ts: list[np.ndarray], t: np.ndarray) -> np.ndarray:
    """Seeds stacked on the common times ``t`` (NaN past a seed's end)."""
    rest = next((a.shape[1:] for a in arrays if a is not None), ())
    out = np.full((len(arrays), t.size, *rest), np.nan)
    for i, (a, ti) in enumerate(zip(arrays, ts)):
        if a is None or not len(a):
            continue
        k = min(len(a), len(ti))
        if k <= t.size and np.allclose(ti[:k], t[:k]):
            out[i, :k] = a[:k]
        else:                      # different checkpoint times: interpolate onto t
            flat = a[:k].reshape(k, -1)
            cols = [np.interp(t, ti[:k], c, left=np.nan, right=np.nan) for c in flat.T]
            out[i] = np.stack(cols, axis=-1).reshape(t.size, *rest)
    out[~np.isfinite(out)] = np.nan
    return out


def gather(arch: _archive.Archive) -> list[Trace]:
    """Read every run of an open archive into Traces sorted by (point, solver order)."""
    groups: dict[tuple[int, str], list[tuple]] = {}
    order: list[str] = []
    meta: dict[int, tuple[str, dict]] = {}
    for run in arch.runs.values():
        meta.setdefault(run.point, (run.label, run.params))
        init = run.init
        scalars = {k: float(np.asarray(v)) for k, v in init.items()
                   if np.ndim(v) == 0 and k in ("kappa_n", "loss0")}
        for name, view in run.solvers.items():
            if name not in order:
                order.append(name)
            groups.setdefault((run.point, name), []).append(
                (run.seed, view.status, view.preset, np.asarray(view.t, float),
                 _derived(view), scalars))
    traces = []
    for (point, name), items in sorted(groups.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1]))):
        items.sort(key=lambda it: it[0])
        ts = [it[3] for it in items]
        t = max(ts, key=len)
        names = sorted({n for it in items for n in it[4]})
        label, params = meta[point]
        inits = {k: float(np.mean([it[5][k] for it in items if k in it[5]]))
                 for k in {k for it in items for k in it[5]}}
        traces.append(Trace(
            point=point, solver=name, label=short_label(params, label), params=params,
            preset=items[0][2], t=t, seeds=[it[0] for it in items],
            statuses=[it[1] for it in items], lengths=[len(x) for x in ts],
            series={n: _stack([it[4].get(n) for it in items], ts, t) for n in names},
            init=inits))
    return traces


# --------------------------------------------------------------------------------------
# Styling
# --------------------------------------------------------------------------------------

@dataclass
class _Style:
    colour: dict[int, str]
    line: dict[str, object]

    @classmethod
    def of(cls, traces: list[Trace]) -> "_Style":
        points = sorted({tr.point for tr in traces})
        palette = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple",
                   "tab:brown", "tab:pink", "tab:gray", "tab:olive", "tab:cyan"]
        colour = {p: palette[i % len(palette)] for i, p in enumerate(points)}
        line, used = {}, {"flow": 0, "discrete": 0, "modified-flow": 0}
        for tr in traces:
            if tr.solver in line:
                continue
            fam = ("discrete" if tr.kind in DISCRETE_KINDS else
                   "modified-flow" if tr.kind == "modified-flow" else "flow")
            styles = _STYLES[fam]
            line[tr.solver] = styles[used[fam] % len(styles)]
            used[fam] += 1
        return cls(colour, line)


def _quiet(fn: Callable, *args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(*args, **kw)


def _draw(ax: Axes, tr: Trace, y: np.ndarray, style: _Style, *, band: bool = True,
          lw: float = 1.6, alpha: float = 1.0, mark: bool = True) -> None:
    """Mean over the seeds that ran to the end, with a min–max band over them; each seed
    that ended early is its own thin line ending in × (so no mean jumps where it stops)."""
    colour, ls = style.colour[tr.point], style.line[tr.solver]
    early = {i for i, _ in tr.early_ends}
    full = [i for i in range(y.shape[0]) if i not in early]
    if full:
        yf = y[full]
        ax.plot(tr.t, _quiet(np.nanmean, yf, axis=0), color=colour, ls=ls, lw=lw, alpha=alpha)
        if band and len(full) > 1:
            lo, hi = _quiet(np.nanmin, yf, axis=0), _quiet(np.nanmax, yf, axis=0)
            ax.fill_between(tr.t, lo, hi, color=colour, alpha=0.15 * alpha, lw=0)
    for i in sorted(early):
        ax.plot(tr.t, y[i], color=colour, ls=ls, lw=0.6 * lw, alpha=0.8 * alpha)
        good = np.flatnonzero(np.isfinite(y[i]))
        if mark and good.size:
            j = good[-1]
            ax.plot([tr.t[j]], [y[i, j]], marker="x", ms=9, mew=2.2, color=colour,
                    ls="none", zorder=5, clip_on=False)


def _not_recorded(ax: Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"{what}\n{_NOT_RECORDED}", ha="center", va="center",
            transform=ax.transAxes, color="0.45", fontsize=11, style="italic")
    ax.set_xticks([])
    ax.set_yticks([])


def _set_time_axis(ax: Axes, traces: Iterable[Trace]) -> None:
    """Symlog when the positive checkpoint times span three decades or more, else linear."""
    ts = np.concatenate([tr.t for tr in traces] or [np.zeros(1)])
    pos = ts[ts > 0]
    if pos.size and pos.max() / pos.min() >= 1e3:
        ax.set_xscale("symlog", linthresh=float(pos.min()), linscale=0.3)
    ax.set_xlabel("t (flow time; GD step × η)")
    if pos.size:
        ax.set_xlim(0, float(pos.max()) * (1.15 if ax.get_xscale() == "symlog" else 1.0))


def _set_y_auto_log(ax: Axes, values: list[np.ndarray], decades: float = 2.0) -> None:
    """Log y when the positive ``values`` span more than ``decades`` decades; the lower
    limit then comes from ``values`` (callers pass the rows after t = 0, so a change
    that is 0 or round-off at t = 0 does not stretch the axis)."""
    flat = np.concatenate([v[np.isfinite(v)].ravel() for v in values] or [np.zeros(0)])
    pos = flat[flat > 0]
    if pos.size and pos.max() / pos.min() > 10 ** decades:
        ax.set_yscale("log", nonpositive="mask")
        ax.set_ylim(bottom=float(pos.min()) / 1.5)


def _with(traces: list[Trace], name: str) -> list[Trace]:
    return [tr for tr in traces if name in tr.series and np.isfinite(tr.series[name]).any()]


def _theory_gamma(params: dict) -> float | None:
    """γ of Caron's bounds: 1 for NTK, the scaling's gamma for the asymmetric families."""
    sc = _get_dotted(params, "model.scaling") or {}
    kind = sc.get("kind", "ntk")
    if kind == "ntk":
        return 1.0
    if kind in ("asymmetric", "single", "finite", "custom"):
        return float(sc.get("gamma", 0.0))
    return None


def _theory_rate(tr: Trace) -> float | None:
    """γ κ_n of the run (None when not available or zero)."""
    gamma, kappa = _theory_gamma(tr.params), tr.init.get("kappa_n")
    if gamma is None or kappa is None or not math.isfinite(kappa) or gamma * kappa <= 0:
        return None
    return gamma * kappa


def _one_per_point(traces: list[Trace]) -> list[Trace]:
    seen, out = set(), []
    for tr in traces:
        if tr.point not in seen:
            seen.add(tr.point)
            out.append(tr)
    return out


# --------------------------------------------------------------------------------------
# Panels
# --------------------------------------------------------------------------------------

def panel_loss(ax: Axes, traces: list[Trace], style: _Style, *, name: str = "loss",
               title: str = "(a) training loss", bound: bool = True) -> None:
    """Loss vs t (log y) with the flow bound L_0 exp(−γκ_n t/2) for half-sse losses."""
    ax.set_title(title, loc="left", fontsize=11)
    have = _with(traces, name)
    if not have:
        _not_recorded(ax, name.replace("_", " "))
        return
    for tr in have:
        _draw(ax, tr, tr.series[name], style)
    _set_time_axis(ax, have)
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


def _loss_bound(ax: Axes, have: list[Trace], style: _Style) -> None:
    ylim = ax.get_ylim()
    for tr in _one_per_point(have):
        loss_kind = (_get_dotted(tr.params, "loss.kind") or "half-sse")
        rate = _theory_rate(tr)
        if loss_kind != "half-sse" or rate is None:
            continue
        l0 = tr.init.get("loss0")
        if l0 is None:
            l0 = float(_quiet(np.nanmean, tr.series["loss"][:, 0]))
        t = np.geomspace(max(tr.t[tr.t > 0].min(initial=1.0) / 10, 1e-12), tr.t.max(), 200) \
            if ax.get_xscale() == "symlog" else np.linspace(0, tr.t.max(), 200)
        t = np.concatenate([[0.0], t])
        ax.plot(t, l0 * np.exp(-rate * t / 2), color=style.colour[tr.point], ls=":",
                lw=1.2, alpha=0.8)
    ax.set_ylim(ylim)


def panel_weight_change(ax: Axes, traces: list[Trace], style: _Style) -> None:
    """The largest mover's ‖w_tj − w_0j‖ (bold, band over seeds) and ranks 2–5 (thin)."""
    ax.set_title(f"(b) weight change of the top-{TOP_NODES} nodes (per seed, by final value)",
                 loc="left", fontsize=11)
    have = _with(traces, "weight_change_top")
    if not have:
        _not_recorded(ax, "weight change")
        return
    for tr in have:
        top = tr.series["weight_change_top"]            # (seeds, k, r)
        for r in range(1, top.shape[2]):
            _draw(ax, tr, top[:, :, r], style, band=False, lw=0.7, alpha=0.45, mark=False)
        _draw(ax, tr, top[:, :, 0], style)
    _set_time_axis(ax, have)
    _set_y_auto_log(ax, [tr.series["weight_change_top"][:, 1:] for tr in have])
    ax.set_ylabel(r"$\|w_{tj} - w_{0j}\|$" + "\n"
                  f"(bold: largest mover, thin: ranks 2–{TOP_NODES})")


def panel_ntg_change(ax: Axes, traces: list[Trace], style: _Style) -> None:
    """Spectral norm of the NTG change since t = 0."""
    ax.set_title("(c) NTG change", loc="left", fontsize=11)
    have = _with(traces, "ntg_change")
    if not have:
        _not_recorded(ax, "NTG change")
        return
    for tr in have:
        _draw(ax, tr, tr.series["ntg_change"], style)
    _set_time_axis(ax, have)
    _set_y_auto_log(ax, [tr.series["ntg_change"][:, 1:] for tr in have])
    ax.set_ylabel(r"$\|\hat\Theta_t - \hat\Theta_0\|_2$  (spectral)")


def panel_eig_min(ax: Axes, traces: list[Trace], style: _Style) -> None:
    """Smallest NTG eigenvalue, with Caron's lower bound γκ_n/4 (dotted) per point."""
    ax.set_title("(d) smallest NTG eigenvalue", loc="left", fontsize=11)
    have = _with(traces, "eig_min")
    if not have:
        _not_recorded(ax, "NTG eigenvalues")
        return
    for tr in have:
        _draw(ax, tr, tr.series["eig_min"], style)
    for tr in _one_per_point(have):
        rate = _theory_rate(tr)
        if rate is not None:
            ax.axhline(rate / 4, color=style.colour[tr.point], ls=":", lw=1.2, alpha=0.9)
    _set_time_axis(ax, have)
    _set_y_auto_log(ax, [tr.series["eig_min"] for tr in have], decades=1.5)
    ax.set_ylabel(r"$\lambda_{\min}(\hat\Theta_t)$")


# --------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------

def _legends(fig: Figure, traces: list[Trace], style: _Style, *, theory: bool) -> None:
    """Colour legend (sweep points) and line-style legend (solvers, with early ends)."""
    points = _one_per_point(traces)
    handles = [Line2D([], [], color=style.colour[tr.point], lw=2.5) for tr in points]
    labels = [tr.label or f"point {tr.point}" for tr in points]
    solvers: dict[str, list[Trace]] = {}
    for tr in traces:
        solvers.setdefault(tr.solver, []).append(tr)
    s_handles, s_labels = [], []
    for name, trs in solvers.items():
        text = _solver_label(name, trs[0].preset)
        ends: dict[str, int] = {}
        for tr in trs:
            for _, status in tr.early_ends:
                ends[status] = ends.get(status, 0) + 1
        n_runs = sum(len(tr.statuses) for tr in trs)
        if ends:
            text += " — " + ", ".join(f"{s} in {n} of {n_runs} runs (×)" for s, n in ends.items())
        s_handles.append(Line2D([], [], color="0.2", ls=style.line[name], lw=1.6,
                                marker="x" if ends else None, ms=7, mew=2))
        s_labels.append(text)
    if theory:
        s_handles.append(Line2D([], [], color="0.4", ls=":", lw=1.2))
        s_labels.append(r"theory: $\gamma\kappa_n/4$ on (d), $L_0\,e^{-\gamma\kappa_n t/2}$ on (a)")
    s_handles.append(Line2D([], [], color="0.6", lw=6, alpha=0.3))
    s_labels.append("line: mean over seeds, band: min–max")
    # One legend, two columns (points | solvers) with a bold header row each, so the two
    # lists are top-aligned under the panels.
    blank = Line2D([], [], ls="none")
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


def _has_theory(traces: list[Trace]) -> bool:
    return any(_theory_rate(tr) is not None for tr in traces)


def _seeds_note(traces: list[Trace]) -> str:
    n = sorted({len(tr.seeds) for tr in traces})
    return f"{n[-1]} seed{'s' if n[-1] != 1 else ''}" if len(n) == 1 else f"{n[0]}–{n[-1]} seeds"


def figure_fig1(traces: list[Trace], name: str) -> Figure:
    """The four-panel figure of Caron et al. Fig. 1 (a Figure with four axes)."""
    fig = Figure(figsize=(12, 9.5), layout="constrained", dpi=110)
    axes = fig.subplots(2, 2).ravel()
    style = _Style.of(traces)
    panel_loss(axes[0], traces, style)
    panel_weight_change(axes[1], traces, style)
    panel_ntg_change(axes[2], traces, style)
    panel_eig_min(axes[3], traces, style)
    for ax in axes:
        if ax.has_data():
            ax.grid(True, which="major", alpha=0.3)
    fig.suptitle(f"{name}   ({_seeds_note(traces)})" if traces else name, fontsize=13)
    if traces:
        _legends(fig, traces, style, theory=_has_theory(traces))
    return fig


def figure_test(traces: list[Trace], name: str) -> Figure | None:
    """Train and test loss per point (None when test_loss is not recorded)."""
    if not _with(traces, "test_loss"):
        return None
    fig = Figure(figsize=(12, 5.5), layout="constrained", dpi=110)
    axes = fig.subplots(1, 2)
    style = _Style.of(traces)
    panel_loss(axes[0], traces, style, title="training loss", bound=False)
    panel_loss(axes[1], traces, style, name="test_loss", title="test loss", bound=False)
    for ax in axes:
        ax.grid(True, which="major", alpha=0.3)
    fig.suptitle(f"{name}: train and test loss   ({_seeds_note(traces)})", fontsize=13)
    _legends(fig, traces, style, theory=False)
    return fig


def _scenario_name(arch: _archive.Archive, path) -> str:
    resolved = arch.attrs.get("scenario_resolved") or {}
    if isinstance(resolved, dict) and resolved.get("name"):
        return str(resolved["name"])
    for run in arch.runs.values():
        if run.params.get("name"):
            return str(run.params["name"])
    return Path(os.fspath(path)).stem


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", name).strip("_") or "flowsim"


def plot_archive(path, out_dir, *, formats=("png", "pdf")) -> list[Path]:
    """Draw the scenario's figures from the archive at ``path`` into ``out_dir``.

    Writes ``<name>-fig1.<fmt>`` (and ``<name>-test.<fmt>`` when test loss is recorded)
    for each format; returns the paths written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    from flowsim import plots_chen

    with _archive.open(path) as arch:
        name = _scenario_name(arch, path)
        chen = plots_chen.figure_kind(arch)
        traces = [] if chen else gather(arch)
    if chen:  # `[plot] figure = "chen-exp…"`: Chen et al.'s paper layouts
        return plots_chen.plot_archive(path, out, formats=formats, name=name)
    figures = {"fig1": figure_fig1(traces, name), "test": figure_test(traces, name)}
    from flowsim.plots_caron import caron_figures  # pruning, transfer, PCA, lr transfer

    figures.update(caron_figures(path, name))
    written = []
    for tag, fig in figures.items():
        if fig is None:
            continue
        for fmt in formats:
            target = out / f"{_safe(name)}-{tag}.{fmt.lstrip('.')}"
            fig.savefig(target, dpi=150 if fmt == "png" else None)
            written.append(target)
    return written
