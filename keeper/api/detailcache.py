"""Details' heads kept under their subject's version, checked in the database each lookup.

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

A detail's entity tag (``ETag``) is a digest over the head's digest, kept
with the head, and the tail: a changed byte anywhere changes it, and a kept
head's 3 KB are not hashed again on every lookup.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Hashable
from typing import Final, NamedTuple

__all__ = ["CACHE_BYTES", "DetailCache", "Kept", "digest", "entity_tag"]

# Per reading thread (lookups run on the API's one loop thread in the daemon).
CACHE_BYTES: Final = 32 << 20


def digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def entity_tag(head_digest: bytes, tail: str) -> str:
    """The detail's entity tag (unquoted) from its head's digest and its tail."""
    return hashlib.blake2b(head_digest + tail.encode(), digest_size=16).hexdigest()


class Kept(NamedTuple):
    """A head, the version it was read at, and its digest."""

    version: int
    head: str
    digest: bytes


class DetailCache:
    """Heads by subject; least recently used out. The caller checks the version."""

    def __init__(self, max_bytes: int = CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._heads: OrderedDict[Hashable, Kept] = OrderedDict()
        self._bytes = 0

    def get(self, key: Hashable) -> Kept | None:
        found = self._heads.get(key)
        if found is not None:
            self._heads.move_to_end(key)
        return found

    def put(self, key: Hashable, kept: Kept) -> None:
        """Keep ``kept`` for ``key``, replacing what ``key`` had."""
        self.drop(key)
        size = len(kept.head)
        if size > self.max_bytes:
            return
        while self._heads and self._bytes + size > self.max_bytes:
            _, oldest = self._heads.popitem(last=False)
            self._bytes -= len(oldest.head)
        self._heads[key] = kept
        self._bytes += size

    def drop(self, key: Hashable) -> None:
        found = self._heads.pop(key, None)
        if found is not None:
            self._bytes -= len(found.head)
