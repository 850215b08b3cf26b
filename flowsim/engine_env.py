"""The environment default of the run path: set before the engine (Equinox) is first
imported, by what runs it (`flowsim run`, `show` and `analyze`, and the names of the
`flowsim` package that load the engine), never by `import flowsim` or by reading an archive.
"""

import os


def set_engine_defaults() -> None:
    """Equinox's runtime checks (`eqx.error_if`) become host callbacks in the compiled
    program by default, and JAX never stores a program with a host callback in its
    persistent cache: every flow run recompiled (about 10 s a process on 2 cores for the
    test scenarios). The one check inside flowsim's segments is diffeqsolve's
    "(t1 - t0) * dt0 >= 0", which holds by construction (dt0 is the controller's positive
    proposal); with "nan" a failed check would give NaNs, which end the run with status
    `nonfinite`: statuses are results either way. Equinox reads the variable once, when it
    is first imported, so a user who imported it before, or who set EQX_ON_ERROR, keeps
    their choice."""
    os.environ.setdefault("EQX_ON_ERROR", "nan")
