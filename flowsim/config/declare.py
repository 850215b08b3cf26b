"""How a configuration table is declared once: a frozen class whose fields are `setting`s.

A setting carries the field's validator (a `flowsim.config.spec` spec: allowed values,
TOML default, the message contract) and its one line of meaning; the field's Python type
is its annotation (`Literal` for an enumeration), which is the validator too where it says
all one would (`bool`, a `Literal` of strings ...). From the classes come

- the TOML schema (`table_spec`, `tagged_spec`: the spec trees `flowsim.config.schema` names),
- the typed defaults (`FlowPreset(method="tsit5", rtol=1e-8)` is a complete preset),
- the generated key reference (`meanings`), `flowsim show` and the archive's JSON (`to_dict`).

`from_dict` / `to_dict` convert between a resolved (validated) dict and the typed object,
exactly, key order included: the archive stores `to_dict` as JSON and ``--resume`` compares
it. Pure Python: no numpy, no JAX.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, dataclass
from typing import Any, Literal, Union

from .spec import ABSENT, REQUIRED, Bool, FilePath, Float, Int, Spec, Str, Table, Tagged, join

_SPEC, _MEANING, _KINDS, _NONE = "spec", "meaning", "kinds", "none"


def setting(spec: Any, meaning: str = "", *, kinds: tuple[str, ...] = (), none: str | None = None,
            default: Any = MISSING) -> Any:
    """A field of a configuration table: validated by `spec`, documented by `meaning`.

    Where the annotation says all a validator would (`bool`, `int`, `float`, `str`, a `Literal`
    of strings), `spec` is the TOML default alone (REQUIRED: none) and the validator is the
    annotation's: `output: Literal["fixed", "trained"] = setting("fixed", "...")`.
    Its Python default is the spec's default, typed (lists become tuples, tables objects;
    ABSENT is None), unless `default` says otherwise (REQUIRED: none, for a TOML default
    only the validator can resolve, such as a preset's name). `kinds`: the only kinds of the class
    that take the key (None for the others, the spec's default for them). `none`: the TOML
    value that stands for None (the empty string of an unset `reference`)."""
    metadata = {_SPEC: spec, _MEANING: meaning}
    if kinds:
        metadata[_KINDS] = kinds
    if none is not None:
        metadata[_NONE] = none
    return dataclasses.field(default=default, metadata=metadata)


def _annotated(hint: Any, default: Any) -> Spec:
    """The validator an annotation states in full: a `Literal` of strings, `bool`, `int`, `float`, `str`."""
    if typing.get_origin(hint) is Literal:
        return Str(choices=typing.get_args(hint), default=default)
    plain = {bool: Bool, int: Int, float: Float, str: Str}
    if hint not in plain:
        raise TypeError(f"a setting annotated `{hint}` needs its spec: the annotation does not say how to validate it")
    return plain[hint](default=default)


def _typed_default(spec: Spec, hint: Any, f: dataclasses.Field) -> Any:
    d = spec.default
    if _KINDS in f.metadata or d is ABSENT or (_NONE in f.metadata and d == f.metadata[_NONE]):
        return None
    if d is REQUIRED or callable(d):
        return MISSING
    if isinstance(spec, Tagged) and isinstance(d, Mapping) and spec.tag_default is not REQUIRED:
        d = {spec.tag: spec.tag_default, **d}
    try:
        return from_dict(hint, d)
    except (TypeError, ValueError):    # a shorthand (`prune = false`) a rule expands: required
        return MISSING


def table(cls: type) -> type:
    """Make `cls` a frozen, keyword-only dataclass whose settings default to their spec's
    default, and whose kind-specific settings (`setting(kinds=...)`) default to it for the
    kinds that take them."""
    hints = typing.get_type_hints(cls, localns={cls.__name__: cls})
    for name in cls.__dict__.get("__annotations__", {}):
        f = cls.__dict__.get(name)
        if isinstance(f, dataclasses.Field) and _SPEC in f.metadata and not isinstance(f.metadata[_SPEC], Spec):
            spec = _annotated(hints[name], f.metadata[_SPEC])    # (a field's metadata is read-only)
            setattr(cls, name, f := dataclasses.field(default=f.default, metadata={**f.metadata, _SPEC: spec}))
        if isinstance(f, dataclasses.Field) and _SPEC in f.metadata and f.default is MISSING:
            f.default = _typed_default(f.metadata[_SPEC], hints[name], f)
        elif isinstance(f, dataclasses.Field) and f.default is REQUIRED:
            f.default = MISSING
    cls = dataclass(frozen=True, kw_only=True)(cls)
    kind_specific = [f for f in dataclasses.fields(cls) if _KINDS in f.metadata]
    if kind_specific:
        check = getattr(cls, "__post_init__", None)

        def __post_init__(self):
            for f in kind_specific:
                d = f.metadata[_SPEC].default
                if getattr(self, f.name) is None and self.kind in f.metadata[_KINDS] and d is not REQUIRED:
                    object.__setattr__(self, f.name, d)
            if check is not None:
                check(self)

        cls.__post_init__ = __post_init__
    return cls


def settings(cls: type) -> list[dataclasses.Field]:
    """The fields of `cls` that are settings (the others are filled by Python, not files)."""
    return [f for f in dataclasses.fields(cls) if _SPEC in f.metadata]


def spec_of(cls: type, name: str) -> Spec:
    return cls.__dataclass_fields__[name].metadata[_SPEC]


def table_spec(cls: type, *, default: Any = None, what: str = "a table") -> Table:
    """The TOML table `cls` declares; its rules are `cls.RULES`."""
    return Table(fields={f.name: f.metadata[_SPEC] for f in settings(cls)}, rules=getattr(cls, "RULES", ()),
                 default={} if default is None else default, what=what)


def kinds_of(cls: type) -> tuple[str, ...]:
    """The `kind` values a tagged class stands for."""
    return getattr(cls, "KINDS", None) or typing.get_args(typing.get_type_hints(cls)["kind"])


def tagged_spec(union: Any, *, common: tuple[str, ...] = (), tag_default: Any = REQUIRED, default: Any = None,
                replace: Mapping[str, Spec] | None = None, exclude: tuple[str, ...] = ()) -> Tagged:
    """The TOML table with a `kind` that the classes of `union` declare, one class per kind
    (or per several kinds: `KINDS`), in their order, but those no file names (`IN_FILES`);
    `common` are the keys every kind takes, listed first. `replace` swaps the specs of some
    keys (a preset file's `description` is required), `exclude` leaves some out (a preset
    file's `name` is its stem)."""
    classes = [c for c in _classes(union) if getattr(c, "IN_FILES", True)]
    replace = dict(replace or {})
    first = {f.name: f for f in settings(classes[0])}
    common_specs = {n: replace.get(n, first[n].metadata[_SPEC]) for n in common}
    variants, rules = {}, {}
    for cls in classes:
        for kind in kinds_of(cls):
            variants[kind] = {f.name: replace.get(f.name, f.metadata[_SPEC]) for f in settings(cls)
                              if f.name not in (*common, *exclude) and kind in f.metadata.get(_KINDS, (kind,))}
            if getattr(cls, "RULES", ()):
                rules[kind] = cls.RULES
    return Tagged(variants=variants, common=common_specs, tag_default=tag_default, rules=rules,
                  default={} if default is None else default)


def meanings(hint: Any, prefix: str = "") -> dict[str, str]:
    """The meaning of every setting below `hint` (a class or a union of them), by dotted key;
    a table of kinds gives its meaning to its `kind`."""
    out: dict[str, str] = {}
    for cls in _classes(hint):
        hints = typing.get_type_hints(cls)
        for f in settings(cls):
            key, spec = join(prefix, f.name), f.metadata[_SPEC]
            if isinstance(spec, Tagged):
                out.setdefault(join(key, spec.tag), f.metadata[_MEANING])
            elif f.metadata[_MEANING]:      # (a table has no line of its own: its keys do)
                out.setdefault(key, f.metadata[_MEANING])
            if spec.children():
                for k, v in meanings(hints[f.name], key).items():
                    out.setdefault(k, v)
    return out


def _classes(hint: Any) -> list[type]:
    if dataclasses.is_dataclass(hint):
        return [hint]
    return [c for a in typing.get_args(hint) for c in _classes(a)]


# --------------------------------------------------------------------------------------
# Resolved dict <-> typed
# --------------------------------------------------------------------------------------


class Frozen(Mapping):
    """An immutable, hashable table: how a [sweep] keeps the values it lists (any TOML)."""

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, Any] = ()):
        self._items = dict(items)

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(tuple(self._items.items()))

    def __repr__(self) -> str:
        return f"Frozen({self._items!r})"


def freeze(v: Any) -> Any:
    if isinstance(v, Mapping):
        return Frozen({k: freeze(x) for k, x in v.items()})
    if isinstance(v, list):
        return tuple(freeze(x) for x in v)
    return v


@functools.cache
def _fields(cls: type) -> tuple[tuple[dataclasses.Field, Any], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f, hints[f.name]) for f in dataclasses.fields(cls))


def _union(hint: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(hint) in (Union, types.UnionType):
        return typing.get_args(hint)
    return None


def table_class(union: Any, value: Mapping) -> type:
    """The class of `union` (e.g. `Data`) that a resolved table stands for: chosen by its
    `kind`, or (checkpoints) by the keys it has."""
    classes = [o for o in typing.get_args(union) if dataclasses.is_dataclass(o)] or [union]
    if len(classes) == 1:
        return classes[0]
    if "kind" in value:
        found = [c for c in classes if value["kind"] in kinds_of(c)]
    else:
        found = [c for c in classes if set(value) == {f.name for f, _ in _fields(c)}]
    if len(found) != 1:
        names = ", ".join(c.__name__ for c in classes)
        raise ValueError(f"{dict(value)!r} is not a resolved table of one of {names}")
    return found[0]


def from_dict(hint: Any, value: Any) -> Any:
    """The typed form of a resolved value; `hint` is a class or a union of them.

    `from_dict(Config, json.loads(archive_params))`, `from_dict(Preset, load_solver("tsit5"))`.
    """
    options = _union(hint)
    if options is not None:
        if isinstance(value, Mapping):
            return from_dict(table_class(hint, value), value)
        if isinstance(value, list):
            return from_dict(next(o for o in options if typing.get_origin(o) is tuple), value)
        return value
    if typing.get_origin(hint) is tuple:
        item = typing.get_args(hint)[0]
        return tuple(from_dict(item, v) for v in value)
    if hasattr(hint, "from_resolved"):
        return hint.from_resolved(value)
    if dataclasses.is_dataclass(hint):
        fields = _fields(hint)
        unknown = set(value) - {f.name for f, _ in fields}
        if unknown:
            raise ValueError(f"{hint.__name__} has no field {', '.join(sorted(unknown))}")
        kwargs = {}
        for f, h in fields:
            if f.name not in value:
                continue
            v = value[f.name]
            kwargs[f.name] = None if _NONE in f.metadata and v == f.metadata[_NONE] else from_dict(h, v)
        return hint(**kwargs)
    return value


def to_dict(obj: Any) -> Any:
    """The resolved form of a typed value: dicts and lists, exactly as validation gives it."""
    if hasattr(obj, "to_resolved"):
        return obj.to_resolved()
    if dataclasses.is_dataclass(obj):
        out = {}
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if v is not None:
                out[f.name] = to_dict(v)
            elif _NONE in f.metadata:
                out[f.name] = f.metadata[_NONE]
        return out
    if isinstance(obj, Mapping):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return [to_dict(v) for v in obj]
    return obj


# Settings several tables declare alike.

def alike(spec: Callable[..., Any], meaning: str) -> Callable[..., Any]:
    """A setting several tables declare, each with its own default (or bound): `alike(spec,
    meaning)(*args)` is `setting(spec(*args), meaning)`, its meaning written once."""
    return lambda *args, **kwargs: setting(spec(*args, **kwargs), meaning)


def positive(default: Any = REQUIRED) -> Float:
    return Float(lo=0.0, lo_open=True, default=default)


def fraction(default: float) -> Float:
    return Float(lo=0.0, hi=1.0, default=default)


def file_setting(meaning: str = "the file (csv: one header row, numeric columns; npz: X_train, y_train, optional "
                                "X_test, y_test and an integer `classes`)") -> Any:
    return setting(FilePath(), meaning)
