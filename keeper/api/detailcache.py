"""Details kept under their subject's version; no answer predates a commit its connection sees.

A subject's version (``subject_versions``) is raised by the index store in
every transaction that rewrites its row, events or view reads, and by every
contract-level pause event of its contract. On SQLite, triggers raise it
too when the keeper's intents or the verifier's verification of the subject
change (``keeper.store.migrations.version_triggers``), and versions rise in
commit order (``keeper.store.versions``): there the whole detail is kept,
and served as kept until the reader learns, once per commit, that the
subject's version rose (``keeper.api.reads``). On PostgreSQL the version
stamps only the head (the row's object, its events and view reads): the head
is kept, and each lookup reads the version and the tail (intents, pause
state, verification) in one statement. Either way the check is the
database's, which a standby replays with the rows: it holds for API-only
daemons reading a replica, where no invalidation from the writer's process
could reach. Bounded in bytes; the least recently used go first.

A detail's entity tag (``ETag``) is a digest over the kept text's digest
and the tail read with it: a changed byte anywhere changes it, and a kept
detail's 3 KB are not hashed again on every lookup.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from typing import Final, NamedTuple

__all__ = ["CACHE_BYTES", "DetailCache", "Kept", "digest", "entity_tag"]

# Per reading thread (lookups run on the API's one loop thread in the daemon).
CACHE_BYTES: Final = 64 << 20


def digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def entity_tag(head_digest: bytes, tail: str) -> str:
    """The detail's entity tag (unquoted) from its head's digest and its tail."""
    return hashlib.blake2b(head_digest + tail.encode(), digest_size=16).hexdigest()


class Kept(NamedTuple):
    """A head (on SQLite the whole detail), the version it was read at, and its digest."""

    version: int
    head: str
    digest: bytes


class DetailCache:
    """Kept details by key, each about one subject (contract, subject id); least recently
    used out. The caller checks versions; on SQLite it also records here the commit
    header and the highest version it has caught up with (keeper.api.reads)."""

    def __init__(self, max_bytes: int = CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._heads: OrderedDict[Hashable, Kept] = OrderedDict()
        self._keys: dict[tuple[str, str], set[Hashable]] = {}
        self._subject: dict[Hashable, tuple[str, str]] = {}
        self._bytes = 0
        self.header: bytes | None = None
        self.seen: int | None = None

    def get(self, key: Hashable) -> Kept | None:
        found = self._heads.get(key)
        if found is not None:
            self._heads.move_to_end(key)
        return found

    def put(self, key: Hashable, subject: tuple[str, str], kept: Kept) -> None:
        """Keep ``kept`` for ``key`` (about ``subject``), replacing what ``key`` had."""
        self.drop(key)
        size = len(kept.head)
        if size > self.max_bytes:
            return
        while self._heads and self._bytes + size > self.max_bytes:
            self.drop(next(iter(self._heads)))
        self._heads[key] = kept
        self._bytes += size
        self._subject[key] = subject
        self._keys.setdefault(subject, set()).add(key)

    def drop(self, key: Hashable) -> None:
        found = self._heads.pop(key, None)
        if found is None:
            return
        self._bytes -= len(found.head)
        subject = self._subject.pop(key)
        keys = self._keys[subject]
        keys.discard(key)
        if not keys:
            del self._keys[subject]

    def drop_subjects(self, subjects: Iterable[tuple[str, str]]) -> None:
        """Forget whatever is kept about these (contract, subject id) pairs."""
        for subject in subjects:
            for key in list(self._keys.get(subject, ())):
                self.drop(key)

    def clear(self) -> None:
        self.drop_subjects(list(self._keys))
