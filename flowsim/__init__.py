"""flowsim: the exact gradient flow of neural networks, with gradient descent beside it.

Importing flowsim imports no JAX and changes no JAX setting in code (a run turns float64
on itself: flowsim.precision). It does set two environment defaults, below: Equinox's
runtime-error mode and an XLA:CPU scheduler flag."""

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
