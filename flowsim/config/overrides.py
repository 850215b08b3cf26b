"""`--set KEY=VALUE` overrides: parsed, checked against the schema, assigned to a raw scenario.

A KEY is any key `flowsim show` prints, in the form it prints it: a dotted key
(``model.width``), a key inside one solver of the list, by its index
(``run.solvers[0].rtol``, ``run.solvers[0].reference.atol``), a swept list
(``sweep."model.width"``, or ``sweep.model.width``) or a key inside one of its elements
(``sweep."model.scaling"[1].gamma``). A solver given by a preset's name (``"tsit5"``)
becomes, once a key inside it is set, the inline table that preset resolves to (its name
kept) with that key changed: so ``--set 'run.solvers[0].rtol=1e-6'`` changes one preset's
tolerance and nothing else.

Setting a ``kind`` by ``--set`` or by a [sweep] dotted key (``model.scaling.kind``) drops
the sibling keys that the new kind does not use, so ``--set model.scaling.kind=ntk`` works
on a scenario whose scaling was ``asymmetric`` with a ``gamma``.  Kind assignments are
applied before the other assignments, so a ``gamma`` set alongside is never dropped.
"""

from __future__ import annotations

import copy
import itertools
import re
import tomllib
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .presets import load_preset
from .schema import REFERENCE, SCENARIO, SOLVER_INLINE, SOLVERS
from .spec import ABSENT, Ctx, ScenarioError, Spec, Tagged, join, lookup, paths_to, toml_string
from .sweep_grammar import check_dotted, sweep_key
from .typed import solver_spec

Part = str | int      # a key's parts: the keys of tables, and indices into lists

_NAME = re.compile(r"\s*([A-Za-z0-9_-]+)((?:\[\d+\])*)\s*")      # `solvers[0]`
_SWEPT = re.compile(r'\s*"([^"]*)"((?:\[\d+\])*)\s*(?:\.(.*))?')    # `"model.scaling"[1].gamma`
_INDEX = re.compile(r"\[(\d+)\]")
_FORMS = ('a dotted key as `flowsim show` prints it: model.width, run.solvers[0].rtol, '
          'sweep."model.width" or sweep."model.scaling"[1].gamma')


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


def shown_key(parts: Sequence[Part]) -> str:
    """A key's parts as `flowsim show` prints the key: `run.solvers[0].rtol`,
    `sweep."model.scaling"[1].gamma`."""
    out = ""
    for depth, part in enumerate(parts):
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = sweep_key(part) if depth == 1 and parts[0] == "sweep" else join(out, part)
    return out


def _split(text: str) -> list[Part] | None:
    """`run.solvers[0].rtol` -> ["run", "solvers", 0, "rtol"]; None when not of that form."""
    parts: list[Part] = []
    for piece in text.split("."):
        m = _NAME.fullmatch(piece)
        if m is None:
            return None
        parts += [m[1], *map(int, _INDEX.findall(m[2]))]
    return parts


def _malformed(key: str, ctx: Ctx) -> ScenarioError:
    return ctx.error(f"unknown key `{key}`: not a key of the form `flowsim show` prints; allowed: {_FORMS}",
                     key=key, value=key, allowed=_FORMS)


def _override_parts(key: str, ctx: Ctx) -> list[Part]:
    """The path an override key names, checked against the schema."""
    if key == "sweep" or not key.startswith("sweep."):
        parts = _split(key)
        if parts is None:
            raise _malformed(key, ctx)
        names = list(itertools.takewhile(lambda p: isinstance(p, str), parts))
        if names == parts:
            _refuse_preset_key(names, key, ctx)
        check_dotted(".".join(names), key, ctx, SCENARIO)
    else:
        rest = key[len("sweep."):]
        m = _SWEPT.fullmatch(rest)
        swept, index, inner = (m[1], m[2], m[3]) if m else (rest.strip(), "", None)
        if not swept:
            raise ctx.error(f"unknown key `{key}`; allowed: sweep.mode or sweep.<dotted key>",
                            key=key, value=key, allowed="sweep.mode or sweep.<dotted key>")
        if not index and inner is None:
            return ["sweep", swept]      # the whole list: [sweep]'s own validation checks it
        tail = _split(inner) if inner is not None else []
        if not index or tail is None:
            raise _malformed(key, ctx)
        check_dotted(swept, sweep_key(swept), ctx, SCENARIO)
        parts = ["sweep", swept, *map(int, _INDEX.findall(index)), *tail]
    _specs(parts, key, ctx)
    return parts


def _refuse_preset_key(names: list[str], key: str, ctx: Ctx) -> None:
    """A solver preset's key named without its solver (`rtol`, `run.solvers.rtol`): say how
    to name one solver's."""
    last = names[-1]
    if (["run", "solvers"][: len(names) - 1] == names[:-1] and last in SOLVER_INLINE.children()
            and lookup(SCENARIO, names) is None and not paths_to(SCENARIO, last)):
        example = f"run.solvers[0].{last}"
        raise ctx.error(f"unknown key `{key}`: `{last}` is a key of each solver preset; allowed: "
                        f"run.solvers[i].{last}, for the i-th solver of `run.solvers` (from 0, as `flowsim show` "
                        f"lists them), e.g. --set '{example}=...'", key=key, value=key, allowed=example)


def _table(spec: Spec | None) -> Spec | None:
    """The table a spec stands for when keys inside its value are named (a `reference`: a preset's)."""
    return SOLVER_INLINE if spec is REFERENCE else spec


def _specs(parts: Sequence[Part], key: str, ctx: Ctx | None) -> list[Spec | None]:
    """The spec of the value at each depth of `parts` (None for a swept list itself, whose
    elements are values of the swept key)."""
    out: list[Spec | None] = []
    spec: Spec | None = SCENARIO
    for depth, part in enumerate(parts):
        if depth == 1 and parts[0] == "sweep":
            spec = None
        elif isinstance(part, int):
            if spec is None:
                spec = lookup(SCENARIO, str(parts[1]).split("."))
            elif spec is SOLVERS:
                spec = SOLVER_INLINE
            else:
                where = shown_key(parts[:depth])
                raise ctx.error(f"unknown key `{key}`: `{where}` is not a list of tables; allowed: its whole "
                                f"value, e.g. --set '{where}=...'", key=key, value=key, allowed=f"{where}=...")
        else:
            kids = _table(spec).children()
            if part not in kids:
                where = shown_key(parts[:depth])
                raise ctx.unknown(key, part, kids, f"[{where}]")
            spec = kids[part]
        out.append(spec)
    return out


def _step(node: Any, parts: Sequence[Part], depth: int, specs: list, ctx: Ctx | None) -> Any:
    """The value at `parts[depth]` inside `node`, made a container the next part can enter:
    a missing table is created, a missing list is its default, a preset's name becomes the
    table it resolves to."""
    part, spec, where = parts[depth], specs[depth], shown_key(parts[: depth + 1])
    if isinstance(part, int):
        if part >= len(node):
            raise ctx.bad(shown_key(parts[:depth]), node, f"has {len(node)} items",
                          f"an index in [0, {len(node) - 1}]")
        child = node[part]
    else:
        child = node.get(part, ABSENT)
    if isinstance(parts[depth + 1], int):
        if child is ABSENT and spec is SOLVERS:
            child = copy.deepcopy(SOLVERS.default)
        if not isinstance(child, list):
            raise ctx.bad(where, "(absent)" if child is ABSENT else child, "is not a list to index",
                          f"set the whole list first: --set '{where}=[...]'")
    elif spec in (SOLVER_INLINE, REFERENCE) and isinstance(child, str):
        if child == "":
            raise ctx.bad(where, child, "is no preset", f"a preset first: --set '{where}=\"NAME\"'")
        child = load_preset(child, where, ctx, solver_spec)
    elif not isinstance(child, dict):
        child = {}
    node[part] = child
    return child


def assign(tree: dict, parts: Sequence[Part], value: Any, ctx: Ctx | None = None) -> None:
    """Set a key (checked by `_override_parts`) in a raw scenario, creating tables on the way.

    Changing a tagged table's `kind` drops the keys the new kind does not use (see the
    module docstring); a value that is not a known kind is left for validation to report.
    """
    specs = _specs(parts, shown_key(parts), ctx)
    for depth in range(len(parts) - 1):
        tree = _step(tree, parts, depth, specs, ctx)
    last = parts[-1]
    parent = _table(specs[-2]) if len(parts) > 1 else SCENARIO
    if (isinstance(parent, Tagged) and last == parent.tag and isinstance(value, str)
            and value in parent.variants and tree.get(last) != value):
        keep = parent.keys_for(value)
        for k in [k for k in tree if k not in keep]:
            del tree[k]
    tree[last] = value


def kind_first(assignments: list[tuple[list[Part], Any]]) -> list[tuple[list[Part], Any]]:
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
        origins[shown_key(parts)] = text
    for parts, value in kind_first(assignments):
        assign(raw, parts, value, set_ctx)
    return raw, origins
