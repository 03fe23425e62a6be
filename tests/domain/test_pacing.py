"""The head-poll pace: fewer empty polls on slow chains, no later detection on schedule."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keeper.domain.pacing import MIN_SAMPLES, BlockPace


def paced(interval: float, blocks: int, start: float = 100.0) -> BlockPace:
    pace = BlockPace()
    for i in range(blocks):
        pace.observe(i, start + i * interval)
    return pace


class TestLearning:
    def test_plain_polling_until_enough_blocks_seen(self) -> None:
        """With fewer than MIN_SAMPLES intervals the configured poll interval stands."""
        pace = paced(12.0, MIN_SAMPLES)  # MIN_SAMPLES heads = MIN_SAMPLES - 1 intervals
        assert pace.interval() is None
        assert pace.delay(2.0, now=100.0 + 12.0 * (MIN_SAMPLES - 1)) == 2.0
        pace.observe(MIN_SAMPLES, 100.0 + 12.0 * MIN_SAMPLES)  # the MIN_SAMPLES-th interval
        assert pace.interval() == 12.0

    def test_median_per_block(self) -> None:
        """A poll that finds two blocks counts two intervals of half the gap each."""
        pace = BlockPace()
        t = 0.0
        for head in range(0, 20, 2):  # 2 blocks every 2 s: 1 s a block
            pace.observe(head, t)
            t += 2.0
        assert pace.interval() == pytest.approx(1.0)

    def test_one_stall_does_not_move_the_pace(self) -> None:
        pace = paced(2.0, 10)
        pace.observe(10, 18.0 + 100.0 + 60.0)  # one block a minute late
        assert pace.interval() == pytest.approx(2.0)

    def test_follows_a_chain_that_slows_down(self) -> None:
        pace = paced(1.0, 10)
        last = 109.0
        for head in range(10, 20):
            last += 3.0
            pace.observe(head, last)
        assert pace.interval() == pytest.approx(3.0)

    def test_lower_or_equal_head_changes_nothing(self) -> None:
        """A lagging node's older head neither adds an interval nor moves the reference."""
        pace = paced(2.0, 8)
        before = (pace.interval(), pace.delay(0.5, now=115.0))
        pace.observe(3, 115.0)
        pace.observe(7, 115.5)
        assert (pace.interval(), pace.delay(0.5, now=115.0)) == before


class TestDelay:
    def test_first_poll_after_a_new_head_waits_for_the_next_block(self) -> None:
        """12 s blocks, 2 s poll: the first poll is due 1 s before the next block."""
        pace = paced(12.0, 10)
        seen = 100.0 + 12.0 * 9
        assert pace.delay(2.0, now=seen) == pytest.approx(11.0)
        assert pace.delay(2.0, now=seen + 11.0) == 2.0  # then the configured interval

    def test_fast_poll_on_one_second_blocks(self) -> None:
        pace = paced(1.0, 10)
        assert pace.delay(0.25, now=109.0) == pytest.approx(0.875)

    def test_never_below_the_poll_interval(self) -> None:
        """Blocks faster than the poll interval: polling stays at the configured rate."""
        pace = paced(0.25, 20)
        assert pace.delay(2.0, now=100.0 + 0.25 * 19) == 2.0

    def test_wait_is_bounded(self) -> None:
        """A pace learnt on a very slow chain never makes a poll wait more than 30 intervals."""
        pace = paced(3600.0, 10)
        assert pace.delay(1.0, now=100.0 + 3600.0 * 9) == 30.0

    @given(
        interval=st.floats(0.05, 60.0),
        poll=st.floats(0.05, 10.0),
        phase=st.floats(0.0, 1.0),
    )
    def test_a_block_on_schedule_is_seen_within_one_poll(
        self, interval: float, poll: float, phase: float
    ) -> None:
        """Polls at delay() steps reach the next on-time block no later than one poll after it.

        Compared with plain polling at ``poll``, which also sees it within one poll.
        """
        pace = paced(interval, 11, start=0.0)
        seen = interval * 11 + phase * poll  # block 11 was seen this long after it came
        pace.observe(11, seen)
        due = interval * 12
        now = seen
        while now < due:
            now += pace.delay(poll, now)
        assert now - due <= poll * (1 + 1e-9)
