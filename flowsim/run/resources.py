"""The resource estimate: a scenario that would exhaust memory (or the disk) is refused
before anything is built, with the estimate and the limit in the message."""

import jax

from .build import _dataset, data_seed   # (the run's data loader, with its messages)
from ..config.typed import Config, FlowPreset
from ..kinds.solvers import state_copies
from ..kinds import MODELS as MODEL_KINDS
from ..models import BuildError
from ..observe.observables import OBSERVABLES

_GIB = float(1 << 30)
_SYNTHETIC_SHAPE = ("n", "d")     # data kinds that state their size in the scenario


class ResourceError(BuildError):
    """A scenario whose estimated memory or disk need exceeds what is available."""


def _limit_from_env(name: str) -> float | None:
    import os

    text = os.environ.get(name, "").strip()
    if not text:
        return None
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    scale = units.get(text[-1].lower(), 1)
    try:
        return float(text[:-1] if scale != 1 else text) * scale
    except ValueError:
        raise BuildError(f"{name} = {text!r} is not a size; allowed: bytes, or a number with "
                         "a suffix K, M, G, T (e.g. 8G)") from None


def memory_limit() -> tuple[float, str]:
    """Bytes the run may use, and where that number comes from. `FLOWSIM_MEMORY_LIMIT`
    (e.g. "8G") overrides; otherwise the available RAM (MemAvailable) and, on an
    accelerator, its memory."""
    env = _limit_from_env("FLOWSIM_MEMORY_LIMIT")
    if env is not None:
        return env, "FLOWSIM_MEMORY_LIMIT"
    limit, source = float("inf"), "unknown"
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    limit, source = float(line.split()[1]) * 1024, "available RAM"
    except OSError:
        import os

        try:
            limit = float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
            source = "available RAM"
        except (ValueError, OSError, AttributeError):
            pass
    try:
        dev = jax.devices()[0]
        if dev.platform != "cpu":
            stats = dev.memory_stats() or {}
            if stats.get("bytes_limit") and stats["bytes_limit"] < limit:
                limit, source = float(stats["bytes_limit"]), f"{dev.platform} memory"
    except Exception:  # noqa: BLE001 - the estimate must never be what fails a run
        pass
    return limit, source


def _data_shape(cfg: Config, seed: int, cache: dict) -> tuple[int, int, int, int]:
    """(n, n_test, d, k) of a run's data: from the scenario when it says (the synthetic kinds,
    one target column each: flowsim.data.synthetic), else by loading it (file-backed data are
    bounded by their file)."""
    data = cfg.data
    if all(hasattr(data, k) for k in _SYNTHETIC_SHAPE):
        return int(data.n), int(data.n_test), int(data.d), 1
    key = (data, data_seed(cfg, seed))
    if key not in cache:
        ds = _dataset(cfg, seed)
        cache[key] = (ds.X_train.shape[0], ds.X_test.shape[0], ds.X_train.shape[1], ds.y_train.shape[1])
    return cache[key]


def estimate_resources(config: Config, n: int, n_test: int, d: int, seeds: int, k: int = 1) -> dict[str, float]:
    """Rough bytes of one sweep point's batch of `seeds` runs: memory and archive size.

    Memory: per seed, the solver's copies of the P parameters (the model config's `size(d, k)`), the
    forward/backward intermediates (≈ 4·n·m; m the sum of an MLP's widths), the NTG work
    (2·p·m + 3·p²; an MLP's Jacobian p·P) and the data (stacked twice).
    Disk: every checkpoint row of every observed series plus the double-buffered
    checkpoint (the weights and at most one more parameter-sized array: a first-same-as-last
    evaluation, a velocity; twice that for a flow with its reference), per seed and solver,
    uncompressed."""
    item = 4 if config.dtype == "float32" else 8
    model = config.model
    p = min(int(config.run.ntg_points), n)
    params, m = model.size(d, k), model.hidden()
    if MODEL_KINDS[model.kind].family == "module":
        # J (p × P) for the NTG (an accelerator's strategy; CPU's vector products need less); per-leaf rows
        ntg_work, row_m, row_d = p * params, params, 1
    else:   # a ShallowNet: the NTG in closed form, per-node rows of its inputs
        ntg_work, row_m, row_d = 2 * p * m, m, model.inputs(d)
    solvers = config.run.solvers
    copies = stored = 0
    for s in solvers:
        paired = isinstance(s, FlowPreset) and s.reference is not None
        copies = max(copies, state_copies(s) * (2 if paired else 1))
        stored = max(stored, 2 * (2 if paired else 1))
    data = (n + n_test) * (d + k)   # inputs and targets
    memory = item * seeds * (copies * params + 4 * n * m + ntg_work + 3 * p * p + 2 * data)
    rows = len(config.run.checkpoint_times()) + 1
    row = 0
    for name in config.run.observe:
        row += OBSERVABLES[name].row_size(row_m, p, row_d)
    disk = item * seeds * len(solvers) * (2 * rows * row + 2 * stored * params) + item * data
    return {"memory": float(memory), "disk": float(disk), "params": float(params), "copies": float(copies)}


def point_estimates(scenario) -> list[tuple[list, dict[str, float] | None]]:
    """Each sweep point's runs with `estimate_resources` of their batch (plus the data's
    `n` and `d`); None for a model whose size is known only once it is built (a plug-in)."""
    cache: dict = {}
    points: dict[int, list] = {}
    for r in scenario.runs:
        points.setdefault(r.point, []).append(r)
    out = []
    for runs in points.values():
        cfg = runs[0].settings
        if not MODEL_KINDS[cfg.model.kind].sized:
            out.append((runs, None))
            continue
        n, n_test, d, k = _data_shape(cfg, runs[0].seed, cache)
        out.append((runs, estimate_resources(cfg, n, n_test, d, len(runs), k) | {"n": float(n), "d": float(d)}))
    return out


def _share_to_write(runs, cfg: Config, written: dict[str, dict[str, int]] | None) -> float:
    """The share of a sweep point's checkpoint rows that a (resumed) archive still lacks."""
    if written is None:
        return 1.0
    rows = len(cfg.run.checkpoint_times()) + 1
    names = [s.name for s in cfg.run.solvers]
    done = sum(min(rows, written.get(r.name, {}).get(s, 0)) for r in runs for s in names)
    return 1.0 - done / (rows * len(runs) * len(names))


def check_resources(scenario, out_dir=None, written: dict[str, dict[str, int]] | None = None) -> None:
    """Refuse, before anything is built, a scenario whose largest sweep point would not fit
    in memory (or whose archive would not fit on the disk). The message gives the estimate,
    the limit and the keys that drive it. `written`: a resumed archive's committed rows (run
    -> solver -> rows); the disk then needs room only for the rows still to come."""
    import shutil

    limit, source = memory_limit()
    disk_free = None
    if out_dir is not None:
        try:
            disk_free = float(shutil.disk_usage(out_dir).free)
        except OSError:
            disk_free = None
    file = getattr(scenario, "path", "scenario")
    disk_total = 0.0
    for runs, est in point_estimates(scenario):
        if est is None:
            continue   # the factory's network is unknown until it is built: no estimate
        cfg = runs[0].settings
        n, d = int(est["n"]), int(est["d"])
        disk_total += est["disk"] * _share_to_write(runs, cfg, written)
        if est["memory"] > limit:
            where = f" (sweep point {runs[0].label})" if runs[0].label else ""
            size, key = (f"`model.widths` = {list(cfg.model.widths)}: {int(est['params'])} parameters",
                         "model.widths") if MODEL_KINDS[cfg.model.kind].family == "module" else \
                (f"`model.width` = {cfg.model.width} × d = {d} parameters", "model.width")
            raise ResourceError(
                f"{file}: this scenario needs an estimated {est['memory'] / _GIB:.3g} GiB of memory{where}: "
                f"{size} × {int(est['copies'])} solver "
                f"copies × {len(runs)} seed(s) (`seeds`), plus n = {n} points (`data.n`) × width and "
                f"`run.ntg_points` = {cfg.run.ntg_points}; the limit is {limit / _GIB:.3g} GiB ({source}); "
                f"allowed: a scenario whose estimate fits (lower {key}, data.n, run.ntg_points or the "
                "number of seeds; FLOWSIM_MEMORY_LIMIT sets the limit)")
    if disk_free is not None and disk_total > disk_free:
        what = "the rest of the resumed archive" if written is not None else "the archive"
        raise ResourceError(
            f"{file}: {what} would need an estimated {disk_total / _GIB:.3g} GiB (uncompressed: every "
            f"checkpoint row of `run.observe` = {list(scenario.settings.run.observe)} for every run and "
            f"solver{' still to come' if written is not None else ''}), more than the "
            f"{disk_free / _GIB:.3g} GiB free at {out_dir}; allowed: fewer "
            "checkpoints (`run.checkpoints`), no `weights`/`ntg` in `run.observe`, or a smaller model")
