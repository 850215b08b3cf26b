"""The network protocol, declared once: `AbstractNet` is what a `Problem`, the observables
(and so the series `flowsim compare` reads) and the integrators may ask of a network.

It is an abstract Equinox module, the way Diffrax declares `AbstractSolver`: a network
holds what never moves and is called with its trainable `params` (the ODE state, GD's state
and the checkpoint alike). It reports its neural tangent Gram matrix and the weight
measures that the observables `weights`, `weight_change` and `unit_change` record, and
names those series' axes in `series_axes` (a shallow network's per hidden node, a
user's model's per trainable leaf). The shipped networks subclass it
(`flowsim.models.ShallowNet`; `flowsim.models.ModuleNet`, which carries any Equinox model
of a user's or of the `mlp` kind). A subclass that leaves one of them out cannot be
instantiated (the error names what is missing), and a `Problem` refuses an object that is
not an `AbstractNet`.
"""

import abc

import equinox as eqx
import jax

Params = dict[str, jax.Array]

# The series whose axes a network names (`series_axes`): its weight measures.
NET_SERIES = ("weights", "weight_change", "unit_change")


class AbstractNet(eqx.Module):
    # series -> the axis names of one checkpoint's value, for each of NET_SERIES
    series_axes: eqx.AbstractClassVar[dict[str, tuple[str, ...]]]

    @property
    def smooth(self) -> bool:
        """Whether the outputs are twice continuously differentiable in the params everywhere
        (no ReLU kinks), so that a difference of gradients is a Hessian-vector product to
        round-off (`flowsim.observe.stability.hessian_matvec`). False where flowsim cannot
        know (a user's module)."""
        return False

    @abc.abstractmethod
    def __call__(self, params: Params, X: jax.Array) -> jax.Array:
        """Predictions (n, k) at inputs X (n, d)."""

    @abc.abstractmethod
    def ntg(self, params: Params, X: jax.Array) -> jax.Array:
        """The neural tangent Gram matrix (n, n) of the first output at the inputs X."""

    @abc.abstractmethod
    def weights(self, params: Params) -> jax.Array:
        """The `weights` series: the trainable weights laid out along `series_axes["weights"]`."""

    @abc.abstractmethod
    def weight_change(self, params: Params, params0: Params) -> jax.Array:
        """The `weight_change` series: how far each group of weights (a hidden node's, a
        trainable leaf) has moved from `params0`, ‖θ_g − θ_g(0)‖."""

    @abc.abstractmethod
    def unit_change(self, params: Params, params0: Params) -> jax.Array:
        """The `unit_change` series: ‖w_i − w_i(0)‖ of each dense unit's incoming weights."""


def refuse_non_net(net: object, where: str) -> None:
    """A TypeError naming `where` and what a network must offer, unless `net` is an
    `AbstractNet`."""
    if not isinstance(net, AbstractNet):
        methods = ", ".join(sorted(AbstractNet.__abstractmethods__))
        raise TypeError(f"{where}: a {type(net).__module__}.{type(net).__qualname__} is not a network; allowed: "
                        f"a subclass of flowsim.nn.net.AbstractNet, with the methods {methods} and the class "
                        f"attribute series_axes (the axes of {', '.join(NET_SERIES)}); a user's Equinox "
                        "model (one input to its outputs) goes through flowsim.models.ModuleNet")
