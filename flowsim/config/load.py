"""Loading: a scenario file (plus ``--set`` overrides) into a `Scenario`, a preset into a dict.

A `Scenario` holds the typed `Config` of the resolved form (every default filled in, solver
presets inlined, relative paths made absolute) and one `RunSpec` per sweep point and seed;
below the loader nothing sees a scenario dict but the archive's JSON (`to_dict`). Every
mistake in the input is a `ScenarioError`, raised before any computation, whose message
names the file, the dotted key, the offending value and what is allowed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import plugins
from ..kinds import PIECEWISE_LINEAR, SHALLOW_KINDS, SMOOTH
from .files import display, parse_toml, read_text
from .overrides import apply_overrides
from .presets import load_preset
from .schema import SCENARIO, sweep_axes
from .sweep_grammar import sweep_key
from ..kinds.solvers import FLOW_METHODS
from .spec import ABSENT, Ctx, ScenarioError, join, toml_value
from .sweep import RunSpec, expand, make_runs, refuse_swept_overrides
from .declare import from_dict, to_dict
from .typed import Config, FlowPreset, Preset, solver_spec


KINK_RTOL = 1e-4   # the rtol of the `bosh3-relu` preset, measured to pass ReLU kinks


@dataclass(frozen=True)
class Scenario:
    """A validated scenario: its file, raw text, typed `settings` and runs (point-major)."""

    path: str
    text: str
    settings: Config
    runs: list[RunSpec]
    warnings: tuple[str, ...] = ()   # valid, but probably not what was meant (printed by `run`)
    origins: Mapping[str, str] = field(default_factory=dict)   # dotted key -> the --set that set it

    @property
    def resolved(self) -> dict:
        """`settings` as the resolved dict the archive stores as JSON and `--resume` compares."""
        return to_dict(self.settings)


def loads_scenario(text: str, *, path: str | Path = "<string>", base_dir: str | Path | None = None,
                   overrides: Sequence[str] = ()) -> Scenario:
    """Validate and resolve scenario TOML `text`.

    `path` names the file in messages (and gives the default `name`, its stem); relative
    paths in the scenario start at `base_dir`, by default the folder of `path` (or the
    working folder for "<string>").  `overrides` are `--set` strings, applied before
    validation.
    """
    if str(path) == "<string>":
        abspath, shown, stem = "<string>", "<string>", "scenario"
        base = Path(base_dir) if base_dir is not None else Path.cwd()
    else:
        p = Path(os.path.abspath(path))
        abspath, shown, stem = str(p), display(p), p.stem
        base = Path(base_dir) if base_dir is not None else p.parent
    ctx = Ctx(file=shown, base_dir=Path(os.path.abspath(base)), stem=stem)
    raw = parse_toml(text, shown)
    raw, origins = apply_overrides(raw, overrides, ctx)
    ctx = replace(ctx, origins=origins)
    resolved = SCENARIO.check(raw, "", ctx)
    refuse_swept_overrides(resolved.get("sweep"), ctx)
    points, sweep = expand(raw, resolved, ctx)
    if sweep is not None:
        resolved["sweep"] = sweep
    runs = make_runs(points, resolved["seeds"], bool(sweep_axes(sweep)), ctx, sweep)
    refuse_filippov_misfits(runs, shown)
    return Scenario(path=abspath, text=text, settings=from_dict(Config, resolved), runs=runs,
                    warnings=kink_warnings(runs, shown), origins=origins)


def refuse_filippov_misfits(runs: list[RunSpec], shown: str, run_key: str = "run") -> None:
    """The Filippov integrator knows one network: shallow (on raw or embedded inputs), a
    piecewise-linear activation, the output layer fixed; and it needs float64 (its crossings
    are located to 2⁻⁴⁰ of a step and its exit slack is 1e-9, both below what float32
    resolves: measured, a float32 run at rtol 1e-5 had other events than float64's and ended
    of order 1 from it by t = 10). `run_key`: where the [run] keys sit in `shown` ("" for the
    arguments of `flowsim.simulate`)."""
    for r in runs:
        model = r.settings.model
        for p in r.settings.run.solvers:
            if not (isinstance(p, FlowPreset) and FLOW_METHODS[p.method].filippov):
                continue
            problem = None
            if p.kind != "flow":
                problem = (f"{p.name}.kind", p.kind, '"flow" (it integrates the gradient flow itself)')
            elif model.kind not in SHALLOW_KINDS:
                problem = (join(run_key, "solvers"), [q.name for q in r.settings.run.solvers],
                           'flow methods for any model, e.g. "tsit5" ("bosh3-relu" through ReLU kinks)')
            elif model.activation not in PIECEWISE_LINEAR:
                problem = ("model.activation", model.activation, " or ".join(map(toml_value, PIECEWISE_LINEAR)))
            elif getattr(model, "output", "fixed") != "fixed":
                problem = ("model.output", model.output, '"fixed"')
            elif r.settings.dtype != "float64":
                problem = ("dtype", r.settings.dtype, '"float64" (its events are located below float32\'s '
                           'resolution)')
            if problem is not None:
                key, value, allowed = problem
                raise ScenarioError(
                    f"{shown}: solver {toml_value(p.name)} (method \"filippov\") integrates the gradient flow "
                    f"of shallow ReLU networks with a fixed output layer, in float64; `{key}` = "
                    f"{toml_value(value)} is outside that (allowed: {allowed}); use another flow method, "
                    "e.g. \"tsit5\"",
                    file=shown, key=key, value=value, allowed=allowed)


def kink_warnings(runs: list[RunSpec], shown: str) -> tuple[str, ...]:
    """A non-smooth activation under a tight flow tolerance: the solver shrinks its steps at
    every kink its error estimate sees and crawls (minutes per point, often `max_steps`)."""
    out = {}
    for r in runs:
        activation = getattr(r.settings.model, "activation", None)
        if activation is None or activation in SMOOTH or plugins.is_path(activation):
            continue
        for p in r.settings.run.solvers:
            if (isinstance(p, FlowPreset) and p.rtol < KINK_RTOL and not FLOW_METHODS[p.method].filippov
                    and p.name not in out):
                out[p.name] = (f"{shown}: `model.activation` = {toml_value(activation)} is not smooth and "
                               f"flow solver {toml_value(p.name)} has rtol = {p.rtol:.0e}: it will crawl "
                               f"through the kinks. The \"filippov\" preset follows them exactly (shallow "
                               f"relu and leaky-relu nets, output layer fixed); \"bosh3-relu\" (rtol "
                               f"{KINK_RTOL:.0e}) passes any kink approximately: "
                               "--set 'run.solvers=[\"filippov\", ...]'")
    return tuple(out.values())


def load_scenario(path: str | Path, overrides: Sequence[str] = ()) -> Scenario:
    """Read, validate and resolve a scenario file (see `loads_scenario`)."""
    p = Path(os.path.abspath(path))
    text = read_text(p, display(p))
    return loads_scenario(text, path=p, base_dir=p.parent, overrides=overrides)


def load_solver(spec: str | dict, *, file: str = "<scenario>", key: str = "run.solvers") -> dict:
    """A solver preset by name (``solvers/NAME.toml``) or inline (a table with `name`).

    Returns the preset with every default filled, `name` first (typed:
    ``from_dict(Preset, load_solver(...))``).  Errors in a preset file name that file;
    errors in an inline table name `file` and `key`.
    """
    return load_preset(spec, key, Ctx(file=file, base_dir=Path.cwd()), solver_spec)


def solver_preset(spec: str | dict) -> Preset:
    """`load_solver`, typed: a `FlowPreset` or a `DescentPreset`."""
    return from_dict(Preset, load_solver(spec))


def differences(old: dict, new: dict, prefix: str = "") -> list[str]:
    """`key: OLD -> NEW` for each dotted key whose resolved value differs (tables walked,
    a key present on one side only shown as absent on the other)."""
    out = []
    for k in list(old) + [k for k in new if k not in old]:
        key = sweep_key(k) if prefix == "sweep." else prefix + k
        a, b = old.get(k, ABSENT), new.get(k, ABSENT)
        if isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, key + ".")
        elif a != b:
            shown = ["(absent)" if v is ABSENT else toml_value(v) for v in (a, b)]
            out.append(f"`{key}`: {shown[0]} -> {shown[1]}")
    return out
