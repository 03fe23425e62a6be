"""The adaptive log-range policy shrinks on refusals, grows slowly, ignores 429s."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keeper.domain.ranges import RangePolicy, span_hint


class TestRangePolicy:
    def test_suggestion_is_taken_when_smaller(self) -> None:
        """A provider's suggested span replaces the current size outright."""
        policy = RangePolicy(size=2000)
        assert policy.on_too_large(500) == 500

    def test_halves_without_suggestion(self) -> None:
        """A bare refusal halves the size."""
        policy = RangePolicy(size=2000)
        assert policy.on_too_large(None) == 1000

    def test_useless_suggestion_falls_back_to_halving(self) -> None:
        """A "suggestion" no smaller than what was refused is ignored."""
        policy = RangePolicy(size=1000)
        assert policy.on_too_large(5000) == 500

    def test_clipped_query_shrinks_from_its_own_span(self) -> None:
        """A refused query shorter than the size (clipped at the target) shrinks below its span."""
        policy = RangePolicy(size=100)
        assert policy.on_too_large(None, tried=6) == 3
        assert policy.on_too_large(50, tried=3) == 1

    def test_hard_cap_becomes_ceiling(self) -> None:
        """An announced per-query cap stops later growth at that cap."""
        policy = RangePolicy(size=20_000, grow_after=1)
        assert policy.on_too_large(None, hard_cap=10_000) == 10_000
        for _ in range(20):
            policy.on_success()
        assert policy.size == 10_000

    def test_grows_only_after_a_streak(self) -> None:
        """Growth waits for grow_after successes in a row, then adds a quarter."""
        policy = RangePolicy(size=100, grow_after=3)
        policy.on_success()
        policy.on_success()
        assert policy.size == 100
        policy.on_success()
        assert policy.size == 125

    def test_refusal_resets_the_streak(self) -> None:
        """Successes before a refusal do not count toward the next growth."""
        policy = RangePolicy(size=100, grow_after=2)
        policy.on_success()
        policy.on_too_large(None)
        policy.on_success()
        assert policy.size == 50

    def test_small_sizes_still_grow(self) -> None:
        """At size 1 a quarter rounds to nothing, so growth adds at least one block."""
        policy = RangePolicy(size=1, grow_after=1)
        assert policy.on_success() == 2

    def test_at_minimum(self) -> None:
        """The policy reports when shrinking can no longer help."""
        policy = RangePolicy(size=2, minimum=1)
        assert not policy.at_minimum
        policy.on_too_large(None)
        assert policy.at_minimum

    def test_next_range_is_inclusive_and_capped_at_target(self) -> None:
        """Ranges are inclusive, never pass the target, and stop after it."""
        policy = RangePolicy(size=10)
        assert policy.next_range(5, 100) == (5, 14)
        assert policy.next_range(95, 100) == (95, 100)
        assert policy.next_range(101, 100) is None

    def test_rejects_bad_bounds(self) -> None:
        """Impossible bounds are a programming error, caught at construction."""
        with pytest.raises(ValueError):
            RangePolicy(minimum=10, maximum=5)
        with pytest.raises(ValueError):
            RangePolicy(minimum=0)


class TestSpanHint:
    def test_width_of_suggested_range(self) -> None:
        """The width of the suggested inclusive range is the span to try."""
        assert span_hint((0, 0x1F3), None) == (500, None)
        assert span_hint(None, 10_000) == (None, 10_000)
        assert span_hint((10, 5), None) == (None, None)


events = st.lists(
    st.one_of(
        st.just(("ok", None)),
        st.just(("429", None)),
        st.tuples(st.just("big"), st.none() | st.integers(min_value=-5, max_value=300_000)),
        st.tuples(st.just("cap"), st.integers(min_value=1, max_value=300_000)),
        st.tuples(st.just("tried"), st.integers(min_value=1, max_value=300_000)),
    ),
    max_size=200,
)


@given(
    start=st.integers(min_value=-10, max_value=1_000_000),
    minimum=st.integers(min_value=1, max_value=50),
    extra=st.integers(min_value=0, max_value=100_000),
    seq=events,
)
def test_size_stays_within_bounds(
    start: int, minimum: int, extra: int, seq: list[tuple[str, int | None]]
) -> None:
    """Whatever the providers say, the size stays within [minimum, maximum]."""
    policy = RangePolicy(size=start, minimum=minimum, maximum=minimum + extra)
    for kind, value in seq:
        if kind == "ok":
            policy.on_success()
        elif kind == "429":
            policy.on_rate_limited()
        elif kind == "big":
            policy.on_too_large(value)
        elif kind == "tried":
            policy.on_too_large(None, tried=value)
        else:
            policy.on_too_large(None, hard_cap=value)
        assert policy.minimum <= policy.size <= policy.maximum


@given(
    start=st.integers(min_value=1, max_value=100_000),
    oks=st.integers(min_value=0, max_value=20),
    n=st.integers(min_value=1, max_value=50),
)
def test_rate_limits_never_shrink(start: int, oks: int, n: int) -> None:
    """Any number of 429s leaves the size exactly where it was."""
    policy = RangePolicy(size=start, maximum=200_000)
    for _ in range(oks):
        policy.on_success()
    before = policy.size
    for _ in range(n):
        policy.on_rate_limited()
    assert policy.size == before


@given(
    start=st.integers(min_value=2, max_value=100_000),
    suggestion=st.none() | st.integers(min_value=1, max_value=200_000),
)
def test_refusal_always_shrinks_above_minimum(start: int, suggestion: int | None) -> None:
    """A refusal strictly shrinks the size unless it is already at the minimum."""
    policy = RangePolicy(size=start, maximum=200_000)
    assert policy.on_too_large(suggestion) < start
