"""Flow versus discrete trajectories at matched times (`flowsim compare`): the numbers.
Their report table and CSV are `compare_report`'s, their figures `flowsim.plots.compare`'s.

For every run of an archive, each discrete solver (GD, momentum, SGD; step η, step k at
flow time t = kη) is paired with each plain flow solver of the same run, and each `gd`
solver with the modified flow (`modified-flow`) and the central flow (`central-flow`) of
the *same* η — a modified or central flow of another step size is a different equation, not
a reference for this GD. The driver makes
every flow checkpoint at every GD time kη, so rows are matched by time (|t_a − t_b| ≤
1e-9·max(1, t)); a GD row with no flow row at its time (e.g. the last good iterate of a
diverged run) is counted as unmatched and left out — never interpolated, never the
nearest checkpoint. t = 0, where both are W_0, is left out.

At each matched time t > 0:

    weight_gap       ‖W_GD(k) − W_flow(kη)‖_F                      (needs series `weights`)
    weight_gap_rel   weight_gap / ‖W_flow(kη) − W_0‖_F
    loss_gap         |L_GD − L_flow|                                (series `loss`)
    ntg_gap          ‖Θ̂_GD − Θ̂_flow‖_2 (spectral norm)            (series `ntg`)
    ntg_gap_rel      ntg_gap / ‖Θ̂_flow‖_2 (the scale the report shows it on)
    weight_change_gap max_j |‖w_j,GD − w_j0‖ − ‖w_j,flow − w_j0‖|  (series `weight_change`)

Certificate. A flow preset with a `reference` records `flow_error` = ‖W − W_ref‖, an
estimate of its own global error e. The measured gap g̃ differs from the true GD–flow gap
g by at most e. A matched time is *unresolved* when g̃ ≤ CERTIFICATE_FACTOR · flow_error
with the factor 2: outside that band g ≥ g̃ − e > g̃/2 (and g < 3g̃/2), i.e. the reported
gap is right to within a factor of two even if the estimate is only good to its own
order, and order fits are unaffected; inside it the gap may be mostly the flow's own
error. Without `weights`, the loss gap is certified against `flow_loss_error` instead.

Step-size ladder. For the discrete solvers of one kind (and otherwise equal settings) with
several η, the gap measure max_t weight_gap (max_t loss_gap without weights) is taken over
the matched times common to all of them, and log(gap) = p log η + c is fitted by least
squares; the order p is printed with its standard error from the regression. Diverged
members and members whose max gap is unresolved are left out of the fit, with the reason.

Stability. For each discrete solver with `sharpness` (else `gn_sharpness`, else
`preconditioned_sharpness`, which is the sharpness for these) recorded — rate·λ_max, see
flowsim/observe/stability.py — and each RMSProp or Adam leg with `preconditioned_sharpness`
(rate·λ_max(P^{-1/2} H P^{-1/2}), P its own denominator), the verdict is whether η·λ stayed
below the leg's edge η·`flowsim.kinds.solvers.edge` (GD, SGD, RMSProp: 2; heavy-ball
momentum β: 2(1+β); Adam: (2 + 2β₁)/(1 − β₁), 38 at β₁ = 0.9), crossed it, or the run
diverged (status `diverged`),
judged at the recorded checkpoints only (a coarser grid can miss a crossing). A run that
crossed is named by how it went on: at the edge of stability while it keeps coming back to
the limit, i.e. its last checkpoint at or above the limit lies in the later half of the time
from the crossing to its last checkpoint (GD hovering about 2/η dips below it between
returns, and its last checkpoint may be one of the dips); else a catapult: back below the
limit early and below it to the end. A run that crosses at its last checkpoint is named
neither: it reaches the limit there, and how it goes on is not recorded. From the crossing
on, the ratio r = η·λ / limit is summarised by its mean and the share of checkpoints with r in
[0.75, 1.25] (Adam traces a sawtooth just below its threshold: Cohen et al. 2022).

Central flow. Each `gd` solver beside the central flow of its η is scored by
`flowsim.analysis.compare_central` (onset, distances against the noise floor, predicted loss, costs):
`Report.central`, empty for an archive without a central flow.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flowsim import archive as _archive
from flowsim.config.declare import from_dict
from flowsim.config.typed import DescentPreset, FlowPreset, Preset
from flowsim.kinds.solvers import GD_FLOW_KINDS, SOLVER_KINDS, edge
from flowsim.toml_text import is_number, sweep_axes, toml_value, value_at

from .compare_central import CentralTrack, central_tracks
from .matching import match_times, per_row, row_norms, same_eta, series_of

# The band of r = η·λ/limit a leg at its edge is counted in (`Stability.edge_band`)
EDGE_BAND = (0.75, 1.25)
# The kinds judged by their preconditioned sharpness: the adaptive methods and their flows
PRECONDITIONED = frozenset(k for k, v in SOLVER_KINDS.items() if v.flow_of) | frozenset(
    v.flow_of for v in SOLVER_KINDS.values() if v.flow_of)

CERTIFICATE_FACTOR = 2.0
GAPS = ("weight_gap", "weight_gap_rel", "loss_gap", "ntg_gap", "ntg_gap_rel", "weight_change_gap")
# (after "label", one column per swept key, named by its dotted key)
CSV_COLUMNS = ("run", "label", "seed", "discrete", "discrete_kind", "eta", "flow", "flow_kind", "t", "step",
               *GAPS, "flow_error", "flow_loss_error", "unresolved", "eta_sharpness", "discrete_status")


# --------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------

@dataclass
class Pair:
    """One discrete solver against one flow solver of one run, at their matched times."""

    run: str
    label: str
    seed: int
    discrete: str
    flow: str
    discrete_kind: str
    flow_kind: str
    eta: float
    status: str                      # the discrete solver's status
    preset: DescentPreset            # the discrete solver's preset
    flow_preset: FlowPreset
    t: np.ndarray                    # matched times, t > 0
    step: np.ndarray
    gaps: dict[str, np.ndarray | None] = field(default_factory=dict)
    flow_error: np.ndarray | None = None
    flow_loss_error: np.ndarray | None = None
    unresolved: np.ndarray | None = None      # bool per matched time; None: no certificate
    certified_on: str = ""                    # "weights" | "loss" | ""
    unmatched: int = 0                        # discrete rows (t > 0) with no flow row at their time
    eta_sharpness: np.ndarray | None = None   # η · sharpness of the discrete run at the matched times
    flow_displacement: np.ndarray | None = None   # ‖W_flow − W_0‖ at the matched times

    def measure(self) -> tuple[str, np.ndarray | None]:
        """The gap the ladder fits: the weight distance, else the loss gap."""
        if self.gaps.get("weight_gap") is not None:
            return "weight_gap", self.gaps["weight_gap"]
        return "loss_gap", self.gaps.get("loss_gap")


@dataclass
class Ladder:
    run: str
    discrete_kind: str
    flow: str                        # the flow solver's name, or "modified flow (same η)"
    flow_kind: str
    measure: str
    discrete: list[str]              # every member's discrete solver (in the order of etas)
    etas: np.ndarray                 # every member's η (descending)
    gaps: np.ndarray                 # max-over-common-times gap per member (NaN if none)
    used: np.ndarray                 # bool: member in the fit
    reasons: list[str]               # why a member is left out ("" when used)
    n_times: int                     # common matched times the max is taken over
    order: float = math.nan
    stderr: float = math.nan
    intercept: float = math.nan
    warnings: list[str] = field(default_factory=list)


@dataclass
class Stability:
    run: str
    solver: str
    eta: float
    status: str
    source: str                      # "sharpness" | "gn_sharpness" | "preconditioned_sharpness" | ""
    limit: float                     # the leg's edge × η (2, 2(1+β), 38 for Adam at β₁ = 0.9), in units of η·λ
    verdict: str                     # "below" | "crossed" | "diverged" | "unknown"
    max_eta_lambda: float = math.nan
    t_cross: float = math.nan
    final_eta_lambda: float = math.nan
    judged: int = 0                  # recorded checkpoints with a finite η·λ: the verdict sees only these
    t_last_over: float = math.nan    # the last of them at or above the limit
    t_judged: float = math.nan       # the last of them
    over_share: float = math.nan     # the share of them at or above the limit, from the crossing on
    edge_mean: float = math.nan      # mean of r = η·λ/limit from the crossing on
    edge_band: float = math.nan      # the share of those with r in EDGE_BAND
    t: np.ndarray | None = None
    sharp: np.ndarray | None = None  # λ (rate·λ_max) per checkpoint
    kind: str = ""                   # the solver kind

    def text(self) -> str:
        lim = f"{self.limit:.3g}/η"
        what = {"sharpness": "sharpness", "gn_sharpness": "Gauss–Newton sharpness",
                "preconditioned_sharpness": "preconditioned sharpness"}.get(self.source, "")
        if self.verdict == "diverged":
            more = f"; η·λ reached {self.max_eta_lambda:.3g}" if what and self.judged else ""
            if what and math.isfinite(self.t_cross):
                more += f", crossing {lim} at t = {self.t_cross:.4g}"
            return f"diverged (status `diverged`){more}"
        if not what:
            if not math.isfinite(self.limit):
                return "stability unknown: the edge of a given optax transformation is not known"
            if self.preconditioned:
                return "stability unknown: record `preconditioned_sharpness` (its own P) to decide"
            return "stability unknown: record `sharpness` or `gn_sharpness` to decide"
        # η·λ is known at the recorded checkpoints only: a finer grid can cross where these did not
        at = f"at its {self.judged} recorded checkpoints"
        if self.verdict == "below":
            return (f"stayed below {lim} {at}: max η·{what} = {self.max_eta_lambda:.3g} < {self.limit:.3g} "
                    "(between checkpoints unknown)")
        over = f"η·{what} ≥ {self.limit:.3g} at {100 * self.over_share:.0f} % of the checkpoints from the crossing on"
        if self.t_cross >= self.t_judged:
            how = ", its last recorded checkpoint: it reaches the limit at the end, how it goes on is not recorded"
        elif self.at_edge:
            how = (f" and stayed at the edge of stability, back at or above it until t = {self.t_last_over:.4g} "
                   f"of {self.t_judged:.4g} ({over}; η·λ/limit: mean {self.edge_mean:.3g}, "
                   f"{100 * self.edge_band:.0f} % of the checkpoints in [{EDGE_BAND[0]:g}, {EDGE_BAND[1]:g}])")
        else:   # named by time, as its stat: its checkpoints may crowd the early spike (a log grid)
            below = (self.t_judged - self.t_last_over) / (self.t_judged - self.t_cross)
            how = (f" and came back below it after t = {self.t_last_over:.4g}, to the end at t = "
                   f"{self.t_judged:.4g}: a catapult (below {lim} for the last {100 * below:.0f} % of the time "
                   "from the crossing on)")
        return (f"crossed {lim} at t = {self.t_cross:.4g}{how}, judged {at}: max η·{what} = "
                f"{self.max_eta_lambda:.3g}, final {self.final_eta_lambda:.3g}")

    @property
    def preconditioned(self) -> bool:
        """Judged by its preconditioned sharpness (RMSProp, Adam)."""
        return self.kind in PRECONDITIONED

    @property
    def at_edge(self) -> bool:
        """Crossed and came back to the limit in the later half of the time since (see the
        module's docstring)."""
        return self.t_last_over - self.t_cross >= 0.5 * (self.t_judged - self.t_cross)


@dataclass
class Report:
    path: str
    name: str
    factor: float
    pairs: list[Pair]
    ladders: list[Ladder]
    stability: list[Stability]
    notes: list[str]
    runs: dict[str, str]             # run → label
    empty: str = ""                  # when there are no pairs: why, in one sentence
    sweep: dict[str, dict[str, Any]] = field(default_factory=dict)   # run → swept key → its value
    central: list[CentralTrack] = field(default_factory=list)        # GD beside its central flow

    @property
    def swept_keys(self) -> list[str]:
        return list(next(iter(self.sweep.values()), {}))


# --------------------------------------------------------------------------------------
# Computation
# --------------------------------------------------------------------------------------

def fit_order(etas, gaps) -> tuple[float, float, float]:
    """Least-squares slope of log(gap) against log(η): (order, its standard error, intercept).
    The standard error is sqrt(s² / Σ(x − x̄)²) with s² the residual variance on n − 2
    degrees of freedom (NaN with fewer than three points)."""
    x, y = np.log(np.asarray(etas, float)), np.log(np.asarray(gaps, float))
    if x.size < 2 or np.ptp(x) == 0:
        return math.nan, math.nan, math.nan
    xm = x.mean()
    sxx = float(np.sum((x - xm) ** 2))
    slope = float(np.sum((x - xm) * (y - y.mean())) / sxx)
    intercept = float(y.mean() - slope * xm)
    if x.size < 3:
        return slope, math.nan, intercept
    resid = y - (intercept + slope * x)
    return slope, float(math.sqrt(np.sum(resid**2) / (x.size - 2) / sxx)), intercept


def sharp_source(view, kind: str = "gd") -> str:
    """The series a solver of `kind` is judged by at its edge: for RMSProp, Adam and their flows
    `preconditioned_sharpness` (their P), else ""; for the others `sharpness`, else
    `gn_sharpness`, else `preconditioned_sharpness` (theirs, P = I, is the sharpness), else ""."""
    order = ("preconditioned_sharpness",) if kind in PRECONDITIONED else (
        "sharpness", "gn_sharpness", "preconditioned_sharpness")
    return next((name for name in order if name in view), "")


def compare_pair(run, dview, fview, dpreset: DescentPreset, fpreset: FlowPreset,
                 factor: float = CERTIFICATE_FACTOR) -> Pair:
    """Gaps of the discrete solver `dview` from the flow `fview` (their presets typed) at
    their matched times."""
    td, tf = np.asarray(dview.t, float), np.asarray(fview.t, float)
    ia, ib = match_times(td, tf)
    keep = td[ia] > 0
    ia, ib = ia[keep], ib[keep]
    unmatched = int(np.sum(td > 0) - ia.size)
    step = dview.step
    step = np.asarray(step)[ia] if step is not None else np.round(td[ia] / dpreset.learning_rate).astype(int)
    pair = Pair(run=run.name, label=run.label, seed=run.seed, discrete=dview.name, flow=fview.name,
                discrete_kind=dpreset.kind, flow_kind=fpreset.kind,
                eta=float(dpreset.learning_rate), status=dview.status, preset=dpreset,
                flow_preset=fpreset, t=td[ia], step=step, unmatched=unmatched)
    gaps: dict[str, np.ndarray | None] = dict.fromkeys(GAPS)
    Wd, Wf = series_of(dview, "weights"), series_of(fview, "weights")
    if Wd is not None and Wf is not None:
        diff = Wd[ia] - Wf[ib]
        gaps["weight_gap"] = row_norms(diff)
        W0 = Wf[0]   # the flow's first row, t = 0: the network's `weights` (AbstractNet) at its start
        pair.flow_displacement = row_norms(Wf[ib] - W0)
        with np.errstate(divide="ignore", invalid="ignore"):
            gaps["weight_gap_rel"] = gaps["weight_gap"] / pair.flow_displacement
    Ld, Lf = series_of(dview, "loss"), series_of(fview, "loss")
    if Ld is not None and Lf is not None:
        gaps["loss_gap"] = np.abs(per_row(Ld[ia] - Lf[ib])).max(axis=1)
    Nd, Nf = series_of(dview, "ntg"), series_of(fview, "ntg")
    if Nd is not None and Nf is not None:
        gaps["ntg_gap"] = np.array([_spectral(a - b) for a, b in zip(Nd[ia], Nf[ib])])
        with np.errstate(divide="ignore", invalid="ignore"):
            gaps["ntg_gap_rel"] = gaps["ntg_gap"] / np.array([_spectral(b) for b in Nf[ib]])
    Cd, Cf = series_of(dview, "weight_change"), series_of(fview, "weight_change")
    if Cd is not None and Cf is not None:
        gaps["weight_change_gap"] = np.abs(per_row(Cd[ia] - Cf[ib])).max(axis=1)
    pair.gaps = gaps
    fe, fle = series_of(fview, "flow_error"), series_of(fview, "flow_loss_error")
    pair.flow_error = None if fe is None else fe[ib]
    pair.flow_loss_error = None if fle is None else fle[ib]
    if pair.flow_error is not None and gaps["weight_gap"] is not None:
        pair.unresolved, pair.certified_on = ~(gaps["weight_gap"] > factor * pair.flow_error), "weights"
    elif pair.flow_loss_error is not None and gaps["loss_gap"] is not None:
        pair.unresolved, pair.certified_on = ~(gaps["loss_gap"] > factor * pair.flow_loss_error), "loss"
    src = sharp_source(dview, dpreset.kind)
    if src:
        pair.eta_sharpness = pair.eta * series_of(dview, src)[ia]
    return pair


def _spectral(m: np.ndarray) -> float:
    if not np.all(np.isfinite(m)):
        return math.nan
    return float(np.max(np.abs(np.linalg.eigvalsh(0.5 * (m + m.T)))))


def _stability(run, view, preset: DescentPreset) -> Stability:
    eta = float(preset.learning_rate)
    threshold = edge(preset.kind, eta, preset)
    limit = math.nan if threshold is None else eta * threshold
    src = sharp_source(view, preset.kind) if threshold is not None else ""
    out = Stability(run=run.name, solver=view.name, eta=eta, status=view.status, source=src, limit=limit,
                    verdict="unknown", kind=preset.kind)
    if src:
        t, lam = np.asarray(view.t, float), series_of(view, src)
        out.t, out.sharp = t, lam
        el = eta * lam
        fin = np.isfinite(el)
        out.judged = int(fin.sum())
        if fin.any():
            out.max_eta_lambda = float(np.max(el[fin]))
            out.final_eta_lambda = float(el[fin][-1])
            over = np.flatnonzero(fin & (el >= limit))
            out.t_judged = float(t[fin][-1])
            if over.size:
                out.t_cross, out.t_last_over = float(t[over[0]]), float(t[over[-1]])
                out.over_share = over.size / int(fin[over[0]:].sum())
                r = el[over[0]:][fin[over[0]:]] / limit
                out.edge_mean = float(np.mean(r))
                out.edge_band = float(np.mean((r >= EDGE_BAND[0]) & (r <= EDGE_BAND[1])))
            out.verdict = "crossed" if over.size else "below"
    if view.status == "diverged":
        out.verdict = "diverged"
    return out


def _ladder_key(pair: Pair) -> tuple:
    """Pairs in one ladder: same run, discrete kind and non-η settings, same flow (for
    modified flows: the same method and tolerances, each at its own η)."""
    settings = tuple(sorted((f.name, str(getattr(pair.preset, f.name)))
                            for f in dataclasses.fields(pair.preset)
                            if f.name not in ("name", "description", "learning_rate")))
    if pair.flow_kind == "modified-flow":
        fp = pair.flow_preset
        flow = ("modified-flow", fp.method, fp.rtol, fp.atol)
    else:
        flow = ("flow", pair.flow)
    return pair.run, pair.discrete_kind, settings, flow


def ladders(pairs: list[Pair]) -> list[Ladder]:
    groups: dict[tuple, list[Pair]] = {}
    for p in pairs:
        groups.setdefault(_ladder_key(p), []).append(p)
    out = []
    for key, members in groups.items():
        if len({p.eta for p in members}) < 2:
            continue
        members = sorted(members, key=lambda p: -p.eta)
        measure = "weight_gap" if all(p.gaps.get("weight_gap") is not None for p in members) else "loss_gap"
        alive = [p for p in members if p.status != "diverged" and p.t.size]
        common = None
        for p in alive:
            common = set(p.t.tolist()) if common is None else common & set(p.t.tolist())
        common = np.array(sorted(common or ()))
        gaps, used, reasons = [], [], []
        for p in members:
            g = p.gaps.get(measure)
            if g is None or not p.t.size:
                gaps.append(math.nan), used.append(False), reasons.append(f"no {measure}")
                continue
            if p.status == "diverged":
                gaps.append(float(np.nanmax(g)) if np.isfinite(g).any() else math.nan)
                used.append(False), reasons.append("diverged")
                continue
            sel = np.isin(p.t, common) if common.size else np.ones(p.t.size, bool)
            gs = np.where(np.isfinite(g[sel]), g[sel], -np.inf)
            if not gs.size or not np.isfinite(gs.max()):
                gaps.append(math.nan), used.append(False), reasons.append("no finite gap")
                continue
            i = int(np.argmax(gs))
            gaps.append(float(gs[i]))
            unres = p.unresolved[sel][i] if p.unresolved is not None and (
                (measure == "weight_gap") == (p.certified_on == "weights")) else False
            if unres:
                used.append(False), reasons.append("unresolved: gap ≤ factor × flow error")
            elif gs[i] <= 0:
                used.append(False), reasons.append("zero gap")
            else:
                used.append(True), reasons.append("")
        lad = Ladder(run=key[0], discrete_kind=key[1],
                     flow=members[0].flow if key[3][0] == "flow" else "modified flow (same η)",
                     flow_kind=key[3][0], measure=measure, discrete=[p.discrete for p in members],
                     etas=np.array([p.eta for p in members]),
                     gaps=np.array(gaps), used=np.array(used), reasons=reasons, n_times=int(common.size))
        if lad.used.sum() >= 2:
            lad.order, lad.stderr, lad.intercept = fit_order(lad.etas[lad.used], lad.gaps[lad.used])
        out.append(lad)
    return out


def warn_crossed(lads: list[Ladder], stab: list[Stability]) -> None:
    """A step past the stability limit is outside the asymptotic regime: each ladder says so
    of its own members that crossed (by solver: a GD and its twin share an η, not a ladder)."""
    for lad in lads:
        for s in stab:
            if s.run == lad.run and s.verdict == "crossed" and s.solver in lad.discrete \
                    and lad.used[lad.discrete.index(s.solver)]:
                lad.warnings.append(f"η = {s.eta:g} crossed {s.limit:g}/η: the fit includes a step outside "
                                    "the small-step regime")


def _once(notes: list[tuple[str, str]], runs: list[str]) -> list[str]:
    """Each note once, with the runs it concerns ("every run" when it is all of them)."""
    where: dict[str, list[str]] = {}
    for run, text in notes:
        where.setdefault(text, []).append(run)
    return [f"{'every run' if len(rs) == len(runs) > 1 else ('run ' if len(rs) == 1 else 'runs ') + ', '.join(rs)}"
            f": {text}" for text, rs in where.items()]


def _scenario_name(arch, path) -> str:
    resolved = arch.attrs.get("scenario_resolved") or {}
    if isinstance(resolved, dict) and resolved.get("name"):
        return str(resolved["name"])
    return Path(os.fspath(path)).stem


def _pairs_with(dp, fp) -> bool:
    """Whether the flow preset `fp` is compared with the discrete `dp`: the gradient flow with
    every discrete leg; GD's own flows (modified, central) with GD at their η; an adaptive
    method's flows (stable, central) with that method at their η."""
    if fp.kind in GD_FLOW_KINDS:
        return dp.kind == "gd" and same_eta(fp.learning_rate, dp.learning_rate)
    if SOLVER_KINDS[fp.kind].flow_of:
        return dp.kind == SOLVER_KINDS[fp.kind].flow_of and same_eta(fp.learning_rate, dp.learning_rate)
    return True


def _why_empty(arch, path) -> str:
    """Why an archive gives no discrete/flow pair: what its scenario lacks, or what has not
    started yet (an interrupted run)."""
    configured = [(run, from_dict(Preset, p)) for run in arch.runs.values() for p in run.params["run"]["solvers"]]
    legs = {"discrete": [(r, p) for r, p in configured if isinstance(p, DescentPreset)],
            "flow": [(r, p) for r, p in configured if isinstance(p, FlowPreset)]}
    for leg, discrete in (("discrete", True), ("flow", False)):
        if not legs[leg]:
            kinds = ", ".join(k for k, v in SOLVER_KINDS.items() if v.discrete == discrete)
            return (f"{path}: nothing to compare: its scenario has no {leg} solver (run.solvers; "
                    f"kinds {kinds})")
    for leg, members in legs.items():
        waiting = sorted({p.name for r, p in members if p.name not in r.solvers or not r.solvers[p.name].n_checkpoints})
        if len({p.name for _, p in members}) == len(waiting):
            return (f"{path}: nothing to compare yet: the {leg} solver(s) {', '.join(waiting)} have not "
                    "started (the run was interrupted before them; resume it with `flowsim run … --resume`)")
    if not any(_pairs_with(d, f) for _, d in legs["discrete"] for _, f in legs["flow"]):
        leg = lambda p: f"{p.name} ({SOLVER_KINDS[p.kind].label}" + (  # noqa: E731
            f", η = {p.learning_rate:g})" if getattr(p, "learning_rate", None) is not None else ")")
        return (f"{path}: nothing to compare: no flow is of a discrete leg's method and step (a flow of GD's or "
                f"of an adaptive method's pairs with that method at its own learning_rate): discrete "
                f"{', '.join(dict.fromkeys(leg(p) for _, p in legs['discrete']))}; flow "
                f"{', '.join(dict.fromkeys(leg(p) for _, p in legs['flow']))}")
    return f"{path}: nothing to compare: no discrete/flow pair of any run has a checkpoint at a common time"


def compare_archive(path, factor: float = CERTIFICATE_FACTOR) -> Report:
    """Every discrete/flow pair of every run of the archive at `path`."""
    pairs: list[Pair] = []
    stab: list[Stability] = []
    notes: list[tuple[str, str]] = []      # (run, note): said once below, naming its runs
    runs: dict[str, str] = {}
    sweep: dict[str, dict[str, Any]] = {}
    central: list[CentralTrack] = []
    with _archive.open(path) as arch:
        name = _scenario_name(arch, path)
        resolved = arch.attrs.get("scenario_resolved", {})
        keys = sweep_axes(resolved.get("sweep"))
        for run in arch.runs.values():
            runs[run.name] = run.label
            sweep[run.name] = {k: value_at(run.params, k) for k in keys}
            solvers = run.solvers
            presets = {name: from_dict(Preset, v.preset) for name, v in solvers.items()}
            disc = [v for v in solvers.values() if isinstance(presets[v.name], DescentPreset)]
            flows = [v for v in solvers.values() if isinstance(presets[v.name], FlowPreset)]
            if not disc or not flows:
                notes.append((run.name, f"needs a discrete and a flow solver (has "
                                        f"{', '.join(solvers) or 'none'}); nothing to compare"))
            unknown = []
            twins = [d.name for d in disc if getattr(presets[d.name], "perturbation", 0.0)]
            if twins and flows:
                notes.append((run.name, f"{', '.join(twins)}: perturbed twin(s), the noise floor of the central-"
                                        "flow section; not paired with the flows (each would repeat its unperturbed leg's row)"))
            for d in (d for d in disc if d.name not in twins):
                dp = presets[d.name]
                stab.append(_stability(run, d, dp))
                if stab[-1].verdict == "unknown":
                    unknown.append(d.name)
                for f in (f for f in flows if _pairs_with(dp, presets[f.name])):
                    fp = presets[f.name]
                    p = compare_pair(run, d, f, dp, fp, factor)
                    pairs.append(p)
                    if p.unmatched:
                        notes.append((run.name, f"{d.name} vs {f.name}: {p.unmatched} checkpoint(s) of "
                                                f"{d.name} have no flow row at the same time (left out)"))
            if unknown:
                notes.append((run.name, f"stability of {', '.join(unknown)} unknown: record `sharpness` or "
                                        "`gn_sharpness` to decide"))
            central += central_tracks(run, presets)
            mine = [p for p in pairs if p.run == run.name]
            absent = [g for g in SUMMARY_GAPS if mine and all(p.gaps.get(g) is None for p in mine)]
            if absent:
                notes.append((run.name, "not reported: " + ", ".join(
                    f"{SUMMARY_GAPS[g]} (needs `{GAP_SERIES[g]}`)" for g in absent) + " recorded by both "
                    "solvers of a pair: add them to run.observe (`observe` of flowsim.simulate)"))
            flows_plain = [f.name for f in flows if presets[f.name].kind == "flow" and "flow_error" not in f]
            if disc and flows_plain:
                notes.append((run.name, f"flow(s) {', '.join(flows_plain)} have no error estimate "
                                        "(give the preset a `reference`): gaps are not certified"))
        empty = "" if pairs else _why_empty(arch, path)
    lads = ladders(pairs)
    warn_crossed(lads, stab)
    return Report(path=os.fspath(path), name=name, factor=factor, pairs=pairs, ladders=lads,
                  stability=stab, notes=_once(notes, list(runs)), runs=runs, empty=empty, sweep=sweep,
                  central=central)


SUMMARY_GAPS = {"weight_gap_rel": "rel ‖ΔW‖", "loss_gap": "|ΔL|", "ntg_gap_rel": "rel ‖ΔΘ̂‖",
                "weight_change_gap": "Δ‖w−w0‖"}
GAP_SERIES = {"weight_gap_rel": "weights", "loss_gap": "loss", "ntg_gap_rel": "ntg",
              "weight_change_gap": "weight_change"}


def cell_text(value: Any) -> str:
    """A swept value in the CSV: a number as written, anything else as inline TOML."""
    return repr(value) if is_number(value) else toml_value(value)


@dataclass
class SweepCell:
    """max_t of one gap over the runs of one swept value, for one discrete/flow pair."""

    key: str
    value: Any
    discrete: str
    flow: str
    gap: str
    maxima: list[float]          # one per run (seed, and the other swept keys' values)

    @property
    def mean(self) -> float:
        return float(np.mean(self.maxima))


def sweep_summary(rep: Report) -> list[SweepCell]:
    """For each swept key, each value, each discrete/flow pair and each recorded gap: the
    max over t of the gap in every run with that value. Values come in increasing order
    when they are numbers, in sweep order otherwise."""
    cells: dict[tuple, SweepCell] = {}
    for key in rep.swept_keys:
        values = list(dict.fromkeys(cell_text(rep.sweep[r][key]) for r in rep.runs))
        numeric = all(is_number(rep.sweep[r][key]) for r in rep.runs)
        if numeric:
            values.sort(key=float)
        for value in values:
            for p in rep.pairs:
                raw = rep.sweep[p.run][key]
                if cell_text(raw) != value:
                    continue
                for gap in SUMMARY_GAPS:
                    a = p.gaps.get(gap)
                    finite = a[np.isfinite(a)] if a is not None else np.zeros(0)
                    if finite.size:
                        cells.setdefault((key, value, p.discrete, p.flow, gap),
                                         SweepCell(key, raw, p.discrete, p.flow, gap, [])).maxima.append(
                            float(finite.max()))
    return list(cells.values())
