"""The key reference cannot drift from the schema: every key has a line of meaning, every
line names a key, and the checked-in docs/scenario-keys.md is what the schema generates."""

from pathlib import Path

from flowsim.config import loads_scenario
from flowsim.config.spec import ABSENT, toml_value
from flowsim.config.scenario_keys import MEANING, markdown, scenario_rows, solver_rows

DOC = Path(__file__).resolve().parent.parent / "docs" / "scenario-keys.md"


def test_every_key_has_a_meaning_and_every_meaning_a_key():
    keys = {r.key for r in scenario_rows()} | {"solver." + r.key for r in solver_rows()}
    assert sorted(keys - MEANING.keys()) == [], "keys without a meaning in flowsim/config/typed.py"
    assert sorted(MEANING.keys() - keys) == [], "meanings in flowsim/config/typed.py for no key"


def test_the_checked_in_reference_is_the_generated_one():
    assert DOC.read_text() == markdown() + "\n", \
        "regenerate: python -m flowsim.config.scenario_keys > docs/scenario-keys.md"


def test_the_documented_defaults_are_what_validation_fills_in(tmp_path):
    """A scenario of csv data and a shallow model, with only its required keys, resolves every
    other key to the default the reference lists."""
    (tmp_path / "d.csv").write_text("x,y\n1,2\n3,4\n5,6\n")
    sc = loads_scenario('[data]\nkind = "csv"\npath = "d.csv"\ntarget = "y"\n[model]\n[run]\nt_end = 1.0\n',
                        path=tmp_path / "s.toml")
    in_use = {"data": "csv", "model": "shallow", "model.scaling": "ntk"}
    checked = 0
    for r in scenario_rows():
        table = r.key.rsplit(".", 1)[0] if "." in r.key else ""
        if r.kinds and in_use.get(table) not in r.kinds or r.default in ("required", "absent", "the file's stem"):
            continue
        value = sc.resolved
        for part in r.key.split("."):
            value = value.get(part, ABSENT) if isinstance(value, dict) else ABSENT
        if value is ABSENT:      # a table the scenario leaves out ([analysis], [plot])
            continue
        if r.key == "run.solvers":   # presets resolve to their full tables
            value = [p["name"] for p in value]
        assert toml_value(value) == r.default, r.key
        checked += 1
    assert checked >= 15
