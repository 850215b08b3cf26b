"""From a typed solver preset to its integrator and its checkpoint grid.

The integrators (`flowsim.integrate`) take the records of the settings groups their method's
registry entry reads and know no preset class; this is where a preset's keys become those
records, and where a run's checkpoint times become the rows each solver records (a discrete
solver's at t = kη, `flowsim.kinds.solvers.steps`).
"""

import dataclasses
import importlib

import numpy as np

from ..config.typed import DescentPreset, FlowPreset, Given, OptaxPreset, Preset, Run
from ..integrate.base import AbstractIntegrator
from ..integrate.adaptive_flows import adaptive_flow, adaptive_form
from ..integrate.central_flow import make_central_integrator
from ..integrate.descent import DescentIntegrator, make_descent_integrator
from ..integrate.optimizers import OptaxIntegrator, make_optax_integrator
from ..integrate.reference_pair import ReferencePair
from ..kinds.solvers import (ADAPTIVE_FLOW_KINDS, CENTRAL_KINDS, CENTRAL_READS, FLOW_METHODS, SOLVER_KINDS,
                             FlowMethod, settings_of, steps)


def factory(spec: FlowMethod):
    """The integrator factory a flow method's entry names ("package.module:function")."""
    module, name = spec.integrator.split(":")
    return getattr(importlib.import_module(module), name)


def flow_integrator(preset: FlowPreset, *, stop_loss: float = 0.0) -> AbstractIntegrator:
    """The integrator of a `flow` or `modified-flow` preset (without its reference): its
    method's factory, given the settings groups the method's entry reads."""
    if preset.method not in FLOW_METHODS:
        raise ValueError(f"unknown flow method {preset.method!r}; allowed: {', '.join(FLOW_METHODS)}")
    spec = FLOW_METHODS[preset.method]
    return factory(spec)(spec, **settings_of(preset, spec.reads), stop_loss=stop_loss,
                         learning_rate=preset.learning_rate if preset.kind == "modified-flow" else None)


def _adaptive_form(preset: FlowPreset):
    """The stable flow of the adaptive method a `rmsprop-flow`, `adam-flow` or `rmsprop-central`
    preset follows."""
    return adaptive_form(SOLVER_KINDS[preset.kind].flow_of + "-flow", learning_rate=preset.learning_rate,
                         beta1=preset.beta1, beta2=preset.beta2, eps=preset.eps, eps_in_sqrt=bool(preset.eps_in_sqrt))


def adaptive_flow_integrator(preset: FlowPreset, *, stop_loss: float = 0.0) -> AbstractIntegrator:
    """The integrator of a `rmsprop-flow` or `adam-flow` preset: its method's, integrating the
    method's stable flow in the weights and its moments."""
    return adaptive_flow(flow_integrator(preset, stop_loss=stop_loss), _adaptive_form(preset))


def central_integrator(preset: FlowPreset, *, stop_loss: float = 0.0) -> AbstractIntegrator:
    """The integrator of a `central-flow` preset, or of a `rmsprop-central` one (in RMSProp's
    (w, ν))."""
    form = _adaptive_form(preset) if SOLVER_KINDS[preset.kind].flow_of else None
    return make_central_integrator(preset.method, **settings_of(preset, CENTRAL_READS), stop_loss=stop_loss,
                                   form=form)


def descent_integrator(preset: DescentPreset) -> DescentIntegrator | OptaxIntegrator:
    """The integrator of a `gd`, `momentum`, `sgd`, `rmsprop` or `adam` preset."""
    if isinstance(preset, OptaxPreset):
        if not isinstance(preset.transformation, Given):     # (read back from an archive)
            raise ValueError(f"solver {preset.name!r}: its optax transformation is not stored in an archive; run "
                             "or resume it through flowsim.simulate, handing it the transformation")
        return make_optax_integrator(optimizer="given", learning_rate=preset.learning_rate,
                                     divergence_factor=preset.divergence_factor, perturbation=preset.perturbation,
                                     given=preset.transformation.value)
    if preset.kind in ("rmsprop", "adam"):
        return make_optax_integrator(optimizer=preset.kind, learning_rate=preset.learning_rate,
                                     divergence_factor=preset.divergence_factor, perturbation=preset.perturbation,
                                     beta1=preset.beta1 or 0.0, beta2=preset.beta2, eps=preset.eps,
                                     eps_in_sqrt=bool(preset.eps_in_sqrt), nu0_grad=preset.nu0 == "grad-squared")
    return make_descent_integrator(learning_rate=preset.learning_rate, divergence_factor=preset.divergence_factor,
                                   beta=preset.beta if preset.kind == "momentum" else None,
                                   batch_size=preset.batch_size if preset.kind == "sgd" else None,
                                   perturbation=preset.perturbation)


def make_integrator(preset: Preset, run: Run) -> AbstractIntegrator:
    """The integrator of `preset` in a run whose [run] table is `run`: a descent, a flow,
    or a flow beside its `reference` flow."""
    if isinstance(preset, DescentPreset):
        return descent_integrator(preset)
    if preset.kind in CENTRAL_KINDS:     # (no reference: the loader refuses one)
        return central_integrator(preset, stop_loss=run.stop_loss)
    if preset.kind in ADAPTIVE_FLOW_KINDS:    # (nor here)
        return adaptive_flow_integrator(preset, stop_loss=run.stop_loss)
    flow = flow_integrator(preset, stop_loss=run.stop_loss)
    if preset.reference is None:
        return flow
    reference = preset.reference
    if preset.kind == "modified-flow":   # the reference solves the same equation
        reference = dataclasses.replace(reference, kind="modified-flow", learning_rate=preset.learning_rate)
    return ReferencePair(flow=flow, reference=flow_integrator(reference))


def checkpoint_grid(preset: Preset, run: Run, horizons: tuple[float, ...] = ()) -> np.ndarray:
    """Checkpoint times from t = 0; a discrete preset's are at t = kη exactly.

    A flow is also observed at every time a discrete solver of the run records, so that flow
    and GD are compared at matched times (never by interpolating between rows). `horizons`: the earlier
    t_ends of an archive extended with `--resume --set run.t_end=T` (increasing): its grid
    is the first horizon's grid, then each later horizon's grid past the one before (rows
    already written keep their times)."""
    grid, before = [], -np.inf
    for t_end in (*horizons, run.t_end):
        part = _grid(preset, dataclasses.replace(run, t_end=t_end))
        grid.append(part[part > before])
        before = max(before, part[-1])    # (a GD time k·η may round a hair past t_end)
    return np.concatenate(grid)


def _grid(preset: Preset, run: Run) -> np.ndarray:
    times = np.concatenate([[0.0], run.checkpoint_times()])
    if isinstance(preset, DescentPreset):
        eta = preset.learning_rate
        return np.unique(steps(times, eta, np)) * eta
    grids = [steps(times, p.learning_rate, np) * p.learning_rate for p in run.solvers if isinstance(p, DescentPreset)]
    if not grids:
        return np.unique(times)
    # Times within rounding of each other (t_end = 1980 beside 2200 × 0.9 = 1980.0000000000002,
    # or 220 × 0.9 beside 180 × 1.1) are one row, a descent's time kη where there is one;
    # compare matches rows to 1e-9 relative, so every descent still finds its rows.
    tol = 1e-12 * max(1.0, run.t_end)
    matched = np.unique(np.concatenate(grids))
    near = np.abs(times[:, None] - matched[None, :]).min(axis=1) <= tol
    union = np.unique(np.concatenate([times[~near], matched]))
    return union[np.concatenate([[True], np.diff(union) > tol])]
