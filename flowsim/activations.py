"""Activation functions by name, and their derivatives.

Every activation is an elementwise JAX function. Derivatives come from `jax.jvp` with a
unit tangent (elementwise, so one forward-mode pass), which keeps one source of truth for
each function: the closed-form NTG and the autodiff oracle cannot disagree about σ'.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp

LEAKY_RELU_SLOPE = 0.01

ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "relu": jax.nn.relu,
    "leaky-relu": lambda z: jax.nn.leaky_relu(z, LEAKY_RELU_SLOPE),
    "swish": jax.nn.swish,
    "tanh": jnp.tanh,
    "sigmoid": jax.nn.sigmoid,
    "softplus": jax.nn.softplus,
    "gelu": lambda z: jax.nn.gelu(z, approximate=False),
    "identity": lambda z: z,
}

# Activations whose derivative is continuous; κ_n uses quadrature for these and the
# arc-cosine closed form for relu.
SMOOTH = frozenset({"swish", "tanh", "sigmoid", "softplus", "gelu", "identity"})


def activation(name: str) -> Callable[[jax.Array], jax.Array]:
    """The activation called `name`; raises `ValueError` listing the allowed names."""
    try:
        return ACTIVATIONS[name]
    except KeyError:
        allowed = ", ".join(sorted(ACTIVATIONS))
        raise ValueError(f"unknown activation {name!r}; allowed: {allowed}") from None


def derivative(name: str) -> Callable[[jax.Array], jax.Array]:
    """Elementwise σ' of the activation called `name` (σ'(0) = 0 for relu, as JAX defines it)."""
    sigma = activation(name)

    def sigma_prime(z: jax.Array) -> jax.Array:
        return jax.jvp(sigma, (z,), (jnp.ones_like(z),))[1]

    return sigma_prime
