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
existing archive (`flowsim.run.analyze`: the networks rebuilt by the run path, the final
weights restored from each solver's checkpoint). Results go to
``/runs/<run>/<solver>/analysis/<name>/`` (arrays, attrs ``importance`` etc.), read back
with ``SolverView.analysis``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import numpy as np

from ..config.typed import Analysis, Config
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


def tables(analysis: Analysis) -> dict:
    """The analyses of an [analysis] table, by name."""
    return {"prune": analysis.prune, "transfer": analysis.transfer, "pca": analysis.pca}


def selected(config: Config, solver: str) -> bool:
    """Whether `solver`'s final networks are analysed (`analysis.solvers`; empty: every solver's)."""
    chosen = config.analysis.solvers if config.analysis is not None else ()
    return not chosen or solver in chosen


def wanted(config: Config) -> bool:
    return config.analysis is not None and any(t.enabled for t in tables(config.analysis).values())


def analyze_runs(writer, runs, built, solver: str, *, initial, final,
                 report: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> None:
    """Analyse each seed's final weights of `solver` and store the results (a driver hook).
    `initial` and `final` are params pytrees stacked along the seed axis."""
    import jax

    config = runs[0].settings
    if not wanted(config) or not selected(config, solver):
        return
    for i, (r, b) in enumerate(zip(runs, built)):
        params, params0 = (jax.tree.map(lambda x: x[i], p) for p in (final, initial))
        for name, (arrays, attrs) in analyze_one(r.settings, b.problem, params, b.dataset, r.seed, params0).items():
            writer.write_analysis(r.name, solver, name, arrays, attrs)
    done = [k for k, t in tables(config.analysis).items() if t.enabled]
    report(f"{runs[0].label or config.name} · {solver}: analyses {', '.join(done)} stored")
