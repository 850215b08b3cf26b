"""Float64 in JAX, turned on by the run that needs it rather than by `import flowsim`.

Float64 is the default so that an "exact" flow at rtol 1e-8..1e-12 means something; a
scenario may still choose float32 (arrays are then created in float32 explicitly), and
float32 runs rely on int64 step counters and float64 times too, so every run turns it on."""

import contextlib
import logging
from collections.abc import Iterator

import jax

_log = logging.getLogger("flowsim")
_turned_on = False      # whether flowsim, not the user, turned jax_enable_x64 on


def enable_x64(*, for_run: bool = False) -> None:
    """Turn on `jax_enable_x64` (idempotent: says so once, at INFO, when it changes it).
    `for_run`: a run turns it on, not the user (whose precision `users_precision` restores)."""
    global _turned_on
    if jax.config.jax_enable_x64:
        return
    jax.config.update("jax_enable_x64", True)
    _turned_on = for_run
    _log.info("turned on jax_enable_x64 (float64, int64 step counters)")


def users_precision_name() -> str:
    """The precision JAX had in the user's session before flowsim turned float64 on."""
    return "float32" if _turned_on or not jax.config.jax_enable_x64 else "float64"


@contextlib.contextmanager
def users_precision() -> Iterator[None]:
    """JAX's precision as the user's session had it before flowsim turned float64 on. A
    model factory called inside draws the weights it draws there for the same key:
    `jax.random.normal` draws other numbers in float64, not the same ones more precisely."""
    if not _turned_on:
        yield
        return
    jax.config.update("jax_enable_x64", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", True)
