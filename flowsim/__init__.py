"""flowsim: exact gradient flow of wide shallow networks, with gradient descent beside it."""

import jax

# Float64 is the default so that an "exact" flow at rtol 1e-8..1e-12 means something; a
# scenario may still choose float32 (arrays are then created in float32 explicitly).
jax.config.update("jax_enable_x64", True)

__version__ = "0.1.0"

from .archive import open  # noqa: E402,A004  (flowsim.open reads an archive)

__all__ = ["open", "__version__"]
