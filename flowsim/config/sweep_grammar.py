"""What a [sweep] table may say: its `mode`, and lists of values for dotted keys of the
scenario (`check_sweep`), how a swept key is named (`sweep_key`), and how many points the
lists give (`point_count`); `check_dotted`, which `--set` shares, says whether a dotted key
is one of the scenario's.

The scenario schema these keys belong to is declared in `flowsim.config.typed`, whose
[sweep] key validates with `check_sweep`: so it comes in as `root`. The expansion of a
sweep into runs is `flowsim.config.sweep`.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from ..toml_text import sweep_axes
from .spec import Ctx, Spec, Str, did_you_mean, guess_text, join, paths_to, toml_key

SWEEP_MODES = ("product", "zip")
MAX_POINTS = 10_000

_UNSWEEPABLE = {"sweep": "a sweep cannot sweep itself",
                "seeds": "every sweep point already runs every seed; list them in `seeds`"}


def point_count(sweep: dict) -> int:
    """The number of points a [sweep] table gives."""
    lengths = [len(sweep[k]) for k in sweep_axes(sweep)]
    if not lengths:
        return 1
    return math.prod(lengths) if sweep["mode"] == "product" else lengths[0]


def sweep_key(k: str) -> str:
    """How a swept key is named in messages and `--set`: `sweep."model.width"`."""
    return f"sweep.{toml_key(k)}"


def check_dotted(dotted: str, key: str, ctx: Ctx, root: Spec) -> list[str]:
    """`dotted` must name a key or table of the scenario schema `root`; returns its parts."""
    parts = dotted.split(".")
    spec = root
    for depth, part in enumerate(parts):
        kids = spec.children()
        if part not in kids:
            parent = ".".join(parts[:depth])
            names = sorted(kids)
            guess = did_you_mean(part, names)
            # (no close spelling here: the key's name where it is a key, `width` -> `model.width`)
            either = [join(parent, guess)] if guess else paths_to(root, part)
            mean = f"; did you mean {guess_text(either)}?" if either else ";"
            table = f"[{parent}]" if parent else "the top level"
            allowed = ", ".join(names) if names else "(none: it is not a table)"
            raise ctx.error(f"unknown key `{key}`: `{dotted}` is not a scenario key{mean} "
                            f"allowed keys in {table}: {allowed}",
                            key=key, value=dotted, allowed=allowed)
        spec = kids[part]
    return parts


def check_sweep(value: Any, key: str, ctx: Ctx, root: Spec) -> dict:
    """The [sweep] table's shape, its keys those of the scenario schema `root`; each point is
    validated later, after expansion (`flowsim.config.sweep`)."""
    if not isinstance(value, dict):
        raise ctx.wrong_type(key, value, "a table")
    out: dict[str, Any] = {   # the raw [sweep] table: `mode` may be left out
        "mode": Str(choices=SWEEP_MODES).check(value.get("mode", "product"), join(key, "mode"), ctx)
    }
    axes = [k for k in value if k != "mode"]
    for k in axes:
        sk = sweep_key(k)
        parts = check_dotted(k, sk, ctx, root)
        if parts[0] in _UNSWEEPABLE:
            raise ctx.bad(sk, value[k], "cannot be swept", "dotted keys of the scenario other "
                          "than sweep and seeds", _UNSWEEPABLE[parts[0]])
        v = value[k]
        if not isinstance(v, list):
            raise ctx.wrong_type(sk, v, f"a non-empty list of values for `{k}`")
        if not v:
            raise ctx.bad(sk, v, "is empty", f"a non-empty list of values for `{k}`")
        out[k] = v
    for a, b in itertools.permutations(axes, 2):
        if b.startswith(a + "."):
            raise ctx.bad(sweep_key(b), value[b], f"overlaps `{sweep_key(a)}`",
                          "sweep keys none of which lies inside another")
    lengths = {k: len(out[k]) for k in axes}
    if out["mode"] == "zip" and len(set(lengths.values())) > 1:
        desc = ", ".join(f"{k}: {n}" for k, n in lengths.items())
        raise ctx.bad(key, value, f"has lists of different lengths ({desc}) in zip mode",
                      'lists of one length with mode = "zip" (or mode = "product")')
    count = point_count(out)
    if count > MAX_POINTS:
        raise ctx.bad(key, value, f"has {count} points", f"at most {MAX_POINTS} sweep points")
    return out
