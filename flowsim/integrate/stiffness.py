"""Whether an explicit Runge–Kutta step was held by stability, from figures the step computed
anyway: Hairer's estimate of h·ρ from its last two stages (DOPRI5's stiffness detection), and
the stability interval of the method's tableau. `flowsim.integrate.runge_kutta` counts such
steps (`stiff_steps`), `flowsim.integrate.auto` switches to ROCK4 after a run of them."""

import diffrax as dfx
import jax
import jax.numpy as jnp
import numpy as np

from ..nn.problem import Params

# Hairer's estimate, as a share of the stability limit, from which a step counts as held by
# stability (`stiff_steps`, and auto's vote for ROCK4).
HELD_SHARE = 0.5


def stiffness_probe(tableau: dfx.ButcherTableau) -> tuple[tuple[float, ...], float]:
    """An explicit tableau's stiffness probe: the weights w with Y_s − Y_{s−1} = Σ_j w_j k_j (its
    last two stages' inputs, k_j = h·f(Y_j)), and the length of the stability interval on the
    negative real axis, where |R(x)| = |1 + x bᵀ(I − xA)⁻¹ 1| ≤ 1 (Tsit5: 3.5; Dopri5: 3.3)."""
    s = len(tableau.b_sol)
    a = np.zeros((s, s))
    for i, row in enumerate(tableau.a_lower):
        a[i + 1, : len(row)] = row
    # A is strictly lower triangular: R(x) = 1 + Σ_{k=1..s} bᵀA^(k−1)1 xᵏ, a polynomial
    coeffs = [1.0] + [float(tableau.b_sol @ np.linalg.matrix_power(a, k - 1) @ np.ones(s)) for k in range(1, s + 1)]
    x = -np.arange(1, 2001) * 1e-2     # [-20, 0] holds every registered method's interval
    limit = -x[np.argmax(np.abs(np.polyval(coeffs[::-1], x)) > 1 + 1e-12) - 1]
    return tuple(float(w) for w in a[-1] - a[-2]), float(limit)


def stage_h_rho(weights: tuple[float, ...], k) -> tuple[jax.Array, Params]:
    """Hairer's estimate of h·ρ from a step's stage increments k (k_j = h·f(Y_j): a sequence of
    pytrees, or one pytree whose leaves stack them along their first axis) and the probe's
    weights: ‖k_s − k_{s−1}‖ / ‖Y_s − Y_{s−1}‖, which approaches h·ρ from below as the stiff
    components dominate the stages' differences; and k_s − k_{s−1}, a direction they
    dominate. 0 where the stages do not differ. Each sum is one fused pass over the stages
    (a tensordot with the weights would be a product of its own, and the stages' stack a copy)."""
    if not isinstance(k, (tuple, list)):
        k = [jax.tree.map(lambda x, j=j: x[j], k) for j in range(len(weights))]
    dk = jax.tree.map(jnp.subtract, k[-1], k[-2])
    num = sum(jnp.sum(x**2) for x in jax.tree.leaves(dk))
    dy = jax.tree.map(lambda *x: sum(w * xj for w, xj in zip(weights, x) if w != 0.0), *k)
    den = sum(jnp.sum(x**2) for x in jax.tree.leaves(dy))
    return jnp.sqrt(num / jnp.where(den > 0, den, 1.0)) * (den > 0), dk


def held(tableau: dfx.ButcherTableau, k) -> jax.Array:
    """Whether the step whose stage increments are `k` (as `stage_h_rho` takes them) reached
    `HELD_SHARE` of the tableau's stability limit."""
    weights, limit = stiffness_probe(tableau)
    h_rho, _ = stage_h_rho(weights, k)
    return h_rho >= HELD_SHARE * limit
