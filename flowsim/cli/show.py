"""`flowsim show`: what a scenario will do, computed from its configuration alone.

Every resolved key, in the form `--set` takes it, with where its value came from (the file,
a default, a `--set`, a solver preset, or the sweep; a flow preset's keys that its method
does not read are left out), the runs it expands to, each solver's checkpoint grid, and the
memory and disk estimate that `run` checks. Nothing is built or run.
"""

from collections.abc import Iterator
from typing import Any

from ..run.resources import point_estimates
from ..config import FlowPreset, Scenario
from ..config.files import parse_toml
from ..config.schema import sweep_axes
from ..config.sweep_grammar import sweep_key
from ..config.spec import ABSENT, toml_value
from ..run.integrators import checkpoint_grid
from ..kinds.solvers import CENTRAL_KINDS, CENTRAL_READS, FLOW_METHODS, group_keys

_MIB = 2**20


def leaves(tree: Any, prefix: str = "") -> Iterator[tuple[str, tuple, Any]]:
    """(dotted key, path, value) of every leaf; tables are walked, lists of tables indexed."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            key = sweep_key(k) if prefix == "sweep." else prefix + k
            yield from ((d, (k, *p), x) for d, p, x in leaves(v, key + "."))
    elif isinstance(tree, list) and tree and all(isinstance(x, dict) for x in tree):
        base = prefix[:-1]
        for i, v in enumerate(tree):
            yield from ((d, (i, *p), x) for d, p, x in leaves(v, f"{base}[{i}]."))
    else:
        yield prefix[:-1], (), tree


def _at(tree: Any, path: tuple) -> Any:
    for part in path:
        if isinstance(tree, dict) and part in tree:
            tree = tree[part]
        elif isinstance(tree, list) and isinstance(part, int) and part < len(tree):
            tree = tree[part]
        else:
            return ABSENT
    return tree


def origin(sc: Scenario, raw: dict, key: str, path: tuple) -> str:
    """Where the resolved value at `key` came from."""
    for set_key, text in sc.origins.items():
        if key == set_key or key.startswith(set_key + ".") or key.startswith(set_key + "["):
            return f"--set {text}"
    swept = sweep_axes(sc.resolved.get("sweep"))
    if any(key == k or key.startswith(k + ".") for k in swept):
        return "swept (see runs)"
    if path[:2] == ("run", "solvers"):     # a preset's key, or its reference's, given by name
        named = next((n for d in range(3, len(path)) if isinstance(n := _at(raw, path[:d]), str)), None)
        if named is not None:
            return f"preset {named!r}"
    return "file" if _at(raw, path) is not ABSENT else "default"


# The flow-preset keys a method's settings groups hold: a preset's others are always shown,
# these where its method's registry entry reads them (a central flow's integrator reads its
# own groups, whatever its method).
_METHOD_KEYS = frozenset(k for m in FLOW_METHODS.values() for k in m.keys())
_CENTRAL_KEYS = frozenset(k for g in CENTRAL_READS for k in group_keys(g))


def _unused(resolved: dict, path: tuple) -> bool:
    """Whether `path` is a flow preset's key that its integrator does not read."""
    if path[:2] != ("run", "solvers") or len(path) != 4 or path[3] not in _METHOD_KEYS:
        return False
    preset = _at(resolved, path[:3])
    method = FLOW_METHODS.get(preset.get("method"))
    if method is None:
        return False
    return path[3] not in (_CENTRAL_KEYS if preset.get("kind") in CENTRAL_KINDS else method.keys())


def _swept(sc: Scenario) -> dict[str, str]:
    """Each swept key and its values as one row shows them: the list of scalars, or how many
    tables (each run's are under runs:). A swept key's resolved value is only its first
    point's, which printed alone would read as the value of every run."""
    sweep = sc.resolved.get("sweep") or {}
    out = {}
    for key in sweep_axes(sweep):
        values = sweep[key]
        scalar = all(not isinstance(v, dict | list) for v in values)
        out[key] = toml_value(values) if scalar else f"<{len(values)} tables, see [sweep]>"
    return out


def configuration(sc: Scenario) -> list[str]:
    raw = parse_toml(sc.text, sc.path)
    swept, rows = _swept(sc), []
    for key, path, value in leaves(sc.resolved):
        axis = next((k for k in swept if key == k or key.startswith(k + ".")), None)
        if axis is not None:
            if axis not in (k for k, _, _ in rows):    # one row for a swept table's keys
                rows.append((axis, swept[axis], origin(sc, raw, key, path)))
        elif not _unused(sc.resolved, path):
            rows.append((key, toml_value(value), origin(sc, raw, key, path)))
    width = min(max(len(k) + len(v) for k, v, _ in rows) + 3, 56)   # a long value pushes its comment
    return [f"  {f'{k} = {v}':<{width}} # {o}" for k, v, o in rows]


def runs(sc: Scenario) -> list[str]:
    points = len({r.point for r in sc.runs})
    seeds = len(sc.settings.seeds)
    head = f"runs: {len(sc.runs)}" + (f" ({points} sweep points × {seeds} seeds)" if points > 1 else "")
    return [head] + [f"  {r.name:<14} seed {r.seed}" + (f"  {r.label}" if r.label else "") for r in sc.runs]


def _times(ts) -> str:
    shown = [f"{t:.4g}" for t in ts]
    for i in range(1, len(shown)):    # distinct times that print alike (η·k rounding) show in full
        if shown[i] == shown[i - 1]:
            shown[i - 1], shown[i] = repr(float(ts[i - 1])), repr(float(ts[i]))
    return ", ".join(shown if len(shown) <= 8 else [*shown[:4], "…", *shown[-3:]])


def grids(sc: Scenario) -> list[str]:
    out = ["checkpoint grids (times from t = 0; a flow is also observed at every discrete solver's times):"]
    found: dict[str, dict[tuple, list[str]]] = {}     # solver -> grid -> the sweep points with it
    kinds = {}
    for r in sc.runs:
        for preset in r.settings.run.solvers:
            grid = tuple(checkpoint_grid(preset, r.settings.run))
            labels = found.setdefault(preset.name, {}).setdefault(grid, [])
            if r.label not in labels:
                labels.append(r.label)
            kinds[preset.name] = "flow" if isinstance(preset, FlowPreset) else f"η = {preset.learning_rate:g}"
    for name, by_grid in found.items():
        for grid, labels in by_grid.items():
            where = f" [{'; '.join(labels)}]" if len(by_grid) > 1 else ""
            out.append(f"  {name} ({kinds[name]}){where}: {len(grid)} rows: {_times(grid)}")
    return out


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(names if len(names) <= 12 else [*names[:8], "…", *names[-3:]])


def data(sc: Scenario) -> list[str]:
    """Each split's shape, and its columns where the file names them, as the first seed of
    each distinct `[data]` table makes it (a seed draws other rows, not other shapes)."""
    from ..data import make_dataset

    out = ["data (as `run` reads it; X: inputs, y: targets):"]
    seen = set()
    for r in sc.runs:
        if repr(r.settings.data) in seen:
            continue
        seen.add(repr(r.settings.data))
        ds = make_dataset(r.settings.data, r.seed)
        where = f" [{r.label}]" if len({repr(q.settings.data) for q in sc.runs}) > 1 else ""
        kind = f"{ds.classes} classes" if ds.classes else "regression"
        out.append(f"  {r.settings.data.kind}{where} ({kind}): train X {ds.X_train.shape}, y {ds.y_train.shape}; "
                   f"test X {ds.X_test.shape}, y {ds.y_test.shape}"
                   + "".join(f"; {k} {v.shape}" for k, v in ds.extra.items() if k in ("X_valid", "y_valid")))
        if ds.columns:
            out.append(f"    inputs ({len(ds.columns[0])}): {_names(ds.columns[0])}")
            out.append(f"    targets: {_names(ds.columns[1])}")
    return out


def estimate(sc: Scenario) -> list[str]:
    """The estimate per sweep point that `run` checks (see `resources.estimate_resources`)."""
    out = ["estimate (per sweep point: one batch of its seeds; uncompressed archive):"]
    points = point_estimates(sc)
    for point, est in points:
        label = point[0].label or sc.settings.name
        if est is None:
            out.append(f"  {label}: none (a plug-in model's size is known once it is built)")
            continue
        out.append(f"  {label}: memory {est['memory'] / _MIB:.3g} MiB, archive {est['disk'] / _MIB:.3g} MiB, "
                   f"{int(est['params'])} parameters per seed")
    if len(points) > 1:
        disk = sum(est["disk"] for _, est in points if est is not None)
        out.append(f"  whole archive: {disk / _MIB:.3g} MiB")
    out.append("  time: a discrete solver takes t_end/η steps; a flow's steps are adaptive, known only as it runs")
    return out


def show(sc: Scenario) -> str:
    title = f"{sc.settings.name}: {sc.settings.description}" if sc.settings.description else sc.settings.name
    lines = [title, f"file: {sc.path}", "", "resolved configuration (# where each value came from):",
             *configuration(sc), "", *data(sc), "", *runs(sc), "", *grids(sc), "",
             *estimate(sc)]
    lines += [f"warning: {w}" for w in sc.warnings]
    return "\n".join(lines)
