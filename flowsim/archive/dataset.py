"""An archive as one `xarray.Dataset`: `flowsim.open(path).to_xarray()`.

Dimensions: `sweep` (the sweep points; only when the scenario has a [sweep]), `seed`,
`solver` (dropped when one is picked), `t` (every time any solver recorded, in order; NaN
where a solver has no row), then each series' own axes (`node`, `eig`, ...; padded with NaN
where a swept width changes their length). Every swept key is a coordinate along `sweep`,
named by its dotted key ("model.width"), numeric where its values are numbers and the
scenario's inline TOML text otherwise. Per run and solver: `status`, `wall_time`, `steps`.
"""

from __future__ import annotations

from numbers import Number
from typing import TYPE_CHECKING, Any

import numpy as np

from ..toml_text import toml_value, value_at

if TYPE_CHECKING:
    import xarray

EXTRA = "pip install 'flowsim[xarray]'"


def _coordinate(values: list) -> np.ndarray:
    """Numbers as numbers; tables and strings as their inline TOML text, as in run labels."""
    if all(isinstance(v, Number) and not isinstance(v, bool) for v in values):
        return np.asarray(values)
    return np.asarray([toml_value(v) for v in values], dtype=object)


def to_xarray(archive, solver: str | None = None, series: list[str] | None = None) -> xarray.Dataset:
    """An open `Archive`'s series as one Dataset (see the module's docstring). `solver` picks one
    solver (its dimension is then dropped); `series` picks variables (default: every series;
    `weights` at paper scale is large)."""
    try:
        import xarray as xr
    except ImportError:
        raise ImportError(f"to_xarray needs xarray: {EXTRA}") from None
    runs = list(archive.runs.values())
    resolved = archive.attrs.get("scenario_resolved", {})
    swept = [k for k in (resolved.get("sweep") or {}) if k != "mode"]
    points = sorted({r.point for r in runs})
    seeds = sorted({r.seed for r in runs})
    views = {(r.point, r.seed): r.solvers for r in runs}
    solvers = list(dict.fromkeys(name for per in views.values() for name in per))
    if solver is not None:
        if solver not in solvers:
            raise KeyError(f"{archive.path}: no solver {solver!r}; the archive has {', '.join(solvers)}")
        solvers = [solver]
    times = np.unique(np.concatenate([per[s].t for per in views.values() for s in solvers if s in per]
                                     or [np.zeros(0)]))
    # each series' axes, and the largest size of each along every run (a swept width varies)
    shapes: dict[str, tuple[list[str], list[int]]] = {}
    for per in views.values():
        for s in solvers:
            if s not in per:
                continue
            for name, (shape, _dtype, axes) in per[s].series_spec.items():
                if series is not None and name not in series:
                    continue
                _, sizes = shapes.setdefault(name, (list(axes), [0] * len(shape)))
                shapes[name] = (list(axes), [max(a, b) for a, b in zip(sizes, shape)])
    if series is not None and set(series) - shapes.keys():
        raise KeyError(f"{archive.path}: no series {sorted(set(series) - shapes.keys())}; "
                       f"it has {sorted(shapes)}")
    lead = (len(points), len(seeds), len(solvers), len(times))
    values = {name: np.full(lead + tuple(sizes), np.nan) for name, (_, sizes) in shapes.items()}
    meta = {"status": np.full(lead[:3], "", dtype=object), "wall_time": np.full(lead[:3], np.nan),
            "steps": np.full(lead[:3], np.nan), "step": np.full(lead, np.nan)}
    for (point, seed), per in views.items():
        i, j = points.index(point), seeds.index(seed)
        for k, s in enumerate(solvers):
            view = per.get(s)
            if view is None:
                continue
            rows = np.searchsorted(times, view.t)
            for name in shapes:
                if name in view:
                    data = view[name]
                    values[name][(i, j, k, rows, *(slice(0, n) for n in data.shape[1:]))] = data
            meta["status"][i, j, k] = "interrupted" if view.interrupted else view.status
            meta["wall_time"][i, j, k] = view.wall_time
            meta["steps"][i, j, k] = view.stats.get("steps", np.nan)
            if view.step is not None:
                meta["step"][i, j, k, rows] = view.step
    dims = ("sweep", "seed", "solver", "t")
    variables = {name: ([*dims, *axes], values[name]) for name, (axes, _) in shapes.items()}
    variables |= {k: (list(dims[: v.ndim]), v) for k, v in meta.items()}
    coords: dict[str, Any] = {"sweep": np.arange(len(points)), "seed": seeds, "solver": solvers, "t": times}
    configs = {r.point: r.params for r in runs}
    for key in swept:
        coords[key] = ("sweep", _coordinate([value_at(configs[p], key) for p in points]))
    ds = xr.Dataset(variables, coords=coords,
                    attrs={"scenario": resolved.get("name", ""), "archive": archive.path,
                           "flowsim_version": archive.attrs.get("flowsim_version", "")})
    if not swept:
        ds = ds.squeeze("sweep", drop=True)
    return ds.squeeze("solver", drop=True) if solver is not None else ds
