"""GD beside its central flow (`flowsim compare`'s central-flow section, and the numbers of
`flowsim.plots.central`'s figure).

For each `central-flow` leg of a run and each `gd` leg with the same η and no
`perturbation` (Cohen et al. 2025's model of GD at the edge of stability; flowsim time
t = kη), at the times where both have a row (`compare.match_times`, t = 0 included):

- the onset: the first matched time where η · GD's `sharpness` reaches 2 (its sharpness 2/η);
- ‖θ_GD − θ_central‖ and ‖θ_GD − θ_flow‖ (series `weights`; the flow is the run's first
  `flow`-kind leg), and ‖θ_GD − θ_twin‖, the noise floor: the twin is a `gd` leg at the
  same η started from θ0 + ε·z (`perturbation` ε > 0, flowsim.integrate.descent). GD is
  chaotic past the onset, so two GD runs from starts 1e-12 apart drift as far apart as GD
  is from any model of it; a distance to GD's iterates means little below that floor;
- from the onset on: the mean of each distance, the ratio of the mean distances
  mean‖θ_GD − θ_central‖ / mean‖θ_GD − θ_flow‖ and the median of the per-row ratios
  ‖θ_GD − θ_central‖ / ‖θ_GD − θ_flow‖ (`ratio_of_means`, `median_ratio`, both over the
  rows where both distances are known), and the mean relative error of the central flow's
  predicted loss (series `predicted_loss`, L + ½⟨∇²L, Σ⟩) against GD's smoothed loss. Never
  the mean of the per-row ratios: it is dominated by the few rows where GD passes near the
  flow (‖θ_GD − θ_flow‖ small), 0.763 on central-mlp where the ratio of the means is 0.159
  and the median 0.149;
- the sharpness of GD, of the central flow (its tracked top eigenvalue `central_eig1`) and
  of the flow at the last matched time;
- each model's cost per GD step in gradient-equivalents (a gradient, a Hessian-vector
  product and a third-derivative product count one each): the central flow's series
  `central_evals + central_hvps + central_thirds` at its last row (tries and its first
  point included), the flow's statistics `vf_evals + hvps` (the initial step-size search's
  few evaluations are not counted), GD's one gradient per step; each divided by the GD
  steps to its last row, t/η.

Smoothing. GD's loss is known on its checkpoint rows only, so it is smoothed in time: at
t_i, Σ_j w_ij L_j / Σ_j w_ij with w_ij = exp(−(t_i − t_j)² / 2σ²) · c_j, σ = SMOOTH_STEPS · η
(50 GD steps, the JAX central-flow package's choice) and c_j the row's share of the time axis
((t_{j+1} − t_{j−1})/2, half a cell at the ends), so that uneven checkpoint spacing weighs
each stretch of time by its length. The kernel is cut at TRUNCATE σ as scipy's
`gaussian_filter1d` cuts it; at the ends of the run it is renormalised over the rows inside
the run (scipy's "nearest" mode would repeat the end values instead). On an evenly spaced grid
it equals `gaussian_filter1d(L, σ/Δt)` wherever the window lies inside the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from flowsim.config.declare import from_dict
from flowsim.config.typed import DescentPreset, FlowPreset, Preset
from flowsim.kinds.solvers import CENTRAL_KINDS, SOLVER_KINDS

from .matching import match_times, row_norms, same_eta, series_of

SMOOTH_STEPS = 50.0      # σ of the Gaussian smoothing of GD's loss, in GD steps
TRUNCATE = 4.0           # the kernel is cut at TRUNCATE · σ (scipy's default)
TIME_FRACTIONS = (0.5, 0.75, 1.0)   # the rows of the distance table: these fractions of the last matched time
TWIN_PERTURBATION = 1e-12           # what the advice to add a twin suggests


@dataclass
class CentralTrack:
    """One GD leg beside the central flow of its η in one run, at their matched times."""

    run: str
    label: str
    seed: int
    gd: str
    central: str
    eta: float
    t: np.ndarray                          # matched times (GD ∩ central), t = 0 included
    step: np.ndarray
    flow: str = ""                         # the run's flow leg ("" if none)
    twin: str = ""                         # the noise-floor twin ("" if none)
    twin_perturbation: float = math.nan
    onset: int | None = None               # index into t of the onset; None: never (or unknown)
    sharp_gd: np.ndarray | None = None     # rate·λ_max along GD (None: `sharpness` not recorded)
    sharp_central: np.ndarray | None = None    # central_eig1, the central flow's top tracked eigenvalue
    # the central flow's `sharpness` observable (Lanczos, as GD's and the flow's): central_eig1
    # comes from the warm-started tracking, which below the tracking threshold may lag it
    sharp_central_observed: np.ndarray | None = None
    # the series the sharpness is read from: `preconditioned_sharpness` for RMSProp's pair
    sharpness: str = "sharpness"
    sharp_flow: np.ndarray | None = None   # NaN where the flow has no row at a matched time
    d_central: np.ndarray | None = None    # ‖θ_GD − θ_central‖ (None: `weights` not recorded by both)
    d_flow: np.ndarray | None = None
    floor: np.ndarray | None = None        # ‖θ_GD − θ_twin‖
    loss_gd: np.ndarray | None = None
    loss_smoothed: np.ndarray | None = None
    loss_flow: np.ndarray | None = None
    predicted: np.ndarray | None = None    # the central flow's predicted_loss
    cost: dict[str, float] = field(default_factory=dict)   # leg → gradient-equivalents per GD step
    notes: list[str] = field(default_factory=list)
    # the central leg's `conventions` attribute (Σ and the package's X, the edge, where the
    # sharpness is taken: flowsim.integrate.central.conventions); "" in an older archive
    conventions: str = ""
    # the discrete method's label ("GD", "RMSProp"): the text and figures name the leg's own method
    method: str = "GD"

    @property
    def after(self) -> np.ndarray:
        """The matched times from the onset on (none when the onset is never reached)."""
        sel = np.zeros(self.t.size, bool)
        if self.onset is not None:
            sel[self.onset:] = True
        return sel

    @property
    def ratio(self) -> np.ndarray | None:
        if self.d_central is None or self.d_flow is None:
            return None
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.d_central / self.d_flow

    def _paired_after(self) -> np.ndarray | None:
        """From the onset on, the rows where both distances are known (None: not recorded)."""
        if self.d_central is None or self.d_flow is None:
            return None
        return self.after & np.isfinite(self.d_central) & np.isfinite(self.d_flow)

    @property
    def ratio_of_means(self) -> float:
        """mean ‖GD − central‖ / mean ‖GD − flow‖ from the onset on (NaN: no such row)."""
        sel = self._paired_after()
        if sel is None or not sel.any():
            return math.nan
        return float(self.d_central[sel].mean() / self.d_flow[sel].mean())

    @property
    def median_ratio(self) -> float:
        """The median over the rows from the onset on of ‖GD − central‖ / ‖GD − flow‖."""
        sel = self._paired_after()
        if sel is None or not sel.any():
            return math.nan
        return float(np.median(self.ratio[sel]))

    @property
    def loss_error(self) -> np.ndarray | None:
        """|predicted − smoothed| / smoothed at each matched time."""
        if self.predicted is None or self.loss_smoothed is None:
            return None
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.abs(self.predicted - self.loss_smoothed) / self.loss_smoothed

    def mean_after(self, values: np.ndarray | None) -> float:
        """The mean of `values` over the matched times from the onset on (finite ones)."""
        if values is None:
            return math.nan
        v = values[self.after]
        v = v[np.isfinite(v)]
        return float(v.mean()) if v.size else math.nan

    def rows(self) -> list[int]:
        """The matched times the distances are shown at: the onset, and those nearest to
        TIME_FRACTIONS of the last one (each once, in order)."""
        if not self.t.size:
            return []
        picks = [int(np.argmin(np.abs(self.t - f * self.t[-1]))) for f in TIME_FRACTIONS]
        return sorted(set(picks + ([self.onset] if self.onset is not None else [])))


def smooth(t: np.ndarray, values: np.ndarray, sigma: float, truncate: float = TRUNCATE) -> np.ndarray:
    """`values` (sampled at increasing times `t`) smoothed by a Gaussian of standard deviation
    `sigma` in time: weights exp(−Δt²/2σ²) × each sample's share of the time axis, cut at
    `truncate`·σ, normalised over the samples inside the run (see the module's docstring).
    Non-finite samples are left out of every window."""
    t, values = np.asarray(t, float), np.asarray(values, float)
    if t.size < 2:
        return values.copy()
    edges = np.concatenate(([t[0]], (t[1:] + t[:-1]) / 2, [t[-1]]))
    share = np.diff(edges)
    ok = np.isfinite(values)
    share, v = np.where(ok, share, 0.0), np.where(ok, values, 0.0)
    out = np.empty(t.size)
    reach = truncate * sigma * (1 + 1e-12)    # (a sample exactly `truncate`·σ away is inside, as in scipy)
    for i, ti in enumerate(t):
        lo, hi = np.searchsorted(t, ti - reach, "left"), np.searchsorted(t, ti + reach, "right")
        w = np.exp(-0.5 * ((t[lo:hi] - ti) / sigma) ** 2) * share[lo:hi]
        total = w.sum()
        out[i] = np.dot(w, v[lo:hi]) / total if total > 0 else math.nan
    return out


def _at(view, name: str, rows: np.ndarray) -> np.ndarray | None:
    """Series `name` of `view` at `rows` (−1: no row there, NaN), None if not recorded."""
    s = series_of(view, name)
    if s is None:
        return None
    out = np.full((rows.size, *s.shape[1:]), np.nan)
    have = rows >= 0
    out[have] = s[rows[have]]
    return out


def _rows_at(t: np.ndarray, view) -> np.ndarray:
    """For each time of `t`, the row of `view` at that time (−1: none)."""
    rows = np.full(t.size, -1)
    ia, ib = match_times(t, np.asarray(view.t, float))
    rows[ia] = ib
    return rows


def _cost_central(view, eta: float) -> float:
    names = ("central_evals", "central_hvps", "central_thirds")
    t = np.asarray(view.t, float)
    if not all(n in view for n in names) or not t.size or t[-1] <= 0:
        return math.nan
    return float(sum(series_of(view, n)[-1] for n in names) / (t[-1] / eta))


def _cost_flow(view, eta: float) -> float:
    t = np.asarray(view.t, float)
    if "vf_evals" not in view.stats or not t.size or t[-1] <= 0:
        return math.nan
    return float((view.stats["vf_evals"] + view.stats.get("hvps", 0)) / (t[-1] / eta))


def _block_full(view, preset) -> str | None:
    """Where every tracked direction of the central leg `view` is a candidate (the last one's
    ηλ/2 at the preset's `track_threshold` or above, in the certificate's rows), the note that
    says so: the direction beneath them (the guard, `CentralField.capacity`) cannot be held
    then, so it can pass 2/η. None where the block always had a direction to spare."""
    k = int(preset.max_eigen)
    last = series_of(view, f"central_edge{k}")
    if last is None:
        return None
    full = np.flatnonzero(last >= preset.track_threshold)
    if not full.size:
        return None
    t = np.asarray(view.t, float)
    return (f"{view.name}: all {k} tracked directions are candidates from t = {t[full[0]]:g} on "
            f"(ηλ{k}/2 = {last[full[0]]:.4f} ≥ track_threshold {preset.track_threshold:g}, at {full.size} of "
            f"{t.size} rows, {last[full[-1]]:.4f} at t = {t[full[-1]]:g}): a direction beyond them (the guard "
            f"beneath the block) cannot be held and can pass 2/η; run again with a larger max_eigen to know")


def twin_advice(gd: str, eta: float) -> str:
    return (f"no noise floor: add a twin of {gd} to run.solvers, e.g. {{ name = \"{gd}-twin\", kind = \"gd\", "
            f"learning_rate = {eta:g}, perturbation = {TWIN_PERTURBATION:g} }}")


def archive_tracks(arch) -> list[CentralTrack]:
    """`central_tracks` of every run of the open archive `arch`."""
    return [tr for run in arch.runs.values()
            for tr in central_tracks(run, {n: from_dict(Preset, v.preset) for n, v in run.solvers.items()})]


def central_tracks(run, presets: dict[str, object]) -> list[CentralTrack]:
    """Every GD / central-flow pair of the same η in `run` (an archive's RunView; `presets`:
    its solvers' typed presets); and every RMSProp / rmsprop-central pair, read alike with
    RMSProp's stable flow as its flow and the `preconditioned_sharpness` as its sharpness."""
    solvers = run.solvers
    kind = lambda v: presets[v.name].kind
    out = []
    for c in (v for v in solvers.values() if isinstance(presets[v.name], FlowPreset) and kind(v) in CENTRAL_KINDS):
        eta = float(presets[c.name].learning_rate)
        method = SOLVER_KINDS[kind(c)].flow_of or "gd"
        mine = [g for g in solvers.values() if isinstance(presets[g.name], DescentPreset) and kind(g) == method
                and same_eta(presets[g.name].learning_rate, eta)]
        flow = next((v for v in solvers.values() if isinstance(presets[v.name], FlowPreset) and (
            kind(v) == "flow" if method == "gd" else
            kind(v) == f"{method}-flow" and same_eta(presets[v.name].learning_rate, eta))), None)
        twins = [g for g in mine if presets[g.name].perturbation > 0]
        for g in (g for g in mine if presets[g.name].perturbation == 0):
            twin = min(twins, key=lambda v: presets[v.name].perturbation, default=None)
            out.append(_track(run, g, c, flow, twin, eta, presets,
                              "sharpness" if method == "gd" else "preconditioned_sharpness"))
    return out


def _track(run, g, c, flow, twin, eta: float, presets, sharpness: str = "sharpness") -> CentralTrack:
    tg = np.asarray(g.t, float)
    steps = np.asarray(g.step) if g.step is not None else np.round(tg / eta).astype(int)
    ig, ic = match_times(tg, np.asarray(c.t, float))
    t = tg[ig]
    tr = CentralTrack(run=run.name, label=run.label, seed=run.seed, gd=g.name, central=c.name, eta=eta, t=t,
                      step=steps[ig], flow=flow.name if flow is not None else "", twin=twin.name if twin is not None else "",
                      conventions=c.conventions, method=SOLVER_KINDS[presets[g.name].kind].label)
    if twin is not None:
        tr.twin_perturbation = float(presets[twin.name].perturbation)
    rf = _rows_at(t, flow) if flow is not None else None
    rw = _rows_at(t, twin) if twin is not None else None

    tr.sharpness = sharpness
    tr.sharp_gd = _at(g, sharpness, ig)
    tr.sharp_central = _at(c, "central_eig1", ic)
    tr.sharp_central_observed = _at(c, sharpness, ic)
    tr.sharp_flow = _at(flow, sharpness, rf) if flow is not None else None
    if tr.sharp_gd is None:
        tr.notes.append(f"onset unknown: {g.name} has no `{sharpness}` (add it to run.observe)")
    else:
        over = np.flatnonzero(eta * tr.sharp_gd >= 2.0)
        tr.onset = int(over[0]) if over.size else None

    Wg = _at(g, "weights", ig)
    if Wg is None or "weights" not in c:
        tr.notes.append(f"no distances: record `weights` (run.observe) for {tr.method} and its models")
    else:
        tr.d_central = row_norms(Wg - _at(c, "weights", ic))
        if flow is not None and "weights" in flow:
            tr.d_flow = row_norms(Wg - _at(flow, "weights", rf))
        if twin is not None and "weights" in twin:
            tr.floor = row_norms(Wg - _at(twin, "weights", rw))
    full = _block_full(c, presets[c.name])
    if full is not None:
        tr.notes.append(full)
    if flow is None:
        tr.notes.append("no gradient flow: add a `flow`-kind leg (e.g. \"tsit5\") to run.solvers" if tr.method == "GD" else
                        f"no stable flow: add a `{presets[g.name].kind}-flow` leg at η = {eta:g} to run.solvers")
    if twin is None:
        tr.notes.append(twin_advice(g.name, eta))

    Lg = series_of(g, "loss")
    if Lg is not None:
        # Measured on central-mlp: 4.6 % mean predicted-loss error from rows every 5 steps,
        # 3.5 % from every step (the same run); GD's loss oscillates from step to step.
        every = np.median(np.diff(steps)) if steps.size > 1 else 1
        if every > 1:
            tr.notes.append(f"{tr.method}'s loss is smoothed from its checkpoint rows, every {every:g} {tr.method} steps here, not "
                            "from every iterate: sampling an oscillating loss biases the smoothed loss; "
                            f"checkpoints every step (run.checkpoints = {{ every = {eta:g} }}) smooth every iterate")
        tr.loss_gd = Lg[ig]
        tr.loss_smoothed = smooth(tg, Lg, SMOOTH_STEPS * eta)[ig]
        tr.loss_flow = _at(flow, "loss", rf) if flow is not None else None
    tr.predicted = _at(c, "predicted_loss", ic)

    tr.cost = {c.name: _cost_central(c, eta), **({flow.name: _cost_flow(flow, eta)} if flow is not None else {}),
               g.name: 1.0}
    return tr
