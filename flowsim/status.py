"""Run statuses, shared by the integrators (as integer codes inside compiled code), the
driver and the archive (as names). A numerical failure is a result, not an exception."""

RUNNING, DONE, MAX_STEPS, NONFINITE, STOPPED, DIVERGED, FAILED = range(7)

NAMES = ("running", "done", "max_steps", "nonfinite", "stopped", "diverged", "failed")

# What a user should do about each terminal status (printed by `flowsim run` and `inspect`).
ADVICE = {
    "done": "",
    "max_steps": "the flow solver hit `max_steps`; raise it in the solver preset or loosen rtol "
                 "(with relu or leaky-relu, use the \"filippov\" preset where it applies, else \"bosh3-relu\")",
    "nonfinite": "the state or vector field became non-finite; check the data and the step size",
    "stopped": "stopped by the scenario's `run.stop_loss` event",
    "diverged": "the loss grew past `divergence_factor` × its initial value or became non-finite",
    "failed": "the solver could not go on: with `filippov`, a node met more kink surfaces at once than "
              "its preset's `slots` (use the preset \"filippov16\", or an inline one with more `slots`); "
              "with a Diffrax solver, its step size collapsed",
}


def name(code: int) -> str:
    return NAMES[int(code)]
