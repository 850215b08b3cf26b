"""Scenario and solver files: resolution, overrides, sweeps, checkpoints, and errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from flowsim.config import (
    Config,
    DescentPreset,
    FlowPreset,
    OptaxPreset,
    Preset,
    ScenarioError,
    checkpoint_times,
    from_dict,
    table_class,
    load_scenario,
    load_solver,
    loads_scenario,
    to_dict,
    to_toml,
)
from flowsim.config import schema as sc
from flowsim.config import presets, typed
from flowsim.config import find_scenario, list_solvers, scenarios_dir, solvers_dir

# A minimal valid scenario, as sections of raw TOML lines; cases patch it.
BASE: dict[str, dict[str, str]] = {
    "": {"seeds": "[0, 1]"},
    "data": {"kind": '"sphere-sine"', "n": "20", "d": "5"},
    "model": {"width": "50", "activation": '"relu"'},
    "run": {"t_end": "10.0", "checkpoints": "{ count = 5 }", "solvers": '["tsit5"]'},
}


def render(patch: dict[str, str | None] | None = None, extra: str = "") -> str:
    """BASE with `patch` applied: "section.key" -> raw TOML value (None deletes);
    a key without a dot is top level; "section" -> None drops the whole table."""
    sections = {s: dict(kv) for s, kv in BASE.items()}
    for dotted, value in (patch or {}).items():
        if dotted in sections and dotted and value is None:
            del sections[dotted]
            continue
        section, _, key = dotted.rpartition(".") if "." in dotted else ("", "", dotted)
        table = sections.setdefault(section, {})
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value
    lines = [f"{k} = {v}" for k, v in sections.get("", {}).items()]
    for s, kv in sections.items():
        if s:
            lines.append(f"[{s}]")
            lines.extend(f"{k} = {v}" for k, v in kv.items())
    return "\n".join(lines) + "\n" + extra


def write(tmp_path: Path, text: str, name: str = "case.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ---------------------------------------------------------------------------------------
# Resolution
# ---------------------------------------------------------------------------------------


def test_valid_scenario_has_every_default(tmp_path):
    s = load_scenario(write(tmp_path, render(), "quick.toml"))
    r = s.resolved
    assert s.path == str((tmp_path / "quick.toml").resolve())
    assert "[data]" in s.text
    assert r["name"] == "quick" and r["description"] == "" and r["dtype"] == "float64"
    assert r["seeds"] == [0, 1]
    assert r["data"] == {"kind": "sphere-sine", "seed": 0, "n": 20, "d": 5, "noise": 1.0,
                         "n_test": 100}
    assert r["model"] == {"kind": "shallow", "width": 50, "activation": "relu", "init_std": 1.0,
                          "output": "fixed", "zeroed": False, "init_path": "",
                          "scaling": {"kind": "ntk"}}
    assert r["loss"] == {"kind": "half-sse"}
    run = r["run"]
    assert run["t_end"] == 10.0 and isinstance(run["t_end"], float)
    assert run["checkpoints"] == {"count": 5, "spacing": "linear"}
    assert run["observe"] == ["loss", "test_loss", "ntg_eig", "ntg_change", "weight_change"]
    assert run["ntg_points"] == 100 and run["stop_loss"] == 0.0
    assert run["solvers"][0]["name"] == "tsit5" and run["solvers"][0]["rtol"] == 1e-8
    assert "sweep" not in r
    json.dumps(r)  # JSON-serialisable
    assert [x.name for x in s.runs] == ["seed0", "seed1"]
    assert all(x.point == 0 and x.label == "" and "sweep" not in x.config for x in s.runs)
    assert s.runs[0].config == {k: v for k, v in r.items()}


def test_resolved_form_loads_to_itself(tmp_path):
    text = render({"model.scaling": '{ kind = "asymmetric", alpha = 0.7 }'},
                  '[sweep]\n"model.width" = [50, 60]\n')
    r = loads_scenario(text).resolved
    again = loads_scenario(to_toml(r)).resolved
    assert again == r


def test_int_is_widened_to_float():
    r = loads_scenario(render({"run.t_end": "10", "model.init_std": "2"})).resolved
    assert isinstance(r["run"]["t_end"], float) and isinstance(r["model"]["init_std"], float)


@pytest.mark.parametrize(
    "seeds, expected",
    [("[3, 1, 7]", [3, 1, 7]), ("{ count = 3 }", [0, 1, 2]), ("{ count = 2, start = 5 }", [5, 6]),
     (None, [0])],
    ids=["list", "count", "count-start", "default"],
)
def test_seed_forms(seeds, expected):
    s = loads_scenario(render({"seeds": seeds}))
    assert s.resolved["seeds"] == expected
    assert [r.seed for r in s.runs] == expected
    assert [r.name for r in s.runs] == [f"seed{x}" for x in expected]


def test_set_overrides():
    text = render({"model.scaling": '{ kind = "asymmetric", gamma = 0.3, alpha = 0.7 }'})
    s = loads_scenario(text, overrides=[
        "model.width=70", 'run.solvers=["gd-lr1", "tsit5"]', "model.activation=tanh",
        "data.seed=run", "loss.kind=mse",
    ])
    r = s.resolved
    assert r["model"]["width"] == 70
    assert r["model"]["activation"] == "tanh"  # not TOML: taken as a string
    assert r["data"]["seed"] == "run"
    assert r["loss"]["kind"] == "mse"
    assert [x["name"] for x in r["run"]["solvers"]] == ["gd-lr1", "tsit5"]


def test_set_kind_drops_keys_of_the_old_kind():
    text = render({"model.scaling": '{ kind = "asymmetric", gamma = 0.3, alpha = 0.7 }'})
    r = loads_scenario(text, overrides=["model.scaling.kind=ntk"]).resolved
    assert r["model"]["scaling"] == {"kind": "ntk"}
    r = loads_scenario(text, overrides=["model.scaling.gamma=0.9",
                                        "model.scaling.kind=single"]).resolved
    assert r["model"]["scaling"] == {"kind": "single", "gamma": 0.9}


def test_set_whole_table_and_sweep_entry():
    s = loads_scenario(render(), overrides=['model.scaling={kind="finite", k=3}',
                                            "sweep.model.width=[10, 20]"])
    assert s.resolved["model"]["scaling"] == {"kind": "finite", "k": 3, "gamma": 0.0}
    assert [r.config["model"]["width"] for r in s.runs] == [10, 10, 20, 20]


@pytest.mark.parametrize(
    "override, needle",
    [("model.widht=3", "did you mean `model.width`"), ("nokey", "KEY=VALUE"),
     ("bogus.x=1", "unknown key `bogus.x`")],
    ids=["misspelt", "no-equals", "unknown-table"],
)
def test_set_unknown_key_names_set(override, needle):
    with pytest.raises(ScenarioError) as e:
        loads_scenario(render(), overrides=[override])
    assert e.value.file == "--set"
    assert str(e.value).startswith("--set")
    assert needle in str(e.value)


def test_set_bad_value_names_set():
    with pytest.raises(ScenarioError) as e:
        loads_scenario(render(), overrides=["model.width=-4"])
    assert e.value.file == "--set" and e.value.key == "model.width" and "-4" in str(e.value)


def test_sweep_product():
    text = render(extra='[sweep]\n"model.scaling" = [{ kind = "ntk" }, '
                        '{ kind = "asymmetric", gamma = 0.2 }]\n"model.width" = [30, 40, 50]\n')
    s = loads_scenario(text)
    assert len(s.runs) == 2 * 3 * 2
    points = sorted({r.point for r in s.runs})
    assert points == list(range(6))
    assert [r.name for r in s.runs[:4]] == ["p0-seed0", "p0-seed1", "p1-seed0", "p1-seed1"]
    first, last = s.runs[0], s.runs[-1]
    assert first.label == 'model.scaling={kind="ntk"}; model.width=30'
    assert last.label == 'model.scaling={kind="asymmetric", gamma=0.2}; model.width=50'
    assert last.config["model"]["scaling"] == {"kind": "asymmetric", "gamma": 0.2, "alpha": 0.5}
    assert last.config["model"]["width"] == 50
    assert all("sweep" not in r.config for r in s.runs)
    sweep = s.resolved["sweep"]
    assert sweep["mode"] == "product"
    assert sweep["model.scaling"][1] == {"kind": "asymmetric", "gamma": 0.2, "alpha": 0.5}


def test_sweep_zip_and_padding():
    widths = ", ".join(str(10 + i) for i in range(11))
    solvers = ", ".join('"tsit5"' if i % 2 else '"gd-lr1"' for i in range(11))
    text = render({"seeds": "[4]"},
                  f'[sweep]\nmode = "zip"\n"model.width" = [{widths}]\n'
                  f'"run.solvers" = [{", ".join(f"[{x}]" for x in solvers.split(", "))}]\n')
    s = loads_scenario(text)
    assert len(s.runs) == 11
    assert s.runs[0].name == "p00-seed4" and s.runs[10].name == "p10-seed4"
    assert s.runs[3].config["model"]["width"] == 13
    assert s.runs[3].config["run"]["solvers"][0]["name"] == "tsit5"
    assert s.runs[3].label == 'model.width=13; run.solvers=["tsit5"]'
    # the resolved sweep lists the inlined presets
    assert s.resolved["sweep"]["run.solvers"][0][0]["kind"] == "gd"


def test_sweep_kind_key_keeps_sibling():
    # gamma is listed first but applied after kind, so the kind change cannot drop it
    text = render(extra='[sweep]\n"model.scaling.gamma" = [0.25]\n'
                        '"model.scaling.kind" = ["single", "asymmetric"]\n')
    s = loads_scenario(text, overrides=["seeds=[0]"])
    assert [r.config["model"]["scaling"] for r in s.runs] == [
        {"kind": "single", "gamma": 0.25}, {"kind": "asymmetric", "gamma": 0.25, "alpha": 0.5}]


def test_sweep_point_error_names_point():
    text = render(extra='[sweep]\n"model.scaling" = [{ kind = "ntk" }, { kind = "single" }, '
                        '{ kind = "asymmetric", gamma = 2.0 }]\n')
    with pytest.raises(ScenarioError) as e:
        loads_scenario(text, path="x.toml")
    msg = str(e.value)
    assert 'sweep point 2 (model.scaling={kind="asymmetric", gamma=2.0})' in msg
    assert "`model.scaling.gamma` = 2.0" in msg and "[0, 1]" in msg


def test_empty_sweep_is_no_sweep():
    s = loads_scenario(render(extra='[sweep]\nmode = "zip"\n'))
    assert [r.name for r in s.runs] == ["seed0", "seed1"]


@pytest.mark.parametrize(
    "checkpoints, t_end, expected",
    [
        ("{ every = 3.0 }", 10.0, [3, 6, 9, 10]),
        ("{ every = 2.5 }", 10.0, [2.5, 5, 7.5, 10]),
        ("{ every = 0.1 }", 0.3, [0.1, 0.2, 0.3]),  # 3 × 0.1 ≠ 0.3 in floats: no near-duplicate
        ("{ count = 4 }", 8.0, [2, 4, 6, 8]),
        ('{ count = 3, spacing = "log" }', 1000.0, [1, 31.622776601683793, 1000]),
        ('{ count = 1, spacing = "log" }', 5.0, [5]),
        ("{ times = [1.0, 2.5] }", 10.0, [1, 2.5, 10]),
        ("{ times = [1.0, 10.0] }", 10.0, [1, 10]),
        ("{}", 50.0, list(np.arange(1, 51) * 1.0)),
    ],
    ids=["every", "every-exact", "every-rounding", "linear", "log", "log-one", "times",
         "times-with-end", "default"],
)
def test_checkpoint_times(checkpoints, t_end, expected):
    run = loads_scenario(render({"run.checkpoints": checkpoints, "run.t_end": str(t_end)})
                         ).resolved["run"]
    ts = checkpoint_times(run)
    assert ts.dtype == np.float64
    np.testing.assert_allclose(ts, expected, rtol=1e-12)
    assert ts[-1] == t_end and np.all(np.diff(ts) > 0) and ts[0] > 0


def test_relative_paths_resolve_against_the_scenario_folder(tmp_path):
    sub = tmp_path / "scn"
    sub.mkdir()
    (tmp_path / "d.csv").write_text("a,b\n1,2\n")
    (sub / "lam.npz").write_bytes(b"x")
    text = render({"data": None, "model.scaling": '{ kind = "custom", path = "lam.npz" }'},
                  '[data]\nkind = "csv"\npath = "../d.csv"\ntarget = ["b"]\n')
    s = load_scenario(write(sub, text))
    assert s.resolved["data"]["path"] == str((tmp_path / "d.csv").resolve())
    assert s.resolved["model"]["scaling"]["path"] == str((sub / "lam.npz").resolve())
    assert s.resolved["data"]["test_fraction"] == 0.2 and s.resolved["data"]["standardize"]


def test_data_kind_defaults():
    r = loads_scenario(render({"data": None}, '[data]\nkind = "uci"\nname = "energy"\n')).resolved
    assert r["data"] == {"kind": "uci", "seed": 0, "name": "energy",
                         "split": {"train": 0.4, "test": 0.2, "valid": 0.4},
                         "permute_seed": 10, "standardize": True}
    r = loads_scenario(render({"data": None}, '[data]\nkind = "digits"\n')).resolved
    assert r["data"] == {"kind": "digits", "seed": 0, "standardize": True}  # absent n = all


@pytest.mark.parametrize("name", sorted(p.stem for p in solvers_dir().glob("*.toml")))
def test_every_preset_loads(name):
    preset = load_solver(name)
    assert preset["name"] == name and preset["description"]
    assert preset["kind"] in sc.SOLVER_KINDS
    json.dumps(preset)


def test_required_presets_exist():
    names = {n for n, _ in list_solvers()}
    assert {"tsit5", "dopri8-tight", "dopri5-fast", "kvaerno5", "heun", "bosh3", "gd-lr1",
            "gd-lr0.1", "momentum", "sgd"} <= names
    assert load_solver("dopri8-tight")["rtol"] == 1e-11
    assert load_solver("kvaerno5")["method"] == "kvaerno5"
    assert load_solver("momentum")["beta"] == 0.9
    assert load_solver("sgd")["batch_size"] == 64


def test_inline_solver():
    p = load_solver({"name": "mine", "kind": "momentum", "learning_rate": 1})
    assert p == {"name": "mine", "kind": "momentum", "description": "", "learning_rate": 1.0,
                 "beta": 0.9, "divergence_factor": 1e8, "perturbation": 0.0}
    with pytest.raises(ScenarioError, match=r"run.solvers\[0\].beta"):
        load_solver({"name": "m", "kind": "momentum", "learning_rate": 1, "beta": 1.0},
                    key="run.solvers[0]")


def test_find_scenario(tmp_path):
    p = write(tmp_path, render())
    assert find_scenario(str(p)) == p.resolve()
    with pytest.raises(ScenarioError, match="no such scenario"):
        find_scenario("surely-not-a-scenario")


def test_activation_names_match_the_activation_module():
    from flowsim.nn.activations import ACTIVATIONS

    assert set(sc.ACTIVATIONS) == set(ACTIVATIONS)


# ---------------------------------------------------------------------------------------
# Malformed scenarios: one case each; the message names the file, the key and the value
# ---------------------------------------------------------------------------------------

BAD = [
    # id, patch, extra text, key in the message, value (or other words) in the message
    ("unknown-top-key", {"colour": '"red"'}, "", "colour", "allowed keys in the top level"),
    ("misspelt-model-key", {"model.widht": "10"}, "", "model.widht", "did you mean `width`?"),
    ("misspelt-run-key", {"run.tend": "1.0"}, "", "run.tend", "did you mean `t_end`?"),
    ("width-string", {"model.width": '"100"'}, "", "model.width", '"100"'),
    ("width-bool", {"model.width": "true"}, "", "model.width", "true"),
    ("width-float", {"model.width": "100.0"}, "", "model.width", "100.0"),
    ("width-negative", {"model.width": "-3"}, "", "model.width", "-3"),
    ("width-zero", {"model.width": "0"}, "", "model.width", "= 0"),
    ("t_end-nan", {"run.t_end": "nan"}, "", "run.t_end", "nan"),
    ("t_end-inf", {"run.t_end": "inf"}, "", "run.t_end", "inf"),
    ("t_end-zero", {"run.t_end": "0.0"}, "", "run.t_end", "0.0"),
    ("t_end-missing", {"run.t_end": None}, "", "run.t_end", "missing"),
    ("gamma-too-big", {"model.scaling": '{ kind = "single", gamma = 1.5 }'}, "",
     "model.scaling.gamma", "1.5"),
    ("alpha-zero", {"model.scaling": '{ kind = "asymmetric", alpha = 0 }'}, "",
     "model.scaling.alpha", "(0, 1)"),
    ("alpha-one", {"model.scaling": '{ kind = "asymmetric", alpha = 1.0 }'}, "",
     "model.scaling.alpha", "1.0"),
    ("k-above-width", {"model.scaling": '{ kind = "finite", k = 51 }'}, "",
     "model.scaling.k", "model.width` = 50"),
    ("k-missing", {"model.scaling": '{ kind = "finite" }'}, "", "model.scaling.k", "missing"),
    ("scaling-key-of-other-kind", {"model.scaling": '{ kind = "ntk", gamma = 0.5 }'}, "",
     "model.scaling.gamma", 'for kind = "ntk"'),
    ("data-kind-missing", {"data.kind": None}, "", "data.kind", "sphere-sine"),
    ("data-kind-unknown", {"data.kind": '"sphere-sin"'}, "", "data.kind", '"sphere-sin"'),
    ("data-key-of-other-kind", {"data.name": '"energy"'}, "", "data.name", "another kind"),
    ("data-missing", {"data": None}, "", "data", "missing"),
    ("low-above-high", {"data.kind": '"random-labels"', "data.n": None, "data.d": None,
                        "data.low": "1.0"}, "", "data.high", "data.low"),
    ("model-kind", {"model.kind": '"embeded"'}, "", "model.kind", 'did you mean "embedded"'),
    ("activation-unknown", {"model.activation": '"rleu"'}, "", "model.activation",
     'did you mean "relu"'),
    ("loss-unknown", {}, '[loss]\nkind = "l2"\n', "loss.kind", '"l2"'),
    ("solver-unknown", {"run.solvers": '["tsit6"]'}, "", "run.solvers[0]", '"tsit5"'),
    ("solver-duplicate", {"run.solvers": '["tsit5", "gd-lr1", "tsit5"]'}, "", "run.solvers",
     'names solver "tsit5" twice'),
    ("solver-inline-no-name", {"run.solvers": '[{ kind = "gd", learning_rate = 1.0 }]'}, "",
     "run.solvers[0].name", "missing"),
    ("solver-inline-bad-lr", {"run.solvers": '[{ name = "g", kind = "gd", learning_rate = -1 }]'},
     "", "run.solvers[0].learning_rate", "-1"),
    ("solvers-empty", {"run.solvers": "[]"}, "", "run.solvers", "[]"),
    ("sweep-unknown-key", {}, '[sweep]\n"model.widht" = [1, 2]\n', 'sweep."model.widht"',
     "did you mean `model.width`"),
    ("sweep-not-list", {}, '[sweep]\n"model.width" = 3\n', 'sweep."model.width"', "= 3"),
    ("sweep-seeds", {}, '[sweep]\nseeds = [[1], [2]]\n', "sweep.seeds", "cannot be swept"),
    ("zip-lengths", {}, '[sweep]\nmode = "zip"\n"model.width" = [1, 2]\n"run.t_end" = [1.0]\n',
     "sweep", "model.width: 2, run.t_end: 1"),
    ("sweep-mode", {}, '[sweep]\nmode = "cartesian"\n', "sweep.mode", '"cartesian"'),
    ("checkpoints-two-forms", {"run.checkpoints": "{ every = 1.0, count = 3 }"}, "",
     "run.checkpoints", "mixes 2 forms"),
    ("checkpoints-unknown-key", {"run.checkpoints": "{ evry = 1.0 }"}, "",
     "run.checkpoints.evry", "did you mean `every`?"),
    ("times-not-increasing", {"run.checkpoints": "{ times = [1.0, 3.0, 2.0] }"}, "",
     "run.checkpoints.times", "[1.0, 3.0, 2.0]"),
    ("times-beyond-t_end", {"run.checkpoints": "{ times = [1.0, 11.0] }"}, "",
     "run.checkpoints.times[1]", "11.0"),
    ("every-negative", {"run.checkpoints": "{ every = -1.0 }"}, "", "run.checkpoints.every",
     "-1.0"),
    ("spacing-unknown", {"run.checkpoints": '{ count = 3, spacing = "exp" }'}, "",
     "run.checkpoints.spacing", '"exp"'),
    ("split-sum", {"data": None}, '[data]\nkind = "uci"\nname = "plant"\n'
     "split = { train = 0.5, test = 0.5, valid = 0.5 }\n", "data.split", "sums to 1.5"),
    ("uci-name", {"data": None}, '[data]\nkind = "uci"\nname = "iris"\n', "data.name", '"iris"'),
    ("csv-missing-path", {"data": None}, '[data]\nkind = "csv"\ntarget = "y"\n', "data.path",
     "missing"),
    ("csv-path-not-found", {"data": None}, '[data]\nkind = "csv"\npath = "nope.csv"\n'
     'target = "y"\n', "data.path", "nope.csv"),
    ("init-path-not-found", {"model.init_path": '"w0.npz"'}, "", "model.init_path", "w0.npz"),
    ("observe-unknown", {"run.observe": '["loss", "ntk"]'}, "", "run.observe[1]", '"ntk"'),
    ("observe-duplicate", {"run.observe": '["loss", "loss"]'}, "", "run.observe", "twice"),
    ("dtype-float16", {"dtype": '"float16"'}, "", "dtype", '"float16"'),
    ("seeds-negative", {"seeds": "[0, -1]"}, "", "seeds[1]", "-1"),
    ("seeds-duplicate", {"seeds": "[1, 2, 1]"}, "", "seeds", "lists 1 twice"),
    ("seeds-count-zero", {"seeds": "{ count = 0 }"}, "", "seeds.count", "= 0"),
    ("seeds-string", {"seeds": '"0"'}, "", "seeds", '"0"'),
    ("data-seed-word", {"data.seed": '"each"'}, "", "data.seed", '"each"'),
    ("noise-negative", {"data.noise": "-0.1"}, "", "data.noise", "-0.1"),
    ("xor-d-too-small", {"data.kind": '"xor-noise"', "data.d": "2"}, "", "data.d", "= 2"),
    ("model-not-table", {"model": None}, "model = 5\n", "model", "= 5"),
    ("stop-loss-negative", {"run.stop_loss": "-1.0"}, "", "run.stop_loss", "-1.0"),
    ("huge-int-as-float", {"run.t_end": "9" * 400}, "", "run.t_end", "too large"),
]


@pytest.mark.parametrize("patch, extra, key, needle",
                         [pytest.param(p, e, k, n, id=i) for i, p, e, k, n in BAD])
def test_malformed_scenario(tmp_path, patch, extra, key, needle):
    text = render(patch, extra)
    if "model = 5" in extra:  # a top-level key must precede the tables
        text = extra + render(patch)
    path = write(tmp_path, text, "bad-scenario.toml")
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    msg = str(e.value)
    assert "bad-scenario.toml" in msg
    assert key in msg, msg
    assert needle in msg, msg
    assert "allowed" in msg, msg
    assert e.value.file.endswith("bad-scenario.toml")


def test_invalid_toml_names_file_and_line(tmp_path):
    good = render()
    path = write(tmp_path, good + "stop_loss = = 3\n", "broken.toml")
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    line = len(good.splitlines()) + 1
    assert "broken.toml" in str(e.value) and f"line {line}" in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(ScenarioError, match="gone.toml"):
        load_scenario(tmp_path / "gone.toml")


def test_bad_preset_file_names_the_preset(tmp_path, monkeypatch):
    (tmp_path / "odd.toml").write_text('description = "x"\nkind = "flow"\nrtl = 1e-3\n')
    monkeypatch.setattr(presets, "solvers_dir", lambda: tmp_path)
    with pytest.raises(ScenarioError) as e:
        load_solver("odd")
    assert "odd.toml" in str(e.value) and "`rtl`" in str(e.value)
    assert "did you mean `rtol`?" in str(e.value)
    (tmp_path / "nodesc.toml").write_text('kind = "gd"\nlearning_rate = 1.0\n')
    with pytest.raises(ScenarioError, match="missing required key `description`"):
        load_solver("nodesc")


# ---------------------------------------------------------------- the shipped catalog

CATALOG = sorted(p.stem for p in scenarios_dir().glob("*.toml"))


@pytest.mark.parametrize("name", CATALOG)
def test_every_catalog_scenario_loads(name):
    # The paper-scale files are too big to run in CI; loading proves their keys, presets,
    # data files and sweeps valid (the `-quick` twins also run end to end in the slow tests).
    s = load_scenario(scenarios_dir() / f"{name}.toml")
    assert s.resolved["name"] == name and s.resolved["description"].strip()
    assert len(s.runs) == len({r.name for r in s.runs}) >= 1


def test_every_paper_experiment_has_a_quick_twin():
    # (a -quick scenario of flowsim's own, such as adam-eos-quick, has no paper-scale twin)
    papers_of = ("caron-", "chen-", "cohen-")
    quick = {n.removesuffix("-quick") for n in CATALOG if n.endswith("-quick") and n.startswith(papers_of)}
    papers = {n for n in CATALOG if n.startswith(papers_of) and not n.endswith("-quick")}
    assert quick == papers and len(papers) == 16


# ---------------------------------------------------------------- typed configs

def _same(a, b) -> bool:
    """Equal, and equal as JSON text: key order included (the archive stores the text)."""
    return a == b and json.dumps(a) == json.dumps(b)


@pytest.mark.parametrize("name", CATALOG)
def test_typed_round_trip_of_every_catalog_scenario(name):
    s = load_scenario(scenarios_dir() / f"{name}.toml")
    assert isinstance(s.settings, Config)
    assert _same(to_dict(s.settings), s.resolved)
    assert from_dict(Config, to_dict(s.settings)) == s.settings
    # the resolved form, validated again, gives the same typed object
    assert loads_scenario(to_toml(to_dict(s.settings))).settings == s.settings
    for r in s.runs:
        assert r.settings.sweep is None and _same(to_dict(r.settings), r.config)
        assert r.settings.run.checkpoint_times().tolist() == checkpoint_times(r.config["run"]).tolist()


@pytest.mark.parametrize("name", sorted(p.stem for p in solvers_dir().glob("*.toml")))
def test_typed_round_trip_of_every_preset(name):
    resolved = load_solver(name)
    preset = from_dict(Preset, resolved)
    assert _same(to_dict(preset), resolved)
    assert from_dict(Preset, load_solver(to_dict(preset))) == preset  # validated again, inline


def test_typed_configs_are_frozen_and_hashable():
    s = loads_scenario(render({"model.scaling": '{ kind = "asymmetric", gamma = 0.25 }'},
                              '[sweep]\n"model.scaling" = [{ kind = "ntk" }, { kind = "finite", k = 3 }]\n'))
    settings = s.settings
    for obj in (settings, settings.model, settings.model.scaling, settings.run.solvers[0],
                settings.run.checkpoints, settings.data, settings.sweep):
        with pytest.raises(dataclasses.FrozenInstanceError):
            obj.kind = "x"
        hash(obj)
    assert hash(s.runs[0].settings) == hash(s.runs[1].settings)  # one point, two seeds
    assert isinstance(settings.run.observe, tuple) and isinstance(settings.seeds, tuple)
    with pytest.raises(TypeError):
        settings.sweep.axes["model.width"] = [1]
    wider = dataclasses.replace(settings.model, width=80)
    assert wider.width == 80 and to_dict(wider)["width"] == 80 and settings.model.width == 50
    with pytest.raises(ValueError, match="not a kind of FlowPreset"):
        dataclasses.replace(settings.run.solvers[0], kind="gd")


@pytest.mark.parametrize("table, cls", [
    ('kind = "sphere-sine"', typed.SphereSineData),
    ('kind = "uci"\nname = "energy"', typed.UciData),
    ('kind = "digits"', typed.DigitsData),
    ('kind = "random-labels"', typed.RandomLabelsData),
])
def test_a_data_kind_gives_its_class(table, cls):
    data = loads_scenario(render({"data": None}, f"[data]\n{table}\n")).settings.data
    assert type(data) is cls and data.kind == cls.__dataclass_fields__["kind"].default


def test_kinds_give_their_classes():
    text = render({"model.scaling": '{ kind = "finite", k = 7 }', "run.checkpoints": "{ every = 2.0 }",
                   "run.solvers": '["tsit5", "gd-lr1", "momentum", "sgd", '
                                  '{ name = "mf", kind = "modified-flow", learning_rate = 0.5, '
                                  'reference = "dopri8-tight" }]'})
    st = loads_scenario(text).settings
    assert type(st.model) is typed.ShallowModel and type(st.model.scaling) is typed.FiniteScaling
    assert st.model.scaling.k == 7 and type(st.run.checkpoints) is typed.CheckpointEvery
    kinds = {p.name: (type(p), p.kind) for p in st.run.solvers}
    assert kinds == {"tsit5": (FlowPreset, "flow"), "gd-lr1": (DescentPreset, "gd"),
                     "momentum": (DescentPreset, "momentum"), "sgd": (DescentPreset, "sgd"),
                     "mf": (FlowPreset, "modified-flow")}
    tsit5, _, momentum, sgd, mf = st.run.solvers
    assert tsit5.learning_rate is None and tsit5.reference is None
    assert momentum.beta == 0.9 and momentum.batch_size is None and sgd.batch_size == 64
    assert mf.learning_rate == 0.5 and type(mf.reference) is FlowPreset
    assert mf.reference.name == "dopri8-tight" and mf.reference.rtol == 1e-11
    emb = loads_scenario(render({"model": None}, '[model]\nkind = "embedded"\nwidth = 6\n')).settings.model
    assert type(emb) is typed.EmbeddedModel and emb.features is None
    for text, cls in [("{ count = 4 }", typed.CheckpointCount), ("{ times = [1.0, 2.0] }", typed.CheckpointTimes)]:
        assert type(loads_scenario(render({"run.checkpoints": text})).settings.run.checkpoints) is cls
    assert st.analysis is None and st.plot is None and st.sweep is None


def test_typed_classes_have_the_schema_keys():
    """Every kind the schema accepts has a class with exactly that kind's keys."""
    def keys(cls):
        return {f.name for f in dataclasses.fields(cls)}

    for spec, union in [(sc.DATA, typed.Data), (sc.SCALING, typed.Scaling), (sc.MODEL, typed.Model),
                        (sc.SOLVER_INLINE, Preset)]:
        for kind in spec.variants:
            cls = table_class(union, {"kind": kind})
            assert spec.keys_for(kind) <= keys(cls), (kind, cls)
            # keys of a class shared by several kinds that this kind lacks default to None
            extra = keys(cls) - spec.keys_for(kind)
            assert all(cls.__dataclass_fields__[k].default is None for k in extra), (kind, extra)
    for table in sc.CHECKPOINT_FORMS.values():
        assert keys(table_class(typed.Checkpoints, dict.fromkeys(table.fields))) == set(table.fields)
    assert keys(Config) == set(sc.SCENARIO.fields)
    assert keys(typed.Run) == set(sc.RUN.fields)
    assert keys(typed.Analysis) == set(sc.ANALYSIS.fields)


def test_kinds_are_read_from_the_registries():
    from flowsim.kinds.solvers import FLOW_METHODS, SOLVER_KINDS
    from flowsim.nn.losses import LOSSES
    from flowsim.observe.observables import OBSERVABLES

    in_files = tuple(k for k, v in SOLVER_KINDS.items() if not v.given)     # (a given one: flowsim.simulate's)
    assert sc.SOLVER_KINDS == in_files == tuple(sc.SOLVER_FILE.variants)
    assert sc.FLOW_METHODS == tuple(FLOW_METHODS) and sc.LOSSES == tuple(LOSSES)
    assert sc.OBSERVABLES == tuple(OBSERVABLES)
    assert {k for cls in (FlowPreset, DescentPreset, OptaxPreset) for k in cls.KINDS} == set(SOLVER_KINDS)


@pytest.mark.parametrize("patch, allowed", [
    ({"model.activation": '"relux"'},
     'one of "relu", "leaky-relu", "swish", "tanh", "sigmoid", "softplus", "gelu", "identity", '
     'or a plug-in "package.module:name" naming an elementwise function z -> σ(z)'),
    ({"loss.kind": '"mae"'}, 'one of "half-sse", "mse", "half-sse-mean", "cross-entropy", or a plug-in '
     '"package.module:name" '
     'naming a function (pred (n, k), y (n, k)) -> scalar, a mean over samples'),
    ({"run.observe": '["los"]'},
     'one of "loss", "test_loss", "accuracy", "test_accuracy", "ntg", "ntg_eig", "ntg_change", '
     '"weight_change", "unit_change", "importance", "weights", "sharpness", "gn_sharpness", '
     '"preconditioned_sharpness", "hessian_top", "hessian_density", "hidden"'),
    ({"run.solvers": '[{ name = "x", kind = "flo" }]'},
     'one of "flow", "modified-flow", "central-flow", "rmsprop-flow", "adam-flow", "rmsprop-central", "gd", '
     '"momentum", "sgd", "rmsprop", "adam"'),
    ({"run.solvers": '[{ name = "x", kind = "flow", method = "rk4" }]'},
     'one of "tsit5", "dopri5", "dopri8", "heun", "bosh3", "ralston", "kvaerno5", "rock4", "rkc2", "auto", "filippov"'),
])
def test_allowed_lists_keep_their_order(patch, allowed):
    with pytest.raises(ScenarioError) as e:
        loads_scenario(render(patch))
    assert e.value.allowed == allowed


def test_embedded_features_have_one_place_given_or_not():
    # The default D is filled in after the other keys; a given D sits in the same place,
    # so the typed form (one field order) gives either resolved table back exactly.
    for model in ('kind = "embedded"\nembedding = "random-features"\nwidth = 6\n',
                  'kind = "embedded"\nembedding = "random-features"\nfeatures = 9\nwidth = 6\n'):
        s = loads_scenario(render({"model": None}, f"[model]\n{model}"))
        assert list(s.resolved["model"])[-1] == "features"
        assert _same(to_dict(s.settings), s.resolved)
