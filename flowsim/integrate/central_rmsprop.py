"""RMSProp's preconditioner in the central flow (Cohen, Damian et al., ICLR 2025, §RMSProp):
what `flowsim.integrate.central_field.central_point` adds to GD's central flow when it is
handed RMSProp's stable flow (`flowsim.integrate.adaptive_flows.RmspropFlow`) as its form.

RMSProp steps w ← w − η g/D, D = √ν + ε (ν updated first), g = ∇L̃ (L̃ = rate·L): GD with
the preconditioner P = D/η. In flowsim's time t = kη its central flow, in (w, ν), is

    dw/dt = −D⁻¹ [g + ½ ∇_w⟨∇²L̃, Σ⟩],
    dν/dt = (1 − β₂)/(β₂η) · (g ⊙ g + diag(∇²L̃ Σ ∇²L̃) − ν),      Σ = U X Uᵀ, X ⪰ 0,

from ν(0) = g₀ ⊙ g₀. ν's equation is the time average of RMSProp's: E[(g + Hδ)²] with the
weights' oscillation δ of covariance Σ adds diag(HΣH), the gradient's covariance (as the
authors' PyTorch code has it; the JAX package adds diag(Σ), the weights' own: docs/optimizers.md).
The stability condition is 2P − ∇²L̃ ⪰ 0 on the tracked directions: the effective
eigenvalues ηλ, λ those of D^{-1/2}∇²L̃D^{-1/2}, at most 2, i.e. λ ≤ 2/η as GD's. U holds
D^{-1/2}V, V the top eigenvectors of D^{-1/2}∇²L̃D^{-1/2} (orthonormal), so that UᵀDU = I and
Uᵀ∇²L̃U = diag λ; ∇²L̃u_a = λ_a D u_a. With U held fixed, the margins A = Uᵀ(2D/η − ∇²L̃)U =
2/η − diag λ move as

    dA/dt = (2/η) Uᵀ diag(∂D/∂ν ⊙ dν/dt) U − Uᵀ (d∇²L̃/dt) U,

and (d∇²L̃/dt)_ij = ⟨g_ij, dw/dt⟩, g_ij = ∇_w(u_iᵀ∇²L̃u_j) the third-derivative vectors. Both
terms are affine in X: dA/dt = α + T[X] with

    α_ij = ⟨g_ij, g/D⟩ + (2/η) Σ_n u_ni u_nj ∂D_n/∂ν_n · c (g_n² − ν_n),
    T[X]_ij = ½ Σ_ab ⟨g_ij, g_ab/D⟩ X_ab + (2/η) c Σ_n u_ni u_nj ∂D_n/∂ν_n (∇²L̃ U X Uᵀ∇²L̃)_nn,

c = (1 − β₂)/(β₂η): X's off-diagonal entries enter Σ, and so diag(HΣH), with their full
weight (X_ab and X_ba, 2 X_ab in all; the package's packed vectors give them √2). The first
part of T is the Gram operator of g/√D, positive semidefinite; the second (ν's response to X,
the preconditioner growing with the oscillation) is c ≈ 0.01 per step times it in size. X
solves the same relaxed complementarity problem as GD's (`central_field`, κ = 1/η).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from . import sdcp


class Preconditioned(eqx.Module):
    """RMSProp's preconditioner at one state (flat vectors over the weights)."""

    root: jax.Array      # √D
    D: jax.Array         # √ν + ε (√(ν + ε) with eps_in_sqrt)
    slope: jax.Array     # ∂D/∂ν
    nu: jax.Array
    g: jax.Array         # ∇L̃
    c: jax.Array         # ν's rate (1 − β₂)/(β₂η)
    eta: jax.Array

    @classmethod
    def at(cls, form, y: dict, g: jax.Array, eta) -> "Preconditioned":
        nu = ravel_pytree(y["nu"])[0]
        D = ravel_pytree(form.preconditioner(y))[0]
        return cls(root=jnp.sqrt(D), D=D, slope=ravel_pytree(form.denominator_slope(y))[0], nu=nu, g=g,
                   c=form.nu_rate(nu.dtype), eta=eta)

    def symmetric(self, hvp):
        """v ↦ D^{-1/2}∇²L̃D^{-1/2}v, whose eigenvalues are held at 2/η."""
        return lambda v: hvp(v / self.root) / self.root

    def directions(self, V: jax.Array) -> jax.Array:
        """Σ's directions U = D^{-1/2}V (UᵀDU = I) from the tracked eigenvectors V."""
        return V / self.root[:, None]

    def symmetric_images(self, HV: jax.Array) -> jax.Array:
        """The images D^{-1/2}∇²L̃D^{-1/2}V under `symmetric`'s operator from ∇²L̃'s of the
        directions, HV = ∇²L̃·D^{-1/2}V."""
        return HV / self.root[:, None]

    def _images(self, U: jax.Array, lam: jax.Array) -> jax.Array:
        """∇²L̃U = D U diag λ (the tracked pairs' own relation: no product)."""
        return self.D[:, None] * U * lam[None, :]

    def stability(self, U: jax.Array, lam: jax.Array, candidates: jax.Array):
        """The preconditioner's own part of (α, T) in the margins' rate dA/dt = α + T[X] (the
        module's docstring), beside the third-derivative vectors' (`central_field` forms those:
        ⟨g_ij, g/D⟩ and the Gram operator of g/√D); the columns off `candidates` have no third
        derivatives and are left out of this part too, so that X stays zero on them as in GD's
        problem."""
        U = jnp.where(candidates[None, :], U, 0.0)
        weight = (2 / self.eta) * self.slope                       # ∂(2D/η)/∂ν
        alpha = (U * (weight * self.c * (self.g ** 2 - self.nu))[:, None]).T @ U
        HU = self._images(U, lam)
        return alpha, self.c * jnp.einsum("ni,nj,n,na,nb->ijab", U, U, weight, HU, HU)

    def velocity(self, y: dict, v: jax.Array, U: jax.Array, lam: jax.Array, X: jax.Array, unravel) -> dict:
        """(dw/dt, dν/dt) from v = −g − ½⟨g_ab, X_ab⟩ (the bracket of dw/dt)."""
        HU = self._images(U, lam)
        gradient_covariance = jnp.sum((HU @ X) * HU, axis=1)       # diag(∇²L̃ Σ ∇²L̃)
        return {"w": unravel(v / self.D), "nu": unravel(self.c * (self.g ** 2 + gradient_covariance - self.nu))}
