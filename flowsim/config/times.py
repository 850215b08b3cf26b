"""The checkpoint times a resolved [run] table asks for."""

from __future__ import annotations

import math

import numpy as np

#: count/log checkpoints start this factor below t_end: geomspace(t_end / 10**3, t_end, count).
LOG_SPAN = 1e3


def checkpoint_times(run_cfg: dict) -> np.ndarray:
    """The checkpoint times of a resolved [run] table: float64, strictly increasing, in
    (0, t_end], the last exactly t_end.

    - ``{every = T}``: T, 2T, ... up to t_end, then t_end itself (a multiple within 1e-9·T
      of t_end is replaced by t_end, so rounding never yields a near-duplicate).
    - ``{count = N, spacing = "linear"}``: t_end·(1..N)/N.
    - ``{count = N, spacing = "log"}``: ``geomspace(t_end / 10**3, t_end, N)`` for N > 1
      (three decades below t_end), and [t_end] for N = 1.
    - ``{times = [...]}``: as given, with t_end appended when it is not the last.
    """
    t_end = float(run_cfg["t_end"])
    cp = run_cfg["checkpoints"]
    if "every" in cp:
        every = float(cp["every"])
        n = int(math.floor(t_end / every))
        ts = every * np.arange(1, n + 1, dtype=np.float64)
        ts = ts[ts < t_end - 1e-9 * every]
    elif "times" in cp:
        ts = np.asarray(cp["times"], dtype=np.float64)
        ts = ts[ts < t_end]
    else:
        count = int(cp["count"])
        if cp["spacing"] == "log":
            if count == 1:
                ts = np.empty(0)
            else:
                ts = np.geomspace(t_end / LOG_SPAN, t_end, count)[:-1]
        else:
            # t_end * (i / count), not t_end * i / count: the latter overflows near 1e308.
            ts = t_end * (np.arange(1, count, dtype=np.float64) / count)
    return np.append(ts, t_end).astype(np.float64)
