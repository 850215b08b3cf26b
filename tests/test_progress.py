"""Progress a user can see: throttled lines without a terminal, a JSON log that agrees with
the archive, and a stop that acts while a long segment computes (issue "sweeps as data,
nothing silent", finding 2)."""

import io
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from flowsim import archive
from flowsim.run.driver import Driver, Interrupted
from flowsim.run.progress import Progress
from flowsim.run.session import open_archive, prepare, run_scenario

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "scenarios" / "tiny.toml"
ONE = ["seeds=[0]", 'sweep."model.scaling"=[{kind="ntk"}]', "run.checkpoints={count=4}"]

# A ReLU network at rtol 1e-13: the flow crawls through the kinks, and one segment is
# hundreds of thousands of steps (about 2 s per 200 000 here); max_steps bounds it.
KINKED = """
name = "kinked"
seeds = [0]
[data]
kind = "sphere-sine"
n = 12
d = 4
[model]
width = 24
activation = "relu"
[run]
t_end = 4000.0
checkpoints = {{ count = 3, spacing = "linear" }}
solvers = [{{ name = "tight", kind = "flow", method = "tsit5", rtol = 1e-13, atol = 1e-14, max_steps = {max_steps} }}]
observe = ["loss"]
"""


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_without_a_terminal_a_line_comes_at_most_every_30_seconds():
    clock, stream = Clock(), io.StringIO()      # StringIO is not a terminal
    progress = Progress(stream=stream, clock=clock)
    assert progress.lines and not progress.bars
    bar = progress.batch("p0", "tsit5", ["p0-seed0", "p0-seed1"], 0.0, 200.0)
    lines = []
    for now, t in [(1, 1.0), (29, 2.0), (31, 5.0), (50, 9.0), (60.5, 10.0), (61, 20.0)]:
        clock.now = now
        bar.update(t, [10 * int(t), 12 * int(t)], ["running", "diverged"])
        lines.append(stream.getvalue().count("\n"))
    assert lines == [0, 0, 1, 1, 1, 2]
    first, second = stream.getvalue().splitlines()
    # the time left at the pace since the first row (t = 1 at 1 s): 4 time units in 30 s,
    # 195 to go; then 19 in 60 s, 180 to go
    assert first == ("flowsim: p0 · tsit5: t = 5 of 200 (2 %), 110 steps, 1 running, 1 diverged; "
                     "about 24 min left at its pace so far")
    assert second == ("flowsim: p0 · tsit5: t = 20 of 200 (10 %), 440 steps, 1 running, 1 diverged; "
                      "about 9 min left at its pace so far")
    clock.now = 95           # a segment still computing also gets its line; 34 s of the 568 have passed
    bar.waiting(40.0)
    assert stream.getvalue().splitlines()[-1] == ("flowsim: p0 · tsit5: t = 20 of 200 (10 %), computing the segment "
                                                  "to t = 40; about 9 min left at its pace so far")
    clock.now = 130          # the same segment, a line later: for how long, not the same line again
    bar.waiting(40.0)
    assert stream.getvalue().splitlines()[-1] == ("flowsim: p0 · tsit5: t = 20 of 200 (10 %), computing the segment "
                                                  "to t = 40 (for 35 s); about 8 min left at its pace so far")
    first_row = progress.batch("p0", "gd", ["p0-seed0"], 0.0, 10.0)
    clock.now = 170          # the segment to where the batch is: its first row, compiling
    first_row.waiting(0.0)
    assert stream.getvalue().splitlines()[-1] == "flowsim: p0 · gd: t = 0 of 10 (0 %), compiling"
    first_row.close(None)
    bar.close({"p0-seed0": "done"})
    long = progress.batch("p1", "rock4", ["p1-seed0"], 0.0, 1000.0)
    clock.now = 200          # its first row: no pace yet
    long.update(0.0, [0], ["running"])
    assert stream.getvalue().splitlines()[-1] == "flowsim: p1 · rock4: t = 0 of 1000 (0 %), 0 steps, 1 running"
    clock.now = 300          # 8 time units in 100 s, 992 to go: 12 400 s
    long.update(8.0, [90], ["running"])
    assert stream.getvalue().splitlines()[-1].endswith("1 running; about 3.4 h left at its pace so far")
    long.close(None)
    compiled_ahead = progress.batch("p0", "rk", ["p0-seed0"], 0.0, 10.0)
    for clock.now in (400, 435):     # the driver's compilation ahead waits with no target: since 400 s
        compiled_ahead.waiting(None)
    assert stream.getvalue().splitlines()[-2:] == ["flowsim: p0 · rk: t = 0 of 10 (0 %), compiling",
                                                   "flowsim: p0 · rk: t = 0 of 10 (0 %), compiling (for 35 s)"]
    compiled_ahead.close(None)


@pytest.mark.parametrize("show", [False, True])
def test_quiet_prints_nothing_and_bars_print_no_lines(show):
    clock, stream = Clock(), io.StringIO()
    progress = Progress(show, stream=stream, clock=clock)
    bar = progress.batch("p0", "gd", ["r"], 0.0, 10.0)
    for now in (40, 80, 120):
        clock.now = now
        bar.update(now / 20, [now], ["running"])
        bar.waiting(10.0)
    bar.close({"r": "done"})
    assert "flowsim:" not in stream.getvalue()
    assert bool(stream.getvalue()) == show      # the bar, drawn on request


@pytest.mark.slow
def test_the_json_log_agrees_with_the_archive(tmp_path):
    log, stream = tmp_path / "log.jsonl", io.StringIO()
    out = tmp_path / "a.h5"
    run_scenario(TINY, ONE, output=out, report=lambda s: None,
                 progress=Progress(stream=stream, every=0.0, jsonl=log))
    records = [json.loads(line) for line in log.read_text().splitlines()]
    with archive.open(out) as a:
        sv = {name: a.runs["p0-seed0"].solvers[name] for name in ("tsit5", "gd-lr1")}
        for name, view in sv.items():
            rows = [r for r in records if r["solver"] == name and r["event"] == "checkpoint"]
            np.testing.assert_array_equal([r["t"] for r in rows], view.t)
            assert rows[-1]["steps"] == [view.stats["steps"]] and rows[-1]["t_end"] == view.t[-1]
            (end,) = [r for r in records if r["solver"] == name and r["event"] == "finished"]
            assert end["status"] == {"p0-seed0": view.status} == {"p0-seed0": "done"}
    # every = 0: a line per checkpoint, the last one of each solver at 100 %
    assert stream.getvalue().count("(100 %)") == 2


@pytest.mark.slow
def test_a_stop_acts_while_a_long_segment_computes(tmp_path):
    """The stop is honoured while the segment's thread still computes (not after it), and
    nothing of that segment reaches the archive."""
    path = tmp_path / "kinked.toml"
    path.write_text(KINKED.format(max_steps=400_000))
    job = prepare(path, [], output=tmp_path / "k.h5")
    # the chunk after t = 0 holds one checkpoint, or more where the first chunk ran fast
    with pytest.raises(Interrupted, match=r"during the segment to t = (1333.33|2666.67|4000)\b"):
        with open_archive(job) as writer:   # stop once the t = 0 checkpoint is committed
            Driver(job.scenario, writer, progress=False, report=lambda s: None,
                   stop_now=lambda: writer.n_checkpoints("seed0", "tight") > 0).run(job.built)
    busy = [t for t in threading.enumerate() if t.name == "flowsim-segment"]
    assert len(busy) == 1, "the stop waited for the segment"
    busy[0].join()           # (let it finish: a test process must not exit under it)
    with archive.open(tmp_path / "k.h5") as a:
        view = a.runs["seed0"].solvers["tight"]
        np.testing.assert_array_equal(view.t, [0.0])
        assert view.interrupted


@pytest.mark.slow
def test_ctrl_c_stops_a_long_segment_and_the_command_exits_130(tmp_path):
    """The process boundary is the point: the command leaves with the segment's thread still
    computing (a 10⁸-step segment, minutes long), and nothing aborts on the way out."""
    path = tmp_path / "kinked.toml"
    path.write_text(KINKED.format(max_steps=100_000_000))
    log = tmp_path / "log.jsonl"
    env = {**os.environ, "FLOWSIM_CACHE_DIR": ""}
    proc = subprocess.Popen([sys.executable, "-m", "flowsim.cli", "run", str(path), "-o", str(tmp_path / "k.h5"),
                             "--log-jsonl", str(log)], stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        while not (log.exists() and log.read_text()):     # the t = 0 checkpoint is committed
            assert proc.poll() is None, proc.stderr.read()
            threading.Event().wait(0.2)
        threading.Event().wait(1.0)                       # well into the long segment
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=60)
    finally:
        proc.kill()
    err = proc.stderr.read()
    assert rc == 130, err
    assert "interrupted" in err and "--resume" in err
    assert "terminate called" not in err and "Traceback" not in err
    with archive.open(tmp_path / "k.h5") as a:
        assert a.runs["seed0"].solvers["tight"].interrupted


def test_an_unwritable_log_is_refused_before_the_archive_is_created(tmp_path):
    from helpers import call_cli

    out = tmp_path / "a.h5"
    rc, _, err = call_cli("run", TINY, "-o", out, "--log-jsonl", tmp_path / "no-such-folder" / "log.jsonl",
                          *[a for s in ONE for a in ("--set", s)])
    assert rc == 2 and "--log-jsonl" in err and "cannot be written" in err
    assert not out.exists()
