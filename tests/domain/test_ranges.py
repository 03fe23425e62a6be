"""The adaptive log-range policy shrinks on refusals, grows slowly, ignores 429s,
and keeps answers under their event and byte bounds by learning the density."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keeper.domain.ranges import (
    DENSITY_START,
    RangePolicy,
    busy_enough,
    fit_span,
    rest_is_large,
    span_hint,
    split_by_block,
)


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

    @pytest.mark.parametrize(
        "bad",
        [{"grow_after": 0}, {"grow_factor": 1.0}, {"max_events": 0}, {"max_bytes": 0}],
    )
    def test_each_bad_growth_or_bound_alone_is_refused(self, bad: dict[str, float]) -> None:
        """A size that could never grow, or an answer bound nothing fits under, each on
        its own (the others valid)."""
        with pytest.raises(ValueError):
            RangePolicy(**bad)  # type: ignore[arg-type]

    def test_the_smallest_valid_bounds_are_taken(self) -> None:
        policy = RangePolicy(grow_after=1, grow_factor=1.01, max_events=1, max_bytes=1)
        assert policy.bounded and policy.span >= 1

    def test_next_range_at_the_target_is_that_one_block(self) -> None:
        assert RangePolicy(size=10).next_range(100, 100) == (100, 100)

    def test_a_cap_or_suggestion_of_one_block_is_taken(self) -> None:
        """One block is a real answer from a provider (a dense chain's limit)."""
        capped = RangePolicy(size=1000, grow_after=1)
        assert capped.on_too_large(None, hard_cap=1) == 1
        capped.on_success()
        assert capped.size == 1  # remembered as the ceiling
        assert RangePolicy(size=1000).on_too_large(1) == 1

    def test_the_lowest_announced_cap_stays_the_ceiling(self) -> None:
        """Two endpoints announcing different per-query caps: the smaller one holds."""
        policy = RangePolicy(size=5000, grow_after=1)
        policy.on_too_large(None, hard_cap=500)
        policy.on_too_large(None, hard_cap=2000, tried=600)
        for _ in range(30):
            policy.on_success()
        assert policy.size == 500

    def test_a_query_of_exactly_the_size_counts_toward_growth(self) -> None:
        """Bounded by density, a query as long as the provider size proves that size."""
        policy = RangePolicy(size=4, grow_after=1, max_events=10_000)
        assert policy.span == 4
        policy.on_answer(4, 1, 100)
        assert policy.size == 5


class TestSpanHint:
    def test_width_of_suggested_range(self) -> None:
        """The width of the suggested inclusive range is the span to try."""
        assert span_hint((0, 0x1F3), None) == (500, None)
        assert span_hint(None, 10_000) == (None, 10_000)
        assert span_hint((10, 5), None) == (None, None)
        assert span_hint((7, 7), None) == (1, None)  # one block suggested


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


class TestBoundedAnswers:
    def test_unbounded_policy_spans_its_size(self) -> None:
        """Without event or byte bounds the span is the provider size, as before."""
        policy = RangePolicy(size=500)
        assert not policy.bounded
        assert policy.next_range(0, 10_000) == (0, 499)
        policy.on_answer(500, 1_000_000, 10**9)
        assert policy.span == 500

    def test_starts_small_and_doubles_on_a_quiet_chain(self) -> None:
        """Nothing is known at first: a few blocks, then at most twice the span per answer."""
        policy = RangePolicy(size=2000, maximum=2000, max_events=1000, max_bytes=10**6)
        assert policy.span == DENSITY_START
        seen = []
        while policy.span < 2000:
            seen.append(policy.span)
            policy.on_answer(policy.span, 0, 0)
        assert seen == [4, 8, 16, 32, 64, 128, 256, 512, 1024]
        assert policy.span == 2000  # the provider size still caps it

    def test_provider_size_grows_only_when_asked_for(self) -> None:
        """Queries held below the size by density do not grow the size."""
        policy = RangePolicy(size=100, grow_after=1, max_events=10)
        for _ in range(5):
            policy.on_answer(policy.span, 40, 0)
        assert policy.size == 100

    def test_dense_answer_sizes_the_next_range_to_the_event_bound(self) -> None:
        """3,000 events a block under a 10,000 bound: three blocks a query."""
        policy = RangePolicy(size=2000, max_events=10_000, max_bytes=10**9)
        policy.on_answer(4, 12_000, 12_000 * 600)
        assert policy.span == 3
        policy.on_answer(3, 9_000, 9_000 * 600)
        assert policy.span == 3

    def test_byte_bound_wins_for_large_events(self) -> None:
        """Few events with big data are bounded by bytes, not by count."""
        policy = RangePolicy(size=2000, max_events=10_000, max_bytes=1_000_000)
        policy.on_answer(4, 40, 1_600_000)
        assert policy.span == 2

    def test_a_block_over_the_bound_is_asked_alone(self) -> None:
        """One block can hold more than the bound; the span never drops below one block."""
        policy = RangePolicy(size=2000, max_events=100)
        policy.on_answer(4, 4_000, 0)
        assert policy.span == 1
        assert policy.next_range(7, 100) == (7, 7)

    def test_refusals_still_shrink_a_bounded_policy(self) -> None:
        """The provider's refusal caps the span below what density would allow."""
        policy = RangePolicy(size=2000, max_events=10**6)
        for _ in range(10):
            policy.on_answer(policy.span, 0, 0)
        assert policy.span == 2000
        policy.on_too_large(None, tried=2000)
        assert policy.span == 1000

    def test_rejects_empty_bounds(self) -> None:
        """A bound of zero events or bytes is a programming error."""
        with pytest.raises(ValueError):
            RangePolicy(max_events=0)
        with pytest.raises(ValueError):
            RangePolicy(max_bytes=0)

    def test_answer_cap_spares_single_blocks(self) -> None:
        """Multi-block answers are capped at twice the byte bound; one block never is."""
        policy = RangePolicy(size=2000, max_bytes=1000)
        assert policy.answer_cap(2) == 2000
        assert policy.answer_cap(1) is None
        assert RangePolicy(size=2000).answer_cap(50) is None

    def test_answer_over_the_cap_halves_the_density_span_only(self) -> None:
        """A dropped answer halves what density allows; the provider size stays."""
        policy = RangePolicy(size=2000, maximum=2000, max_bytes=1000)
        for _ in range(6):
            policy.on_answer(policy.span, 0, 0)
        assert policy.span == 256
        assert policy.on_answer_too_large(256) == 128
        assert policy.size == 2000
        assert policy.on_answer_too_large(3) == 1

    def test_short_tail_keeps_what_was_learned(self) -> None:
        """A query clipped at the range's end does not reset the allowed span."""
        assert fit_span(400, 3, 0, 0, max_events=100, max_bytes=None) == 400
        assert fit_span(400, 3, 30, 0, max_events=100, max_bytes=None) == 10


@given(
    span=st.integers(min_value=1, max_value=5_000),
    events=st.integers(min_value=0, max_value=10**7),
    nbytes=st.integers(min_value=0, max_value=10**10),
    max_events=st.integers(min_value=1, max_value=100_000),
    max_bytes=st.integers(min_value=1, max_value=10**8),
)
def test_fit_keeps_the_same_density_within_bounds(
    span: int, events: int, nbytes: int, max_events: int, max_bytes: int
) -> None:
    """At the density just seen, the next span's events and bytes stay within the bounds
    (unless it is a single block), and it never more than doubles."""
    fit = fit_span(span, span, events, nbytes, max_events=max_events, max_bytes=max_bytes)
    assert 1 <= fit <= 2 * span
    if fit > 1:
        assert fit * events <= max_events * span
        assert fit * nbytes <= max_bytes * span


blocks = st.lists(
    st.tuples(st.integers(min_value=1, max_value=40), st.integers(min_value=1, max_value=500)),
    max_size=40,
)


@given(
    layout=blocks,
    max_items=st.none() | st.integers(min_value=1, max_value=60),
    max_bytes=st.none() | st.integers(min_value=1, max_value=5_000),
)
def test_split_by_block_keeps_blocks_whole_and_slices_bounded(
    layout: list[tuple[int, int]], max_items: int | None, max_bytes: int | None
) -> None:
    """Slices cover every item in order, never cut a block, and each is within the
    bounds unless it is one block on its own."""
    items = [(b, size) for b, (count, size) in enumerate(layout) for _ in range(count)]
    cuts = split_by_block(
        items, lambda it: it[0], lambda it: it[1], max_items=max_items, max_bytes=max_bytes
    )
    assert [i for a, b in cuts for i in range(a, b)] == list(range(len(items)))
    for a, b in cuts:
        piece = items[a:b]
        assert a == 0 or items[a - 1][0] != items[a][0]  # starts a block
        if len({blk for blk, _ in piece}) > 1:
            assert max_items is None or len(piece) <= max_items
            assert max_bytes is None or sum(s for _, s in piece) <= max_bytes


def test_split_by_block_fills_each_slice_up_to_the_bound() -> None:
    """A slice of exactly the bound is within it; no slice for no items."""
    one_each = [1, 2, 3, 4, 5]
    assert split_by_block(one_each, lambda b: b, lambda _: 1, max_items=2, max_bytes=None) == [
        (0, 2),
        (2, 4),
        (4, 5),
    ]
    assert split_by_block(one_each, lambda b: b, lambda _: 10, max_items=None, max_bytes=20) == [
        (0, 2),
        (2, 4),
        (4, 5),
    ]
    assert split_by_block([], lambda b: b, lambda _: 1, max_items=2, max_bytes=None) == []


def test_split_by_block_counts_the_bytes_of_the_block_that_starts_a_slice() -> None:
    """After a cut, the new slice holds the bytes of its first block's items so far."""
    items = [(1, 6), (2, 3), (2, 3), (3, 3)]  # (block, bytes)
    cuts = split_by_block(items, lambda it: it[0], lambda it: it[1], max_items=None, max_bytes=8)
    assert cuts == [(0, 1), (1, 3), (3, 4)]


def test_split_by_block_isolates_an_oversized_block() -> None:
    """A block over the bound is a slice alone; its neighbours are not merged into it."""
    items = [1, 2, 2, 2, 2, 3]
    cuts = split_by_block(items, lambda b: b, lambda _: 1, max_items=2, max_bytes=None)
    assert cuts == [(0, 1), (1, 5), (5, 6)]


class TestRestIsLarge:
    def test_the_rest_at_the_density_seen_decides(self) -> None:
        """3,000 events over 2 blocks, 40 blocks left: 60,000 expected."""
        assert rest_is_large(3_000, 2, 40, 60_000)
        assert not rest_is_large(3_000, 2, 39, 60_000)

    def test_nothing_seen_or_nothing_left_is_never_large(self) -> None:
        """No density yet (or no rest) is no reason for a second process."""
        assert not rest_is_large(0, 0, 10_000, 1)
        assert not rest_is_large(5_000, 3, 0, 1)
        assert not rest_is_large(0, 500, 10_000, 1)


class TestBusyEnough:
    def test_the_share_of_the_wall_time_on_the_cpu_decides(self) -> None:
        """0.9 s of CPU in 1.0 s is busy at 0.7; 0.45 s (a process waiting on its node)
        is not."""
        assert busy_enough(0.9, 1.0, 0.7)
        assert busy_enough(0.7, 1.0, 0.7)
        assert not busy_enough(0.45, 1.0, 0.7)

    def test_zero_hands_over_on_the_size_alone(self) -> None:
        assert busy_enough(0.0, 1.0, 0.0)
        assert busy_enough(0.0, 0.0, 0.0)

    def test_no_time_measured_is_not_busy(self) -> None:
        assert not busy_enough(0.0, 0.0, 0.7)
