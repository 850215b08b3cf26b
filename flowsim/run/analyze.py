"""`flowsim analyze OUT.h5`: the Caron et al. analyses (`flowsim.analysis.caron`) run again on
an archive's trained networks, each rebuilt by the run path and given the final weights of
its solver's committed checkpoint; the results are stored in the archive as a run's are.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable

from ..analysis import caron
from ..config.declare import from_dict
from ..config.typed import Analysis, Config, PcaAnalysis, Preset, PruneAnalysis, TransferAnalysis


def final_params_from_archive(config: Config, seed: int, preset: Preset, stored):
    """Rebuild a run and restore a solver's committed checkpoint `stored` (arrays, attrs):
    (built, final params)."""
    import jax

    from . import batch, state_arrays
    from .build import build_run
    from .integrators import make_integrator

    built = build_run(config, seed)
    integ = make_integrator(preset, config.run)
    template = batch.init(integ, batch.stack_problems([built.problem]), batch.stack([built.params]),
                          batch.stack([built.key]))
    state = state_arrays.restore(template, 0, stored[0])
    return built, jax.tree.map(lambda x: x[0], integ.params(state))


class NotCaron(ValueError):
    """`analyze_archive` was asked to analyse an archive without an [analysis] table."""


def analyze_archive(path, *, only: list[str] | None = None, force: bool = False,
                    report: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> int:
    """(Re)run the analyses of an archive in place; returns the number of results stored.

    Uses each run's `[analysis]` table. An archive whose scenario has none is not a Caron
    experiment: refused (`NotCaron`) unless `force`, which gives such runs every analysis
    with the defaults. `only` restricts to some of prune, transfer, pca."""
    from .. import archive

    jobs = []
    with archive.open(path) as a:
        configs = {name: from_dict(Config, run.params) for name, run in a.runs.items()}
        if not force and not any(c.analysis for c in configs.values()):
            raise NotCaron(f"{path}: its scenario has no [analysis] table, so it is not a Caron "
                           "experiment; allowed: an archive of a scenario with [analysis], or "
                           "--force to run every analysis with its defaults anyway")
        for run in a.runs.values():
            config = configs[run.name]
            cfg = config.analysis or Analysis(prune=PruneAnalysis(), transfer=TransferAnalysis(), pca=PcaAnalysis())
            if only:
                cfg = dataclasses.replace(cfg, **{k: dataclasses.replace(t, enabled=t.enabled and k in only)
                                                  for k, t in caron.tables(cfg).items()})
            config = dataclasses.replace(config, analysis=cfg)
            presets = {p.name: p for p in config.run.solvers}
            for name, view in run.solvers.items():
                cp = view.checkpoint
                if cp is not None and name in presets and caron.selected(config, name):
                    jobs.append((run.name, run.seed, config, presets[name], cp))
    count = 0
    writer = archive.ArchiveWriter.resume(path)
    try:
        for run_name, seed, config, preset, cp in jobs:
            built, params = final_params_from_archive(config, seed, preset, cp)
            for name, (arrays, attrs) in caron.analyze_one(config, built.problem, params, built.dataset, seed,
                                                           built.params).items():
                writer.write_analysis(run_name, preset.name, name, arrays, attrs)
                count += 1
            report(f"{run_name} · {preset.name}: analysed")
    finally:
        writer.close()
    return count
