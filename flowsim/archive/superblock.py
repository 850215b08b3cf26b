"""HDF5 superblock status flags, cleared without h5clear (writer.py, point 5).

A killed writer leaves the superblock's "open for write" flags set, and HDF5 then refuses
to open the file. These functions read such a file without modifying it: they present the
superblock with the flags cleared and its checksum recomputed (Jenkins lookup3, as HDF5
does)."""

from __future__ import annotations

import io
import struct

from .format import HDF5_SIGNATURE


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & 0xFFFFFFFF


def _lookup3(data: bytes, initval: int = 0) -> int:
    """Bob Jenkins' lookup3 ``hashlittle``, as HDF5's H5_checksum_lookup3 computes it."""
    m = 0xFFFFFFFF
    length = len(data)
    a = b = c = (0xDEADBEEF + length + initval) & m
    k = 0
    while length > 12:
        a = (a + int.from_bytes(data[k:k + 4], "little")) & m
        b = (b + int.from_bytes(data[k + 4:k + 8], "little")) & m
        c = (c + int.from_bytes(data[k + 8:k + 12], "little")) & m
        a = (a - c) & m; a ^= _rot(c, 4); c = (c + b) & m
        b = (b - a) & m; b ^= _rot(a, 6); a = (a + c) & m
        c = (c - b) & m; c ^= _rot(b, 8); b = (b + a) & m
        a = (a - c) & m; a ^= _rot(c, 16); c = (c + b) & m
        b = (b - a) & m; b ^= _rot(a, 19); a = (a + c) & m
        c = (c - b) & m; c ^= _rot(b, 4); b = (b + a) & m
        length -= 12
        k += 12
    if length == 0:
        return c
    tail = data[k:k + length] + b"\0" * (12 - length)
    a = (a + int.from_bytes(tail[0:4], "little")) & m
    b = (b + int.from_bytes(tail[4:8], "little")) & m
    c = (c + int.from_bytes(tail[8:12], "little")) & m
    c ^= b; c = (c - _rot(b, 14)) & m
    a ^= c; a = (a - _rot(c, 11)) & m
    b ^= a; b = (b - _rot(a, 25)) & m
    c ^= b; c = (c - _rot(b, 16)) & m
    a ^= c; a = (a - _rot(c, 4)) & m
    b ^= a; b = (b - _rot(a, 14)) & m
    c ^= b; c = (c - _rot(b, 24)) & m
    return c


def superblock_cleared(head: bytes, eof: int | None = None) -> bytes | None:
    """Return the v2/v3 superblock in ``head`` with status flags cleared, or None; with
    `eof`, its end-of-file address raised to at least `eof`.

    Layout (8-byte offsets): signature 8, version 1, sizes 2, flags 1, four addresses
    32, checksum 4 = 48 bytes.  Only that case is handled (it is what we write).
    """
    if len(head) < 48 or head[:8] != HDF5_SIGNATURE or head[8] not in (2, 3):
        return None
    if head[9] != 8 or head[11] == 0:
        return None
    stored = struct.unpack("<Q", head[28:36])[0]
    end = head[28:36] if eof is None or eof <= stored else struct.pack("<Q", eof)
    body = head[:11] + b"\0" + head[12:28] + end + head[36:44]
    return body + struct.pack("<I", _lookup3(body))


class FlagClearedFile(io.RawIOBase):
    """Read-only file object presenting ``path`` with the superblock flags cleared.

    Lets h5py read an archive left by a writer killed in plain (non-SWMR) write mode
    without modifying the file on disk.
    """

    def __init__(self, path: str, patched_head: bytes, size: int | None = None):
        super().__init__()
        self._fh = io.open(path, "rb")
        self._head = patched_head
        self._pos = 0
        # A file whose last writes failed (disk full, file-size limit) can be shorter than
        # the end-of-file address its superblock records; it is presented zero-padded to
        # that size (the committed rows all lie before the failed writes).
        self._size = size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == io.SEEK_END and self._size is not None:
            self._pos = max(self._size, self._fh.seek(0, io.SEEK_END)) + offset
            return self._pos
        self._pos = self._fh.seek(offset, whence)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, buf) -> int:
        self._fh.seek(self._pos)
        n = self._fh.readinto(buf)
        view = memoryview(buf)
        if self._pos < len(self._head) and n:
            end = min(len(self._head), self._pos + n)
            view[: end - self._pos] = self._head[self._pos:end]
        self._pos += n
        return n

    def close(self) -> None:
        self._fh.close()
        super().close()


def stored_eof(head: bytes) -> int | None:
    """The end-of-file address a v2/v3 superblock records (8-byte offsets), or None."""
    if len(head) < 48 or head[:8] != HDF5_SIGNATURE or head[8] not in (2, 3) or head[9] != 8:
        return None
    return struct.unpack("<Q", head[28:36])[0]
