"""Caron et al. analyses run on trained networks: pruning, transfer, PCA of features.

A scenario asks for them in an ``[analysis]`` table (see `flowsim.config.Analysis`)::

    [analysis]
    prune = { points = 41, importance = ["weight", "lambda"] }     # or prune = true
    transfer = { k = [1, 2, 5, 10, 20, 50], hidden = 64, steps = 5000, learning_rate = 1.0 }
    pca = true
    solvers = []          # which solvers' final weights to analyse; [] = all

:func:`analyze_runs` is a driver hook (`flowsim.run.driver.Hook`): `flowsim run` registers it,
and the driver calls it once a solver has finished a batch of seeds, with the batch's
initial and final weights. The command ``flowsim analyze OUT.h5`` recomputes them from an
existing archive (final weights restored from each solver's checkpoint). Results go to
``/runs/<run>/<solver>/analysis/<name>/`` (arrays, attrs ``importance`` etc.), read back
with ``SolverView.analysis``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable

import numpy as np

from ..config.declare import from_dict
from ..config.typed import Analysis, Config, PcaAnalysis, Preset, PruneAnalysis, TransferAnalysis
from . import pca as _pca
from . import prune as _prune
from . import transfer as _transfer



def _validation(dataset, problem):
    """Held-out points for transfer/PCA: the `valid` split when the data have one (UCI),
    else the test set (digits, npz features)."""
    extra = dataset.extra
    if "X_valid" in extra and len(extra["X_valid"]):
        return np.asarray(extra["X_valid"]), np.asarray(extra["y_valid"]), "valid"
    return np.asarray(problem.X_test), np.asarray(problem.y_test), "test"


def analyze_one(config: Config, problem, params, dataset, seed: int, initial) -> dict[str, tuple[dict, dict]]:
    """Every requested analysis of one trained network (`params`, trained from `initial`):
    name -> (arrays, attrs)."""
    out = {}
    if config.analysis is None:        # the scenario has no [analysis] table
        return out
    cfg = config.analysis
    net = problem.net
    loss_kind = config.loss.kind
    if cfg.prune.enabled:
        p = cfg.prune
        counts = _prune.prune_counts(net.width, p.points)
        arrays = _prune.prune_curve(net, params, problem.X, problem.y, problem.X_test, problem.y_test,
                                    loss_kind=loss_kind, counts=counts, importances=p.importance)
        out["prune"] = (arrays, {"importance": json.dumps(p.importance), "loss_kind": loss_kind})
    want_transfer = cfg.transfer.enabled
    want_pca = cfg.pca.enabled
    if want_transfer or want_pca:
        Xv, yv, source = _validation(dataset, problem)
        F = np.asarray(_prune.node_outputs(net, params, Xv))
    if want_transfer:
        t = cfg.transfer
        rows: dict[str, list] = {}
        for kind in t.importance:
            res = _transfer.transfer_curve(
                F, yv, _prune.importance(net, params, kind), t.k, hidden=t.hidden, steps=t.steps,
                learning_rate=t.learning_rate, cross_entropy=loss_kind == "cross-entropy", seed=seed,
                standardise=t.standardize)
            for k, v in res.items():
                if k != "k":
                    rows.setdefault(k, []).append(v)
        arrays = {"k": res["k"], **{k: np.stack(v) for k, v in rows.items()}}
        out["transfer"] = (arrays, {"importance": json.dumps(t.importance), "source": source,
                                    "hidden": t.hidden, "steps": t.steps,
                                    "learning_rate": t.learning_rate})
    if want_pca:
        npts = min(cfg.pca.points, len(Xv))
        labels = np.argmax(yv[:npts], axis=1) if yv.shape[1] > 1 else yv[:npts, 0]
        F0 = np.asarray(_prune.node_outputs(net, initial, Xv[:npts]))
        s0, r0 = _pca.pca_scores(F0)
        s1, r1 = _pca.pca_scores(F[:npts])
        out["pca"] = ({"scores_init": s0, "explained_init": r0, "scores": s1, "explained": r1,
                       "labels": labels.astype(np.float64),
                       "separation": np.array([_pca.class_separation(s0, labels),
                                               _pca.class_separation(s1, labels)])},
                      {"source": source})
    return out


def _tables(analysis: Analysis) -> dict:
    return {"prune": analysis.prune, "transfer": analysis.transfer, "pca": analysis.pca}


def _select(config: Config, solver: str) -> bool:
    chosen = config.analysis.solvers if config.analysis is not None else ()
    return not chosen or solver in chosen


def wanted(config: Config) -> bool:
    return config.analysis is not None and any(t.enabled for t in _tables(config.analysis).values())


def analyze_runs(writer, runs, built, solver: str, *, initial, final,
                 report: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> None:
    """Analyse each seed's final weights of `solver` and store the results (a driver hook).
    `initial` and `final` are params pytrees stacked along the seed axis."""
    import jax

    config = runs[0].settings
    if not wanted(config) or not _select(config, solver):
        return
    for i, (r, b) in enumerate(zip(runs, built)):
        params, params0 = (jax.tree.map(lambda x: x[i], p) for p in (final, initial))
        for name, (arrays, attrs) in analyze_one(r.settings, b.problem, params, b.dataset, r.seed, params0).items():
            writer.write_analysis(r.name, solver, name, arrays, attrs)
    done = [k for k, t in _tables(config.analysis).items() if t.enabled]
    report(f"{runs[0].label or config.name} · {solver}: analyses {', '.join(done)} stored")


def final_params_from_archive(config: Config, seed: int, preset: Preset, stored):
    """Rebuild a run and restore a solver's committed checkpoint `stored` (arrays, attrs):
    (built, final params)."""
    import jax

    from ..run import batch, state_arrays
    from ..run.build import build_run
    from ..run.integrators import make_integrator

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
                                                  for k, t in _tables(cfg).items()})
            config = dataclasses.replace(config, analysis=cfg)
            presets = {p.name: p for p in config.run.solvers}
            for name, view in run.solvers.items():
                cp = view.checkpoint
                if cp is not None and name in presets and _select(config, name):
                    jobs.append((run.name, run.seed, config, presets[name], cp))
    count = 0
    writer = archive.ArchiveWriter.resume(path)
    try:
        for run_name, seed, config, preset, cp in jobs:
            built, params = final_params_from_archive(config, seed, preset, cp)
            for name, (arrays, attrs) in analyze_one(config, built.problem, params, built.dataset, seed,
                                                     built.params).items():
                writer.write_analysis(run_name, preset.name, name, arrays, attrs)
                count += 1
            report(f"{run_name} · {preset.name}: analysed")
    finally:
        writer.close()
    return count


