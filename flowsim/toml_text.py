"""Scenario values as inline TOML text, what counts as a number, and values at dotted keys:
what labels, messages, sweep coordinates and CSV columns print. Free of JAX (the archive
package uses it)."""

import datetime as _dt
import math
import re
from collections.abc import Mapping
from typing import Any

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_key(key: str) -> str:
    """A TOML key, quoted only when it is not a bare key."""
    return key if _BARE_KEY.match(key) else toml_string(key)


def toml_string(s: str) -> str:
    """A TOML basic string; control characters are escaped so the result always parses."""
    out = ['"']
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def toml_value(v: Any) -> str:
    """Render a TOML value inline: `{kind="asymmetric", gamma=2.0}`, `[1, 2]`, `nan`.

    Used for error messages, sweep labels and for writing a resolved scenario back out.
    """
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{toml_key(str(k))}={toml_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, (_dt.datetime, _dt.date, _dt.time)):
        return v.isoformat()
    return repr(v)


def is_int(v: Any) -> bool:
    # bool is a subclass of int in Python; in a scenario `true` is never a number.
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    return is_int(v) or isinstance(v, float)


def sweep_axes(sweep: Mapping | None) -> list[str]:
    """The swept dotted keys of a [sweep] table, in file order."""
    return [k for k in (sweep or {}) if k != "mode"]


def value_at(tree: Any, dotted: str) -> Any:
    """The value at a dotted key ("model.width") of a resolved scenario; None where absent."""
    for part in dotted.split("."):
        tree = tree.get(part) if isinstance(tree, Mapping) else None
    return tree
