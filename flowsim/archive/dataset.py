"""An archive's time series as arrays: the one reader under the figures and `to_xarray`.

`blocks(archive)` reads one `Block` per sweep point and solver: every seed's rows on one
time grid (the union of the seeds' times, NaN where a seed has no row). The figures
(`flowsim.plots`) build on the blocks; `to_xarray` joins them into one `xarray.Dataset`:

Dimensions: `sweep` (the sweep points; only when the scenario has a [sweep]), `seed`,
`solver` (dropped when one is picked), `t` (every time any solver recorded, in order; NaN
where a solver has no row), then each series' own axes (`node`, `eig`, ...; padded with NaN
where a swept width changes their length). Every swept key is a coordinate along `sweep`,
named by its dotted key ("model.width"), numeric where its values are numbers and the
scenario's inline TOML text otherwise. Per run and solver: `status`, each solver attribute that
mirrors a statistic (`wall_time`, `compile_time`: `flowsim.archive.format.ATTRS`), `steps`.
The Dataset is dense over (sweep, seed, solver, t): pick `series` for large archives (a
`weights` or `ntg` series times many solvers' grids); the blocks stay on each solver's own
grid.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..toml_text import is_number, sweep_axes, toml_value, value_at
from .format import SOLVER, attrs_of

if TYPE_CHECKING:
    import xarray

EXTRA = "pip install 'flowsim[xarray]'"
_MIRRORED = tuple(a.name for a in attrs_of(SOLVER) if a.stat)   # wall_time, compile_time


@dataclass
class Block:
    """One sweep point × one solver, seeds along axis 0 (in seed order)."""

    point: int
    solver: str
    label: str                     # the point's label ("" without a sweep)
    params: dict                   # the point's resolved scenario
    preset: dict                   # the solver's resolved preset
    runs: list[str]
    seeds: list[int]
    statuses: list[str]            # per seed; "interrupted" for a run left running, no writer live
    timed: dict[str, list[float]]  # per seed, each solver attribute mirroring a statistic (wall_time, ...)
    steps: list[float]
    t: np.ndarray                  # (k,) every time a seed of the block recorded
    rows: np.ndarray               # (seeds, k) bool: the rows each seed has
    series: dict[str, np.ndarray] = field(default_factory=dict)   # name -> (seeds, k, *axes)
    axes: dict[str, list[str]] = field(default_factory=dict)
    step: np.ndarray | None = None  # (seeds, k) a discrete solver's step numbers, NaN-padded
    init: list[dict[str, np.ndarray]] = field(default_factory=list)   # per seed, /runs/<run>/init

    def own(self, i: int, name: str) -> np.ndarray:
        """Seed i's rows of series `name`, as the archive holds them (no padding rows)."""
        return self.series[name][i][self.rows[i]]


def blocks(archive, *, solver: str | None = None, series: Collection[str] | None = None) -> list[Block]:
    """Every (sweep point, solver) of an open `Archive`, points in order and solvers in the
    order the archive first lists them. `series`: the names to read (default every series;
    a name a solver lacks is left out of its block)."""
    grouped: dict[tuple[int, str], list] = {}
    order: list[str] = []
    for run in sorted(archive.runs.values(), key=lambda r: (r.point, r.seed)):
        for name, view in run.solvers.items():
            if solver is not None and name != solver:
                continue
            if name not in order:
                order.append(name)
            grouped.setdefault((run.point, name), []).append((run, view))
    out = []
    for (point, name), members in sorted(grouped.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1]))):
        times = [np.asarray(view.t, float) for _, view in members]
        t = np.unique(np.concatenate(times))
        index = [np.searchsorted(t, ti) for ti in times]
        rows = np.zeros((len(members), t.size), bool)
        for i, ix in enumerate(index):
            rows[i, ix] = True
        specs = [view.series_spec for _, view in members]
        names = [n for n in dict.fromkeys(n for spec in specs for n in spec) if series is None or n in series]
        block = Block(point=point, solver=name, label=members[0][0].label, params=members[0][0].params,
                      preset=members[0][1].preset, runs=[r.name for r, _ in members],
                      seeds=[r.seed for r, _ in members],
                      statuses=[v.state for _, v in members],
                      timed={a: [getattr(v, a) for _, v in members] for a in _MIRRORED},
                      steps=[v.stats.get("steps", np.nan) for _, v in members], t=t, rows=rows,
                      init=[r.init for r, _ in members])
        for n in names:
            shape = [max(s) for s in zip(*(spec[n][0] for spec in specs if n in spec))]
            data = np.full((len(members), t.size, *shape), np.nan)
            for i, (_, view) in enumerate(members):
                if n in view:
                    a = np.asarray(view[n], float)
                    data[(i, index[i], *(slice(0, k) for k in a.shape[1:]))] = a
            block.series[n] = data
            block.axes[n] = list(next(spec[n][2] for spec in specs if n in spec))
        if any(view.step is not None for _, view in members):
            block.step = np.full(rows.shape, np.nan)
            for i, (_, view) in enumerate(members):
                if view.step is not None:
                    block.step[i, index[i]] = view.step
        out.append(block)
    return out


def _coordinate(values: list) -> np.ndarray:
    """Numbers as numbers; tables and strings as their inline TOML text, as in run labels."""
    if all(is_number(v) for v in values):
        return np.asarray(values)
    return np.asarray([toml_value(v) for v in values], dtype=object)


def to_xarray(archive, solver: str | None = None, series: list[str] | None = None) -> xarray.Dataset:
    """An open `Archive`'s series as one Dataset (see the module's docstring). `solver` picks
    one solver (its dimension is then dropped); `series` picks variables (default: every
    series)."""
    try:
        import xarray as xr
    except ImportError:
        raise ImportError(f"to_xarray needs xarray: {EXTRA}") from None
    found = blocks(archive, solver=solver, series=series)
    names = list(dict.fromkeys(b.solver for b in found))
    if solver is not None and not found:
        have = list(dict.fromkeys(s for r in archive.runs.values() for s in r.solvers))
        raise KeyError(f"{archive.path}: no solver {solver!r}; the archive has {', '.join(have)}")
    shapes: dict[str, tuple[list[str], list[int]]] = {}
    for b in found:
        for n, a in b.series.items():
            sizes = shapes.get(n, (None, [0] * (a.ndim - 2)))[1]
            shapes[n] = (b.axes[n], [max(x, y) for x, y in zip(sizes, a.shape[2:])])
    if series is not None and set(series) - shapes.keys():
        have = {n for r in archive.runs.values() for v in r.solvers.values() for n in v.series_names}
        raise KeyError(f"{archive.path}: no series {sorted(set(series) - shapes.keys())}; it has {sorted(have)}")
    points = sorted({b.point for b in found})
    seeds = sorted({s for b in found for s in b.seeds})
    times = np.unique(np.concatenate([b.t for b in found] or [np.zeros(0)]))
    lead = (len(points), len(seeds), len(names), len(times))
    values = {n: np.full(lead + tuple(sizes), np.nan) for n, (_, sizes) in shapes.items()}
    meta = {"status": np.full(lead[:3], "", dtype=object)} | {a: np.full(lead[:3], np.nan) for a in _MIRRORED} | {
        "steps": np.full(lead[:3], np.nan), "step": np.full(lead, np.nan)}
    for b in found:
        p, k = points.index(b.point), names.index(b.solver)
        at = np.searchsorted(times, b.t)
        for i, seed in enumerate(b.seeds):
            j = seeds.index(seed)
            for n, a in b.series.items():
                values[n][(p, j, k, at, *(slice(0, m) for m in a.shape[2:]))] = a[i]
            meta["status"][p, j, k] = b.statuses[i]
            for a, per_seed in b.timed.items():
                meta[a][p, j, k] = per_seed[i]
            meta["steps"][p, j, k] = b.steps[i]
            if b.step is not None:
                meta["step"][p, j, k, at] = b.step[i]
    dims = ("sweep", "seed", "solver", "t")
    variables = {n: ([*dims, *axes], values[n]) for n, (axes, _) in shapes.items()}
    variables |= {n: (list(dims[: v.ndim]), v) for n, v in meta.items()}
    coords: dict[str, Any] = {"sweep": np.arange(len(points)), "seed": seeds, "solver": names, "t": times}
    resolved = archive.attrs.get("scenario_resolved", {})
    swept = sweep_axes(resolved.get("sweep"))
    configs = {b.point: b.params for b in found}
    for key in swept:
        coords[key] = ("sweep", _coordinate([value_at(configs[p], key) for p in points]))
    ds = xr.Dataset(variables, coords=coords,
                    attrs={"scenario": resolved.get("name", ""), "archive": archive.path,
                           "flowsim_version": archive.attrs.get("flowsim_version", "")})
    if not swept:
        ds = ds.squeeze("sweep", drop=True)
    return ds.squeeze("solver", drop=True) if solver is not None else ds
