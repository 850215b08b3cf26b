"""Reading an archive: ``open`` and the views it returns (read-only, also while a writer
is live or after one was killed)."""

from __future__ import annotations

import os
import time

import h5py
import numpy as np

from .checkpoint import checkpoint_attrs, n_committed, read_checkpoint
from .format import (RUN, SOLVER, attr_str, attrs_of, count_columns, decode_root_attrs, is_solver, read_arrays,
                     read_attrs, run_params)
from .lock import writer_pid
from .recovery import (damaged, flags_set, is_read_failure, open_h5_readonly, require_flowsim,
                       warnings_unless_failed)


_LIVE_RETRY_S = 1.0           # how long a reader tries again beside a live writer
INTERRUPTED = "interrupted"   # `SolverView.state` of a run left `running` with no live writer


def open(path) -> "Archive":  # noqa: A001 - re-exported as flowsim.open
    """Open an archive read-only (works while it is written and after a killed writer).

    Never changes the file's bytes: a file a writer killed inside a write left "open for
    write" is read as it is (its repair is `--resume`'s)."""
    return Archive(path)


class Archive:
    """Read-only view of an archive; a context manager."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.writer_pid = writer_pid(self.path)   # a live writer's pid (at open), or None
        # A writer killed inside one of its writes left HDF5's "open for write" flags set:
        # other HDF5 tools refuse the file until `--resume` repairs it.
        self.killed_inside_write = self.writer_pid is None and flags_set(self.path)
        # What every reader reads first (each run's solvers, their committed state and
        # times) is read here: a damaged structure is then refused in one message, and the
        # warnings of opening a short file are given only for one that reads.
        # A live writer's structure change (plain write mode) can change the file under a
        # reader that opened it a moment before: read again for up to a second.
        deadline = time.monotonic() + _LIVE_RETRY_S
        while True:
            with warnings_unless_failed():
                self._f = open_h5_readonly(self.path)
                require_flowsim(self.path, self._f)
                try:
                    self.attrs = decode_root_attrs(self._f.attrs)
                    for run in self.runs.values():
                        for solver in run.solvers.values():
                            solver.t
                    break
                except Exception as exc:
                    if not is_read_failure(exc):
                        raise
                    self._f.close()
                    if writer_pid(self.path) is None or time.monotonic() > deadline:
                        raise damaged(self.path, exc) from None
            time.sleep(0.02)
        self.scenario_text = self.attrs.get("scenario_text", "")

    @property
    def data(self) -> dict[str, np.ndarray]:
        return read_arrays(self._f.get("data"))

    @property
    def runs(self) -> dict[str, "RunView"]:
        g = self._f.get("runs")
        if g is None:
            return {}
        # h5py yields None for a run a writer is creating this moment (a reader beside a
        # running `flowsim run`): it is not there yet
        return {name: RunView(self, run) for name, run in g.items() if run is not None}

    def to_xarray(self, solver: str | None = None, series: list[str] | None = None):
        """The whole archive as one `xarray.Dataset` (see `flowsim.archive.dataset`)."""
        from .dataset import to_xarray

        return to_xarray(self, solver=solver, series=series)

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> "Archive":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<flowsim Archive {self.path!r}>"


class _Attributes:
    """A view whose group's attributes (those `flowsim.archive.format.ATTRS` declares for it,
    decoded; the declared default where one is absent) read as the view's attributes."""

    _attrs: dict

    def __getattr__(self, name: str):
        attrs = self.__dict__.get("_attrs", {})
        if name in attrs:
            return attrs[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class RunView(_Attributes):
    """One /runs/<run> group: `seed`, `label`, `point` (its attributes), and `params` (the
    run's resolved scenario, whole)."""

    def __init__(self, archive: Archive, g: h5py.Group):
        self._archive, self._g = archive, g
        self.name = g.name.rsplit("/", 1)[-1]
        self._attrs = read_attrs(g.attrs, RUN)
        self.params = run_params(self._attrs["params"], self._attrs["params_changes"],
                                 archive.attrs.get("scenario_resolved") or {})

    @property
    def data(self) -> dict[str, np.ndarray]:
        own = self._g.get("data")
        return read_arrays(own) if own is not None else self._archive.data

    @property
    def init(self) -> dict[str, np.ndarray]:
        return read_arrays(self._g.get("init"))

    @property
    def solvers(self) -> dict[str, "SolverView"]:
        return {k: SolverView(v, live=self._archive.writer_pid is not None) for k, v in self._g.items()
                if is_solver(v)}

    @property
    def unbegun(self) -> list[str]:
        """The scenario's solvers this run has no group for yet (a writer killed between
        creating the run and beginning them leaves such a run, and nothing `running`)."""
        resolved = self._archive.attrs.get("scenario_resolved")
        presets = resolved.get("run", {}).get("solvers", []) if isinstance(resolved, dict) else []
        have = self.solvers
        return [p["name"] for p in presets if isinstance(p, dict) and p.get("name") not in have]

    def __repr__(self) -> str:
        return f"<RunView {self.name!r} seed={self.seed} point={self.point}>"


class SolverView(_Attributes):
    """One solver group; every series is truncated to the committed checkpoint count. Its
    attributes (`flowsim.archive.format.ATTRS`: preset, status, stats, wall_time, message,
    status_time, discrete, series_spec, conventions, …) are the view's.

    `interrupted`: the status is still "running" but no writer is live (killed, stopped or
    crashed); `stats` and the attributes mirroring a statistic (wall_time) are then those of
    the last committed checkpoint."""

    def __init__(self, g: h5py.Group, live: bool = False):
        self._g = g
        self.name = g.name.rsplit("/", 1)[-1]
        self._attrs = read_attrs(g.attrs, SOLVER)
        if self._attrs["status"] == "running":   # the final attrs are written when the solver ends
            committed = checkpoint_attrs(g)
            if committed:
                mirrored = {a.name: a for a in attrs_of(SOLVER) if a.stat}
                for name, a in mirrored.items():
                    self._attrs[name] = a.decode(committed.get(name, self._attrs[name]))
                self._attrs["stats"] = {k: v for k, v in committed.items() if k not in mirrored and k != "code"}
        self.interrupted = self.status == "running" and not live
        self.n_checkpoints = n_committed(g)
        self._spec = self._attrs["series_spec"]

    @property
    def state(self) -> str:
        """The status as a reader should show it: "interrupted" for a run left running."""
        return INTERRUPTED if self.interrupted else self.status

    @property
    def t(self) -> np.ndarray:
        return self._g["t"][: self.n_checkpoints]

    @property
    def step(self) -> np.ndarray | None:
        return self._g["step"][: self.n_checkpoints] if "step" in self._g else None

    @property
    def counts(self) -> dict[str, np.ndarray]:
        """The cumulative counts at each checkpoint, start-up included (one array per column:
        steps, accepted, rejected, vf_evals, hvps); their last row is `stats`'. {} in an
        archive written before them."""
        columns = count_columns(self._g)
        rows = self._g["counts"][: self.n_checkpoints] if columns else None
        return {name: rows[:, i] for i, name in enumerate(columns)}

    @property
    def series_names(self) -> list[str]:
        return list(self._spec)

    @property
    def series_spec(self) -> dict[str, tuple[list[int], str, list[str]]]:
        """Each series' row shape, dtype and axis names, as the writer declared them."""
        return dict(self._spec)

    @property
    def checkpoint(self) -> tuple[dict[str, np.ndarray], dict] | None:
        """The committed checkpoint (arrays, attrs) or None."""
        return read_checkpoint(self._g)

    @property
    def analysis(self) -> dict[str, tuple[dict[str, np.ndarray], dict]]:
        """Stored analyses (name -> (arrays, attrs)), e.g. Caron pruning curves."""
        g = self._g.get("analysis")
        if g is None:
            return {}
        return {k: (read_arrays(v), {a: attr_str(x) if isinstance(x, (bytes, str)) else x
                                      for a, x in v.attrs.items()})
                for k, v in g.items() if not k.startswith("_tmp-")}

    def __contains__(self, name: str) -> bool:
        return name in self._spec

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._spec:
            raise KeyError(f"{self._g.file.filename}: {self._g.name} has no series {name!r}")
        return self._g[name][: self.n_checkpoints]

    def __repr__(self) -> str:
        return f"<SolverView {self.name!r} status={self.status} n={self.n_checkpoints}>"
