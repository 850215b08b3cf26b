"""A member's integrator state as named arrays (what the archive stores under
`checkpoint/`) and back. Only the array leaves are stored, and not those of a `Scratch`
part (which the integrator computes again): the static parts and the scratch of a state are
rebuilt by initialising the same integrator, which gives the template to restore into."""

import equinox as eqx
import jax
import numpy as np

from ..archive import ArchiveError
from ..integrate.base import LookAhead, Scratch


def _is_scratch(x) -> bool:
    return isinstance(x, Scratch)


def _slots(template) -> tuple[list, object, list[int], set[int]]:
    """The template's leaves (a `Scratch` part as one) and treedef, the positions of the array
    leaves a checkpoint holds, and which of those (by their index among them) are a
    `LookAhead`'s."""
    leaves, treedef = jax.tree.flatten(template, is_leaf=_is_scratch)
    mark = jax.tree.map(lambda x: x if _is_scratch(x) else jax.tree.map(lambda _: True, x)
                        if isinstance(x, LookAhead) else False,
                        template, is_leaf=lambda x: isinstance(x, (Scratch, LookAhead)))
    marks = jax.tree.leaves(mark, is_leaf=_is_scratch)
    slots = [j for j, x in enumerate(leaves) if eqx.is_array(x)]
    return leaves, treedef, slots, {k for k, j in enumerate(slots) if marks[j] is True}


def _older(slots: list[int], ahead: set[int], arrays: dict[str, np.ndarray]) -> bool:
    return bool(ahead) and len(arrays) == len(slots) - len(ahead)


def lacks_look_ahead(template, arrays: dict[str, np.ndarray]) -> bool:
    """Whether `arrays` are a checkpoint of the template's state written before the states
    kept their `LookAhead` (`restore` leaves it as the template has it, and the integrator's
    `complete` computes it again)."""
    _, _, slots, ahead = _slots(template)
    return _older(slots, ahead, arrays)


def stored(state):
    """The part of a state that a checkpoint holds: its `Scratch` parts left out (None)."""
    return jax.tree.map(lambda x: None if _is_scratch(x) else x, state, is_leaf=_is_scratch)


def as_arrays(state) -> dict[str, np.ndarray]:
    """A member's state as named arrays, `leaf000`, `leaf001`, … in pytree order."""
    leaves = jax.tree.leaves(eqx.filter(stored(state), eqx.is_array))
    return {f"leaf{i:03d}": np.asarray(x) for i, x in enumerate(leaves)}


def restore(template, i: int, arrays: dict[str, np.ndarray]):
    """Put one member's stored arrays into row i of the batched `template` state (numpy);
    its scratch stays the template's, and so does its `LookAhead` where the checkpoint was
    written before states kept one (`lacks_look_ahead`)."""
    leaves, treedef, slots, ahead = _slots(template)
    if _older(slots, ahead, arrays):
        slots = [slot for j, slot in enumerate(slots) if j not in ahead]
    if len(arrays) != len(slots):
        raise ArchiveError(f"checkpoint holds {len(arrays)} arrays, the solver's state has {len(slots)}: the "
                           "archive's state was written by another version of this solver; run it again "
                           "without --resume")
    new = list(leaves)
    for j, slot in enumerate(slots):
        x = np.array(leaves[slot])
        saved = arrays[f"leaf{j:03d}"]
        if saved.size != int(np.prod(x.shape[1:])):
            # e.g. an archive from a flowsim whose `filippov` held more slots per node
            raise ArchiveError(f"checkpoint array {j} has shape {saved.shape}, the solver's state needs "
                               f"{x.shape[1:]}: the archive's state was written by another version of this "
                               "solver; run it again without --resume")
        x[i] = np.reshape(saved, x.shape[1:])  # the archive stores 0-d as (1,)
        new[slot] = x
    return jax.tree.unflatten(treedef, new)
