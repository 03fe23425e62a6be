"""Details' heads kept under their subject's version: a lookup reads one row, not six.

A detail's head (the row's object, its events and view reads) is most of
what a lookup reads, and only the index store writes it, raising the
subject's version in the same transaction (``subject_versions``). A head
read together with its version in one statement is kept under that
version; a later lookup reads the version and the tail (intents, pause
state, verification: written by others, always read afresh) in one
statement, and uses the kept head only if the version is still the one it
was read at. So no answer predates a commit its connection can see, and the
check is the database's, which a standby replays with the rows: it holds
for API-only daemons reading a replica, where no invalidation from the
writer's process could reach. Bounded in bytes; the least recently used
heads go first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Final

__all__ = ["CACHE_BYTES", "DetailCache"]

# Per reading thread (lookups run on the API's one loop thread in the daemon).
CACHE_BYTES: Final = 32 << 20


class DetailCache:
    """Heads by subject, each with the version it was read at; least recently used out."""

    def __init__(self, max_bytes: int = CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._heads: OrderedDict[Hashable, tuple[int, str]] = OrderedDict()
        self._bytes = 0

    def get(self, key: Hashable) -> tuple[int, str] | None:
        """(version, head) kept for ``key``; the caller checks the version."""
        found = self._heads.get(key)
        if found is not None:
            self._heads.move_to_end(key)
        return found

    def put(self, key: Hashable, version: int, head: str) -> None:
        """Keep ``head``, read at ``version``, replacing what ``key`` had."""
        self.drop(key)
        size = len(head)
        if size > self.max_bytes:
            return
        while self._heads and self._bytes + size > self.max_bytes:
            _, (_, oldest) = self._heads.popitem(last=False)
            self._bytes -= len(oldest)
        self._heads[key] = (version, head)
        self._bytes += size

    def drop(self, key: Hashable) -> None:
        found = self._heads.pop(key, None)
        if found is not None:
            self._bytes -= len(found[1])
