"""Tests for keeper.api.pagecache: pages kept per data version, bounded in size."""

from __future__ import annotations

from keeper.api.pagecache import PageCache
from keeper.store.subjects import Page

KEY = (1, "0x" + "aa" * 20, "7")


def test_a_page_is_kept_only_for_its_version() -> None:
    """A kept page comes back at its version; any other version drops every page."""
    cache = PageCache()
    assert cache.get(1, "a") is None
    cache.put(1, "a", Page("{}", 1, KEY))
    cache.put(1, "b", Page("{},{}", 2, None))
    assert cache.get(1, "a") == Page("{}", 1, KEY)
    assert cache.get(2, "b") is None
    assert cache.get(2, "a") is None
    assert cache.get(1, "a") is None  # going back is a change too


def test_a_page_read_at_an_old_version_is_not_kept() -> None:
    """A page built while a commit landed (its version no longer current) is not kept."""
    cache = PageCache()
    assert cache.get(1, "a") is None
    assert cache.get(2, "a") is None
    cache.put(1, "a", Page("{}", 1, None))
    assert cache.get(2, "a") is None


def test_oldest_pages_go_first_and_oversized_ones_are_not_kept() -> None:
    """Past the bound the oldest pages are dropped; a page over the bound is never kept."""
    cache = PageCache(max_bytes=10)
    cache.get(7, "x")
    cache.put(7, "a", Page("1234", 1, None))
    cache.put(7, "b", Page("5678", 1, None))
    cache.put(7, "c", Page("90ab", 1, None))
    assert cache.get(7, "a") is None
    assert cache.get(7, "b") == Page("5678", 1, None)
    assert cache.get(7, "c") == Page("90ab", 1, None)
    cache.put(7, "big", Page("x" * 11, 1, None))
    assert cache.get(7, "big") is None
    assert cache.get(7, "c") == Page("90ab", 1, None)
