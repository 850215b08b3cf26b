"""Fully connected networks of any depth: `model.kind = "mlp"`.

    h⁰ = x,   hˡ = σ(cₗ Wₗ hˡ⁻¹ + bₗ)  (l < L),   f(x) = c_L W_L h^{L−1} + b_L

with widths n₀ = d, n₁ … n_{L−1} = `widths`, n_L = k, and a parameterisation that sets the
initial variance of Wₗ and its forward multiplier cₗ (σ = `init_std`, fan_in = nₗ₋₁):

    standard     Wₗ ~ N(0, σ²/fan_in),  cₗ = 1            (LeCun init; PyTorch's scale)
    ntk          Wₗ ~ N(0, σ²),         cₗ = 1/√fan_in     (Jacot et al. 2018)
    mean-field   as ntk, but the output layer c_L = 1/fan_in (f → 0 at init as width grows)
    mup          Wₗ ~ N(0, σ²/n),  c₁ = √n₁ (input layer, n = n₁ its width), cₗ = 1 (hidden,
                 n = fan_in), c_L = 1/√fan_in (output, n = fan_in)

Under the gradient flow dθ/dt = −∇L the parameterisations differ in their per-layer
effective learning rates, which is what the NTK, mean-field and µP limits are about. µP is
Yang & Hu (2021)'s abc-parameterisation with one learning rate for every layer (a = −½, 0,
½ for the input, hidden and output layers, b = ½, c = 0; their Table 3): the symmetry
(a, b, c) → (a + θ, b − θ, c − 2θ) moves per-layer learning rates into the multipliers and
the initial variances, so the plain flow realises it. Biases start at zero and are not
rescaled (a simplification: in µP the input layer's bias would carry c₁ too).

The network is an Equinox module, run through `ModuleNet` like a user's model: `train`
picks the layers whose weights (and biases) move.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp

from ..kinds import SMOOTH
from ..nn.activations import activation
from ..config.typed import Config, MlpModel
from ..data import Dataset
from .base import Network, dtype_of
from .module import module_network


class MLP(eqx.Module):
    weights: tuple[jax.Array, ...]          # (nₗ, nₗ₋₁) per layer
    biases: tuple[jax.Array | None, ...]    # (nₗ,) per layer, or None without biases
    multipliers: tuple[float, ...] = eqx.field(static=True)
    activation: str = eqx.field(static=True)

    def __call__(self, x: jax.Array) -> jax.Array:
        sigma = activation(self.activation)
        h = x
        last = len(self.weights) - 1
        for i, (W, b, c) in enumerate(zip(self.weights, self.biases, self.multipliers)):
            h = c * (W @ h) + (0.0 if b is None else b)
            if i < last:
                h = sigma(h)
        return h


def init_mlp(key: jax.Array, sizes: list[int], *, parameterisation: str, init_std: float, bias: bool,
             activation_name: str, dtype=jnp.float64) -> MLP:
    """Draw an MLP with layer sizes `sizes` = [d, n₁, …, k]."""
    layers = len(sizes) - 1
    weights, biases, multipliers = [], [], []
    for i, key_i in enumerate(jax.random.split(key, layers)):
        fan_in, fan_out = sizes[i], sizes[i + 1]
        W = init_std * jax.random.normal(key_i, (fan_out, fan_in), dtype)
        if parameterisation == "standard":
            W, c = W / math.sqrt(fan_in), 1.0
        elif parameterisation == "mup":   # n: the layer's width (d and k are O(1) in µP)
            n = fan_out if i == 0 else fan_in
            W = W / math.sqrt(n)
            c = math.sqrt(n) if i == 0 else 1.0 / math.sqrt(fan_in) if i == layers - 1 else 1.0
        elif parameterisation == "mean-field" and i == layers - 1:
            c = 1.0 / fan_in
        else:   # ntk, and mean-field's hidden layers
            c = 1.0 / math.sqrt(fan_in)
        weights.append(W)
        biases.append(jnp.zeros(fan_out, dtype) if bias else None)
        multipliers.append(c)
    return MLP(weights=tuple(weights), biases=tuple(biases), multipliers=tuple(multipliers),
               activation=activation_name)


def trained_layers(model: MlpModel) -> list[int]:
    layers = len(model.widths) + 1
    return list(range(layers)) if model.train == "all" else list(model.train)


def build_mlp(config: Config, ds: Dataset, seed: int) -> Network:
    """Network and initial weights of one run of `model.kind = "mlp"`."""
    model = config.model
    dtype = dtype_of(config)
    model_key, solver_key = jax.random.split(jax.random.PRNGKey(seed))
    sizes = [ds.X_train.shape[1], *model.widths, ds.y_train.shape[1]]
    net = init_mlp(model_key, sizes, parameterisation=model.parameterisation, init_std=model.init_std,
                   bias=model.bias, activation_name=model.activation, dtype=dtype)
    train = set(trained_layers(model))
    trainable = MLP(weights=tuple(i in train for i in range(len(net.weights))),
                    biases=tuple(None if b is None else i in train for i, b in enumerate(net.biases)),
                    multipliers=net.multipliers, activation=net.activation)
    params, frozen = eqx.partition(net, trainable)
    return module_network(params, frozen, solver_key, smooth=model.activation in SMOOTH)
