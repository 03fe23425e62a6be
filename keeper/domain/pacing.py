"""When to ask for the head again: right after a new block, the next is about a block time away.

Polling every ``poll_interval`` costs one call per poll, and on a chain whose
blocks come slower than that most polls answer "nothing new": with 12 s
blocks and a 2 s poll, five calls of six are wasted; with 1 s blocks and a
0.25 s poll, three of four. So after a new head the first poll waits until
half a poll before the next block is due, then polling goes on at the
configured interval. A block on schedule is seen as soon as before; only a
block that comes well ahead of the usual pace waits for that first poll.

The pace is learnt from when new heads were seen on the local monotonic
clock, not from block timestamps (devnets warp chain time), per block (a
poll that finds two new blocks counts two intervals) and as the median of the
last few, so a chain that speeds up or slows down is followed within a few
blocks and one stall does not move it. Pure: the caller supplies the clock.
"""

from __future__ import annotations

import statistics
from collections import deque
from typing import Final

__all__ = ["MIN_SAMPLES", "BlockPace"]

MIN_SAMPLES: Final = 5  # intervals seen before the pace is trusted
_SAMPLES: Final = 9
_MAX_QUIET_POLLS: Final = 30  # a wait never exceeds this many poll intervals


class BlockPace:
    """The chain's recent block interval, and the wait before the next head poll."""

    def __init__(self) -> None:
        self._last: tuple[int, float] | None = None
        self._intervals: deque[float] = deque(maxlen=_SAMPLES)

    def observe(self, head: int, now: float) -> None:
        """Record the head seen at ``now``; a head at or below the last one changes nothing.

        A lower head is a lagging node or a shorter branch: the pace is a
        property of the chain, so it is measured from the highest head seen.
        """
        if self._last is None:
            self._last = (head, now)
            return
        number, at = self._last
        if head <= number:
            return
        self._intervals.append((now - at) / (head - number))
        self._last = (head, now)

    def interval(self) -> float | None:
        """Median seconds per block over the last few, or None while still learning."""
        if len(self._intervals) < MIN_SAMPLES:
            return None
        return statistics.median(self._intervals)

    def delay(self, poll_interval: float, now: float) -> float:
        """Seconds to wait before the next head poll: at least ``poll_interval``."""
        pace = self.interval()
        if pace is None or self._last is None:
            return poll_interval
        due = self._last[1] + pace - poll_interval / 2 - now
        return min(max(poll_interval, due), _MAX_QUIET_POLLS * poll_interval)
