"""flowsim: the exact gradient flow of neural networks, with gradient descent beside it.

What a user calls is here, flat (`flowsim.__all__`):

    flowsim.simulate(model, data=(X, y), ...)      # your own Equinox model, into an archive
    flowsim.run_scenario("quickstart")             # what `flowsim run` does
    flowsim.open("runs/quickstart.h5")             # read an archive (no JAX)
    flowsim.load_scenario / solver_preset          # scenarios and presets, typed
    flowsim.Config, FlowPreset, DescentPreset ...  # every configuration table (flowsim.config)
    flowsim.build_run, Problem, make_integrator    # the engine, driven by hand
    flowsim.AbstractNet                            # what a network offers (subclass it)

Importing flowsim imports no JAX and changes no JAX setting: each name loads its module when
first used (a run turns float64 on itself: flowsim.run.precision), and the names that load the
engine set its environment default first (flowsim.engine_env). Importing it does set one
environment default, below: an XLA:CPU scheduler flag."""

import importlib
import os
from typing import TYPE_CHECKING

# XLA:CPU (jaxlib 0.10) can deadlock a program whose schedule it optimised for concurrency:
# it never completes and every thread waits. Measured: caron-uci-concrete-quick (GD and the
# five observables, several checkpoints per compiled `lax.scan`) hung on one of its first
# chunks in most runs, and a CI run hung on it for 90 minutes; with this scheduler off it
# finished 5 runs of 5, in 10 s. (Single-threaded Eigen, another reported cure for XLA:CPU
# hangs, did not help here.) XLA reads the flag when JAX creates its CPU backend, so a user
# who set it, or who ran JAX before importing flowsim, keeps their choice.
if "xla_cpu_enable_concurrency_optimized_scheduler" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = " ".join((os.environ.get("XLA_FLAGS", ""),
                                        "--xla_cpu_enable_concurrency_optimized_scheduler=false")).strip()

from .version import __version__ as __version__  # noqa: E402

if TYPE_CHECKING:   # what type checkers and IDEs see; at run time `__getattr__` loads the same
    from .archive import Archive, ArchiveError, open  # noqa: A004
    from .run.build import build_run
    from .config import RunSpec, Scenario, ScenarioError, load_scenario, loads_scenario, solver_preset
    from .config.typed import *  # noqa: F403 - every configuration table's class (typed.__all__)
    from .data import DataError
    from .models import BuildError
    from .nn.net import AbstractNet
    from .run.integrators import make_integrator
    from .nn.problem import Problem
    from .run.session import InputError, run_scenario
    from .simulation import simulate

# Each public name and the module it is loaded from when first used. The modules outside
# _READERS load JAX and Equinox.
_EXPORTS: dict[str, str] = {
    "open": "flowsim.archive", "Archive": "flowsim.archive", "ArchiveError": "flowsim.archive",
    "load_scenario": "flowsim.config", "loads_scenario": "flowsim.config", "solver_preset": "flowsim.config",
    "Scenario": "flowsim.config", "RunSpec": "flowsim.config", "ScenarioError": "flowsim.config",
    "DataError": "flowsim.data",
    "simulate": "flowsim.simulation",
    "run_scenario": "flowsim.run.session", "InputError": "flowsim.run.session",
    "build_run": "flowsim.run.build", "BuildError": "flowsim.models",
    "Problem": "flowsim.nn.problem", "AbstractNet": "flowsim.nn.net",
    "make_integrator": "flowsim.run.integrators",
}
_READERS = frozenset({"flowsim.archive", "flowsim.config", "flowsim.data"})   # they import no JAX


def _config_classes() -> tuple[str, ...]:
    """Every configuration table's class, as `flowsim.config` exports it: the names are
    declared once, in `flowsim.config.typed.__all__` (imported when first asked for: it
    takes a second, and `import flowsim` stays light)."""
    from .config import typed

    return tuple(typed.__all__)


def _public() -> list[str]:
    """`flowsim.__all__`: the version, `_EXPORTS` and the configuration classes."""
    return ["__version__", *_EXPORTS, *_config_classes()]


def __getattr__(name: str):
    # Loaded when first used, not at `import flowsim`: the `flowsim` command imports this
    # package before it can take SIGTERM over, and seconds of importing h5py and JAX would
    # be a window in which a scheduler's stop kills instead of stopping; and reading an
    # archive needs no JAX. (`simulate` lives in `flowsim.simulation`: a submodule named
    # `simulate` would replace this attribute once imported.)
    if name == "__all__":
        globals()[name] = value = _public()
        return value
    module = _EXPORTS.get(name)
    if module is None and name[:1].isupper() and name in _config_classes():   # (a submodule's name is lower case)
        module = "flowsim.config"
    if module is None:
        raise AttributeError(f"module 'flowsim' has no attribute {name!r}")
    if module not in _READERS:
        from .engine_env import set_engine_defaults

        set_engine_defaults()   # before Equinox is first imported (flowsim.engine_env says why)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value     # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_public()})
