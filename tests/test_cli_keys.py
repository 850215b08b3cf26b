"""The keys and files a user types, through the command: every key `flowsim show` prints is
settable with `--set` in the form printed; a key in the wrong table, a solver preset's key
without its solver, an unclosed bracket and a misspelt file name are each answered with
where the right one is."""

import re
import shutil
from pathlib import Path

import pytest

from flowsim.cli.command import main
from flowsim.config import find_scenario, load_scenario

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "scenarios" / "tiny.toml"
SWEPT = "swept (see runs)"      # a swept key's row: its values are the sweep's, set there


def shown_rows(out: str) -> list[tuple[str, str, str]]:
    """(key, value, origin) of each row of `flowsim show`'s resolved configuration."""
    block = out.split("resolved configuration (# where each value came from):\n", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in block.splitlines():
        setting, _, origin = line.strip().rpartition(" # ")
        key, _, value = setting.partition(" = ")
        rows.append((key.strip(), value.strip(), origin))
    return rows


# a sweep of tables and named presets; inline presets with a reference table; [analysis] and
# digits; a central flow of an MLP
@pytest.mark.parametrize("name", ["quickstart", "edge-of-stability", "caron-digits-quick", "central-mlp"])
def test_every_key_show_prints_is_settable_as_printed(name, capsys):
    assert main(["show", name]) == 0
    rows = shown_rows(capsys.readouterr().out)
    settable = [(k, v) for k, v, o in rows if o != SWEPT]
    assert len(settable) > 20 and any(k.startswith("run.solvers[0].") for k, _ in settable)
    path = find_scenario(name)
    base = load_scenario(path).resolved
    for key, value in settable:    # each, set to what show printed, gives the same configuration
        assert load_scenario(path, [f"{key}={value}"]).resolved == base, key
    # all of them at once, through the command: the same rows, each now from its --set
    assert main(["show", name, *(x for k, v in settable for x in ("--set", f"{k}={v}"))]) == 0
    again = shown_rows(capsys.readouterr().out)
    assert [(k, v) for k, v, _ in again] == [(k, v) for k, v, _ in rows]
    assert [o for _, _, o in again if o != SWEPT] == [f"--set {k}={v}" for k, v in settable]


def test_one_presets_rtol_is_set_by_its_index_and_the_others_keep_theirs(capsys):
    assert main(["show", "quickstart", "--set", "run.solvers[0].rtol=1e-6",
                 "--set", 'sweep."model.scaling"[1].gamma=0.25']) == 0
    rows = {k: (v, o) for k, v, o in shown_rows(capsys.readouterr().out)}
    assert rows["run.solvers[0].rtol"] == ("1e-06", "--set run.solvers[0].rtol=1e-6")
    assert rows["run.solvers[0].atol"] == ("1e-10", "preset 'tsit5'")       # the rest of the preset
    assert rows["run.solvers[1].learning_rate"] == ("1.0", "preset 'gd-lr1'")
    assert rows['sweep."model.scaling"[1].gamma'][0] == "0.25"
    assert rows['sweep."model.scaling"[1].alpha'][0] == "0.7"
    # a reference given by name: its keys are the preset's
    assert main(["show", "edge-of-stability"]) == 0
    rows = {k: (v, o) for k, v, o in shown_rows(capsys.readouterr().out)}
    assert rows["run.solvers[0].reference.rtol"] == ("1e-11", "preset 'dopri8-tight'")
    # a kind set by index drops the keys the new kind does not take
    sc = load_scenario(find_scenario("quickstart"), ["run.solvers[1].kind=momentum"])
    assert sc.settings.run.solvers[1].kind == "momentum" and sc.settings.run.solvers[1].beta == 0.9


def test_a_bad_value_set_in_one_element_of_a_sweep_names_its_set(capsys):
    assert main(["show", "quickstart", "--set", 'sweep."model.scaling"[1].gamma=7']) == 2
    err = capsys.readouterr().err
    assert err.startswith("flowsim: error: --set: sweep point 1 ")
    assert "`model.scaling.gamma` = 7 is out of range" in err


@pytest.mark.parametrize("key, says", [
    ("rtol=1e-6", "`rtol` is a key of each solver preset; allowed: run.solvers[i].rtol"),
    ("run.solvers.rtol=1e-6", "e.g. --set 'run.solvers[0].rtol=...'"),
    ("run.solvers[2].rtol=1e-6", 'key `run.solvers` = ["tsit5", "gd-lr1"] has 2 items; allowed: an index in [0, 1]'),
    ("run.solvers[0].rtl=1e-6", "unknown key `run.solvers[0].rtl`; did you mean `rtol`?"),
    ("run.solvers[0].reference.rtol=1e-9", 'key `run.solvers[0].reference` = "" is no preset'),
    ("model.width[0]=3", "`model.width` is not a list of tables"),
    ("width=abc", "unknown key `width`: `width` is not a scenario key; did you mean `model.width`?"),
    ("run.width=3", "did you mean `model.width`?"),
    ("kind=3", "did you mean `data.kind`, `model.kind`, `model.scaling.kind` or `loss.kind`?"),
    ("model.widht=3", "did you mean `model.width`?"),
])
def test_a_key_named_wrong_is_answered_with_the_key_meant(key, says, capsys):
    assert main(["show", "quickstart", "--set", key]) == 2
    err = capsys.readouterr().err
    assert err.startswith("flowsim: error: --set: ") and says in err, err


def test_a_key_in_the_wrong_table_of_a_file_names_its_table(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text(TINY.read_text().replace("[data]", "width = 30\n\n[data]", 1))
    assert main(["show", str(path)]) == 2
    assert "unknown key `width`; did you mean `model.width`?" in capsys.readouterr().err


def test_an_unclosed_bracket_is_reported_where_it_opens(tmp_path, capsys):
    text = TINY.read_text()
    assert "seeds" not in text.split("\n", 2)[1]
    lines = text.split("\n")
    lines.insert(1, "seeds = [0, 1")            # line 2, a table header and more lines below
    path = tmp_path / "s.toml"
    path.write_text("\n".join(lines))
    assert main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert re.search(r"invalid TOML: line 2: the `\[` at column 9 \(`seeds = \[0, 1`\) is never closed "
                     r"\(the parser gave up at line \d+", err), err
    path.write_text('name = "x"\ndata = {kind = "sphere-sine", n = 3\n[model]\nwidth = 3\n')
    assert main(["show", str(path)]) == 2
    assert "line 2: the `{` at column 8" in capsys.readouterr().err


def test_a_missing_file_is_matched_to_the_file_beside_it(tmp_path, capsys, monkeypatch):
    shutil.copy(TINY, tmp_path / "width.toml")
    monkeypatch.chdir(tmp_path)
    assert main(["show", "widht.toml"]) == 2
    assert 'widht.toml: no such file; did you mean "width.toml"?' in capsys.readouterr().err
    assert main(["run", str(tmp_path / "widht.toml"), "-o", str(tmp_path / "o.h5")]) == 2
    assert f'did you mean "{tmp_path / "width.toml"}"?' in capsys.readouterr().err
    assert main(["show", "nothing-like-it.toml"]) == 2
    assert "did you mean" not in capsys.readouterr().err
    # a data file named in the scenario, too
    (tmp_path / "points.csv").write_text("x,y\n1,2\n3,4\n5,6\n")
    text = TINY.read_text()
    data = text[text.index("[data]"):].split("\n[", 1)[0]
    (tmp_path / "s.toml").write_text(text.replace(data, '[data]\nkind = "csv"\npath = "pionts.csv"\ntarget = "y"\n'))
    assert main(["show", "s.toml"]) == 2
    assert 'did you mean "points.csv"?' in capsys.readouterr().err
