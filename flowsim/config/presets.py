"""Solver presets loaded: by name (a file in solvers/, or `gd-lr<η>`, GD at any step) or as
an inline table, validated, with every default filled and the name first; the list of them
that `run.solvers` is, and the `reference` of a flow preset.

The preset classes (`flowsim.config.typed`) validate their `reference`, and the [run] table
its `solvers`, with the functions here: so the preset specs come in as `specs`
(`typed.solver_spec`: inline -> the spec of an inline table, else of a preset file), and
this module imports no class.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from .catalog import solvers_dir
from .files import display, read_toml
from .spec import Ctx, Tagged, did_you_mean, toml_string

Specs = Callable[[bool], Tagged]

_GD_STEP = re.compile(r"gd-lr(\d+(?:\.\d*)?(?:e-?\d+)?)")   # "gd-lr0.5": GD at that step, any step
_DIGITS = re.compile(r"\d+(?:\.\d*)?(?:e-?\d+)?")


def _positive_number(text: str) -> bool:
    return math.isfinite(float(text)) and float(text) > 0


def load_preset(value: Any, key: str, ctx: Ctx, specs: Specs) -> dict:
    """A preset by name (a file in solvers/) or inline, validated, with defaults and name."""
    if isinstance(value, str):
        names = sorted(p.name[: -len(".toml")] for p in solvers_dir().glob("*.toml"))
        step = _GD_STEP.fullmatch(value)
        if value not in names and step and _positive_number(step[1]):
            return load_preset({"name": value, "kind": "gd", "learning_rate": float(step[1]),
                                "description": f"Full-batch gradient descent, step {step[1]}"}, key, ctx, specs)
        if value not in names:
            guess = did_you_mean(value, names)
            if guess and (value.startswith("gd-lr") or _DIGITS.sub("#", guess) == _DIGITS.sub("#", value)):
                guess = None     # another step size or order is another solver, not a spelling
            raise ctx.bad(key, value, "is not a solver preset",
                          "one of " + ", ".join(toml_string(n) for n in names)
                          + " (files in solvers/), gd-lr<η> for any step η > 0 (e.g. \"gd-lr0.5\"), or an "
                          "inline table such as { name = \"gd-0.5\", kind = \"gd\", learning_rate = 0.5 }",
                          f"did you mean {toml_string(guess)}?" if guess else "")
        path = solvers_dir() / f"{value}.toml"
        shown = display(path)
        raw = read_toml(path, shown)
        preset = specs(False).check(raw, "", Ctx(file=shown, base_dir=path.parent))
        return {"name": value, **preset}
    if isinstance(value, dict):
        preset = specs(True).check(value, key, ctx)
        name = preset.pop("name")
        return {"name": name, **preset}
    raise ctx.wrong_type(key, value, "a solver preset name or an inline table with `name` "
                         "and `kind`")


def check_solvers(value: Any, key: str, ctx: Ctx, specs: Specs) -> list[dict]:
    """`run.solvers`: distinct presets, by name or inline."""
    allowed = "a non-empty list of distinct solver preset names or inline tables"
    if not isinstance(value, list):
        raise ctx.wrong_type(key, value, allowed)
    if not value:
        raise ctx.bad(key, value, "is empty", allowed)
    out: list[dict] = []
    for i, item in enumerate(value):
        preset = load_preset(item, f"{key}[{i}]", ctx, specs)
        if any(p["name"] == preset["name"] for p in out):
            raise ctx.bad(key, value, f"names solver {toml_string(preset['name'])} twice",
                          allowed + " (give an inline solver its own `name`)")
        out.append(preset)
    return out


def check_reference(value: Any, key: str, ctx: Ctx, specs: Specs) -> str | dict:
    """A flow preset's `reference`: "" (none), or a plain `flow` preset."""
    if value == "":
        return ""
    preset = load_preset(value, key, ctx, specs)
    if preset["kind"] != "flow" or preset["reference"]:
        raise ctx.bad(key, value, "is not a plain `flow` preset",
                      "the name or inline table of a `flow` preset without a reference of its own")
    return preset
