"""The archive's exceptions."""


class ArchiveError(Exception):
    """Something is wrong with an archive file; the message names the path."""


class ArchiveLocked(ArchiveError):
    """Another process is writing this archive."""


class ArchiveFull(ArchiveError, OSError):
    """The disk (or the process's file-size limit) has no room for the next write.

    Raised *before* writing, so the file stays as its last commit left it: a write that
    HDF5 starts and cannot finish may leave metadata pointing past the end of the file."""


class NoSuchArchive(ArchiveError):
    """The path names no file. `path` and `allowed` are kept apart from the message, so
    that a caller who knows more (the command line knows the scenario catalog, which this
    package, beneath the configuration, does not) can say it with `hinted`."""

    def __init__(self, path: str, allowed: str):
        self.path, self.allowed = path, allowed
        super().__init__(f"{path}: no such archive; {allowed}")

    def hinted(self, hint: str) -> str:
        """The message with `hint` (what the path may have meant) before what is allowed."""
        return f"{self.path}: no such archive; {hint}; {self.allowed}"
