"""List pages kept until the database changes: a repeated query between two commits is free.

Clients poll the same filtered list (dashboards, bots watching their jobs),
and between two commits every one of them gets the same page; building it
(20 rows of some twenty fields as JSON) costs more than the whole HTTP
exchange around it. A page is kept under a version of the whole database
that changes whenever any other connection commits (the indexer, the
keeper, the verifier): on SQLite the WAL-index header
(:mod:`keeper.store.commitwatch`, no statement), else the connection's
``data_version`` (:func:`keeper.store.db.data_version`). A changed version
drops every kept page, so a page is never served from before a commit its
connection can see. One cache per reading thread. Bounded in bytes; the oldest pages go first.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Final

from keeper.store.subjects import Page

__all__ = ["CACHE_BYTES", "PageCache"]

# Per reading thread: some hundreds of default pages; RSS stays well inside its budget.
CACHE_BYTES: Final = 4 << 20


class PageCache:
    """Encoded pages by query, valid for one version of the database (module docstring)."""

    def __init__(self, max_bytes: int = CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._version: Hashable = None
        self._pages: dict[Hashable, Page] = {}
        self._bytes = 0

    def get(self, version: Hashable, key: Hashable) -> Page | None:
        """The page kept for ``key`` at ``version``; a new version first drops every page."""
        if version != self._version:
            self._version = version
            self._pages.clear()
            self._bytes = 0
            return None
        return self._pages.get(key)

    def put(self, version: Hashable, key: Hashable, page: Page) -> None:
        """Keep ``page`` for ``key``, read at ``version``."""
        size = len(page.items)
        if version != self._version or size > self.max_bytes:
            return
        while self._pages and self._bytes + size > self.max_bytes:
            oldest = next(iter(self._pages))
            self._bytes -= len(self._pages.pop(oldest).items)
        self._pages[key] = page
        self._bytes += size
