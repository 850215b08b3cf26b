"""Honest counts: an archive's statistics count every evaluation of the field and every
Hessian-vector product, the start-up's included (against a counting vector field); its
`counts` hold the cumulative figures at each checkpoint, the last row the totals; and its
wall time leaves compilation out, which `compile_time` holds (no XLA compilation happens
inside the calls the driver times: JAX's compile events, not a clock, say so)."""

from __future__ import annotations

import shutil
from pathlib import Path

import equinox as eqx
import jax
import jax.monitoring
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import run_cli

import flowsim
from flowsim.archive.format import COUNTS
from flowsim.nn.problem import Problem
from flowsim.run import batch, driver

BEFORE = Path(__file__).resolve().parent / "archives" / "before-counts.h5"
TINY = Path(__file__).resolve().parent / "scenarios" / "tiny.toml"
# the settings tests/archives/before-counts.h5 was written with (test_archive_attrs.py)
BEFORE_SETS = ["--set", "seeds=[0]", "--set", "run.checkpoints={count=4}", "--set", 'run.solvers=["rock4","gd-lr1"]',
               "--set", 'run.observe=["loss"]']

_COMPILING = "/jax/core/compile/"     # JAX's events for tracing, lowering and compiling a program


class _Phases:
    """Which of the driver's phases the process is in ("ahead": its compilation ahead of a
    call; "timed": a call whose time it records; "other"), and the compile events of each."""

    def __init__(self):
        self.now = "other"
        self.events: dict[str, list[str]] = {"ahead": [], "timed": [], "other": []}

    def listen(self, name: str, seconds: float, **kw) -> None:
        if name.startswith(_COMPILING):
            self.events[self.now].append(name)

    def during(self, phase: str, fn):
        def call(*args):
            self.now = phase
            try:
                return fn(*args)
            finally:
                self.now = "other"
        return call


class _Timed:
    """A `batch` kernel whose calls are "timed" and whose `lower` (the driver's compilation
    ahead) is left as it is."""

    def __init__(self, fn, phases: _Phases):
        self.fn, self.lower = fn, fn.lower
        self.call = phases.during("timed", lambda *a: jax.block_until_ready(fn(*a)))

    def __call__(self, *args):
        return self.call(*args)


@pytest.mark.slow
def test_counts_equal_a_counting_field_and_compilation_is_timed_apart(tmp_path, monkeypatch):
    """rock4, whose start-up (its first step's size, f(W0), and 20 Hessian-vector products for
    its first spectral radius) the statistics used to leave out."""
    method = "rock4"
    calls = []
    real = Problem.velocity

    def counting(self, params):
        jax.debug.callback(lambda: calls.append(1))
        return real(self, params)

    phases = _Phases()
    monkeypatch.setattr(Problem, "velocity", counting)
    monkeypatch.setattr(driver, "_compile", phases.during("ahead", driver._compile))
    for name in ("init", "references", "chunk"):
        monkeypatch.setattr(batch, name, _Timed(getattr(batch, name), phases))
    jax.monitoring.register_event_duration_secs_listener(phases.listen)
    X = np.random.default_rng(1).normal(size=(9, 3))
    # shapes no other test uses: this test's programs are traced (with the count) and compiled here
    model = eqx.nn.MLP(3, 1, 7, 1, activation=jnp.tanh, key=jax.random.PRNGKey(2))
    try:
        with flowsim.simulate(model, data=(X, np.sin(X[:, 0])), solvers=[method], t_end=2.0,
                              checkpoints={"count": 5}, observe=["loss"], output=tmp_path / "c.h5",
                              progress=False, report=lambda s: None) as arch:
            sv = arch.runs["seed0"].solvers[method]
            stats, counts, t = sv.stats, sv.counts, sv.t
    finally:
        jax.monitoring.unregister_event_duration_listener(phases.listen)
    # every evaluation of the field, each Hessian-vector product's primal included
    assert len(calls) == stats["vf_evals"] + stats["hvps"]
    assert list(counts) == list(COUNTS) and t.size == 6
    for name, column in counts.items():
        assert np.all(np.diff(column) >= 0) and column[-1] == stats[name], name
    # at t = 0, the start-up only: 2 evaluations to size the first step, f(W0), 20 products
    assert (counts["steps"][0], counts["vf_evals"][0], counts["hvps"][0]) == (0, 3, 20)
    np.testing.assert_array_equal(counts["accepted"] + counts["rejected"], counts["steps"])
    # compiled ahead (with events), nothing compiled inside the calls the wall time is
    assert phases.events["ahead"] and phases.events["timed"] == []
    assert stats["compile_time"] > 0 and stats["wall_time"] > 0 and sv.wall_time == stats["wall_time"]


@pytest.mark.slow
def test_an_archive_written_before_the_counts_resumes_and_extends(tmp_path):
    path = tmp_path / "old.h5"
    shutil.copy(BEFORE, path)
    with flowsim.open(path) as arch:
        before = {(r, s): dict(sv.stats) for r, run in arch.runs.items() for s, sv in run.solvers.items()}
    run_cli("run", TINY, "-q", "-o", path, "--resume", *BEFORE_SETS, "--set", "run.t_end=6.0")
    with flowsim.open(path) as arch:
        for r, run in arch.runs.items():
            for s, sv in run.solvers.items():
                # its solvers have no counts dataset to write to: the rows go on without them
                assert sv.status == "done" and sv.t[-1] == 6.0 and sv.counts == {}
                assert sv.stats["steps"] > before[r, s]["steps"] and sv.stats["vf_evals"] > before[r, s]["vf_evals"]
                assert "compile_time" in sv.stats
    assert "cumulative" not in run_cli("inspect", path)


def test_counts_are_committed_repaired_and_required_with_the_rows(tmp_path):
    """The writer's side, without JAX: rows of counts are committed with the other series,
    copied by a crash's repair, and a counted solver refuses a row without them."""
    from archive_sample import SERIES, rows, state

    from flowsim import archive as A
    from flowsim.archive import recovery

    path = tmp_path / "a.h5"
    with A.ArchiveWriter.create(path, scenario_text="x", resolved={}, provenance={}, dtype="float64") as w:
        w.create_run("r0", params={}, seed=0, label="", point=0, init={"W0": np.ones(3)})
        w.create_solver("r0", "gd", preset={}, series=SERIES, discrete=True, counts=COUNTS)
        for k in range(3):
            arrays, attrs = state(k)
            w.append("r0", "gd", t=0.1 * k, step=k, values=rows(k), checkpoint=arrays, checkpoint_attrs=attrs,
                     counts=[k, k, 0, 2 * k + 1, 0])
        w.append("r0", "gd", t=0.3, step=3, values=rows(3), counts=[3, 3, 0, 7, 0])   # never committed
        with pytest.raises(A.ArchiveError, match=r"append needs counts, one per column \['steps'"):
            w.append("r0", "gd", t=0.4, step=4, values=rows(4))
    recovery.rebuild(str(path))
    with A.open(path) as a:
        counts = a.runs["r0"].solvers["gd"].counts
    assert list(counts) == list(COUNTS)
    np.testing.assert_array_equal(counts["vf_evals"], [1, 3, 5])
    np.testing.assert_array_equal(counts["steps"], [0, 1, 2])
