"""A setting is declared once: a field added to a table's class, and nothing else, is
validated, documented, shown, stored and resumed.

The field goes into a copy of the package (a `run.note` string beside `run.stop_loss`), and
the copy runs in its own process: validation, the key reference, `flowsim show`, a run into
an archive and its `--resume` all read it from that one line."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIELD = '''    note: str = setting(Str(default=""), "a note kept with the run")
'''
SCRIPT = r'''
import json, sys
from flowsim.cli import main
from flowsim.config import ScenarioError, load_scenario
from flowsim.config.scenario_keys import markdown

out = {"doc": [line for line in markdown().splitlines() if "`run.note`" in line]}
try:
    load_scenario("tiny.toml", ["run.note=5"])
except ScenarioError as err:
    out["error"] = [str(err), err.file, err.key]
out["default"] = load_scenario("tiny.toml").settings.run.note
out["codes"] = [main(args) for args in (
    ["show", "tiny.toml", "--set", "run.note=hello"],
    ["run", "tiny.toml", "-q", "-o", "a.h5", "--set", "run.note=hello", "--set", "run.t_end=2.0",
     "--set", "run.solvers=[\"gd-lr1\"]", "--set", "seeds=[0]"],
    ["run", "tiny.toml", "-q", "-o", "a.h5", "--resume", "--set", "run.note=hello", "--set", "run.t_end=2.0",
     "--set", "run.solvers=[\"gd-lr1\"]", "--set", "seeds=[0]"],
    ["run", "tiny.toml", "-q", "-o", "a.h5", "--resume", "--set", "run.note=other", "--set", "run.t_end=2.0",
     "--set", "run.solvers=[\"gd-lr1\"]", "--set", "seeds=[0]"])]
import flowsim.archive
with flowsim.archive.open("a.h5") as arch:
    out["stored"] = [run.params["run"]["note"] for run in arch.runs.values()]
print("RESULT " + json.dumps(out))
'''


@pytest.mark.slow
def test_a_field_added_to_a_class_is_validated_documented_shown_stored_and_resumed(tmp_path):
    for name in ("flowsim", "solvers", "scenarios"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    typed = tmp_path / "flowsim" / "config" / "typed.py"
    text = typed.read_text(encoding="utf-8")
    anchor = '''                               "> 0: a flow stops (status `stopped`) once the loss falls to this value")
'''
    assert text.count(anchor) == 1
    typed.write_text(text.replace(anchor, anchor + FIELD), encoding="utf-8")
    shutil.copy(ROOT / "tests" / "scenarios" / "tiny.toml", tmp_path / "tiny.toml")
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.split("RESULT ", 1)[1])
    # validated, with the message contract (file, dotted key, value, allowed)
    message, file, key = result["error"]
    assert file == "--set" and key == "run.note"
    assert message == "--set: key `run.note` = 5 has the wrong type (integer); allowed: a string"
    # documented
    assert result["doc"] == ['| `run.note` | all | a string | `""` | a note kept with the run |']
    # shown, with where its value came from
    assert 'run.note = "hello"' in done.stdout and "--set run.note=hello" in done.stdout
    # stored, resumed with the same value, refused with another
    assert result["default"] == "" and result["stored"] == ["hello", "hello"]   # two sweep points
    assert result["codes"][:3] == [0, 0, 0] and result["codes"][3] != 0
    assert '`run.note`: "hello" -> "other"' in done.stderr


def test_presets_written_in_python_are_the_presets_a_file_gives():
    """A preset class's defaults are the ones validation fills in: `FlowPreset(method=...,
    rtol=...)` equals the inline table with those two keys, and a kind-specific key has its
    default for its kind only."""
    from flowsim.config import DescentPreset, FlowPreset, Preset, from_dict, load_solver, to_dict

    preset = FlowPreset(method="tsit5", rtol=1e-8)
    assert preset == from_dict(Preset, load_solver({"name": "tsit5", "kind": "flow", "method": "tsit5", "rtol": 1e-8}))
    assert preset.name == "tsit5" and preset.reference is None and preset.learning_rate is None
    assert to_dict(FlowPreset(name="m", kind="modified-flow", learning_rate=0.5)) == load_solver(
        {"name": "m", "kind": "modified-flow", "learning_rate": 0.5})
    for kind, beta, batch_size in (("gd", None, None), ("momentum", 0.9, None), ("sgd", None, 64)):
        p = DescentPreset(kind=kind, learning_rate=0.1)
        assert (p.name, p.beta, p.batch_size, p.divergence_factor) == (kind, beta, batch_size, 1e8)
        assert to_dict(p) == load_solver({"name": kind, "kind": kind, "learning_rate": 0.1})


def test_the_default_analysis_tables_are_the_ones_validation_fills_in():
    """`flowsim analyze --force` gives a scenario without [analysis] every analysis with
    the declared defaults: the tables validation makes of `prune = true` and so on."""
    from flowsim.config import Analysis, PcaAnalysis, PruneAnalysis, TransferAnalysis, to_dict
    from flowsim.config.schema import ANALYSIS
    from flowsim.config.spec import Ctx

    every = ANALYSIS.check({"prune": True, "transfer": True, "pca": True}, "analysis",
                           Ctx(file="x.toml", base_dir=ROOT))
    assert to_dict(Analysis(prune=PruneAnalysis(), transfer=TransferAnalysis(), pca=PcaAnalysis())) == every


@pytest.mark.parametrize("cls, spec, given", [
    ("SphereSineData", "DATA", {}), ("SingleReluData", "DATA", {}), ("RandomLabelsData", "DATA", {}),
    ("XorNoiseData", "DATA", {}), ("QuadraticTeacherData", "DATA", {}), ("UciData", "DATA", {"name": "energy"}),
    ("DigitsData", "DATA", {}), ("MnistData", "DATA", {}), ("SyntheticImagesData", "DATA", {}),
    ("NtkScaling", "SCALING", {}), ("AsymmetricScaling", "SCALING", {}), ("FiniteScaling", "SCALING", {"k": 3}),
    ("ShallowModel", "MODEL", {}), ("EmbeddedModel", "MODEL", {"width": 6}), ("MlpModel", "MODEL", {}),
    ("Loss", "LOSS", {}), ("Plot", "PLOT", {}),
])
def test_every_python_default_is_the_default_validation_fills_in(cls, spec, given):
    """A table written in Python with only its required keys equals the table validation
    makes of the same keys: the defaults are declared once, for both."""
    from flowsim.config import from_dict, schema, to_dict, typed
    from flowsim.config.spec import Ctx, Tagged

    table, spec = getattr(typed, cls), getattr(schema, spec)
    kind = {"kind": table.__dataclass_fields__["kind"].default} if isinstance(spec, Tagged) else {}
    resolved = spec.check({**kind, **given}, "t", Ctx(file="x.toml", base_dir=ROOT))
    assert to_dict(table(**given)) == resolved
    assert from_dict(table, resolved) == table(**given)


def test_an_annotation_that_states_the_validator_is_the_validator():
    """A setting given only its default is validated by its annotation (the choices of a
    `Literal` are written once); an annotation that does not say how to validate is refused
    where the table is declared."""
    from typing import Literal

    from flowsim.config.declare import setting, spec_of, table
    from flowsim.config.spec import Bool, Str

    @table
    class T:
        mode: Literal["a", "b"] = setting("a", "m")
        on: bool = setting(True, "m")

    assert spec_of(T, "mode") == Str(choices=("a", "b"), default="a") and spec_of(T, "on") == Bool(default=True)
    assert T() == T(mode="a", on=True)
    with pytest.raises(TypeError, match="annotated `tuple.*needs its spec"):
        @table
        class U:
            widths: tuple[int, ...] = setting([1], "m")
