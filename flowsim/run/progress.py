"""What a long run shows while it works.

On a terminal: a bar per batch whose length is the simulated horizon, so that its rate and
ETA count simulated time (a log-spaced grid puts most checkpoints early, and an ETA in
checkpoints would be wrong by orders of magnitude). Without one (a batch job's log file): one
line at most every `every` seconds, so that a minutes-long segment is not silence, with the
time left at the batch's pace in simulated time since its first row (after compilation). With a
`jsonl` path: one JSON object per committed checkpoint and per finished batch, for
dashboards; that file is appended to, so a resumed run continues its log.
"""

import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from tqdm.auto import tqdm


class Progress:
    """`show`: True draws bars, False shows nothing, None (the default) draws bars on a
    terminal and writes throttled lines otherwise. The JSON log is independent of `show`."""

    def __init__(self, show: bool | None = None, *, every: float = 30.0, jsonl: str | Path | None = None,
                 stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic):
        self.stream = sys.stderr if stream is None else stream
        # a terminal, or a notebook (where tqdm.auto draws a widget)
        live = bool(getattr(self.stream, "isatty", lambda: False)()) or "ipykernel" in sys.modules
        self.bars = bool(show) if show is not None else live
        self.lines = show is None and not live
        self.every = every
        self.clock = clock
        self.jsonl = None if jsonl is None else Path(jsonl)
        if self.jsonl is not None:
            self.jsonl.open("a").close()    # an unwritable path fails now, before any work
        self._last_line = clock()    # the first line comes `every` seconds in, not at once
        self._start = clock()

    def batch(self, label: str, solver: str, runs: Sequence[str], t_start: float, t_end: float) -> "BatchProgress":
        return BatchProgress(self, label, solver, list(runs), t_start, t_end)

    def _due(self) -> bool:
        now = self.clock()
        if now - self._last_line < self.every:
            return False
        self._last_line = now
        return True

    def _log(self, record: dict) -> None:
        if self.jsonl is None:
            return
        record = {"wall": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "elapsed_s": round(self.clock() - self._start, 3),
                  **record}
        with self.jsonl.open("a") as f:    # opened per record: a killed run leaves whole lines
            f.write(json.dumps(record) + "\n")


class BatchProgress:
    """One solver over one batch of seeds, from t_start (0, or where a resume starts) to t_end."""

    def __init__(self, owner: Progress, label: str, solver: str, runs: list[str], t_start: float, t_end: float):
        self.owner, self.label, self.solver, self.runs = owner, label, solver, runs
        self.t, self.t_end = t_start, t_end
        self._waiting_for, self._waiting_since = None, None    # the segment `waiting` was last called for
        # (t, clock) of the first row (compiled by then) and of the last: the pace between them
        self._first: tuple[float, float] | None = None
        self._last: tuple[float, float] | None = None
        self.bar = tqdm(total=t_end, initial=t_start, disable=not owner.bars, leave=False, file=owner.stream,
                        desc=f"{label} · {solver}"[:60], unit="t", unit_scale=False,
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| t={n:.4g}/{total:.4g} "
                                   "[{elapsed}<{remaining}{postfix}]")

    def update(self, t: float, steps: Sequence[int], statuses: Sequence[str]) -> None:
        """A checkpoint at simulated time t was committed; `steps` and `statuses` per seed."""
        self.bar.update(t - self.t)
        self.t = t
        total = int(sum(steps))
        self.bar.set_postfix_str(f"{total} steps", refresh=False)
        record = {"event": "checkpoint", "label": self.label, "runs": self.runs, "solver": self.solver,
                  "t": t, "t_end": self.t_end, "steps": [int(s) for s in steps], "status": list(statuses)}
        self.owner._log(record)
        self._last = (t, self.owner.clock())
        self._first = self._first or self._last
        if self.owner.lines and self.owner._due():
            states = ", ".join(f"{statuses.count(s)} {s}" for s in dict.fromkeys(statuses))
            print(f"flowsim: {self.label} · {self.solver}: t = {t:.6g} of {self.t_end:.6g} "
                  f"({100 * t / self.t_end:.0f} %), {total} steps, {states}{self._left()}",
                  file=self.owner.stream, flush=True)

    def _left(self) -> str:
        """The time left at the pace from the first row to the last, less the time since the
        last: a stiff flow slows as its sharpness grows, so this is a lower bound there."""
        if self._last is None:
            return ""
        (t0, c0), (t1, c1) = self._first, self._last
        left = (self.t_end - t1) * (c1 - c0) / (t1 - t0) - (self.owner.clock() - c1) if t0 < t1 < self.t_end else 0
        return f"; about {_duration(left)} left at its pace so far" if left > 0 else ""

    def advise(self, advice: str) -> None:
        """The solver advisor spoke (the driver prints it): a JSON record."""
        self.owner._log({"event": "advice", "label": self.label, "runs": self.runs, "solver": self.solver,
                         "t": self.t, "advice": advice})

    @property
    def waiting_shown(self) -> bool:
        """Whether `waiting` can print anything (the driver skips its wait otherwise)."""
        return self.owner.lines

    def waiting(self, target: float | None) -> None:
        """Called while a segment towards `target` computes, or while its program compiles
        (`target` None): a line when one is due. A segment to where the batch already is
        (its first row, at t = 0) is the compilation too; a wait that outlasts a line says
        for how long it has been going on."""
        if not (self.owner.lines and self.owner._due()):
            return
        now = self.owner.clock()
        if self._waiting_since is None or self._waiting_for != target:   # None: a compilation
            self._waiting_for, self._waiting_since = target, now
        what = "compiling" if target is None or target <= self.t else f"computing the segment to t = {target:.6g}"
        since = now - self._waiting_since
        print(f"flowsim: {self.label} · {self.solver}: t = {self.t:.6g} of {self.t_end:.6g} "
              f"({100 * self.t / self.t_end:.0f} %), {what}" + (f" (for {since:.0f} s)" if since > 0 else "")
              + self._left(), file=self.owner.stream, flush=True)

    def close(self, statuses: dict[str, str] | None = None, *, wall: float = float("nan"),
              observe: float = float("nan")) -> None:
        """The batch ended; `statuses` (run -> final status) when it finished, None when
        stopped. `wall`: its seconds (all sessions of a resumed run), of which `observe`
        (an estimate) went to the observables; the rest is integration and compilation."""
        self.bar.close()
        if statuses is not None:
            self.owner._log({"event": "finished", "label": self.label, "solver": self.solver,
                             "t": self.t, "t_end": self.t_end, "status": statuses, "wall_s": round(wall, 3),
                             "observe_s": round(observe, 3), "integrate_s": round(wall - observe, 3)})


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
