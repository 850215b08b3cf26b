"""Activation functions by name: `ACTIVATIONS` is the registry (the names and what validation
knows of them are declared in `flowsim.kinds`).

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

from .. import plugins
from ..kinds import ACTIVATIONS as _KINDS
from ..kinds import LEAKY_RELU_SLOPE as LEAKY_RELU_SLOPE
from ..kinds import PIECEWISE_LINEAR as PIECEWISE_LINEAR
from ..kinds import SMOOTH as SMOOTH

Elementwise = Callable[[jax.Array], jax.Array]


def _derivative_of(sigma: Elementwise) -> Elementwise:
    def sigma_prime(z: jax.Array) -> jax.Array:
        return jax.jvp(sigma, (z,), (jnp.ones_like(z),))[1]

    return sigma_prime


@dataclass(frozen=True)
class Activation:
    name: str
    fn: Elementwise
    smooth: bool                    # (see flowsim.kinds.ActivationKind)
    low_slope: float | None = None
    derivative: Elementwise = field(init=False)   # elementwise σ' (σ'(0) = 0 for relu, as JAX defines it)

    def __post_init__(self):
        object.__setattr__(self, "derivative", _derivative_of(self.fn))


_FUNCTIONS: dict[str, Elementwise] = {
    "relu": jax.nn.relu,
    "leaky-relu": lambda z: jax.nn.leaky_relu(z, LEAKY_RELU_SLOPE),
    "swish": jax.nn.swish,
    "tanh": jnp.tanh,
    "sigmoid": jax.nn.sigmoid,
    "softplus": jax.nn.softplus,
    "gelu": lambda z: jax.nn.gelu(z, approximate=False),
    "identity": lambda z: z,
}
# Every activation flowsim.kinds declares, with its function.
ACTIVATIONS: dict[str, Activation] = {name: Activation(name, _FUNCTIONS[name], smooth=k.smooth,
                                                       low_slope=k.low_slope) for name, k in _KINDS.items()}


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
