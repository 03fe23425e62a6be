"""What the sync yields, and the read-only view of the index it needs.

The sync decides; it never writes. :meth:`keeper.sync.indexer.Indexer.changes`
yields these items in chain order and the composition root's consumer
(:mod:`keeper.indexing`) commits each one (one store transaction per
:class:`BlockBatch` or :class:`Reorg`) and reports it, before the sync is
resumed. Because the consumer applies an item before the next is asked for,
the sync reads back the window and cursor it just caused, through
:class:`IndexView`; that is the only way it sees the store.

There is no separate ``Finalize`` item: the finalized block moves with the
cursor, in the same transaction as the rows it covers, so it rides on every
:class:`BlockBatch` (``finalized``, and ``keep_from`` for the window it
prunes). A finalize-only write would be a transaction the index never needed.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Protocol

from keeper.domain.model import BlockHeader, ChainRead, Event

__all__ = [
    "BlockBatch",
    "Change",
    "Changes",
    "Heads",
    "IndexView",
    "Reorg",
    "Retime",
    "StepDone",
]


@dataclass(frozen=True, slots=True)
class Heads:
    """The chain's head and finalized block as a step began, and our cursor then (a report)."""

    head: BlockHeader
    finalized: int
    indexed: int


@dataclass(frozen=True, slots=True)
class BlockBatch:
    """Blocks to commit at once: events, window blocks, view reads, and the cursor after them.

    Window blocks below ``keep_from`` are pruned in the same transaction.
    ``log_stamped``: the events' times are the node's log timestamps, unchecked;
    ``stamps_wrong``: those were found wrong by now (a check of them is owed).
    """

    events: list[Event]
    blocks: list[BlockHeader]
    reads: list[ChainRead]
    indexed_block: int
    indexed_hash: str
    finalized: int
    keep_from: int
    log_stamped: bool = False
    stamps_wrong: bool = False


@dataclass(frozen=True, slots=True)
class Reorg:
    """Everything above ``fork_block`` was replaced: forget it and rebuild what it touched.

    ``depth`` is how many of our blocks were replaced (for metrics and logs).
    """

    fork_block: int
    depth: int


@dataclass(frozen=True, slots=True)
class Retime:
    """Stored events whose block time was wrong: ``(number, hash, timestamp)`` as each
    block's header gives it. Their subjects' projections are rebuilt with it.

    What a node whose log timestamps were found wrong had already had committed
    (keeper.sync.log_stamps); a block whose hash is not the header's is left alone.
    ``settled``: the last of a check, which the store then no longer owes.
    """

    blocks: list[tuple[int, str, int]]
    settled: bool = False


@dataclass(frozen=True, slots=True)
class StepDone:
    """The last item of a step: whether stepping again at once would find more."""

    again: bool


Change = Heads | BlockBatch | Reorg | Retime | StepDone
# what the indexer's stepping methods return: consumed in order, closed when done
Changes = AsyncGenerator[Change, None]


class CursorPoint(Protocol):
    @property
    def indexed_block(self) -> int: ...


class StampCheckOwed(Protocol):
    @property
    def unchecked_from(self) -> int: ...

    @property
    def found_wrong(self) -> bool: ...


class IndexView(Protocol):
    """The index as the sync may see it: read-only, answered by the store.

    A protocol declared here rather than an import of ``keeper.store``, so
    the sync depends on nothing that writes; ``IndexStore`` satisfies it.
    """

    def cursor(self) -> CursorPoint | None: ...

    def window(self) -> list[BlockHeader]: ...

    def reads_from(self, block_number: int) -> Sequence[ChainRead]: ...

    def stamp_checks(self) -> StampCheckOwed | None:
        """The check of event times committed from log timestamps that is owed, if any."""
        ...

    def event_blocks(self, first: int, last: int) -> Sequence[tuple[int, str, int]]:
        """``(number, hash, timestamp)`` of each block from ``first`` to ``last`` that
        has stored events, as stored."""
        ...
