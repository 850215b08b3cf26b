"""The run statuses: one enumeration whose members carry their code, label and advice."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flowsim.status import LABELS, Status

# What archives hold under a solver's `status` attribute (docs/archive.md): these strings
# and these codes (stored in checkpointed solver states) must never change.
ARCHIVED = {"running": 0, "done": 1, "max_steps": 2, "nonfinite": 3, "stopped": 4, "diverged": 5, "failed": 6}


def test_labels_and_codes_are_the_archived_ones():
    assert {s.label: int(s) for s in Status} == ARCHIVED
    assert LABELS == tuple(ARCHIVED)


@pytest.mark.parametrize("label", list(ARCHIVED))
def test_round_trip(label):
    status = Status.from_label(label)
    assert status.label == label
    for code in (int(status), np.int64(status), np.asarray(status, np.int32), jnp.asarray(int(status))):
        assert Status.of(code) is status


def test_every_status_that_ends_a_run_early_says_what_to_do():
    quiet = {Status.RUNNING, Status.DONE}
    for s in Status:
        assert bool(s.advice) == (s not in quiet), s
    assert "bosh3-relu" in Status.MAX_STEPS.advice and "filippov16" in Status.FAILED.advice


def test_an_unknown_label_is_refused_with_the_allowed_ones():
    with pytest.raises(ValueError, match=r"unknown status 'finished'; allowed: running, done, max_steps"):
        Status.from_label("finished")
    with pytest.raises(ValueError):
        Status.of(7)


def test_members_are_integer_codes_inside_compiled_code():
    @jax.jit
    def settle(code, bad):
        code = jnp.where(bad, Status.NONFINITE, code)
        return jnp.where(code == Status.RUNNING, Status.DONE, code)

    assert Status.of(settle(jnp.asarray(Status.RUNNING), False)) is Status.DONE
    assert Status.of(settle(jnp.asarray(Status.RUNNING), True)) is Status.NONFINITE
    assert Status.of(settle(jnp.asarray(Status.STOPPED), False)) is Status.STOPPED
