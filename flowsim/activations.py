"""Activation functions by name, declared once: `ACTIVATIONS` is the registry.

Every activation is an elementwise JAX function. Derivatives come from `jax.jvp` with a
unit tangent (elementwise, so one forward-mode pass), which keeps one source of truth for
each function: the closed-form NTG and the autodiff oracle cannot disagree about σ'.
A scenario may name its own activation by import path ("package.module:name",
`flowsim.plugins`): it is looked up here like a registry name.
"""

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp

from . import plugins

Elementwise = Callable[[jax.Array], jax.Array]

LEAKY_RELU_SLOPE = 0.01


def _derivative_of(sigma: Elementwise) -> Elementwise:
    def sigma_prime(z: jax.Array) -> jax.Array:
        return jax.jvp(sigma, (z,), (jnp.ones_like(z),))[1]

    return sigma_prime


@dataclass(frozen=True)
class Activation:
    name: str
    fn: Elementwise
    # σ' continuous: κ_n uses Gauss–Hermite quadrature. The others are piecewise linear
    # (relu, leaky-relu), whose κ_n has the arc-cosine closed form.
    smooth: bool
    # σ' on the negative side of a piecewise-linear activation (σ' is 1 on the positive
    # side): what the Filippov integrator needs to know of it. None for the others.
    low_slope: float | None = None
    derivative: Elementwise = field(init=False)   # elementwise σ' (σ'(0) = 0 for relu, as JAX defines it)

    def __post_init__(self):
        object.__setattr__(self, "derivative", _derivative_of(self.fn))


ACTIVATIONS: dict[str, Activation] = {a.name: a for a in (
    Activation("relu", jax.nn.relu, smooth=False, low_slope=0.0),
    Activation("leaky-relu", lambda z: jax.nn.leaky_relu(z, LEAKY_RELU_SLOPE), smooth=False,
               low_slope=LEAKY_RELU_SLOPE),
    Activation("swish", jax.nn.swish, smooth=True),
    Activation("tanh", jnp.tanh, smooth=True),
    Activation("sigmoid", jax.nn.sigmoid, smooth=True),
    Activation("softplus", jax.nn.softplus, smooth=True),
    Activation("gelu", lambda z: jax.nn.gelu(z, approximate=False), smooth=True),
    Activation("identity", lambda z: z, smooth=True),
)}

# The names whose κ_n needs quadrature (flowsim.theory picks its method by this set).
SMOOTH = frozenset(name for name, a in ACTIVATIONS.items() if a.smooth)
# The piecewise-linear ones, with σ' on the negative side (flowsim.integrate.filippov).
PIECEWISE_LINEAR = {name: a.low_slope for name, a in ACTIVATIONS.items() if a.low_slope is not None}


@functools.cache
def _entry(name: str) -> Activation:
    if plugins.is_path(name):   # validated (imported once) by the scenario loader
        return Activation(name, plugins.load(name), smooth=False)
    try:
        return ACTIVATIONS[name]
    except KeyError:
        allowed = ", ".join(sorted(ACTIVATIONS))
        raise ValueError(f"unknown activation {name!r}; allowed: {allowed}") from None


def activation(name: str) -> Elementwise:
    """The activation called `name`; raises `ValueError` listing the allowed names."""
    return _entry(name).fn


def derivative(name: str) -> Elementwise:
    """Elementwise σ' of the activation called `name` (σ'(0) = 0 for relu, as JAX defines it)."""
    return _entry(name).derivative
