"""flowsim: exact gradient flow of wide shallow networks, with gradient descent beside it.

Importing flowsim changes no global JAX setting (and imports no JAX): a run turns float64
on itself (flowsim.precision)."""

__version__ = "0.1.0"

from .archive import open as open  # noqa: E402,A004  (flowsim.open reads an archive)

__all__ = ["open", "__version__"]
