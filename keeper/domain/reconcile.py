"""Chain reconciliation: how a newly seen block relates to the blocks we hold.

Pure functions over the persisted window of unfinalized ``BlockHeader``s
(ascending, last = our indexed head). The sync layer does the fetching and
acts on the verdicts returned here, so every reorg rule is testable from
tables without a node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from keeper.domain.model import BlockHeader


@dataclass(frozen=True, slots=True)
class Extends:
    """The block is the child of our head: index it."""


@dataclass(frozen=True, slots=True)
class Diverged:
    """The block's parent is not our head (or the head itself was replaced): find the fork."""


@dataclass(frozen=True, slots=True)
class Lagging:
    """The node reports a height we already hold, with the same hash: a lagging node, no reorg."""


@dataclass(frozen=True, slots=True)
class Ahead:
    """The block is above our head + 1; fetch the missing ones first."""


Relation = Extends | Diverged | Lagging | Ahead


def relate(window: Sequence[BlockHeader], block: BlockHeader) -> Relation:
    """Classify ``block`` against the window (which must not be empty)."""
    head = window[-1]
    if block.number == head.number + 1:
        return Extends() if block.parent_hash == head.hash else Diverged()
    if block.number > head.number + 1:
        return Ahead()
    held = _by_number(window).get(block.number)
    if held is None:
        # below the window: finalized territory we can't compare; the node lags far behind
        return Lagging()
    return Lagging() if held.hash == block.hash else Diverged()


def fork_point(window: Sequence[BlockHeader], canonical: Mapping[int, str]) -> int | None:
    """The highest window block whose hash the node still reports as canonical.

    ``canonical`` maps block numbers to the node's current hashes (numbers the
    node no longer has are absent). Returns None when no window block survives:
    the reorg is deeper than the window and must halt, never be repaired.
    """
    for header in reversed(window):
        if canonical.get(header.number) == header.hash:
            return header.number
    return None


def prune(window: Sequence[BlockHeader], finalized: int, keep: int) -> list[BlockHeader]:
    """Drop window blocks no reorg can reach, keeping the last ``keep`` and all unfinalized ones.

    Blocks at or above ``finalized`` always stay (a reorg there must be seen,
    and the finalized block anchors the first unfinalized one by parent hash).
    Below it we still keep up to ``keep`` blocks in all, because a node's
    finalized tag is only as good as the node: a reorg under it within the
    window is still caught rather than silently indexed around.
    """
    above = [h for h in window if h.number >= finalized]
    if len(above) >= keep:
        return above
    below = [h for h in window if h.number < finalized]
    room = keep - len(above)
    return below[max(0, len(below) - room) :] + above


def _by_number(window: Sequence[BlockHeader]) -> dict[int, BlockHeader]:
    return {h.number: h for h in window}
