"""Float64 in JAX, turned on by the run that needs it rather than by `import flowsim`.

Float64 is the default so that an "exact" flow at rtol 1e-8..1e-12 means something; a
scenario may still choose float32 (arrays are then created in float32 explicitly), and
float32 runs rely on int64 step counters and float64 times too, so every run turns it on."""

import logging

import jax

_log = logging.getLogger("flowsim")


def enable_x64() -> None:
    """Turn on `jax_enable_x64` (idempotent: says so once, at INFO, when it changes it)."""
    if jax.config.jax_enable_x64:
        return
    jax.config.update("jax_enable_x64", True)
    _log.info("turned on jax_enable_x64 (float64, int64 step counters)")
