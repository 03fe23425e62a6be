"""Whether anything committed to a SQLite database in WAL mode, without running a statement.

Every statement on a SQLite connection outside a transaction takes and
drops the WAL read lock (file-lock system calls); in a busy server that is
most of what a one-row read costs (bench/README.md). A lookup that only
needs to know "has anything committed since I last looked?" can instead
read the WAL-index header, the first bytes of the ``-shm`` file that every
connection to the database maps (https://sqlite.org/walformat.html, section
"The WAL-Index Format"). The header holds a counter raised by every commit,
the last commit frame and the WAL's salts; a writer updates its second copy,
then its first; SQLite's own readers compare the two copies and read
again on a difference. Here a header whose two copies agree and equal the
last one seen means that no transaction has committed since; anything else
(copies that differ while a commit is written, a file that is missing or
too short) counts as a change, and the caller asks the database. So does a
header that is not (yet) initialised or names another WAL-index version than
the one whose layout this reads: a SQLite that ever changed the layout would
cost the readers a statement per look, never serve a stale page.

SQLite truncates the ``-shm`` file when the first connection opens it and
deletes it when the last one closes; a read of a mapping whose file was cut
short would kill the process. So a watch is made only by a thread whose own
connection has read from the database (and so holds the file open, with its
lock, until it closes), and is closed before that connection.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

__all__ = ["WALINDEX_VERSION", "CommitWatch"]

# two copies of the 48-byte WalIndexHdr at the start of the -shm file
_HEADER = 48
# its iVersion (offset 0) and isInit (offset 12), in the host's byte order: the
# version whose layout this module reads (sqlite3.c, WALINDEX_MAX_VERSION)
_VERSION = struct.Struct("=I")
WALINDEX_VERSION = 3007000
_IS_INIT = 12


class CommitWatch:
    """The WAL-index header of one database file, read from its shared memory."""

    def __init__(self, path: str | Path) -> None:
        self._shm = f"{Path(path).resolve()}-shm"
        self._map: mmap.mmap | None = None
        self._closed = False

    def _open(self) -> mmap.mmap | None:
        """Map the header; again on each look until the file exists (the writer makes it)."""
        try:
            fd = os.open(self._shm, os.O_RDONLY)
        except OSError:
            return None
        try:
            if os.fstat(fd).st_size >= 2 * _HEADER:
                self._map = mmap.mmap(fd, 2 * _HEADER, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        return self._map

    def header(self) -> bytes | None:
        """The header now, or None when it cannot tell (no map, a commit being written)."""
        found = self._map or (None if self._closed else self._open())
        if found is None:
            return None
        both = found[: 2 * _HEADER]
        first = both[:_HEADER]
        if first != both[_HEADER:] or not first[_IS_INIT]:
            return None
        return first if _VERSION.unpack_from(first)[0] == WALINDEX_VERSION else None

    def close(self) -> None:
        self._closed = True
        if self._map is not None:
            self._map.close()
            self._map = None
