"""A [sweep] expanded into runs: one configuration per sweep point, one `RunSpec` per seed;
and the run list cut into a job array's parts (`shard_runs`)."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from .overrides import assign, kind_first
from .schema import MAX_RUNS, SCENARIO, sweep_axes
from .sweep_grammar import sweep_key
from .spec import ABSENT, Ctx, toml_key, toml_value
from .declare import from_dict, to_dict
from .typed import Config


@dataclass(frozen=True)
class RunSpec:
    """One simulation: a sweep point and a seed.

    ``name`` is the archive group: ``seed{seed}`` without a sweep, else
    ``p{i}-seed{seed}`` with ``i`` zero-padded to the width of the point count.
    ``settings`` is the typed `Config` of this point (no [sweep] table; shared by the seeds
    of a point: it is frozen).
    """

    name: str
    point: int
    seed: int
    label: str
    settings: Config

    @property
    def config(self) -> dict:
        """`settings` as the resolved dict the archive stores as the run's JSON."""
        return to_dict(self.settings)


def point_indices(sweep: dict | None) -> list[tuple[int, ...]]:
    """Per sweep point, the element index of each axis (axes in file order)."""
    axes = sweep_axes(sweep)
    if not axes:
        return [()]
    ranges = [range(len(sweep[k])) for k in axes]
    if sweep["mode"] == "product":
        return list(itertools.product(*ranges))
    return list(zip(*ranges))


def _get(tree: dict, parts: Sequence[str]) -> Any:
    for p in parts:
        if not isinstance(tree, dict) or p not in tree:
            return ABSENT
        tree = tree[p]
    return tree


def refuse_swept_overrides(sweep: dict | None, ctx: Ctx) -> None:
    """A `--set` of a key that the sweep assigns at every point would be silently replaced:
    refuse it, and say how to change the sweep instead."""
    for axis in sweep_axes(sweep):
        for key, text in ctx.origins.items():
            if key == axis or axis.startswith(key + ".") or key.startswith((axis + ".", axis + "[")):
                values = ", ".join(toml_value(v) for v in sweep[axis])
                raise ctx.error(
                    f"{text}: key `{key}` is swept by [sweep] ({toml_key(axis)} = [{values}]), "
                    f"which replaces it at every point; allowed: change the sweep instead, "
                    f"e.g. --set '{sweep_key(axis)}=[{toml_value(sweep[axis][0])}]'",
                    key=key, value=text, allowed=f"--set '{sweep_key(axis)}=[...]'")


def expand(raw: dict, resolved: dict, ctx: Ctx) -> tuple[list[tuple[str, dict]], dict | None]:
    """(label, config) per sweep point, and the sweep with normalised elements."""
    sweep = resolved.get("sweep")
    axes = sweep_axes(sweep)
    # A point's value of a swept key comes from the sweep: from `--set` if its list, or an
    # element of it (`sweep."k"[1].x`), did.
    ctx = replace(ctx, origins={**ctx.origins, **{k: text for k in axes for key, text in ctx.origins.items()
                                                  if key == sweep_key(k) or key.startswith(sweep_key(k) + "[")}})
    base_raw = {k: v for k, v in raw.items() if k != "sweep"}
    if not axes:
        return [("", {k: v for k, v in resolved.items() if k != "sweep"})], sweep
    points = []
    normalised = {k: [ABSENT] * len(sweep[k]) for k in axes}
    for i, idx in enumerate(point_indices(sweep)):
        chosen = [(k, sweep[k][j]) for k, j in zip(axes, idx)]
        label = "; ".join(f"{k}={toml_value(v)}" for k, v in chosen)
        point_raw = copy.deepcopy(base_raw)
        for parts, v in kind_first([(k.split("."), copy.deepcopy(v)) for k, v in chosen]):
            assign(point_raw, parts, v)
        config = SCENARIO.check(point_raw, "", replace(ctx, where=f"sweep point {i} ({label}): "))
        points.append((label, config))
        for k, j in zip(axes, idx):
            if normalised[k][j] is ABSENT:
                normalised[k][j] = _get(config, k.split("."))
    # The resolved sweep lists each element as validated (defaults filled, presets inlined),
    # so that the resolved scenario, loaded again, expands to the same configs.
    norm_sweep = {"mode": sweep["mode"]}
    for k in axes:
        norm_sweep[k] = [sweep[k][j] if v is ABSENT else v for j, v in enumerate(normalised[k])]
    return points, norm_sweep


def make_runs(points: list[tuple[str, dict]], seeds: list[int], swept: bool,
              ctx: Ctx, sweep: Any) -> list[RunSpec]:
    """The runs of the points, point-major; a sweep giving too many is an error."""
    if len(points) * len(seeds) > MAX_RUNS:
        raise ctx.bad("sweep", sweep, f"gives {len(points)} points x {len(seeds)} seeds "
                      f"= {len(points) * len(seeds)} runs", f"at most {MAX_RUNS} runs")
    width = len(str(len(points)))
    runs = []
    for i, (label, config) in enumerate(points):
        settings = from_dict(Config, config)
        for seed in seeds:
            name = f"p{i:0{width}d}-seed{seed}" if swept else f"seed{seed}"
            runs.append(RunSpec(name=name, point=i, seed=seed, label=label, settings=settings))
    return runs


def shard_runs(runs: list, i: int, n: int) -> list:
    """The i-th of n contiguous, near-equal parts of `runs` (may be empty when n > len(runs)):
    a job array's part (`flowsim run --shard i/N`). The runs are point-major (sweep points ×
    seeds), so a part keeps the seeds of a point batched wherever it can."""
    total = len(runs)
    return runs[i * total // n:(i + 1) * total // n]
