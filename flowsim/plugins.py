"""Plug-ins: the user's own code, named in a scenario by import path "package.module:name".

A scenario may name a model factory (`[model] kind = "python"`, `factory = ...`), an
activation (`model.activation`) or a loss (`loss.kind`) this way. Such a scenario runs the
user's code: validation imports it (a path that does not import, or an object of the wrong
shape, is a scenario error naming the key, before anything is computed), and `flowsim list`
and `flowsim inspect` say so. Reading an archive never imports anything: the archive keeps
the path as a string.

The scenario's folder is searched first, so a scenario beside its `mymodel.py` can say
"mymodel:make_model".
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_PATH = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
FORM = '"package.module:name"'


class PluginError(Exception):
    """An import path that does not resolve (the message says which part failed)."""


def is_path(value: Any) -> bool:
    return isinstance(value, str) and bool(_PATH.match(value))


def load(path: str, base_dir: str | Path | None = None) -> Any:
    """The object at `path`, importing its module (from `base_dir` first)."""
    module_name, _, attr = path.partition(":")
    added = base_dir is not None and str(base_dir) not in sys.path
    if added:
        sys.path.insert(0, str(base_dir))
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # noqa: BLE001 - the user's module may raise anything on import
        raise PluginError(f"does not import: module {module_name!r} raised "
                          f"{type(err).__name__}: {err}") from None
    finally:
        if added:
            sys.path.remove(str(base_dir))
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise PluginError(f"does not import: module {module_name!r} has no {attr!r}")
        obj = getattr(obj, part)
    return obj


# the keys a plug-in may fill, and how to tell (a resolved or raw scenario table)
def named_in(table: Mapping) -> list[str]:
    """The plug-in paths a scenario (resolved, or raw TOML) names, sweep values included."""
    found = []
    model, loss = table.get("model") or {}, table.get("loss") or {}
    if isinstance(model, Mapping):
        found += [model.get("factory"), model.get("activation")]
    if isinstance(loss, Mapping):
        found.append(loss.get("kind"))
    sweep = table.get("sweep") or {}
    if isinstance(sweep, Mapping):
        for key in ("model.factory", "model.activation", "loss.kind"):
            values = sweep.get(key)
            found += values if isinstance(values, list) else []
    return sorted({v for v in found if is_path(v)})
