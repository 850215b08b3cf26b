"""Rows of two solvers of a run at the same time: flowsim compares legs only where both
have a checkpoint at t (DESIGN.md §1), never by interpolating or taking the nearest row.
Shared by `compare` (GD against its flows) and `central` (GD against its central flow)."""

from __future__ import annotations

import numpy as np

TIME_RTOL = 1e-9


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
