"""flowsim's scenario and solver-preset schema (DESIGN.md §4), derived from the typed classes.

A scenario file says *what* to simulate, a solver preset (``solvers/NAME.toml``) says *how*.
Every key is declared once, as a setting of a class in `flowsim.config.typed`; this module
names the spec trees those classes give, for validation, ``--set`` and the key reference.
"""

from ..toml_text import sweep_axes as sweep_axes
from .declare import spec_of
from .typed import (ACTIVATIONS as ACTIVATIONS, CHECKPOINT_FORMS as CHECKPOINT_FORMS, FLOW_METHODS as FLOW_METHODS,
                    LOSSES as LOSSES, MAX_RUNS as MAX_RUNS, OBSERVABLES as OBSERVABLES, SOLVER_KINDS as SOLVER_KINDS,
                    Config, FlowPreset, Run, ShallowModel, scenario_spec, solver_spec)

SCENARIO = scenario_spec()
DATA = spec_of(Config, "data")
DATA_KINDS = tuple(DATA.variants)
MODEL = spec_of(Config, "model")
SCALING = spec_of(ShallowModel, "scaling")
LOSS = spec_of(Config, "loss")
RUN = spec_of(Config, "run")
ANALYSIS = spec_of(Config, "analysis")
PLOT = spec_of(Config, "plot")
#: A preset file: the name is the file's stem; the description is required.
SOLVER_FILE = solver_spec(inline=False)
#: An inline preset in a scenario: carries its own name; the description is optional.
SOLVER_INLINE = solver_spec(inline=True)
#: The keys whose value is a solver preset, by name or inline (`reference`), or a list of
#: them (`run.solvers`): `--set` reaches inside them (`run.solvers[0].rtol`).
SOLVERS = spec_of(Run, "solvers")
REFERENCE = spec_of(FlowPreset, "reference")
