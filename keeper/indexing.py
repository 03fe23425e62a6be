"""The consumer of the sync: each yielded change committed, in order, and reported.

Part of the composition root. The sync (:mod:`keeper.sync`) decides and
never writes; :class:`IndexPipeline` commits every :class:`BlockBatch` and
:class:`Reorg` in one store transaction each (the cursor moves in the same
transaction as its rows) before the sync is resumed, then tells the listener
(metrics, logs, progress). The daemon, ``keeper backfill``, the benchmarks
and the tests all build it with :func:`build_indexing`, so they all run one
wiring.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Protocol

from keeper.config import Config
from keeper.domain.model import BlockHeader, Event
from keeper.domain.model import Protocol as EscrowProtocol
from keeper.domain.multicall import MULTICALL3_ADDRESS
from keeper.obs.logging import get_logger
from keeper.rpc.client import RpcClient
from keeper.store.db import Db
from keeper.store.index_store import ApplyResult, Batch, IndexStore
from keeper.store.tokens import save_token_meta, tokens_to_read
from keeper.sync.changes import BlockBatch, Change, Changes, Heads, Reorg, Retime, StepDone
from keeper.sync.indexer import Indexer, SyncSettings, WatchedContract
from keeper.sync.tokens import Caller, read_token

__all__ = [
    "IndexListener",
    "IndexPipeline",
    "NullListener",
    "Tee",
    "build_indexing",
    "read_new_tokens",
    "sync_settings",
    "watched",
]

log = get_logger(__name__)


class IndexListener(Protocol):
    """What indexing reports; the daemon wires it to metrics and logs."""

    def on_heads(self, head: BlockHeader, finalized: int, indexed: int) -> None: ...

    def on_batch(self, result: ApplyResult, events: Sequence[Event]) -> None: ...

    def on_reorg(self, depth: int, fork: int) -> None: ...

    def on_halt(self, reason: str) -> None: ...


class NullListener:
    def on_heads(self, head: BlockHeader, finalized: int, indexed: int) -> None:
        pass

    def on_batch(self, result: ApplyResult, events: Sequence[Event]) -> None:
        pass

    def on_reorg(self, depth: int, fork: int) -> None:
        pass

    def on_halt(self, reason: str) -> None:
        pass


class Tee:
    """One listener that tells several."""

    def __init__(self, *targets: IndexListener) -> None:
        self.targets = targets

    def on_heads(self, head: BlockHeader, finalized: int, indexed: int) -> None:
        for t in self.targets:
            t.on_heads(head, finalized, indexed)

    def on_batch(self, result: ApplyResult, events: Sequence[Event]) -> None:
        for t in self.targets:
            t.on_batch(result, events)

    def on_reorg(self, depth: int, fork: int) -> None:
        for t in self.targets:
            t.on_reorg(depth, fork)

    def on_halt(self, reason: str) -> None:
        for t in self.targets:
            t.on_halt(reason)


class IndexPipeline:
    """The indexer's changes committed to the store and reported, one at a time."""

    def __init__(
        self, indexer: Indexer, store: IndexStore, listener: IndexListener | None = None
    ) -> None:
        self.indexer = indexer
        self.store = store
        self.listener: IndexListener = listener or NullListener()

    def apply(self, change: Change) -> None:
        """Commit one change (one transaction) and report it; StepDone needs neither."""
        if isinstance(change, Heads):
            self.listener.on_heads(change.head, change.finalized, change.indexed)
        elif isinstance(change, BlockBatch):
            batch = Batch(
                events=change.events,
                blocks=change.blocks,
                reads=change.reads,
                indexed_block=change.indexed_block,
                indexed_hash=change.indexed_hash,
                finalized_block=change.finalized,
                log_stamped=change.log_stamped,
                stamps_wrong=change.stamps_wrong,
            )
            result = self.store.apply_batch(batch, keep_from=change.keep_from)
            self.listener.on_batch(result, change.events)
        elif isinstance(change, Retime):
            touched = self.store.retime(change.blocks, settled=change.settled)
            if change.blocks:
                log.warning(
                    "events_retimed", blocks=len(change.blocks),
                    first_block=change.blocks[0][0], last_block=change.blocks[-1][0],
                    touched=len(touched),
                )  # fmt: skip
        elif isinstance(change, Reorg):
            touched = self.store.rollback_to(change.fork_block)
            self.listener.on_reorg(change.depth, change.fork_block)
            log.warning(
                "reorg", fork_block=change.fork_block, depth=change.depth, touched=len(touched)
            )

    async def consume(self, changes: Changes) -> bool:
        """Apply every change, in order; returns the closing StepDone's ``again``.

        The generator is closed however this ends (an error in a commit, a
        cancellation), so a range prefetch in flight never outlives it.
        """
        again = False
        async with contextlib.aclosing(changes):
            async for change in changes:
                if isinstance(change, StepDone):
                    again = change.again
                else:
                    self.apply(change)
        return again

    async def step(self, *, to_block: int | None = None) -> bool:
        """One indexer step, committed; True when stepping again at once would find more."""
        return await self.consume(self.indexer.changes(to_block=to_block))

    async def backfill(self, to_block: int | None = None) -> int:
        """Index up to ``to_block`` (default: the finalized block) and return the cursor."""
        head, finalized = await self.indexer.heads()
        target = finalized if to_block is None else min(to_block, head.number)
        while self.indexer.start_cursor() < target:
            await self.step(to_block=target)
        return self.indexer.start_cursor()


def watched(cfg: Config) -> list[WatchedContract]:
    return [
        WatchedContract(
            name=c.name,
            address=c.address,
            protocol=EscrowProtocol(c.protocol),
            start_block=c.start_block,
        )
        for c in cfg.contracts
    ]


def sync_settings(cfg: Config) -> SyncSettings:
    return SyncSettings(
        finality=cfg.chain.finality,
        confirmations=cfg.chain.confirmations,
        window=cfg.chain.window,
        min_range=cfg.chain.min_range,
        max_range=cfg.chain.max_range,
        batch_events=cfg.chain.batch_events,
        batch_bytes=cfg.chain.batch_bytes,
        # the keeper's Multicall3 when configured (a devnet's), else the canonical address
        multicall=cfg.keeper.multicall or MULTICALL3_ADDRESS,
        fetch_process_blocks=cfg.chain.fetch_process_blocks,
        fetch_process_events=cfg.chain.fetch_process_events,
        fetch_process_busy=cfg.chain.fetch_process_busy,
    )


def build_indexing(
    cfg: Config,
    rpc: RpcClient,
    conn: Db,
    listener: IndexListener | None = None,
) -> IndexPipeline:
    """The indexer over this chain's index store, and the consumer that commits for it."""
    store = IndexStore(conn, cfg.chain.chain_id)
    indexer = Indexer(rpc, store, watched(cfg), sync_settings(cfg))
    return IndexPipeline(indexer, store, listener)


async def read_new_tokens(
    conn: Db,
    rpc: Caller,
    chain_id: int,
    block: int,
    reader: Db | None = None,
) -> int:
    """Read every job token that has no metadata yet; returns how many were stored.

    Finding them scans the jobs' tokens; with ``reader`` (a read-only connection of
    the same database) that scan runs on a worker thread, so the daemon's event
    loop keeps serving the indexer meanwhile. Writes go through ``conn``.
    """
    if reader is not None:
        todo = await asyncio.to_thread(tokens_to_read, reader, chain_id)
    else:
        todo = tokens_to_read(conn, chain_id)
    stored = 0
    for token in todo:
        meta = await read_token(rpc, token, block)
        save_token_meta(conn, chain_id, meta, block)
        log.info("token_metadata_read", token=token, decimals=meta.decimals, symbol=meta.symbol)
        stored += 1
    return stored
