"""Rows of two solvers of a run at the same time: flowsim compares legs only where both
have a checkpoint at t (DESIGN.md §1), never by interpolating or taking the nearest row.
Shared by `compare` (GD against its flows) and `compare_central` (GD against its central flow),
with the other rules both apply to matched rows."""

from __future__ import annotations

import math

import numpy as np

TIME_RTOL = 1e-9
# Two legs' step sizes are the same η (a GD and the modified or central flow of that GD)
ETA_RTOL = 1e-12


def match_times(ta: np.ndarray, tb: np.ndarray, rtol: float = TIME_RTOL) -> tuple[np.ndarray, np.ndarray]:
    """Indices (ia, ib) of the rows of `ta` and `tb` at the same time (to rtol·max(1, |t|))."""
    ta, tb = np.asarray(ta, float), np.asarray(tb, float)
    order = np.argsort(tb, kind="stable")
    sb = tb[order]
    ia, ib = [], []
    for i, t in enumerate(ta):
        if not np.isfinite(t) or not sb.size:
            continue
        j = int(np.searchsorted(sb, t))
        for c in (j - 1, j):
            if 0 <= c < sb.size and abs(sb[c] - t) <= rtol * max(1.0, abs(t)):
                ia.append(i)
                ib.append(int(order[c]))
                break
    return np.asarray(ia, int), np.asarray(ib, int)


def series_of(view, name):
    """A solver's series `name` as float64, None where it was not recorded."""
    return np.asarray(view[name], float) if name in view else None


def same_eta(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=ETA_RTOL)


def per_row(a: np.ndarray) -> np.ndarray:
    """One row per matched time, whatever the series' shape; no rows (a solver that ended at
    t = 0) included, where reshape(0, -1) cannot tell the row length."""
    return a.reshape(a.shape[0], math.prod(a.shape[1:]))


def row_norms(a: np.ndarray) -> np.ndarray:
    """The Euclidean norm of each matched time's row (of a difference of weights)."""
    return np.sqrt(np.sum(per_row(a) ** 2, axis=1))
