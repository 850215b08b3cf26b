"""flowsim: the exact gradient flow of neural networks, with gradient descent beside it.

Importing flowsim changes no global JAX setting (and imports no JAX): a run turns float64
on itself (flowsim.precision). It does choose Equinox's runtime-error mode, below."""

import os

# Equinox's runtime checks (`eqx.error_if`) become host callbacks in the compiled program
# by default, and JAX never stores a program with a host callback in its persistent cache:
# every flow run recompiled (about 10 s a process on 2 cores for the test scenarios). The
# one check inside flowsim's segments is diffeqsolve's "(t1 - t0) * dt0 >= 0", which holds
# by construction (dt0 is the controller's positive proposal); with "nan" a failed check
# would give NaNs, which end the run with status `nonfinite`: statuses are results either
# way. Equinox reads the variable when it is first imported, so a user who imported it
# before flowsim, or who set EQX_ON_ERROR, keeps their choice.
os.environ.setdefault("EQX_ON_ERROR", "nan")

from .version import __version__ as __version__  # noqa: E402

__all__ = ["open", "simulate", "__version__"]


def __getattr__(name: str):
    # flowsim.open (which reads an archive) and flowsim.simulate load h5py and JAX only when
    # first used: the `flowsim` command imports this package before it can take SIGTERM
    # over, and their seconds of import time would be a window in which a scheduler's stop
    # kills instead of stopping.
    if name == "open":
        from .archive import open

        return open
    if name == "simulate":   # (its module is `simulation`: a submodule named `simulate`
        from .simulation import simulate   # would replace this attribute once imported)

        return simulate
    raise AttributeError(f"module 'flowsim' has no attribute {name!r}")
