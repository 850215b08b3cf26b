"""The solver advisor: what a flow's statistics say about the preset that should integrate it.

It reads only the statistics every flow keeps (no extra evaluations), so the driver can ask
after each chunk, and `inspect` can ask of an archive. Two patterns:
- **Steps held by stability.** An explicit Runge–Kutta method counts an accepted step in
  `stiff_steps` when its estimate of h·λ_max (Hairer's, from its last two stages) reaches
  half its stability limit (`flowsim.integrate.flow`). When most steps are so held, the step
  is set by the sharpness, not the tolerance: loosening rtol saves nothing, and `auto` (which
  turns to ROCK4 there) or `rock4`, whose cost grows like √λ_max, is the method for the flow
  (`STIFF-FLOWS.md`: tsit5 held on 86 % of its steps on cohen-eos-quick, 0 % on quickstart).
  `auto` itself, and the stabilised and implicit methods, handle stiffness: silent.
- **Rejections not explained by h·ρ.** A vector field with kinks (ReLU, max-pool, abs) makes an
  error-controlled method shrink its step at every kink and reject many tries: a ReLU + max-
  pool CNN under tsit5 rejected 889 of 2 134 steps and reached t = 3.6 of 200 in 300 s. A
  method at its stability limit rejects tries too (controller chatter at the limit, or ROCK4's
  round-off ceiling: the log-spaced quadratic, a smooth field, once rejected 34 % of rock4's
  steps there), and those are counted apart (`stiff_rejections`): only the others count here.
Never the preset already running. Each piece of advice names the figures it read. A central
flow (kinds "central-flow", "rmsprop-central") gets none: its field changes where an eigenvalue reaches 2/η and
joins the held set, and its steps are cut back to those events (`central_field`), so its
rejections say nothing of kinks (central-scale's tanh network: 35 of 139 steps of its leg at
η = 0.04 by t = 19), and the presets either pattern advises integrate gradient flows.
Pure Python (no JAX), so that reading an archive does not import the engine.
"""

from collections.abc import Mapping

from ..kinds.solvers import CENTRAL_KINDS, FLOW_METHODS

# Accepted steps before the advisor speaks: the first steps (the initial transient, the step
# size search) say little of either pattern.
MIN_STEPS = 50
HELD_SHARE = 0.5        # of accepted steps, held by stability
REJECTED_SHARE = 0.25   # of all steps, rejected away from the stability limit (a smooth flow: a few %)
# The statistics the advice reads (`flowsim.integrate.flow.FLOW_STAT_KEYS`).
STAT_KEYS = ("steps", "accepted", "rejected", "stiff_steps", "stiff_rejections")
# What each pattern advises, in order of preference (the first not already running).
STIFF_PRESETS = ("auto", "rock4")
KINK_PRESETS = ("filippov", "bosh3-relu")


def advise(method: str, stats: Mapping[str, int], preset: str = "", kind: str = "flow") -> str | None:
    """One line of advice for a flow of `kind` integrated by `method` (its preset named
    `preset`) with `stats` (summed over the seeds of a batch, or one member's), or None."""
    flow = FLOW_METHODS.get(method)
    if flow is None or kind in CENTRAL_KINDS:
        return None
    steps, accepted, rejected, held, at_limit = (int(stats.get(k, 0)) for k in STAT_KEYS)
    explicit = not (flow.implicit or flow.filippov or flow.stabilised or flow.switching)
    stiff = [p for p in STIFF_PRESETS if p not in (preset, method)]
    if explicit and stiff and accepted >= MIN_STEPS and held >= HELD_SHARE * accepted:
        return (f"{method}'s steps were held by stability on {100 * held / accepted:.0f} % of {accepted} accepted "
                f"steps (h·λ_max at its limit): the flow is stiff, and its cost grows like the sharpness whatever "
                f"rtol is; the preset \"{stiff[0]}\" pays √sharpness there (solvers = [\"{stiff[0]}\", …])")
    kinked = rejected - at_limit
    kinks = [p for p in KINK_PRESETS if p not in (preset, method)]
    if not flow.filippov and kinks and steps >= MIN_STEPS and kinked >= REJECTED_SHARE * steps:
        return (f"{kinked} of {steps} steps of {method} were rejected away from its stability limit (of "
                f"{rejected} rejected, {at_limit} at h·ρ's limit): the vector field is likely not smooth (ReLU, "
                f"max-pool, abs) and every kink costs shrinking steps; "
                + ("\"filippov\" integrates shallow ReLU networks with a fixed output layer through their kinks "
                   "exactly; for other kinked models use " if "filippov" in kinks else "use ")
                + ("a low-order preset such as \"bosh3-relu\" (rtol 1e-4) with a `reference` flow as its certificate"
                   if "bosh3-relu" in kinks else "a `reference` flow as the certificate of its accuracy"))
    return None
