"""A member's integrator state as named arrays (what the archive stores under
`checkpoint/`) and back. Only the array leaves are stored: the static parts of a state are
rebuilt by initialising the same integrator, which gives the template to restore into."""

import equinox as eqx
import jax
import numpy as np

from .archive import ArchiveError


def as_arrays(state) -> dict[str, np.ndarray]:
    """A member's state as named arrays, `leaf000`, `leaf001`, … in pytree order."""
    return {f"leaf{i:03d}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(eqx.filter(state, eqx.is_array)))}


def restore(template, i: int, arrays: dict[str, np.ndarray]):
    """Put one member's stored arrays into row i of the batched `template` state (numpy)."""
    dynamic, static = eqx.partition(template, eqx.is_array)
    leaves, treedef = jax.tree.flatten(dynamic)
    if len(arrays) != len(leaves):
        raise ArchiveError(f"checkpoint holds {len(arrays)} arrays, the solver's state has {len(leaves)}")
    new = []
    for j, x in enumerate(leaves):
        x = np.array(x)
        stored = arrays[f"leaf{j:03d}"]
        if stored.size != int(np.prod(x.shape[1:])):
            # e.g. an archive from a flowsim whose `filippov` held more slots per node
            raise ArchiveError(f"checkpoint array {j} has shape {stored.shape}, the solver's state needs "
                               f"{x.shape[1:]}: the archive's state was written by another version of this "
                               "solver; run it again without --resume")
        x[i] = np.reshape(stored, x.shape[1:])  # the archive stores 0-d as (1,)
        new.append(x)
    return eqx.combine(jax.tree.unflatten(treedef, new), static)
