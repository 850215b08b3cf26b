"""`flowsim compare`'s text: the report table and the CSV of `compare.compare_archive`'s
numbers (the figures are `flowsim.plots.compare`'s)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from flowsim.integrate.registry import SOLVER_KINDS

from .compare import CSV_COLUMNS, GAPS, SUMMARY_GAPS, Ladder, Report, SweepCell, cell_text, sweep_summary


def _g(x) -> str:
    if x is None:
        return "—"
    x = float(x)
    return "nan" if not math.isfinite(x) else f"{x:.3g}"


def _max_final(a: np.ndarray | None) -> tuple[str, str]:
    if a is None or not a.size:
        return "—", "—"
    fin = a[np.isfinite(a)]
    return (_g(fin.max()) if fin.size else "nan"), _g(a[-1])


def format_report(rep: Report) -> str:
    lines = [f"{rep.path}: scenario {rep.name!r} — discrete vs flow at matched times t = kη "
             f"(certificate: a gap ≤ {rep.factor:g} × the flow's error estimate is unresolved)"]
    # a column per gap some pair reports (what none can report is said in the notes)
    shown = [g for g in SUMMARY_GAPS if any(p.gaps.get(g) is not None for p in rep.pairs)]
    head = (f"  {'discrete':<12}{'flow':<14}{'η':>7}{'times':>6}"
            + "".join(f"  {SUMMARY_GAPS[g] + ' max/final':>20}" for g in shown) + f"  {'unresolved':>10}")
    for run, label in rep.runs.items():
        ps = [p for p in rep.pairs if p.run == run]
        lines.append(f"run {run}" + (f" ({label})" if label else ""))
        if ps:
            lines.append(head)
        for p in ps:
            cols = "".join(f"  {' / '.join(_max_final(p.gaps.get(g))):>20}" for g in shown)
            unres = "no cert." if p.unresolved is None else f"{int(p.unresolved.sum())}/{p.unresolved.size}"
            st = "" if p.status == "done" else f"  [{p.status}]"
            lines.append(f"  {p.discrete:<12}{p.flow:<14}{p.eta:>7.4g}{p.t.size:>6}{cols}  {unres:>10}{st}")
        for lad in (x for x in rep.ladders if x.run == run):
            lines.append("  " + ladder_text(lad))
        for s in (x for x in rep.stability if x.run == run and x.verdict != "unknown"):   # (in the notes)
            lines.append(f"  stability {s.solver} (η = {s.eta:g}): {s.text()}")
    cells = sweep_summary(rep)
    for key in rep.swept_keys:
        mine = [c for c in cells if c.key == key]
        gaps = [g for g in SUMMARY_GAPS if any(c.gap == g for c in mine)]
        lines.append(f"summary against `{key}`: max over t of each gap, mean [min, max] over the runs "
                     "with that value")
        rows: dict[tuple, dict[str, SweepCell]] = {}
        for c in mine:
            rows.setdefault((cell_text(c.value), c.discrete, c.flow), {})[c.gap] = c
        width = max(len(key), *(len(v) for v, _, _ in rows)) + 2
        lines.append(f"  {key:<{width}}{'discrete':<12}{'flow':<14}" + "".join(f"  {SUMMARY_GAPS[g]:>28}" for g in gaps))
        for (value, discrete, flow), by_gap in rows.items():
            text = [f"{_g(by_gap[g].mean)} [{_g(min(by_gap[g].maxima))}, {_g(max(by_gap[g].maxima))}]"
                    if g in by_gap else "—" for g in gaps]
            lines.append(f"  {value:<{width}}{discrete:<12}{flow:<14}" + "".join(f"  {t:>28}" for t in text))
    if rep.notes:
        lines.append("notes:")
        lines += [f"  {n}" for n in rep.notes]
    return "\n".join(lines)


def ladder_text(lad: Ladder) -> str:
    what = "‖W_GD − W_flow‖" if lad.measure == "weight_gap" else "|L_GD − L_flow|"
    kind = SOLVER_KINDS[lad.discrete_kind].label   # ladders hold discrete kinds only
    target = f"flow `{lad.flow}`" if lad.flow_kind == "flow" else lad.flow
    if math.isfinite(lad.order):
        se = f" ± {lad.stderr:.2g}" if math.isfinite(lad.stderr) else " (two steps: no error estimate)"
        res = f"order {lad.order:.3f}{se}"
    else:
        res = "order not fitted (fewer than two usable steps)"
    etas = ", ".join(f"{e:g}" for e in lad.etas[lad.used])
    left = "; ".join(f"η = {e:g} left out: {r}" for e, r, u in zip(lad.etas, lad.reasons, lad.used) if not u)
    times = f"{lad.n_times} common times" if lad.n_times else "each step's own times"
    return (f"ladder {kind} → {target}: {res} (fit of log max_t {what} on log η, η = {etas}; "
            f"max over {times})" + (f"; {left}" if left else "") + "".join(f"; {w}" for w in lad.warnings))


def write_csv(rep: Report, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        keys = rep.swept_keys
        w.writerow([*CSV_COLUMNS[:2], *keys, *CSV_COLUMNS[2:]])
        for p in rep.pairs:
            swept = [cell_text(rep.sweep[p.run][k]) for k in keys]
            for i in range(p.t.size):
                def col(a):
                    return "" if a is None else repr(float(a[i]))
                w.writerow([p.run, p.label, *swept, p.seed, p.discrete, p.discrete_kind, repr(p.eta), p.flow, p.flow_kind,
                            repr(float(p.t[i])), int(p.step[i]), *(col(p.gaps.get(g)) for g in GAPS),
                            col(p.flow_error), col(p.flow_loss_error),
                            "" if p.unresolved is None else int(bool(p.unresolved[i])),
                            col(p.eta_sharpness), p.status])
    return path
