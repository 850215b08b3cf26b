"""The solver advisor: what a flow's statistics say about the preset that should integrate it.

It reads only the statistics every flow keeps (no extra evaluations), so the driver can ask
after each chunk, and `inspect` can ask of an archive. Two patterns:
- **Steps held by stability.** An explicit Runge–Kutta method counts an accepted step in
  `stiff_steps` when its estimate of h·λ_max (Hairer's, from its last two stages) reaches
  half its stability limit (`flowsim.integrate.flow`). When most steps are so held, the step
  is set by the sharpness, not the tolerance: loosening rtol saves nothing, and `rock4`,
  whose cost grows like √λ_max, is the method for the flow (`STIFF-FLOWS.md`: tsit5 held on
  86 % of its steps on cohen-eos-quick, 0 % on quickstart).
- **Rejections clustered.** A vector field with kinks (ReLU, max-pool, abs) makes an
  error-controlled method shrink its step at every kink and reject many tries: a ReLU + max-
  pool CNN under tsit5 rejected 889 of 2 134 steps and reached t = 3.6 of 200 in 300 s.
Pure Python (no JAX), so that reading an archive does not import the engine.
"""

from collections.abc import Mapping

from ..integrate.registry import FLOW_METHODS

# Accepted steps before the advisor speaks: the first steps (the initial transient, the step
# size search) say little of either pattern.
MIN_STEPS = 50
HELD_SHARE = 0.5        # of accepted steps, held by stability
REJECTED_SHARE = 0.25   # of all steps, rejected (a smooth flow under step control: a few %)


def advise(method: str, stats: Mapping[str, int]) -> str | None:
    """One line of advice for a flow integrated by `method` with `stats` (summed over the
    seeds of a batch, or one member's), or None."""
    flow = FLOW_METHODS.get(method)
    if flow is None:
        return None
    steps, accepted = int(stats.get("steps", 0)), int(stats.get("accepted", 0))
    rejected, held = int(stats.get("rejected", 0)), int(stats.get("stiff_steps", 0))
    explicit = not (flow.implicit or flow.filippov or flow.stabilised)
    if explicit and accepted >= MIN_STEPS and held >= HELD_SHARE * accepted:
        return (f"{method}'s steps were held by stability on {100 * held / accepted:.0f} % of {accepted} accepted "
                f"steps (h·λ_max at its limit): the flow is stiff, and its cost grows like the sharpness whatever "
                f"rtol is; the preset \"rock4\" pays √sharpness (solvers = [\"rock4\", …])")
    if not flow.filippov and steps >= MIN_STEPS and rejected >= REJECTED_SHARE * steps:
        return (f"{rejected} of {steps} steps of {method} were rejected: the vector field is likely not smooth "
                f"(ReLU, max-pool, abs) and every kink costs shrinking steps; \"filippov\" integrates shallow "
                f"ReLU networks with a fixed output layer through their kinks exactly; for other kinked models "
                f"use a low-order preset such as \"bosh3-relu\" (rtol 1e-4) with a `reference` flow as its "
                f"certificate")
    return None
