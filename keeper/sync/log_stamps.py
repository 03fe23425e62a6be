"""Which headers a historical batch reads when its logs carry their blocks' timestamps,
and whether those timestamps agree with the headers read.

Pure decisions for :class:`keeper.sync.history.RangeFetcher` (rules in
docs/reliability.md, "Block timestamps from the logs"). A batch reads the
header of its last block (the cursor's anchor) and of one block its logs
timed, drawn at random: a node wrong on some blocks only (a cache, a client
bug on one kind of block) is then found on a batch in proportion to how many
blocks it gets wrong, where a fixed choice (the lowest, say) could miss it
forever. Each header read also bounds every timestamp around it, since chain
time never goes back: a log timestamp later than a later block's header, or
earlier than an earlier one's, is wrong whichever block was drawn.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Set
from dataclasses import dataclass

from keeper.domain.model import BlockHeader

__all__ = ["StampTrust", "disagreements", "headers_to_read"]


@dataclass(slots=True)
class StampTrust:
    """Whether the node's log timestamps are believed, for the rest of the process.

    One for the indexer, shared by its in-process fetcher and the fetch process's
    ranges (sent with each range, taken back with each message): a node found wrong
    by either is not believed again by the next range.
    """

    trusted: bool = True


def headers_to_read(
    blocks: Set[int], stamped: Mapping[int, int], hi: int, rng: random.Random
) -> set[int]:
    """The blocks whose headers a batch reads: every block with logs the logs did not
    time, the batch's last block ``hi``, and one timed block drawn by ``rng``."""
    wanted = set(blocks - stamped.keys())
    wanted.add(hi)
    candidates = sorted(stamped.keys() - {hi})
    if candidates:
        wanted.add(rng.choice(candidates))
    return wanted


def disagreements(
    stamped: Mapping[int, int], headers: Mapping[int, BlockHeader]
) -> list[tuple[int, int, int, int]]:
    """``(block, log timestamp, header's block, header's timestamp)`` for each log
    timestamp a header read contradicts: its own block's, a header above it that is
    earlier, or one below it that is later."""
    wrong: list[tuple[int, int, int, int]] = []
    for number, stamp in sorted(stamped.items()):
        for h in headers.values():
            if (
                (h.number == number and h.timestamp != stamp)
                or (h.number > number and h.timestamp < stamp)
                or (h.number < number and h.timestamp > stamp)
            ):
                wrong.append((number, stamp, h.number, h.timestamp))
                break
    return wrong
