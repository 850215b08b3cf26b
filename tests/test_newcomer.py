"""What a new user met (issue 52, "tried as a new user would"), each through the command a
user types: a moved project resumes and a changed data file is refused by name; a refused
`--resume` says whose archive it is in a few short lines; the statistics of a resumed leg;
`flowsim list` one line each, every flag documented, `flowsim diff`; the wordings; the
guarantee's list of timing fields."""

import ast
import re
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from flowsim import archive
from flowsim.archive.diff import PROVENANCE, TIMINGS, differences
from flowsim.cli.command import parser
from helpers import call_cli

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "scenarios" / "tiny.toml"
# one seed, one sweep point, few checkpoints: seconds
SMALL = ("--set", "seeds=[0]", "--set", 'sweep."model.scaling"=[{kind="ntk"}]', "--set",
         "run.checkpoints={count=4}", "-q")


def _readme_cli() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return text.split("\n## Command line\n", 1)[1].split("\n## ", 1)[0]


# ---------------------------------------------------------------- list, flags, diff (item 7)

def test_list_prints_one_line_per_entry_and_long_the_whole_descriptions(monkeypatch):
    from flowsim.config import list_scenarios, list_solvers

    monkeypatch.setenv("COLUMNS", "100")
    entries = len(list_scenarios()) + len(list_solvers())
    rc, out, _ = call_cli("list")
    lines = out.splitlines()
    assert rc == 0 and len(lines) == entries + 2          # + the "scenarios:" and "solvers:" heads
    assert all(len(line) <= 100 for line in lines)
    assert "flowsim list" in _readme_cli() and "one line each" in _readme_cli()
    rc, long, _ = call_cli("list", "--long")
    assert rc == 0 and len(long.splitlines()) > 2 * entries     # the descriptions wrapped whole
    assert call_cli("list", "-v")[1] == long


def _subcommands():
    p = parser()
    sub = next(a for a in p._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices


def test_every_flag_is_documented_in_the_readme_and_every_argument_has_help():
    section = _readme_cli()
    missing, bare = [], []
    for name, sp in _subcommands().items():
        assert f"flowsim {name}" in section, name
        for action in sp._actions:
            if action.option_strings and "--help" not in action.option_strings:
                if not any(re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", section) for o in action.option_strings):
                    missing.append(f"{name} {'/'.join(action.option_strings)}")
            if not action.help:
                bare.append(f"{name} {action.dest}")
    assert missing == [] and bare == []
    simulate_section = (ROOT / "README.md").read_text(encoding="utf-8").split("## Your own network", 1)[1]
    assert "`name`" in simulate_section.split("\n## ", 1)[0]


def test_archive_imports_nothing_above_it():
    """archive/ sits on the lowest floors: it imports only itself and the root's
    dependency-free modules (statuses, TOML text), never the configuration."""
    allowed = {"flowsim.status", "flowsim.toml_text"}
    found = set()
    for path in (ROOT / "flowsim" / "archive").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level:
                target = "flowsim.archive" if node.level == 1 else "flowsim"
                target += f".{node.module}" if node.module else ""
                if node.level == 2 and node.module is None:
                    target += "." + node.names[0].name
                found.add(target)
    above = {t for t in found if not t.startswith("flowsim.archive") and t not in allowed}
    assert above == set() and found & allowed


def test_a_missing_archive_named_like_a_catalog_scenario_is_pointed_at_it():
    rc, _, err = call_cli("inspect", "quickstart")
    assert rc == 2 and "'quickstart' is a scenario in the catalog: `flowsim run quickstart`" in err
    rc, _, err = call_cli("inspect", "quickstrt")
    assert rc == 2 and "quickstrt: no such archive; allowed:" in err


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """One small scenario run twice, in this process."""
    folder = tmp_path_factory.mktemp("twins")
    for name in ("a.h5", "b.h5"):
        rc, _, err = call_cli("run", TINY, "-o", folder / name, *SMALL, "--set", 'run.solvers=["rkc2", "gd-lr1"]')
        assert rc == 0, err
    return folder / "a.h5", folder / "b.h5"


@pytest.mark.slow
def test_diff_finds_nothing_between_twin_runs_and_names_what_differs(twins, tmp_path):
    a, b = twins
    rc, out, err = call_cli("diff", a, b)
    assert (rc, out) == (0, "") and "the same datasets and attributes" in err
    changed = tmp_path / "c.h5"
    shutil.copy(b, changed)
    with h5py.File(changed, "r+") as f:
        f["runs/p0-seed0/gd-lr1/loss"][1] += 1e-12
        f["runs/p0-seed0"].attrs.modify("seed", 7)     # in place (a new one would move to the end)
    rc, out, _ = call_cli("diff", a, changed)
    assert rc == 1 and out.splitlines() == ["runs/p0-seed0: seed: 0 != 7", "runs/p0-seed0/gd-lr1/loss: values differ"]
    rc, _, err = call_cli("diff", a, tmp_path / "none.h5")
    assert rc == 2 and "none.h5: no such archive" in err


@pytest.mark.slow
def test_two_runs_differ_in_the_listed_timing_fields_only(twins):
    """docs/guarantees.md lists the fields in which two runs of one scenario differ: exactly
    those that do (diff with nothing aside), and those `flowsim diff` leaves aside."""
    a, b = twins
    differ = {d.field.rsplit(".", 1)[-1] for d in differences(a, b, aside=())}
    text = (ROOT / "docs" / "guarantees.md").read_text(encoding="utf-8")
    listed = re.search(r"apart from the timing fields (.*?), also after", text, re.S).group(1)
    assert set(re.findall(r"`(\w+)`", listed)) == differ == set(TIMINGS)
    rc, out, _ = call_cli("diff", "--all", a, b)
    assert rc == 1 and {line.split(": ")[1].rsplit(".", 1)[-1] for line in out.splitlines()} == set(TIMINGS)
    assert not set(PROVENANCE) & differ


# ---------------------------------------------------------------- data by content, refusals (items 1, 2)

CSV_SCENARIO = """name = "proj"
seeds = [0]

[data]
kind = "csv"
path = "d.csv"
target = "y"

[model]
width = 8

[run]
t_end = 4.0
checkpoints = { count = 3 }
solvers = ["gd-lr1"]
observe = ["loss"]
"""


def _project(folder: Path) -> Path:
    folder.mkdir()
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(16, 4)).round(6)
    (folder / "d.csv").write_text("a,b,c,y\n" + "\n".join(",".join(map(str, r)) for r in rows) + "\n")
    (folder / "p.toml").write_text(CSV_SCENARIO)
    return folder


def _bytes(path: Path) -> bytes:
    return path.read_bytes()


def _lines(err: str) -> list[str]:
    return err.strip().splitlines()


@pytest.mark.slow
def test_a_moved_project_resumes_and_a_changed_data_file_is_refused(tmp_path):
    here = _project(tmp_path / "project")
    rc, _, err = call_cli("run", here / "p.toml", "-o", here / "p.h5", "-q", "--set", "run.t_end=2.0")
    assert rc == 0, err
    moved = tmp_path / "elsewhere" / "project"
    shutil.copytree(here, moved)
    shutil.rmtree(here)                   # the old absolute path is gone
    rc, _, err = call_cli("run", moved / "p.toml", "-o", moved / "p.h5", "-q", "--resume", "--set", "run.t_end=2.0")
    assert rc == 0, err
    rc, _, err = call_cli("run", moved / "p.toml", "-o", moved / "p.h5", "-q", "--resume")   # t_end 2 -> 4
    assert rc == 0, err
    with archive.open(moved / "p.h5") as a:
        assert a.runs["seed0"].solvers["gd-lr1"].t[-1] == 4.0
    before = _bytes(moved / "p.h5")
    with open(moved / "d.csv", "a") as fh:      # one more row: other data
        fh.write("9,9,9,9\n")
    rc, _, err = call_cli("run", moved / "p.toml", "-o", moved / "p.h5", "-q", "--resume", "--set", "run.t_end=5.0")
    assert rc == 2 and "`data.path`" in err and f"{moved / 'd.csv'} has changed" in err and "SHA-256" in err
    assert "--overwrite" not in err and "-o" in err
    assert _bytes(moved / "p.h5") == before


@pytest.mark.slow
def test_a_refused_resume_says_whose_archive_it_is_in_three_short_lines(tmp_path):
    here = _project(tmp_path / "project")
    out = here / "p.h5"
    rc, _, err = call_cli("run", here / "p.toml", "-o", out, "-q", "--set", "run.t_end=2.0")
    assert rc == 0, err
    before = _bytes(out)
    rc, _, err = call_cli("run", TINY, "-o", "p.h5", "--resume", *SMALL, cwd=here)       # another scenario
    lines = _lines(err)
    assert rc == 2 and len(lines) <= 3 and all(len(line) <= 120 for line in lines), lines
    assert "p.h5 holds scenario 'proj', not 'tiny'" in lines[0] and "pick another archive: -o runs/tiny.h5" in err
    assert "--overwrite" not in err
    rc, _, err = call_cli("run", "p.toml", "-o", "p.h5", "--resume", "-q", "--set", "model.width=9",
                          "--set", "run.t_end=1.0", "--set", 'run.observe=["loss", "test_loss"]', cwd=here)
    lines = _lines(err)          # other values
    assert rc == 2 and len(lines) == 3 and all(len(line) <= 120 for line in lines), lines
    assert "scenario 'proj' with other values: `model.width`: 8 -> 9 (archive -> now) and 2 more" in lines[0]
    assert "pick another archive" in lines[2] and "--overwrite" not in err
    assert _bytes(out) == before


# ---------------------------------------------------------------- a resumed leg's statistics (item 5)

RESUMED = ["seeds=[0]", 'sweep."model.scaling"=[{kind="ntk"}]', "run.checkpoints={count=12}",
           'run.solvers=["gd-lr1", "rock4"]']


def _stats(path: Path) -> dict:
    with archive.open(path) as a:
        return {name: dict(sv.stats) | {"rows": sv.n_checkpoints, "wall_time": sv.wall_time}
                for name, sv in a.runs["p0-seed0"].solvers.items()}


@pytest.mark.slow
def test_a_resume_reports_its_own_leg_and_leaves_finished_solvers_alone(tmp_path):
    """Stopped inside rock4 after gd-lr1 had finished: the resume's summary gives rock4's
    steps of this leg (the total less those before) and says gd-lr1 had finished, whose
    statistics (times included) the resume leaves as they were; `inspect` then splits
    rock4's wall time with some of it integrating."""
    from flowsim.run.driver import Interrupted
    from flowsim.run.session import run_scenario

    out = tmp_path / "r.h5"
    asked = []

    def stop() -> bool:           # after a few chunks: gd-lr1 done, rock4 begun
        asked.append(1)
        return len(asked) > 6

    with pytest.raises(Interrupted, match="rock4"):
        run_scenario(TINY, RESUMED, output=out, should_stop=stop, progress=False, report=lambda s: None)
    before = _stats(out)
    assert before["gd-lr1"]["rows"] == 13 and 0 < before["rock4"]["rows"] < 19
    rc, _, err = call_cli("run", TINY, "-o", out, "--resume", *(x for s in RESUMED for x in ("--set", s)))
    assert rc == 0, err
    after = _stats(out)
    assert after["gd-lr1"] == before["gd-lr1"]          # wall, compile and observe times too
    summary = {line.split(" · ")[1].split(":")[0]: line for line in err.splitlines() if " · " in line}
    assert summary["gd-lr1"].endswith("1 done (finished before this resume; nothing to run)")
    leg = after["rock4"]["steps"] - before["rock4"]["steps"]
    assert leg > 0 and f"1 done ({leg} steps over 1 seed, " in summary["rock4"], summary["rock4"]
    assert "resumed at t = " in summary["rock4"]
    assert after["rock4"]["wall_time"] > before["rock4"]["wall_time"]
    assert 0 <= after["rock4"]["observe_time"] <= after["rock4"]["wall_time"]


# ---------------------------------------------------------------- wordings (item 8)

def test_inspect_omits_the_counts_of_a_solver_without_a_checkpoint(tmp_path):
    from flowsim.archive import ArchiveWriter
    from flowsim.archive.format import COUNTS

    out = tmp_path / "begun.h5"
    with ArchiveWriter.create(out, scenario_text="", resolved={"name": "x", "run": {"t_end": 1.0}}, provenance={},
                              dtype="float64") as w:
        w.create_run("r0", params={}, seed=0, label="", point=0, init={"W0": np.ones(2)})
        w.create_solver("r0", "gd", preset={"kind": "gd"}, series={"loss": ((), "<f8", ())}, discrete=True,
                        counts=COUNTS)
    rc, shown, err = call_cli("inspect", out)
    assert rc == 0, err
    assert "0 checkpoints, no checkpoint" in shown and "interrupted" in shown
    assert "cumulative" not in shown


@pytest.mark.slow
def test_the_progress_lines_say_compiling_while_a_batch_compiles(tmp_path):
    """Without a terminal, while a batch's program compiles (a new shape: width 19) the
    line says so, before its first checkpoint's `t = 0 …, 0 steps`."""
    import io

    from flowsim.run.progress import Progress
    from flowsim.run.session import run_scenario

    stream = io.StringIO()
    run_scenario(TINY, ["seeds=[0]", 'sweep."model.scaling"=[{kind="ntk"}]', "run.checkpoints={count=3}",
                        'run.solvers=["gd-lr1"]', "model.width=19"], output=tmp_path / "c.h5",
                 progress=Progress(stream=stream, every=0.0), report=lambda s: None)
    lines = stream.getvalue().splitlines()
    first = next(i for i, line in enumerate(lines) if "steps" in line)
    assert lines[first].endswith("t = 0 of 30 (0 %), 0 steps, 1 running")
    assert any(line.endswith("t = 0 of 30 (0 %), compiling") or "compiling (for" in line for line in lines[:first])
