"""A SWMR reader that gives up on a torn metadata block instead of hanging.

A SWMR reader reads a metadata block again while its checksum fails, sleeping 1 ns, 2 ns,
4 ns, ... between tries (HDF5's H5C__load_entry), 100 tries by default: about 2^100 ns. A
block left torn for good (a writer killed in the middle of a flush) hangs the reader for
ever; it hung a rebuild of a killed archive once here. A live writer's flush ends within
milliseconds, so `READ_ATTEMPTS` tries (about 0.13 s of sleep in all) still wait for it,
and then the read fails ("incorrect metadata checksum after all read attempts") as a
plain read fails at once. h5py does not expose the setting (H5Pset_metadata_read_attempts),
so it is called in the very libhdf5 that h5py loaded; where that library cannot be found,
the reader keeps HDF5's default.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os

import h5py

READ_ATTEMPTS = 27


def open_swmr_read(path: str) -> h5py.File:
    """`h5py.File(path, "r", swmr=True, locking=False)` with `READ_ATTEMPTS` metadata reads."""
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_EARLIEST, h5py.h5f.LIBVER_LATEST)
    fapl.set_file_locking(False, ignore_when_disabled=False)     # locking=False, as h5py sets it
    set_attempts = _set_attempts()
    if set_attempts is not None:
        set_attempts(fapl.id, READ_ATTEMPTS)
    fid = h5py.h5f.open(os.fsencode(path), h5py.h5f.ACC_RDONLY | h5py.h5f.ACC_SWMR_READ, fapl=fapl)
    return h5py.File(fid)


@functools.cache
def _set_attempts():
    """H5Pset_metadata_read_attempts of h5py's libhdf5 (returns < 0 on failure), or None."""
    for path in _libhdf5_paths():
        try:
            fn = ctypes.CDLL(path).H5Pset_metadata_read_attempts
        except (OSError, AttributeError):
            continue
        fn.argtypes, fn.restype = [ctypes.c_int64, ctypes.c_uint], ctypes.c_int
        return fn
    return None


def _libhdf5_paths() -> list[str]:
    """Where h5py's libhdf5 is: a library this process has mapped (Linux), else the copy
    bundled with an h5py wheel. Opening an already loaded path gives that same library; a
    property list of h5py's is unknown to any other copy, which then only returns an error."""
    paths = set()
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libhdf5" in line}
    except OSError:
        pass
    root = os.path.dirname(h5py.__file__)
    paths.update(glob.glob(os.path.join(root, ".dylibs", "libhdf5*")),
                 glob.glob(os.path.join(root + ".libs", "libhdf5*")))
    return sorted(p for p in paths if os.path.isabs(p) and os.path.basename(p).startswith("libhdf5")
                  and "_hl" not in os.path.basename(p))
