"""Scenario and solver files: schema and messages, ``--set`` and [sweep], typed configs.

    spec.py       declarative validators and `ScenarioError` (the message contract)
    declare.py    how a table is declared: `setting`, `table`, the derived specs, `from_dict` / `to_dict`
    typed.py      every table, declared once: frozen typed classes whose fields carry their rules
    data_tables.py  the [data] table's classes, one per kind (declarations, as typed.py's)
    rules.py      the rules relating two keys (a class's `RULES`) and the limits they hold values to
    plugin_probe.py  a key that may name a plug-in: imported and probed (`Plugin`)
    presets.py    a solver preset loaded by name (solvers/, gd-lr<η>) or inline; `run.solvers`
    schema.py     the scenario and solver-preset spec trees the classes give
    overrides.py  ``--set KEY=VALUE``
    sweep_grammar.py  what a [sweep] may say: its keys (`check_dotted`), modes, point count
    sweep.py      expansion of a [sweep] into `RunSpec`s; `shard_runs` (a job array's part)
    times.py      checkpoint times of a [run] table
    files.py      TOML in (with messages) and out
    load.py       `load_scenario`, `loads_scenario`, `load_solver`, `solver_preset`, `differences`
    catalog.py    the shipped scenarios, solver presets and datasets (package data)
    scenario_keys.py  the reference of every key (docs/scenario-keys.md), generated from the schema
"""

from .catalog import data_dir as data_dir
from .catalog import find_scenario as find_scenario
from .catalog import list_scenarios as list_scenarios
from .catalog import list_solvers as list_solvers
from .catalog import scenarios_dir as scenarios_dir
from .catalog import solvers_dir as solvers_dir
from .files import to_toml as to_toml
from .load import Scenario as Scenario
from .load import differences as differences
from .load import load_scenario as load_scenario
from .load import load_solver as load_solver
from .load import solver_preset as solver_preset
from .load import loads_scenario as loads_scenario
from .spec import ScenarioError as ScenarioError
from .sweep import RunSpec as RunSpec
from .times import checkpoint_times as checkpoint_times
from .declare import Frozen as Frozen
from .declare import from_dict as from_dict
from .declare import table_class as table_class
from .declare import to_dict as to_dict
from .typed import *  # noqa: F403 - every table class (typed.__all__)
