"""The reference of every scenario and solver-preset key, generated from the schema.

Type, allowed values and default come from the specs that validate the files, the one line
of meaning per key from the same settings (`flowsim.config.typed`). `tests/test_reference.py`
checks that every schema key has a meaning, that no meaning names a key the schema lacks,
and that docs/scenario-keys.md equals `markdown()` (regenerate it with
`python -m flowsim.config.scenario_keys > docs/scenario-keys.md`).
"""

from collections.abc import Iterator
from typing import NamedTuple

from .declare import meanings
from .schema import SCENARIO, SOLVER_INLINE
from .typed import SOLVER_KIND_MEANING, Config, Preset
from .spec import ABSENT, REQUIRED, Custom, OneOf, Spec, Table, Tagged, join, toml_value


#: One line of meaning per key, dotted as `--set` names it; solver-preset keys carry `solver.`.
MEANING = {**meanings(Config), "solver.kind": SOLVER_KIND_MEANING, **meanings(Preset, "solver")}


class Row(NamedTuple):
    key: str
    kinds: tuple[str, ...]      # the kinds of the enclosing table that take this key; () = all
    allowed: str
    default: str


def _default(spec: Spec) -> str:
    d = spec.default
    if d is REQUIRED:
        return "required"
    if d is ABSENT:
        return "absent"
    if callable(d):
        return "the file's stem"
    return toml_value(d)


def rows(spec: Spec, key: str = "") -> Iterator[Row]:
    """Every key below `spec`, depth first in schema order; a Tagged table's per-kind keys are
    merged where several kinds share one spec."""
    if isinstance(spec, Tagged):
        tag = spec.tag_spec()
        yield Row(join(key, spec.tag), (), tag.allowed(), _default(tag))
        for name, s in spec.common.items():
            yield from _leaf_or_table(s, join(key, name), ())
        shared: list[tuple[str, Spec, list[str]]] = []     # (specs hold dicts: no hashing)
        for kind, fields in spec.variants.items():
            for name, s in fields.items():
                same = next((kinds for n, t, kinds in shared if n == name and t == s), None)
                if same is None:
                    shared.append((name, s, [kind]))
                else:
                    same.append(kind)
        order = list(dict.fromkeys(name for name, _, _ in shared))   # a key's rows together
        for name, s, kinds in sorted(shared, key=lambda e: order.index(e[0])):
            yield from _leaf_or_table(s, join(key, name), tuple(kinds))
    elif isinstance(spec, Table):
        for name, s in spec.fields.items():
            yield from _leaf_or_table(s, join(key, name), ())


def _leaf_or_table(spec: Spec, key: str, kinds: tuple[str, ...]) -> Iterator[Row]:
    if isinstance(spec, (Table, Tagged)):
        yield from (r._replace(kinds=r.kinds or kinds) for r in rows(spec, key))
        return
    yield Row(key, kinds, spec.allowed(), _default(spec))
    tables = [o for o in spec.options if isinstance(o, Table)] if isinstance(spec, OneOf) else []
    for table in tables:     # `prune = true` or the table itself
        yield from (r._replace(kinds=r.kinds or kinds) for r in rows(table, key))
    if isinstance(spec, Custom) and key.endswith("checkpoints"):
        # one of three forms, each its own key set
        yield from (Row(join(key, k), (), s.allowed(), _default(s)) for k, s in spec.kids.items())


def scenario_rows() -> list[Row]:
    return list(rows(SCENARIO))


def solver_rows() -> list[Row]:
    return list(rows(SOLVER_INLINE))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table(title: str, intro: str, found: list[Row], prefix: str) -> list[str]:
    out = [f"## {title}", "", intro, "", "| key | for | allowed | default | meaning |", "|---|---|---|---|---|"]
    for i, r in enumerate(found):
        kinds = ", ".join(r.kinds) if r.kinds else "all"
        again = i > 0 and found[i - 1].key == r.key     # the same key for other kinds: said above
        out.append(f"| `{r.key}` | {kinds} | {_cell(r.allowed)} | `{_cell(r.default)}` | "
                   f"{'' if again else _cell(MEANING[prefix + r.key])} |")
    return out + [""]


def markdown() -> str:
    lines = ["# Scenario and solver-preset keys", "",
             "Generated from flowsim's schema by `python -m flowsim.config.scenario_keys`; "
             "`tests/test_reference.py` fails when this file and the schema disagree. "
             "`flowsim show SCENARIO` prints a scenario's resolved value of every key and where it "
             "came from. \"for\" names the `kind`s of the enclosing table that take the key.", ""]
    lines += _table("Scenario keys", "Dotted keys, as `--set` and `[sweep]` name them.",
                    scenario_rows(), "")
    lines += _table("Solver-preset keys", "A file in `solvers/` (the name is the file's stem; "
                    "`description` is required there), or an inline table in `run.solvers` (with "
                    "its own `name`). `--set` names one solver's key by its index in `run.solvers`, "
                    "as `flowsim show` prints it: `run.solvers[0].rtol`.", solver_rows(), "solver.")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
