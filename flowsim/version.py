"""flowsim's version (its own module, so that the modules that record it need not import
the package, whose attributes load the library lazily)."""

__version__ = "0.1.0"
