"""Run statuses, declared once: `Status` is the enumeration, the way Diffrax's `RESULTS`
carries its messages. A numerical failure is a result, not an exception.

Each member is its integer code (what the integrators carry inside compiled code: an
`IntEnum` member is a plain int to JAX), its `label` (what the archive writes and the
driver prints) and its `advice` (what a user should do about it, printed by `flowsim run`
and `inspect`; empty where there is nothing to do).
"""

import enum


class Status(enum.IntEnum):
    advice: str

    def __new__(cls, code: int, advice: str):
        member = int.__new__(cls, code)
        member._value_ = code
        member.advice = advice
        return member

    @property
    def label(self) -> str:
        """The name the archive stores ("max_steps")."""
        return self.name.lower()

    @classmethod
    def of(cls, code) -> "Status":
        """The status of an integer code (a Python, numpy or concrete JAX integer)."""
        return cls(int(code))

    @classmethod
    def from_label(cls, label: str) -> "Status":
        """The status an archive names `label`; a ValueError naming the allowed labels."""
        for member in cls:
            if member.label == label:
                return member
        raise ValueError(f"unknown status {label!r}; allowed: {', '.join(LABELS)}")

    # The codes are stored in checkpoints (a member's state) and must not change.
    RUNNING = 0, ""
    DONE = 1, ""
    MAX_STEPS = 2, ("the flow solver hit `max_steps`; raise it in the solver preset or loosen rtol "
                    "(with relu or leaky-relu, use the \"filippov\" preset where it applies, else \"bosh3-relu\")")
    NONFINITE = 3, "the state or vector field became non-finite; check the data and the step size"
    STOPPED = 4, "stopped by the scenario's `run.stop_loss` event"
    DIVERGED = 5, "the loss grew past `divergence_factor` × its initial value or became non-finite"
    FAILED = 6, ("the solver could not go on: with `filippov`, a node met more kink surfaces at once than "
                 "its preset's `slots` (use the preset \"filippov16\", or an inline one with more `slots`); "
                 "with a Diffrax solver, its step size collapsed")


# Every label, in code order (the archive checks a status it is given against them).
LABELS: tuple[str, ...] = tuple(s.label for s in Status)
