"""The archive's exceptions."""


class ArchiveError(Exception):
    """Something is wrong with an archive file; the message names the path."""


class ArchiveLocked(ArchiveError):
    """Another process is writing this archive."""


class ArchiveFull(ArchiveError, OSError):
    """The disk (or the process's file-size limit) has no room for the next write.

    Raised *before* writing, so the file stays as its last commit left it: a write that
    HDF5 starts and cannot finish may leave metadata pointing past the end of the file."""
