"""`flowsim compare`'s text: the report table and the CSV of `compare.compare_archive`'s
numbers (the figures are `flowsim.plots.compare`'s)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from flowsim.kinds.solvers import SOLVER_KINDS

from .compare_central import SMOOTH_STEPS, TRUNCATE, CentralTrack
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
    # the name columns widen to the longest name, with two spaces after it ("rmsprop-central" ran into η)
    dw = max([12] + [len(p.discrete) + 2 for p in rep.pairs])
    fw = max([14] + [len(p.flow) + 2 for p in rep.pairs])
    head = (f"  {'discrete':<{dw}}{'flow':<{fw}}{'η':>7}{'times':>6}"
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
            lines.append(f"  {p.discrete:<{dw}}{p.flow:<{fw}}{p.eta:>7.4g}{p.t.size:>6}{cols}  {unres:>10}{st}")
        for lad in (x for x in rep.ladders if x.run == run):
            lines.append("  " + ladder_text(lad))
        for s in (x for x in rep.stability if x.run == run and x.verdict != "unknown"):   # (in the notes)
            lines.append(f"  stability {s.solver} (η = {s.eta:g}): {s.text()}")
    if rep.central:
        lines += central_text(rep)
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


def central_text(rep: Report) -> list[str]:
    """The section on GD beside its central flow (`flowsim.analysis.compare_central`): per run and
    pair, the onset, the means after it, the distances at a few times beside the noise
    floor, the sharpness at the end and the costs."""
    lines = [f"Each discrete leg (GD, RMSProp) beside its central flow at the same η, at matched times (its loss smoothed by a Gaussian "
             f"of σ = {SMOOTH_STEPS:g} steps in time over its checkpoint rows, cut at {TRUNCATE:g}σ, "
             "renormalised over the rows inside the run at its ends)"]
    for tr in rep.central:
        lines += ["  " + x for x in _track_text(tr)]
    return lines


def _track_text(tr: CentralTrack) -> list[str]:
    label = f" ({tr.label})" if tr.label else ""
    flow = f"flow {tr.flow}" if tr.flow else "no flow"
    twin = f"twin {tr.twin} (perturbation {tr.twin_perturbation:g})" if tr.twin else "no twin"
    out = [f"run {tr.run}{label}: {tr.gd} vs {tr.central} (η = {tr.eta:g}), {flow}, {twin}"]
    if tr.conventions:
        out.append(f"  conventions of {tr.central} (its archive attribute `conventions`):")
        out += [f"    {x}" for x in tr.conventions.splitlines()]
    else:
        out.append(f"  conventions: {tr.central} has no `conventions` attribute (an archive written before them)")
    limit = f"2/η = {2 / tr.eta:.4g}"
    if tr.onset is not None:
        after = int(tr.after.sum())
        out.append(f"  onset: t = {tr.t[tr.onset]:.4g} (step {int(tr.step[tr.onset])}), the first matched time where "
                   f"{tr.gd}'s {tr.sharpness} ≥ {limit}; {after} matched times from it on")
        ratios = (f"their ratio {_g(tr.ratio_of_means)}, the median of the per-row ratios {_g(tr.median_ratio)}"
                  if tr.ratio is not None else "no ratio")
        m = tr.method
        out.append(f"  from the onset on: mean ‖{m} − central‖ {_mean(tr, tr.d_central)}, mean ‖{m} − flow‖ "
                   f"{_mean(tr, tr.d_flow)}, {ratios}; beside them the noise floor, mean ‖{m} − twin‖ "
                   f"{_mean(tr, tr.floor)}; predicted loss vs {m}'s smoothed loss: mean relative error "
                   f"{_pct(tr.mean_after(tr.loss_error))}")
    elif tr.sharp_gd is not None:
        out.append(f"  onset: never: {tr.gd}'s {tr.sharpness} stays below {limit} at its {tr.t.size} matched times "
                   f"(max {_g(np.nanmax(tr.sharp_gd)) if tr.t.size else '—'}); no means after it")
    if tr.d_central is not None:
        m = tr.method
        w = len(m) - 2      # the columns widen with the method's name ("GD" the narrowest)
        out.append(f"  {'t':>10}{'step':>8}{f'‖{m} − central‖':>{16 + w}}{f'‖{m} − flow‖':>{13 + w}}{'ratio':>8}"
                   f"{f'floor ‖{m} − twin‖':>{19 + w}}{'pred. loss rel. err.':>22}")
        ratio, err = tr.ratio, tr.loss_error
        for i in tr.rows():
            cell = lambda a: _g(a[i]) if a is not None else "—"  # noqa: E731
            out.append(f"  {tr.t[i]:>10.4g}{int(tr.step[i]):>8}{cell(tr.d_central):>{16 + w}}{cell(tr.d_flow):>{13 + w}}"
                       f"{cell(ratio):>8}{cell(tr.floor):>{19 + w}}"
                       f"{(_pct(err[i]) if err is not None else '—'):>22}"
                       + ("   (onset)" if i == tr.onset else ""))
    if tr.t.size:
        end = tr.t.size - 1
        sharp = lambda a: _g(a[end]) if a is not None else "—"  # noqa: E731
        observed = f"; its `{tr.sharpness}` {sharp(tr.sharp_central_observed)}" if tr.sharp_central_observed is not None \
            else ""
        out.append(f"  {tr.sharpness} at t = {tr.t[end]:.4g}: {tr.method} {sharp(tr.sharp_gd)}, central {sharp(tr.sharp_central)} "
                   f"(central_eig1{observed}), flow {sharp(tr.sharp_flow)}; {limit}")
    costs = ", ".join(f"{leg} {_g(v)}" for leg, v in tr.cost.items())
    out.append(f"  cost per {tr.method} step in gradient-equivalents: {costs} (central: evaluations + Hessian-vector + "
               f"third-derivative products; flow: evaluations + Hessian-vector products; {tr.method}: one gradient)")
    out += [f"  note: {n}" for n in tr.notes]
    return out


def _mean(tr: CentralTrack, values) -> str:
    return "—" if values is None else _g(tr.mean_after(values))


def _pct(x) -> str:
    return "—" if x is None or not math.isfinite(float(x)) else f"{100 * float(x):.3g} %"


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
    return (f"ladder {kind} → {target}: {res} ({', '.join(lad.discrete)}: fit of log max_t {what} on log η, η = {etas}; "
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


CENTRAL_CSV_COLUMNS = ("run", "label", "seed", "gd", "central", "flow", "twin", "eta", "t", "step", "after_onset",
                       "d_central", "d_flow", "floor", "ratio", "loss_gd", "loss_smoothed", "predicted_loss",
                       "loss_rel_error", "sharpness_gd", "sharpness_central", "sharpness_flow",
                       "ratio_of_means", "median_ratio", "method", "sharpness_series")


def central_csv_path(path) -> Path:
    """Where `write_central_csv` writes beside the CSV at `path`: `<stem>-central.csv`."""
    path = Path(path)
    return path.with_name(f"{path.stem}-central{path.suffix or '.csv'}")


def write_central_csv(rep: Report, path) -> Path:
    """One row per GD / central-flow pair and matched time (`flowsim.analysis.compare_central`'s
    numbers) into `central_csv_path(path)`; empty cells where a series is not recorded. The
    pair's headline, from the onset on, is on each of its rows (`ratio_of_means`, the ratio of
    the mean distances, and `median_ratio`, the median of the per-row ratios), then what the
    `_gd` columns are of: the discrete leg's `method` (GD, RMSProp) and the `sharpness_series`
    its sharpness columns hold (`preconditioned_sharpness` for RMSProp's pair)."""
    target = central_csv_path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(CENTRAL_CSV_COLUMNS)
        for tr in rep.central:
            after = tr.after
            columns = (tr.d_central, tr.d_flow, tr.floor, tr.ratio, tr.loss_gd, tr.loss_smoothed, tr.predicted,
                       tr.loss_error, tr.sharp_gd, tr.sharp_central, tr.sharp_flow)
            headline = ["" if tr.ratio is None else repr(x) for x in (tr.ratio_of_means, tr.median_ratio)]
            for i in range(tr.t.size):
                w.writerow([tr.run, tr.label, tr.seed, tr.gd, tr.central, tr.flow, tr.twin, repr(tr.eta),
                            repr(float(tr.t[i])), int(tr.step[i]), int(after[i]),
                            *("" if a is None else repr(float(a[i])) for a in columns), *headline,
                            tr.method, tr.sharpness])
    return target
