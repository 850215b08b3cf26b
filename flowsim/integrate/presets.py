"""From a resolved solver preset to its integrator and its checkpoint grid."""

import numpy as np

from ..config import checkpoint_times
from .base import AbstractIntegrator
from .descent import make_descent_integrator
from .flow import make_flow_integrator
from .reference import ReferencePair
from .registry import is_discrete


def make_integrator(preset: dict, run_cfg: dict) -> AbstractIntegrator:
    """The integrator of `preset` in a run whose resolved [run] table is `run_cfg`: a
    descent, a flow, or a flow beside its `reference` flow."""
    if is_discrete(preset["kind"]):
        return make_descent_integrator(preset)
    flow = make_flow_integrator(preset, stop_loss=run_cfg["stop_loss"])
    if not preset["reference"]:
        return flow
    reference = preset["reference"]
    if preset["kind"] == "modified-flow":   # the reference solves the same equation
        reference = reference | {"kind": "modified-flow", "learning_rate": preset["learning_rate"]}
    return ReferencePair(flow=flow, reference=make_flow_integrator(reference))


def checkpoint_grid(preset: dict, run_cfg: dict) -> np.ndarray:
    """Checkpoint times from t = 0; a discrete preset's are at t = kη exactly.

    A flow also stops at every time a discrete solver of the run records, so that flow and
    GD are compared at matched times, never by interpolation."""
    times = np.concatenate([[0.0], checkpoint_times(run_cfg)])
    if is_discrete(preset["kind"]):
        eta = preset["learning_rate"]
        return np.unique(np.round(times / eta).astype(np.int64)) * eta
    grids = [np.round(times / p["learning_rate"]).astype(np.int64) * p["learning_rate"]
             for p in run_cfg["solvers"] if is_discrete(p["kind"])]
    return np.unique(np.concatenate([times, *grids]))
