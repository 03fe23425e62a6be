"""Tests for keeper.api.pagecache: pages kept per data version, bounded in size."""

from __future__ import annotations

from keeper.api.pagecache import PageCache


def test_a_page_is_kept_only_for_its_version() -> None:
    """A kept page comes back at its version; any other version drops every page."""
    cache = PageCache()
    assert cache.get(1, "a") is None
    cache.put(1, "a", ("{}", "next"))
    cache.put(1, "b", ("{},{}", None))
    assert cache.get(1, "a") == ("{}", "next")
    assert cache.get(2, "b") is None
    assert cache.get(2, "a") is None
    assert cache.get(1, "a") is None  # going back is a change too


def test_a_page_read_at_an_old_version_is_not_kept() -> None:
    """A page built while a commit landed (its version no longer current) is not kept."""
    cache = PageCache()
    assert cache.get(1, "a") is None
    assert cache.get(2, "a") is None
    cache.put(1, "a", ("{}", None))
    assert cache.get(2, "a") is None


def test_oldest_pages_go_first_and_oversized_ones_are_not_kept() -> None:
    """Past the bound the oldest pages are dropped; a page over the bound is never kept."""
    cache = PageCache(max_bytes=10)
    cache.get(7, "x")
    cache.put(7, "a", ("1234", None))
    cache.put(7, "b", ("5678", None))
    cache.put(7, "c", ("90ab", None))
    assert cache.get(7, "a") is None
    assert cache.get(7, "b") == ("5678", None)
    assert cache.get(7, "c") == ("90ab", None)
    cache.put(7, "big", ("x" * 11, None))
    assert cache.get(7, "big") is None
    assert cache.get(7, "c") == ("90ab", None)
