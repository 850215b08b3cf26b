"""The flowsim archive: one HDF5 file per scenario run (DESIGN.md §5).

This package is the only code that touches HDF5; it uses numpy and h5py only (no JAX), so
reading an archive needs neither JAX nor a device.

    errors.py      ArchiveError, ArchiveLocked, ArchiveFull, NoSuchArchive
    format.py      the layout: every attribute declared once (ATTRS), reserved names, JSON, chunking, scales
    checkpoint.py  the double-buffered checkpoint and its commit record
    superblock.py  HDF5 status flags cleared without modifying the file (h5clear without h5clear)
    recovery.py    opening a file whatever its writer left; rebuilding it for resume()
    lock.py        one writer per archive (flock on <path>.lock)
    writer.py      ArchiveWriter, and why it is crash-safe
    reader.py      open, Archive, RunView, SolverView
    swmr.py        a SWMR reader that gives up on a torn metadata block instead of hanging
    dataset.py     an archive's time series as arrays (the figures' and `to_xarray`'s one reader)
    merge.py       job arrays: --shard parts and their external-link merge
    diff.py        what differs between two archives, the timing fields aside (`flowsim diff`)
"""

from .errors import ArchiveError as ArchiveError
from .errors import ArchiveFull as ArchiveFull
from .errors import ArchiveLocked as ArchiveLocked
from .errors import NoSuchArchive as NoSuchArchive
from .reader import Archive as Archive
from .reader import RunView as RunView
from .reader import SolverView as SolverView
from .reader import open as open  # noqa: A004 - re-exported as flowsim.open
from .writer import ArchiveWriter as ArchiveWriter
