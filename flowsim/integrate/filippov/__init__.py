"""The exact gradient flow of a shallow ReLU (or leaky-ReLU) network through its kinks: an
event-driven Filippov integrator (`../shared/RELU-FILIPPOV.md` has the measurements and the
mathematics; DESIGN.md §1 the network).

With s_ji = w_j·x_i/√d and the output layer fixed, the velocity of w_j is

    ẇ_j = Σ_i b_ji D_ji x_i,   b_ji = −rate c_j (a_j · ∂L/∂f_i)/√d,   D_ji = σ'(s_ji),

and D_ji jumps (between `low` = σ' on the negative side and 1) where s_ji crosses 0.

A *mode* fixes every D: `active` says which side each pair is on, and `slide` lists the
pairs held on their surface s_ji = 0. Within a mode the field is smooth, so Dormand–Prince
5(4) steps with error control are accurate to high order (the error is held to the
tolerances in W and, relative to its size, in the loss gradient, which near a minimum W's
tolerances alone leave unresolved); the predictions use the mode's
D too (f = Σ c a D s), the smooth continuation of each branch past its kink, so that a
step straddling a kink is still a step of one smooth field. A sliding pair contributes
whatever keeps it on its surface: w_j's velocity is projected off span{x_i : i slides}
(the equivalent control; the Filippov convex hull is this one vector here, the field
being affine in the D's). The control of pair i is δ_ji = −μ_i/b_ji, μ = G⁻¹ X_S u, and
the pair slides as long as δ_ji stays within [low, 1].

Events, located on the step's dense output (the quartic of the Dormand–Prince step):
- a crossing: s_ji of a pair off its surface changes sign (sampled at 16 points of the
  step, then the first located to 2⁻⁴⁰ of the step by safeguarded Newton on the lowest
  of the crossing pairs);
- an exit: a sliding pair's δ leaves [low, 1] by the exit slack, weighted by the force the
  pair can exert (`modes._violation`; a safeguarded secant on the worst one,
  `events.first_exit`, to 1e-10 of the step), looked for up to the first crossing, the
  step's end or, where a slider's b_ji changes sign within the step (δ through a pole,
  `events.first_pole`), the first sample after it.
The step is truncated at the first event (its end value read from the dense output, whose
error is of the step's order), every pair on a surface at that point is put back on it
exactly (an orthogonal correction of w_j), and the new mode is resolved node by node by
an active-set solve over the pairs on surfaces (`modes.resolve`): a pair slides where both
sides push into its surface (b_ji < 0 and δ within [low, 1]), otherwise it goes to the
side its velocity points to. Then stepping restarts (the first stage is evaluated again).

All of it runs in `lax.while_loop`s per segment: no Python per step or per event. A node
may slide on at most `slots` surfaces at once (the preset's key, 8 by default; the
prototype saw 4; never more than min(n, d), see `modes.initial_mode`): more ends the
member with status `failed`, and a larger `slots` goes on. A step's cost grows as slots² per node, so
each segment is stepped with 4 slots while every node's sliders fit in them, then with 8,
and so on (`FilippovIntegrator.advance`).
The flow of a trained output layer, smooth activations and deeper networks are out of
scope: the loader refuses them by name.

The package in three parts: `modes.py`, the mode algebra (a mode's field, the sliders'
controls, the resolution of a mode after an event, the projected NTG); `events.py`, the
events on a step's dense output (crossings, exits, the poles of the controls); and
`integrator.py`, the integrator that steps, truncates at events and counts them.
"""

from .integrator import FilippovIntegrator as FilippovIntegrator
from .integrator import FilippovState as FilippovState
from .integrator import filippov_integrator as filippov_integrator
