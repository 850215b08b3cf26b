"""An archive read for figures: one `Trace` per sweep point and solver, seeds stacked, built
on the archive's one series reader (`flowsim.archive.dataset.blocks`)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from flowsim import archive as _archive
from flowsim.kinds import PER_LEAF_MODELS as PER_LEAF_MODELS   # (fig1 reads it from here)
from flowsim.status import LABELS, Status
from flowsim.archive.dataset import blocks
from flowsim.archive.reader import INTERRUPTED
from flowsim.config.declare import from_dict
from flowsim.config.typed import Config, Preset

from .labels import short_label

# the Hessian's top eigenvalues and its density on each row's grid (`hessian.py` draws them)
HESSIAN_SERIES = ("hessian_top", "hessian_density", "hessian_density_grid")
TOP_NODES = 5                    # panel (b): the nodes that moved most, per seed
# Statuses of a run that has not reached its end time: every status but done, and
# "interrupted" (a run left `running` with no live writer; `running` itself is a live one).
EARLY_END = tuple(s for s in LABELS if s != Status.DONE.label) + (INTERRUPTED,)


@dataclass
class Trace:
    """One sweep point × one solver, every seed stacked along axis 0 (NaN-padded)."""

    point: int
    solver: str
    label: str                     # the short point label
    params: Config
    preset: Preset
    t: np.ndarray                  # (k,) the longest seed's checkpoint times
    seeds: list[int] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    series: dict[str, np.ndarray] = field(default_factory=dict)   # name -> (seeds, k[, r])
    init: dict[str, np.ndarray] = field(default_factory=dict)     # scalar inits, seed-mean

    @property
    def kind(self) -> str:
        return self.preset.kind

    @property
    def early_ends(self) -> list[tuple[int, str]]:
        """(seed index, status) of the seeds that ended early or have not finished."""
        return [(i, s) for i, s in enumerate(self.statuses) if s in EARLY_END]


def run_config(run: _archive.RunView) -> Config:
    """The typed config of an archived run (the archive stores its resolved form)."""
    return from_dict(Config, run.params)


def scenario_config(arch: _archive.Archive) -> Config | None:
    """The archive's typed scenario; None where it holds no resolved scenario."""
    resolved = arch.attrs.get("scenario_resolved")
    return from_dict(Config, resolved) if isinstance(resolved, dict) and resolved else None


# The series the figures read; the full `ntg` matrices only where a fallback needs them.
FIGURE_SERIES = ("loss", "test_loss", "accuracy", "test_accuracy", "sharpness", "weight_change",
                 "ntg_change_spectral", "ntg_eig", *HESSIAN_SERIES)




def _derived(arrays: dict[str, np.ndarray], per_leaf: bool) -> dict[str, np.ndarray]:
    """The per-seed quantities the figures need, each with time first, from one seed's rows.
    Per-leaf weight changes are kept whole (a model has few leaves, each named in panel (b));
    per-node ones only for the nodes that moved most."""
    out: dict[str, np.ndarray] = {}
    for name in ("loss", "test_loss", "accuracy", "test_accuracy", "sharpness"):
        if name in arrays:
            arr = arrays[name]
            out[name] = arr.reshape(arr.shape[0], -1).mean(axis=1) if arr.ndim > 1 else arr
    for name in HESSIAN_SERIES:          # a row each: the top K, or a density on its own grid
        if name in arrays:
            out[name] = arrays[name]
    if "weight_change" in arrays:
        wc = arrays["weight_change"]
        if wc.shape[0]:
            final = np.where(np.isfinite(wc[-1]), wc[-1], -np.inf)
            top = np.argsort(final)[::-1][:TOP_NODES]
            out["weight_change_top"] = wc[:, top]          # (k, r), largest final first
            if per_leaf:
                out["weight_change"] = wc                      # (k, leaves)
    if "ntg_change_spectral" in arrays:
        out["ntg_change"] = arrays["ntg_change_spectral"]
    elif "ntg" in arrays:
        out["ntg_change"] = _spectral_change(arrays["ntg"])
    if "ntg_eig" in arrays:
        out["eig_min"] = arrays["ntg_eig"][:, 0]
    elif "ntg" in arrays:
        out["eig_min"] = np.array([_eig_min(m) for m in arrays["ntg"]])
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
    views = [v for run in arch.runs.values() for v in run.solvers.values()]
    wanted = set(FIGURE_SERIES)
    if any(not {"ntg_eig", "ntg_change_spectral"} <= set(v.series_names) for v in views):
        wanted.add("ntg")
    traces = []
    for b in blocks(arch, series=wanted):
        seeds = range(len(b.seeds))
        ts = [b.t[b.rows[i]] for i in seeds]
        t = max(ts, key=len)
        params = from_dict(Config, b.params)
        derived = [_derived({n: b.own(i, n) for n in b.series}, params.model.kind in PER_LEAF_MODELS)
                   for i in seeds]
        names = sorted({n for d in derived for n in d})
        scalars = [{k: float(np.asarray(v)) for k, v in b.init[i].items() if np.ndim(v) == 0 and k in
                    ("kappa_n", "loss0")} for i in seeds]
        traces.append(Trace(
            point=b.point, solver=b.solver, label=short_label(params, b.label), params=params,
            preset=from_dict(Preset, b.preset), t=t, seeds=list(b.seeds), statuses=list(b.statuses),
            lengths=[len(x) for x in ts], series={n: _stack([d.get(n) for d in derived], ts, t) for n in names},
            init={k: float(np.mean([s[k] for s in scalars if k in s])) for k in {k for s in scalars for k in s}}))
    return traces


def scenario_name(arch: _archive.Archive, path) -> str:
    """The scenario's name (from the resolved scenario, a run, or the file name)."""
    settings = scenario_config(arch)
    if settings is not None and settings.name:
        return settings.name
    for run in arch.runs.values():
        name = run_config(run).name
        if name:
            return name
    return Path(os.fspath(path)).stem


def safe_name(name: str) -> str:
    """A file-name stem from a scenario name."""
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", name).strip("_") or "flowsim"
