"""Readable legend text: sweep-point labels, node scalings and solvers."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np

from flowsim.config.typed import Config, CustomScaling, FiniteScaling, Preset, Scaling
from flowsim.kinds.solvers import SOLVER_KINDS

GREEK = {"gamma": "γ", "alpha": "α", "lam": "λ", "eta": "η", "learning_rate": "η",
         "beta": "β", "kappa": "κ", "width": "m", "sigma": "σ"}


def num(x) -> str:
    """Compact number: 0.5, 1e-05, 2000."""
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, (float, np.floating)):
        return f"{float(x):g}"
    return str(x)


def scaling_label(sc: Scaling) -> str:
    """`{kind="asymmetric", gamma=0.5, alpha=0.7}` -> "asymmetric γ=0.5 α=0.7"."""
    kind = sc.kind
    if kind == "ntk":
        return "NTK"
    words = {"single": "single node", "custom": "custom λ"}.get(kind, kind)
    parts = [words]
    if isinstance(sc, FiniteScaling):
        parts.append(f"K={num(sc.k)}")
    for key in ("gamma", "alpha"):
        if hasattr(sc, key):          # the scaling kinds that have it
            parts.append(f"{GREEK[key]}={num(getattr(sc, key))}")
    if isinstance(sc, CustomScaling) and sc.path:
        parts.append(Path(sc.path).stem)
    return " ".join(parts)


def _split_top(text: str, sep: str) -> list[str]:
    """Split on `sep` outside brackets and quotes."""
    out, depth, quote, cur, i = [], 0, None, "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        elif depth == 0 and text.startswith(sep, i):
            out.append(cur)
            cur, i = "", i + len(sep)
            continue
        cur += ch
        i += 1
    out.append(cur)
    return [s.strip() for s in out if s.strip()]


def _value_text(value: str) -> str:
    """A TOML inline value made readable: strip quotes, unpack tables."""
    value = value.strip()
    if value.startswith("{") and value.endswith("}"):
        items = [_split_top(p, "=") for p in _split_top(value[1:-1], ",")]
        words = []
        for kv in items:
            if len(kv) != 2:
                continue
            key, val = kv[0].strip().strip('"'), _value_text(kv[1])
            words.append(val if key == "kind" else f"{GREEK.get(key, key)}={val}")
        return " ".join(words)
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    try:
        return num(float(value)) if re.fullmatch(r"[-+0-9.eE]+", value) else value
    except ValueError:
        return value


def get_dotted(config: Config | None, key: str):
    """`config.model.scaling` for key "model.scaling"; None where a part is not there (a
    swept key may name a field that only some kinds have, or a list element)."""
    cur = config
    for part in key.split("."):
        if not dataclasses.is_dataclass(cur) or not hasattr(cur, part):
            return None
        cur = getattr(cur, part)
    return cur


def short_label(params: Config | None, label: str) -> str:
    """A readable sweep-point label for legends.

    ``model.scaling={kind="asymmetric", gamma=0.5, alpha=0.7}`` becomes
    "asymmetric γ=0.5 α=0.7", ``{kind="ntk"}`` becomes "NTK", other swept keys keep
    their last component (``model.width=200`` -> "m=200"); parts are joined by ", ".
    Without a sweep (empty label) the point is named by its node scaling. Without `params`
    the label is made from the text of the swept values alone.
    """
    parts = []
    for item in _split_top(label or "", ";"):
        key, _, value = item.partition("=")
        key = key.strip().strip('"')
        resolved = get_dotted(params, key)
        if key == "model.scaling" or key.endswith(".scaling"):
            sc = resolved if dataclasses.is_dataclass(resolved) else None
            parts.append(scaling_label(sc) if sc else _value_text(value))
            continue
        name = key.rsplit(".", 1)[-1]
        text = _value_text(value)
        if key == "model.scaling.kind" and dataclasses.is_dataclass(get_dotted(params, "model.scaling")):
            parts.append(scaling_label(get_dotted(params, "model.scaling")))
        elif name == "kind":
            parts.append(text)
        else:
            parts.append(f"{GREEK.get(name, name)}={text}")
    if parts:
        return ", ".join(parts)
    sc = get_dotted(params, "model.scaling")
    return scaling_label(sc) if dataclasses.is_dataclass(sc) else (label or "")


def kind_label(kind: str) -> str:
    """How figures name a solver kind (its registry label; an unknown kind as written)."""
    entry = SOLVER_KINDS.get(kind)
    return entry.label if entry else kind


def is_discrete(kind: str) -> bool:
    """A stepping kind (GD, momentum, SGD); an unknown kind counts as a flow."""
    entry = SOLVER_KINDS.get(kind)
    return entry is not None and entry.discrete


def solver_label(name: str, preset: Preset) -> str:
    text = f"{name}: {kind_label(preset.kind)}"
    if preset.learning_rate is not None:         # every discrete kind, and the modified flow
        text += f" η={num(preset.learning_rate)}"
    elif preset.method != name:
        text += f" ({preset.method})"
    return text
