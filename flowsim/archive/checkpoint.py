"""The double-buffered checkpoint group and its commit record (writer.py, points 2 and 3).

``checkpoint/<name>`` has shape ``(2, ...)``: two slots, and
``checkpoint/_commit[slot] = [index, attrs_len, check]`` says which one is committed.
``check`` is a function of the other two, so a torn commit record is detected and the
older, intact slot is used instead."""

from __future__ import annotations

import h5py
import numpy as np

from .format import CHECKPOINT, iter_solvers, loads, write_attrs

ATTRS_CAPACITY = 4096        # initial bytes per slot for checkpoint attrs JSON
_COMMIT_MAGIC = 0x5F1C0DE5A17C4EC5


def _commit_check(index: int, attrs_len: int) -> int:
    return ((index * 1_000_003 + attrs_len) ^ _COMMIT_MAGIC) & 0x7FFFFFFFFFFFFFFF


def _committed_slot(cp: h5py.Group | None) -> tuple[int, int, int] | None:
    """(slot, index, attrs_len) of the newest intact commit record, or None."""
    if cp is None or "_commit" not in cp:
        return None
    rec = cp["_commit"][()]
    best = None
    for slot in (0, 1):
        index, alen, check = (int(x) for x in rec[slot])
        if index > 0 and check == _commit_check(index, alen):
            if best is None or index > best[1]:
                best = (slot, index, alen)
    return best


def committed_slot(cp: h5py.Group | dict) -> int:
    """The slot of the committed state (0 when none): the next commit writes the other one,
    however many rows it commits."""
    found = _committed_slot(cp)
    return 0 if found is None else found[0]


def build_checkpoint(g: h5py.Group, arrays: dict[str, np.ndarray], capacity: int) -> h5py.Group:
    """(Re)create the double-buffered checkpoint group, preallocated (contiguous)."""
    if "checkpoint" in g:
        del g["checkpoint"]
    cp = g.create_group("checkpoint")
    for name, arr in arrays.items():
        # Writing zeros now allocates the contiguous storage, so later SWMR writes are
        # pure in-place raw-data writes with no metadata change.
        cp.create_dataset(name, data=np.zeros((2, *arr.shape), dtype=arr.dtype))
    cp.create_dataset("_attrs_json", data=np.zeros((2, capacity), dtype=np.uint8))
    cp.create_dataset("_commit", data=np.zeros((2, 3), dtype=np.int64))
    write_attrs(cp, CHECKPOINT, {"layout": "double-buffered: arrays are (2, ...) slots; the valid slot and "
                                           "row count are in _commit[slot] = [index, attrs_len, check]",
                                 "index": 0, "attrs": "{}"})
    return cp


def checkpoint_layout(cp: h5py.Group | None) -> tuple[dict, int] | None:
    """What the slots hold: ({name: (shape, dtype)}, attrs capacity in bytes), or None."""
    if cp is None or "_commit" not in cp:
        return None
    arrays = {k: (ds.shape[1:], ds.dtype) for k, ds in cp.items() if not k.startswith("_")}
    return arrays, cp["_attrs_json"].shape[1]


def checkpoint_fits(layout: tuple[dict, int] | None, arrays: dict[str, np.ndarray], nbytes: int) -> bool:
    """Whether the slots of `layout` (checkpoint_layout) take `arrays` and `nbytes` of attrs."""
    if layout is None:
        return False
    slots, capacity = layout
    return slots == {k: (a.shape, a.dtype) for k, a in arrays.items()} and capacity >= nbytes


def write_rows(ds: h5py.Dataset, i: int, block) -> None:
    """ds[i:i + len(block)] = block through h5py's low-level calls: its indexing builds a
    selection object per write, which on the append path cost as much as the write itself."""
    block = np.array(block, dtype=ds.dtype, order="C")
    space = ds.id.get_space()
    space.select_hyperslab((i, *(0 for _ in block.shape[1:])), block.shape)
    ds.id.write(h5py.h5s.create_simple(block.shape), space, block)


def write_row(ds: h5py.Dataset, i: int, row) -> None:
    """ds[i] = row (write_rows of one row)."""
    write_rows(ds, i, np.asarray(row, dtype=ds.dtype)[None])


# write_slot and write_commit take the checkpoint group or a {name: dataset} dict of it.
def write_slot(cp: h5py.Group | dict, slot: int, arrays: dict[str, np.ndarray], blob: bytes) -> None:
    for name, arr in arrays.items():
        write_row(cp[name], slot, arr)
    if blob:
        cp["_attrs_json"][slot, : len(blob)] = np.frombuffer(blob, dtype=np.uint8)


def write_commit(cp: h5py.Group | dict, slot: int, index: int, attrs_len: int) -> None:
    cp["_commit"][slot] = np.array([index, attrs_len, _commit_check(index, attrs_len)],
                                   dtype=np.int64)


def read_checkpoint(g: h5py.Group) -> tuple[dict[str, np.ndarray], dict] | None:
    cp = g.get("checkpoint")
    found = _committed_slot(cp)
    if found is None:
        return None
    slot, _, alen = found
    arrays = {k: v[slot] for k, v in cp.items() if not k.startswith("_")}
    return arrays, loads(cp["_attrs_json"][slot, :alen].tobytes())


def checkpoint_attrs(g: h5py.Group) -> dict:
    """The committed checkpoint's attrs (statistics so far) without its arrays; {} if none."""
    cp = g.get("checkpoint")
    found = _committed_slot(cp)
    return {} if found is None else loads(cp["_attrs_json"][found[0], : found[2]].tobytes())


def n_committed(g: h5py.Group) -> int:
    found = _committed_slot(g.get("checkpoint"))
    return 0 if found is None else found[1]


def mirror_checkpoint_attrs(f: h5py.File) -> None:
    """Set the advisory checkpoint attrs ``index`` and ``attrs`` (clean close only)."""
    for g in iter_solvers(f):
        cp = g.get("checkpoint")
        found = _committed_slot(cp)
        if found is not None:
            write_attrs(cp, CHECKPOINT, {"index": found[1],
                                         "attrs": cp["_attrs_json"][found[0], : found[2]].tobytes().decode()})
