"""`--set KEY=VALUE` overrides: parsed, checked against the schema, assigned to a raw scenario.

Setting a ``kind`` by ``--set`` or by a [sweep] dotted key (``model.scaling.kind``) drops
the sibling keys that the new kind does not use, so ``--set model.scaling.kind=ntk`` works
on a scenario whose scaling was ``asymmetric`` with a ``gamma``.  Kind assignments are
applied before the other assignments, so a ``gamma`` set alongside is never dropped.
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .schema import SCENARIO
from .sweep_grammar import check_dotted, sweep_key
from .spec import Ctx, ScenarioError, Tagged, lookup, toml_string


def _parse_override(text: str) -> tuple[str, Any]:
    """`dotted.key=value`; the value is TOML when it parses as one value, else a string."""
    key, eq, raw = text.partition("=")
    key = key.strip()
    if not eq or not key:
        raise ScenarioError(f"--set: {toml_string(text)} is not KEY=VALUE; allowed: a dotted "
                            "key, `=`, and a TOML value, e.g. model.width=50",
                            file="--set", value=text, allowed="KEY=VALUE")
    try:
        doc = tomllib.loads(f"v = {raw}")
        value = doc["v"] if set(doc) == {"v"} else raw
    except ValueError:
        value = raw
    return key, value


def _override_parts(key: str, ctx: Ctx) -> list[str]:
    """The path an override key names; `sweep.<dotted key>` addresses one sweep list."""
    if key == "sweep" or not key.startswith("sweep."):
        return check_dotted(key, key, ctx, SCENARIO)
    rest = key[len("sweep."):].strip()
    if len(rest) >= 2 and rest[0] == rest[-1] == '"':
        rest = rest[1:-1]
    if not rest:
        raise ctx.error(f"unknown key `{key}`; allowed: sweep.mode or sweep.<dotted key>",
                        key=key, value=key, allowed="sweep.mode or sweep.<dotted key>")
    return ["sweep", rest]


def assign(tree: dict, parts: Sequence[str], value: Any) -> None:
    """Set a dotted key in a raw scenario, creating tables on the way.

    Changing a tagged table's `kind` drops the keys the new kind does not use (see the
    module docstring); a value that is not a known kind is left for validation to report.
    """
    for part in parts[:-1]:
        node = tree.get(part)
        if not isinstance(node, dict):
            node = tree[part] = {}
        tree = node
    last = parts[-1]
    parent = lookup(SCENARIO, list(parts[:-1])) if parts[0] != "sweep" else None
    if (isinstance(parent, Tagged) and last == parent.tag and isinstance(value, str)
            and value in parent.variants and tree.get(last) != value):
        keep = parent.keys_for(value)
        for k in [k for k in tree if k not in keep]:
            del tree[k]
    tree[last] = value


def kind_first(assignments: list[tuple[list[str], Any]]) -> list[tuple[list[str], Any]]:
    # Apply `kind` first so that its pruning never drops a sibling set alongside it.
    return sorted(assignments, key=lambda a: a[0][-1] != "kind")


def apply_overrides(raw: dict, overrides: Sequence[str], ctx: Ctx) -> tuple[dict, dict]:
    raw = copy.deepcopy(raw)
    origins: dict[str, str] = {}
    set_ctx = replace(ctx, file="--set")
    assignments = []
    for text in overrides:
        key, value = _parse_override(text)
        parts = _override_parts(key, set_ctx)
        assignments.append((parts, value))
        origins[sweep_key(parts[1]) if parts[0] == "sweep" and len(parts) == 2 else ".".join(parts)] = text
    for parts, value in kind_first(assignments):
        assign(raw, parts, value)
    return raw, origins
