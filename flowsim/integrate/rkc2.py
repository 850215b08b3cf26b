"""RKC2 (Sommeijer, Shampine & Verwer 1998): the second-order Runge–Kutta–Chebyshev method
with damping ε = 2/13 and its standard error estimate, stepped like ROCK4
(`flowsim.integrate.rock4.AbstractStabilised`: the same power-iteration ρ, its refreshes and
its retry after a rejection, the same controller and the same reading of a checkpoint inside a
step: a shorter step from its start).

Why a second stabilised method: ROCK4's finishing procedure amplifies round-off by about
0.01 (h·ρ)⁴, which holds its steps to h·ρ ≤ 464 at rtol 1e-6 (`rock4.roundoff_bound`), and
edge-of-stability work asks for 1e-3 … 1e-5, where a second-order step is long. RKC2 has no
finishing procedure: all s stages are the three-term Chebyshev recurrence, whose internal
perturbations grow at most like s² (Verwer, Hundsdorfer & Sommeijer 1990), so its steps are
held by stability alone, up to `MAX_STAGES`.

A step of s stages (s = 1 + ⌊√(1 + 1.54 h·ρ)⌋, at least 2, as RKC chooses it): with
w0 = 1 + ε/s², w1 = T_s'(w0)/T_s''(w0), b_j = T_j''(w0)/T_j'(w0)² (b_0 = b_1 = b_2) and
a_j = 1 − b_j T_j(w0),

    Y_1 = Y_0 + μ̃_1 h F(Y_0),   μ̃_1 = b_1 w1,
    Y_j = (1 − μ_j − ν_j) Y_0 + μ_j Y_{j−1} + ν_j Y_{j−2} + μ̃_j h F(Y_{j−1}) + γ̃_j h F(Y_0),
    μ_j = 2 b_j w0 / b_{j−1},  ν_j = −b_j / b_{j−2},  μ̃_j = 2 b_j w1 / b_{j−1},  γ̃_j = −a_{j−1} μ̃_j,

y1 = Y_s. Its stability polynomial a_s + b_s T_s(w0 + w1 z) stays within [−1, 1] on
[−β(s), 0], β ≈ 0.653 s². The error estimate is RKC's:
(12 (y0 − y1) + 6 h (F(y0) + F(y1))) / 15, the local error's leading term, O(h³) (on
y' = λy at s = 2: z³/5 against the true −z³/6). A step costs s evaluations: F(y0) is the
last step's F(y1).

Tolerance: a second-order method whose local error per step is held to tol takes N ∝ tol^(−1/3)
steps and ends about N·tol ∝ tol^(2/3) from the flow, so its error is not proportional to its
tolerance (the SCALE.md prototype: 20× rtol at 1e-5; here, on a tanh network to t = 50: 4.5,
11, 23 × rtol at rtol 1e-3, 1e-4, 1e-5). The step control is therefore handed
`local_tolerances(rtol, atol)`: rtol^(3/2), so that N·tol ∝ rtol (measured on that network:
0.46, 0.53, 0.57 × rtol; tests/test_rkc2.py).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ..nn.problem import Params
from .flow import FlowIntegrator, flow_term, stepping
from ..kinds.solvers import Accuracy, FlowMethod, Stabilised, StepControl
from .rock4 import AbstractStabilised

DAMPING = 2.0 / 13.0
# Stages at most: h·ρ up to β(MAX_STAGES) ≈ 0.653 · 200² = 26 000 in one step.
MAX_STAGES = 200


def local_tolerances(rtol: float, atol: float) -> tuple[float, float]:
    """The step control's tolerances for an RKC2 flow asked for `rtol`, `atol` at its end:
    rtol^(3/2), and atol scaled alike (see the module's docstring)."""
    return rtol**1.5, atol * rtol**0.5


def stages(h_rho) -> jax.Array:
    """RKC's stage count for h·ρ: 1 + ⌊√(1 + 1.54 h·ρ)⌋, within [2, MAX_STAGES]."""
    return jnp.clip(1 + jnp.floor(jnp.sqrt(1.0 + 1.54 * h_rho)), 2, MAX_STAGES).astype(jnp.int32)


def _chebyshev(s, x):
    """T_j(x), T_j'(x), T_j''(x) for j = 0 … MAX_STAGES (entries past s unused)."""
    n = MAX_STAGES + 1
    t = jnp.zeros(n, x.dtype).at[0].set(1.0).at[1].set(x)
    d1 = jnp.zeros(n, x.dtype).at[1].set(1.0)
    d2 = jnp.zeros(n, x.dtype)

    def one(j, c):
        t, d1, d2 = c
        t = t.at[j].set(2 * x * t[j - 1] - t[j - 2])
        d1 = d1.at[j].set(2 * t[j - 1] + 2 * x * d1[j - 1] - d1[j - 2])
        d2 = d2.at[j].set(4 * d1[j - 1] + 2 * x * d2[j - 1] - d2[j - 2])
        return t, d1, d2

    return jax.lax.fori_loop(2, s + 1, one, (t, d1, d2))


def coefficients(s) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """w0, w1, b_j and a_j (j = 0 … MAX_STAGES) of the s-stage method."""
    w0 = 1.0 + DAMPING / jnp.asarray(s, jnp.float64) ** 2
    t, d1, d2 = _chebyshev(s, w0)
    w1 = d1[s] / d2[s]
    j = jnp.arange(MAX_STAGES + 1)
    b = jnp.where(j >= 2, d2 / jnp.where(j >= 2, d1, 1.0) ** 2, d2[2] / d1[2] ** 2)
    return w0, w1, b, 1.0 - b * t


def beta(s: int) -> float:
    """The length of the s-stage method's stability interval: z = −x where the argument
    w0 + w1 z of T_s reaches −1, x = (1 + w0)/w1 (float64, NumPy's Chebyshev series)."""
    w0 = 1.0 + DAMPING / s**2
    t = np.polynomial.Chebyshev.basis(s)
    return float((1.0 + w0) * t.deriv(2)(w0) / t.deriv(1)(w0))


#: The largest h·ρ a step can take: the last that `stages` gives MAX_STAGES or fewer.
MAX_H_RHO = ((MAX_STAGES - 1) ** 2 - 1) / 1.54


class Rkc2(AbstractStabilised):
    """RKC2, a step of s stages costing s evaluations."""

    h_rho_max: float | jax.Array = MAX_H_RHO

    def order(self, terms) -> int:
        return 2

    def error_order(self, terms) -> int:
        # the estimate is the local error's O(h³) term: RKC scales the step by err^(-1/3)
        return 3

    def advance_with(self, field, t0, t1, y0: Params, f0: Params, rho):
        y1, evaluations = self.solution_with(field, t0, t1, y0, f0, rho)
        h = t1 - t0
        f1, _ = field(t1, y1)
        y_error = jax.tree.map(lambda a0, a1, g0, g1: (12 * (a0 - a1) + 6 * h * (g0 + g1)) / 15, y0, y1, f0, f1)
        dense = {"y0": y0, "y1": y1, "k": jax.tree.map(lambda a, c: jnp.stack([h * a, h * c]), f0, f1)}
        # s − 1 stage evaluations and f(y1)
        return y1, y_error, dense, f1, evaluations + 1

    def solution_with(self, field, t0, t1, y0: Params, f0: Params, rho):
        h = t1 - t0
        s = stages(h * rho)
        w0, w1, b, a = coefficients(s)

        def stage(j, carry):
            (before, t_before), (last, t_last) = carry
            mu, nu = 2 * b[j] * w0 / b[j - 1], -b[j] / b[j - 2]
            mu_t = 2 * b[j] * w1 / b[j - 1]
            gamma_t = -a[j - 1] * mu_t
            f, _ = field(t_last, last)
            y = jax.tree.map(
                lambda y0, u, p, f, f0: (1 - mu - nu) * y0 + mu * u + nu * p + h * (mu_t * f + gamma_t * f0),
                y0, last, before, f, f0)
            tj = (1 - mu - nu) * t0 + mu * t_last + nu * t_before + h * (mu_t + gamma_t)
            return (last, t_last), (y, tj)

        mu1 = b[1] * w1
        first = (jax.tree.map(lambda y, f: y + h * mu1 * f, y0, f0), t0 + h * mu1)
        _, (y1, _) = jax.lax.fori_loop(2, s + 1, stage, ((y0, t0), first))
        return y1, s - 1


def rkc2_integrator(spec: FlowMethod, *, accuracy: Accuracy, step_control: StepControl, stabilised: Stabilised,
                    learning_rate: float | None = None, stop_loss: float = 0.0) -> FlowIntegrator:
    """The factory the registry names for rkc2: its step control at the local tolerances its
    global error asks (the module's docstring)."""
    rtol, atol = local_tolerances(accuracy.rtol, accuracy.atol)
    solver = Rkc2(rho_every=stabilised.rho_every, rho_safety=stabilised.rho_safety)
    return FlowIntegrator(solver=solver, **stepping(dataclasses.replace(accuracy, rtol=rtol, atol=atol),
                                                    step_control, stop_loss), term=flow_term(learning_rate))
