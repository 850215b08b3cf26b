"""Declarative validation of TOML-shaped data: spec objects and the error they raise.

This module knows nothing about flowsim's scenarios; `flowsim.config.schema` builds its
schema from the spec classes here.  Every spec has one job: take a raw TOML value, return its
normalised form (defaults filled, ints widened to floats, paths made absolute), or raise a
`ScenarioError` whose message names the file, the dotted key, the offending value and
what is allowed.  Pure Python: no numpy, no jax.
"""

from __future__ import annotations

import copy
import datetime as _dt
import difflib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..toml_text import is_int as is_int
from ..toml_text import is_number as is_number
from ..toml_text import toml_key as toml_key
from ..toml_text import toml_string as toml_string
from ..toml_text import toml_value as toml_value


class ScenarioError(ValueError):
    """A bad scenario or solver file, reported before any computation.

    The message is complete on its own (file, dotted key, value, what is allowed); the
    attributes let callers (the CLI, tests) pick the parts apart.
    """

    def __init__(self, message: str, *, file: str, key: str | None = None,
                 value: Any = None, allowed: str = ""):
        super().__init__(message)
        self.file = file
        self.key = key
        self.value = value
        self.allowed = allowed


class _Marker:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: The key must be given.
REQUIRED = _Marker("REQUIRED")
#: The key is optional and, when left out, stays out of the resolved form.
ABSENT = _Marker("ABSENT")


# --------------------------------------------------------------------------------------
# Rendering values the way the user wrote them (TOML inline syntax)
# --------------------------------------------------------------------------------------

def show(v: Any, limit: int = 160) -> str:
    """`toml_value`, shortened for an error message."""
    text = toml_value(v)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def type_name(v: Any) -> str:
    """The TOML name of a value's type, for 'has the wrong type (string)'."""
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "string"
    if isinstance(v, Mapping):
        return "table"
    if isinstance(v, (list, tuple)):
        return "array"
    if isinstance(v, (_dt.datetime, _dt.date, _dt.time)):
        return "date/time"
    return type(v).__name__


def num(x: float) -> str:
    """A bound in an 'allowed' text: 0 rather than 0.0, 1e-09 as written."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(x)


def did_you_mean(word: str, choices) -> str | None:
    """The closest allowed spelling of a misspelt key or value, if any is close."""
    found = difflib.get_close_matches(word, [str(c) for c in choices], n=1, cutoff=0.6)
    return found[0] if found else None


def guess_text(keys: Sequence[str], most: int = 4) -> str:
    """`a`, `a` or `b`, `a`, `b` or `c` (the first `most`)."""
    shown = [f"`{k}`" for k in keys[:most]]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]


def paths_to(spec: Spec, name: str, prefix: str = "") -> list[str]:
    """The dotted keys below `spec` whose last part is `name`: where a key given in the
    wrong table (a top-level `width`) belongs."""
    out = []
    for k, kid in spec.children().items():
        key = join(prefix, k)
        out += [key] if k == name else []
        out += paths_to(kid, name, key)
    return out


# --------------------------------------------------------------------------------------
# Where a value is being checked, and how failures are worded
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ctx:
    """The location of a check: which file, which sweep point, where relative paths start.

    `origins` maps dotted keys set by `--set` to their option text, so that an error in
    an overridden value names `--set` rather than the scenario file.
    """

    file: str
    base_dir: Path
    where: str = ""
    stem: str = "scenario"
    origins: Mapping[str, str] = field(default_factory=dict)

    def _file_for(self, key: str | None) -> str:
        if key:
            for k in self.origins:
                if key == k or key.startswith(k + ".") or key.startswith(k + "["):
                    return "--set"
        return self.file

    def error(self, body: str, *, key: str | None, value: Any = None,
              allowed: str = "") -> ScenarioError:
        file = self._file_for(key)
        return ScenarioError(f"{file}: {self.where}{body}", file=file, key=key,
                             value=value, allowed=allowed)

    def bad(self, key: str, value: Any, problem: str, allowed: str, hint: str = "") -> ScenarioError:
        """`key \\`k\\` = v <problem>[; hint]; allowed: <allowed>`."""
        hint = f" ({hint})" if hint else ""
        return self.error(f"key `{key}` = {show(value)} {problem}{hint}; allowed: {allowed}",
                          key=key, value=value, allowed=allowed)

    def wrong_type(self, key: str, value: Any, allowed: str) -> ScenarioError:
        return self.bad(key, value, f"has the wrong type ({type_name(value)})", allowed)

    def missing(self, key: str, allowed: str) -> ScenarioError:
        return self.error(f"missing required key `{key}`; allowed: {allowed}",
                          key=key, allowed=allowed)

    def unknown(self, key: str, name: str, allowed_names, table: str,
                note: str = "", deeper: Sequence[str] = ()) -> ScenarioError:
        """`deeper`: the full keys of that name in other tables, suggested when no key of
        this table is spelt close to it (`width` -> `model.width`)."""
        names = sorted(allowed_names)
        guess = did_you_mean(name, names)
        mean = f"; did you mean {guess_text([guess] if guess else deeper)}?" if guess or deeper else ";"
        note = f" ({note})" if note else ""
        allowed = ", ".join(names)
        return self.error(f"unknown key `{key}`{note}{mean} allowed keys in {table}: {allowed}",
                          key=key, allowed=allowed)


def join(key: str, name: str) -> str:
    """Dotted key of a child; the top level has the empty key."""
    return f"{key}.{name}" if key else name


# --------------------------------------------------------------------------------------
# Spec objects
# --------------------------------------------------------------------------------------


class Spec:
    """A validator for one value.  `default` is REQUIRED, ABSENT, a value or a callable(ctx)."""

    default: Any = REQUIRED

    def check(self, value: Any, key: str, ctx: Ctx) -> Any:
        """`value` normalised; a value of a type the spec does not accept has the wrong type."""
        if not self.accepts_type(value):
            raise ctx.wrong_type(key, value, self.allowed())
        return self.checked(value, key, ctx)

    def checked(self, value: Any, key: str, ctx: Ctx) -> Any:
        """`value`, of a type the spec accepts, normalised (or a `ScenarioError`)."""
        return value

    def allowed(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def accepts_type(self, value: Any) -> bool:
        """Whether `value` has a type this spec validates (used by OneOf to pick a branch)."""
        return True

    def children(self) -> Mapping[str, Spec]:
        """The sub-keys this spec knows, for checking dotted keys of `--set` and [sweep]."""
        return {}


def _range_text(noun: str, lo, hi, lo_open: bool, hi_open: bool) -> str:
    if lo is not None and hi is not None:
        return f"{noun} in {'(' if lo_open else '['}{num(lo)}, {num(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{noun} {'>' if lo_open else '>='} {num(lo)}"
    if hi is not None:
        return f"{noun} {'<' if hi_open else '<='} {num(hi)}"
    return noun


def _in_range(x, lo, hi, lo_open, hi_open) -> bool:
    if lo is not None and (x < lo or (lo_open and x == lo)):
        return False
    if hi is not None and (x > hi or (hi_open and x == hi)):
        return False
    return True


@dataclass(frozen=True)
class Int(Spec):
    """An integer (not a bool, not a float) in a closed range."""

    lo: int | None = None
    hi: int | None = None
    default: Any = REQUIRED

    def allowed(self) -> str:
        return _range_text("an integer", self.lo, self.hi, False, False)

    def accepts_type(self, value):
        return is_int(value)

    def checked(self, value, key, ctx):
        if not _in_range(value, self.lo, self.hi, False, False):
            raise ctx.bad(key, value, "is out of range", self.allowed())
        return int(value)


@dataclass(frozen=True)
class Float(Spec):
    """A finite number; integers are accepted and widened to float."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    default: Any = REQUIRED

    def allowed(self) -> str:
        noun = "a finite number" if self.lo is None and self.hi is None else "a number"
        return _range_text(noun, self.lo, self.hi, self.lo_open, self.hi_open)

    def accepts_type(self, value):
        return is_number(value)

    def checked(self, value, key, ctx):
        try:
            x = float(value)
        except OverflowError:  # a TOML integer beyond the float range
            raise ctx.bad(key, value, "is too large", self.allowed()) from None
        if not math.isfinite(x):
            raise ctx.bad(key, value, "is not a finite number", self.allowed())
        if not _in_range(x, self.lo, self.hi, self.lo_open, self.hi_open):
            raise ctx.bad(key, value, "is out of range", self.allowed())
        return x


@dataclass(frozen=True)
class Str(Spec):
    """A string, optionally one of a fixed list (checked with a did-you-mean)."""

    choices: tuple[str, ...] | None = None
    nonempty: bool = False
    default: Any = REQUIRED

    def allowed(self) -> str:
        if self.choices is not None:
            return "one of " + ", ".join(toml_string(c) for c in self.choices)
        return "a non-empty string" if self.nonempty else "a string"

    def accepts_type(self, value):
        return isinstance(value, str)

    def checked(self, value, key, ctx):
        if self.nonempty and not value.strip():
            raise ctx.bad(key, value, "is empty", self.allowed())
        if self.choices is not None and value not in self.choices:
            guess = did_you_mean(value, self.choices)
            hint = f"did you mean {toml_string(guess)}?" if guess else ""
            raise ctx.bad(key, value, "is not an allowed value", self.allowed(), hint)
        return value


@dataclass(frozen=True)
class Bool(Spec):
    default: Any = REQUIRED

    def allowed(self) -> str:
        return "true or false"

    def accepts_type(self, value):
        return isinstance(value, bool)


def resolve_path(text: str, base_dir: Path) -> Path | None:
    """`text` made absolute against `base_dir`; None when the OS cannot even name it."""
    try:
        p = Path(text).expanduser()
        if not p.is_absolute():
            p = base_dir / p
        return p.resolve()
    except (OSError, ValueError, RuntimeError):  # NUL bytes, unknown ~user, loops
        return None


def is_file(p: Path | None) -> bool:
    try:
        return p is not None and p.is_file()
    except (OSError, ValueError):  # e.g. a name too long for the file system
        return False


def file_beside(text: str, p: Path | None) -> str | None:
    """A missing file's likely meaning: the file of its folder whose name is spelt closest to
    its own (`widht.toml` -> `width.toml`), written as `text` wrote the path; None if none is close."""
    try:
        names = [q.name for q in p.parent.iterdir() if q.is_file()] if p is not None else []
    except OSError:      # no such folder, or not readable: nothing to offer
        return None
    guess = did_you_mean(p.name, names) if names else None
    return None if guess is None else str(Path(text).with_name(guess))


@dataclass(frozen=True)
class FilePath(Spec):
    """A path to an existing file, relative to the scenario's folder; returned absolute.

    With `empty_ok`, the empty string means 'no file' and is kept as "".
    """

    empty_ok: bool = False
    default: Any = REQUIRED

    def allowed(self) -> str:
        base = "a path to an existing file (relative paths start at the scenario's folder)"
        return base + (', or "" for none' if self.empty_ok else "")

    def accepts_type(self, value):
        return isinstance(value, str)

    def checked(self, value, key, ctx):
        if value == "" and self.empty_ok:
            return ""
        p = resolve_path(value, ctx.base_dir)
        if not is_file(p):
            where = p if p is not None else value
            guess = file_beside(value, p)
            raise ctx.bad(key, value, f"is not an existing file (looked for {where})",
                          self.allowed(), f"did you mean {toml_string(guess)}?" if guess else "")
        return str(p)


@dataclass(frozen=True)
class ListOf(Spec):
    item: Spec = None  # type: ignore[assignment]
    nonempty: bool = False
    distinct: bool = False
    max_len: int | None = None
    default: Any = REQUIRED

    def allowed(self) -> str:
        words = ["a"]
        if self.nonempty:
            words.append("non-empty")
        words.append("list")
        if self.distinct:
            words.append("of distinct items, each")
        else:
            words.append("of")
        return " ".join(words) + " " + self.item.allowed()

    def accepts_type(self, value):
        return isinstance(value, list)

    def checked(self, value, key, ctx):
        if self.nonempty and not value:
            raise ctx.bad(key, value, "is empty", self.allowed())
        if self.max_len is not None and len(value) > self.max_len:
            raise ctx.bad(key, value, f"has {len(value)} items, too many",
                          f"{self.allowed()}, at most {self.max_len} items")
        out = []
        for i, v in enumerate(value):
            x = self.item.check(v, f"{key}[{i}]", ctx)
            if self.distinct and x in out:
                raise ctx.bad(key, value, f"lists {show(v)} twice", self.allowed())
            out.append(x)
        return out


@dataclass(frozen=True)
class OneOf(Spec):
    """One of several specs, chosen by the value's type (so errors come from the right one)."""

    options: tuple[Spec, ...] = ()
    default: Any = REQUIRED

    def allowed(self) -> str:
        return " or ".join(o.allowed() for o in self.options)

    def accepts_type(self, value):
        return any(o.accepts_type(value) for o in self.options)

    def children(self):
        out: dict[str, Spec] = {}
        for o in self.options:
            out.update(o.children())
        return out

    def checked(self, value, key, ctx):
        option = next(o for o in self.options if o.accepts_type(value))
        try:
            return option.check(value, key, ctx)
        except ScenarioError as e:
            raise _widen(e, key, self.allowed()) from None


def _widen(e: ScenarioError, key: str, allowed: str) -> ScenarioError:
    """An error about the value itself (not an item inside it) lists every option's form."""
    msg = str(e)
    tail = f"; allowed: {e.allowed}"
    if e.key != key or not msg.endswith(tail):
        return e
    return ScenarioError(msg[: -len(tail)] + f"; allowed: {allowed}", file=e.file, key=e.key,
                         value=e.value, allowed=allowed)


Rule = Callable[[dict, str, Ctx], None]


def _default_value(spec: Spec, ctx: Ctx) -> Any:
    d = spec.default
    return d(ctx) if callable(d) and not isinstance(d, _Marker) else copy.deepcopy(d)


def _table_name(key: str) -> str:
    return f"[{key}]" if key else "the top level"


@dataclass(frozen=True)
class Table(Spec):
    """A table with a fixed set of keys, each with its own spec; `rules` see the result.

    Keys come out in schema order, so resolved forms read the same every time.
    """

    fields: Mapping[str, Spec] = field(default_factory=dict)
    rules: tuple[Rule, ...] = ()
    default: Any = field(default_factory=dict)
    what: str = "a table"

    def allowed(self) -> str:
        return self.what

    def accepts_type(self, value):
        return isinstance(value, Mapping)

    def children(self):
        return self.fields

    def checked(self, value, key, ctx, *, context: str = "", elsewhere=frozenset()):
        """`context` qualifies the key list ('for kind = "uci"'); `elsewhere` are keys
        valid for another kind, reported as such rather than as misspellings."""
        for name in value:
            if name not in self.fields:
                table = _table_name(key) + context
                note = "it belongs to another kind" if name in elsewhere else ""
                deeper = [join(key, p) for p in paths_to(self, name)]
                raise ctx.unknown(join(key, name), name, self.fields, table, note, deeper)
        out = {}
        for name, spec in self.fields.items():
            k = join(key, name)
            if name in value:
                out[name] = spec.check(value[name], k, ctx)
            elif spec.default is REQUIRED:
                raise ctx.missing(k, spec.allowed())
            elif spec.default is not ABSENT:
                out[name] = spec.check(_default_value(spec, ctx), k, ctx)
        for rule in self.rules:
            rule(out, key, ctx)
        return out


@dataclass(frozen=True)
class Tagged(Spec):
    """A table whose allowed keys depend on a tag (`kind`): common keys plus per-kind keys."""

    variants: Mapping[str, Mapping[str, Spec]] = field(default_factory=dict)
    common: Mapping[str, Spec] = field(default_factory=dict)
    tag: str = "kind"
    tag_default: Any = REQUIRED
    rules: Mapping[str, tuple[Rule, ...]] = field(default_factory=dict)
    default: Any = field(default_factory=dict)

    def tag_spec(self) -> Str:
        return Str(choices=tuple(self.variants), default=self.tag_default)

    def allowed(self) -> str:
        return f"a table with `{self.tag}` = " + self.tag_spec().allowed().removeprefix("one of ")

    def accepts_type(self, value):
        return isinstance(value, Mapping)

    def keys_for(self, kind: str) -> set[str]:
        return {self.tag, *self.common, *self.variants[kind]}

    def children(self):
        out: dict[str, Spec] = {self.tag: self.tag_spec(), **self.common}
        for fields in self.variants.values():
            out.update(fields)
        return out

    def checked(self, value, key, ctx):
        spec = self.tag_spec()
        if self.tag in value:
            kind = spec.check(value[self.tag], join(key, self.tag), ctx)
        elif self.tag_default is REQUIRED:
            raise ctx.missing(join(key, self.tag), spec.allowed())
        else:
            kind = self.tag_default
        fields = {self.tag: spec, **self.common, **self.variants[kind]}
        table = Table(fields=fields, rules=self.rules.get(kind, ()))
        elsewhere = set(self.children()) - set(fields)
        return table.checked({self.tag: kind, **value}, key, ctx,
                           context=f" for {self.tag} = {toml_string(kind)}", elsewhere=elsewhere)


@dataclass(frozen=True)
class Custom(Spec):
    """A spec given by a function, for the few shapes the classes above do not cover."""

    fn: Callable[[Any, str, Ctx], Any] = None  # type: ignore[assignment]
    text: str = ""
    kids: Mapping[str, Spec] = field(default_factory=dict)
    types: tuple[type, ...] = (object,)
    default: Any = REQUIRED

    def allowed(self) -> str:
        return self.text

    def accepts_type(self, value):
        return isinstance(value, self.types)

    def children(self):
        return self.kids

    def check(self, value, key, ctx):    # `fn` words its own wrong-type message
        return self.fn(value, key, ctx)


def lookup(spec: Spec, parts: list[str]) -> Spec | None:
    """The spec a dotted key names inside `spec`, or None when the schema has no such key."""
    for part in parts:
        kids = spec.children()
        if part not in kids:
            return None
        spec = kids[part]
    return spec
