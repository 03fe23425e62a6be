"""The indexer: historical scans and realtime heads, yielded as changes to commit.

Two zones (see the design notes): below the finalized block, ``eth_getLogs``
range scans with an adaptive range; above it, one block at a time fetched by
number and its logs by block hash, each checked against the persisted window
by parent hash. The indexer never writes: :meth:`Indexer.changes` yields
:mod:`keeper.sync.changes` items and the composition root commits each
(events, window blocks, view reads and cursor in one store transaction)
before the indexer resumes, so a SIGKILL at any instant loses and duplicates
nothing: on restart we resume from the cursor and re-check the window.

What the indexer may import: ``keeper.rpc``, ``keeper.domain``,
``keeper.obs`` and ``keeper.errors``; the index it reads through
:class:`~keeper.sync.changes.IndexView`, never ``keeper.store``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from keeper.domain.events import decode_logs
from keeper.domain.model import BlockHeader, ChainRead, Event, Log
from keeper.domain.model import Protocol as EscrowProtocol
from keeper.domain.ranges import RangePolicy, busy_enough, rest_is_large
from keeper.domain.reads import READ_KINDS, STABLE_FIELDS, ReadRequest
from keeper.domain.reconcile import Ahead, Diverged, Extends, Lagging, fork_point, prune, relate
from keeper.errors import DeepReorgError, RetryableError
from keeper.obs.logging import get_logger
from keeper.rpc.client import RpcClient
from keeper.rpc.errors import RpcError
from keeper.rpc.validate import bloom_may_contain
from keeper.sync.changes import BlockBatch, Changes, Heads, IndexView, Reorg, Retime, StepDone
from keeper.sync.fetch_process import ProcessFetcher
from keeper.sync.history import Fetched, RangeFetcher
from keeper.sync.log_stamps import StampTrust
from keeper.sync.view_calls import ViewReader

log = get_logger(__name__)

# blocks whose stored events are checked against their headers at once, in a re-timing
RETIME_BLOCKS = 1000


@dataclass(frozen=True, slots=True)
class WatchedContract:
    name: str
    address: str
    protocol: EscrowProtocol
    start_block: int


@dataclass(slots=True)
class SyncSettings:
    """The ``[chain]`` settings the indexer follows (``indexing.sync_settings``; their
    defaults and meaning are the config's, declared once there)."""

    finality: Literal["tag", "confirmations"]
    confirmations: int
    window: int
    min_range: int
    max_range: int
    # a historical batch stays under these (a single larger block is one batch)
    batch_events: int
    batch_bytes: int
    # the Multicall3 the view reads are grouped through (None: each read alone)
    multicall: str | None
    # a historical range of at least this many blocks is fetched by a second process
    # (keeper.sync.fetch_process) while this one commits, from where the rest of it
    # looks like holding fetch_process_events (0: from its start); 0 blocks: in process
    fetch_process_blocks: int
    fetch_process_events: int
    # ... once this process has been busy on the CPU that share of the time (busy_enough)
    fetch_process_busy: float


@dataclass(slots=True)
class SyncState:
    """What the rest of the daemon may read about sync progress (no I/O)."""

    head: BlockHeader | None = None
    finalized: int = -1
    indexed: int = -1
    halted: str | None = None
    last_progress: float = 0.0
    reorgs: int = 0
    history: list[str] = field(default_factory=list)


class Indexer:
    """Decides what to commit; the caller commits each yielded change before resuming it."""

    def __init__(
        self,
        rpc: RpcClient,
        view: IndexView,
        contracts: Sequence[WatchedContract],
        settings: SyncSettings,
    ) -> None:
        if not contracts:
            raise ValueError("no contracts to index")
        self.rpc = rpc
        self.view = view
        self.contracts = list(contracts)
        self.settings = settings
        self.protocols = {c.address: c.protocol for c in contracts}
        self.addresses = sorted(self.protocols)
        self.policy = RangePolicy(
            size=settings.max_range,
            minimum=settings.min_range,
            maximum=settings.max_range,
            max_events=settings.batch_events,
            max_bytes=settings.batch_bytes,
        )
        self.state = SyncState()
        self.views = ViewReader(rpc, settings.multicall)
        self.stamps = StampTrust()
        self.history = RangeFetcher(
            rpc, self.addresses, self.policy, self.decode, self.execute_reads, stamps=self.stamps
        )
        self.remote = ProcessFetcher(
            rpc, self.addresses, self.policy, self.protocols, settings.multicall, self.stamps
        )
        self._checked_window = False
        self._head_bloom: tuple[BlockHeader, str] | None = None
        # reads made while their block was the node's head (None: not loaded since start)
        self._tip_reads: list[ReadRequest] | None = None
        # whether the current step indexed or rolled back anything
        self._moved = False

    def forget(self) -> None:
        """Drop what was learned from the index since start, as a restart would.

        For a daemon that becomes the indexer again after another wrote the
        index meanwhile: the window is re-checked and the reads at the
        cursor reloaded from the store, not trusted from before.
        """
        self._checked_window = False
        self._tip_reads = None
        self._head_bloom = None

    # ---- heads and finality -------------------------------------------------

    async def heads(self) -> tuple[BlockHeader, int]:
        head = await self.best_head()
        finalized = head.number - self.settings.confirmations
        if self.settings.finality == "tag":
            tagged = await self.rpc.get_block("finalized")
            if tagged is not None:
                finalized = tagged.number
        finalized = max(-1, min(finalized, head.number))
        self.state.head = head
        self.state.finalized = finalized
        return head, finalized

    async def best_head(self) -> BlockHeader:
        """The highest head any endpoint reports, fetched with failover.

        With several endpoints one may lag; following the highest head (and
        fetching blocks with ``must_exist``, which fails a lagging replica over)
        keeps the index at the chain's tip instead of the slowest node's.
        """
        if len(self.rpc.endpoint_names) > 1:
            heads = [h for h in (await self.rpc.head_of_each()).values() if h is not None]
            if heads:
                try:
                    best = await self.rpc.get_block_and_bloom(max(heads), must_exist=True)
                except (RetryableError, RpcError) as exc:
                    # only the endpoint that is ahead has that block, and it is failing
                    # now: follow what the others have rather than not moving at all
                    log.info("best_head_unavailable", block=max(heads), error=str(exc))
                    best = None
                if best is not None:
                    self._head_bloom = best
                    return best[0]
        latest = await self.rpc.get_block_and_bloom("latest")
        if latest is None:
            raise RetryableError("node returned no latest block")
        # kept with its bloom: when the head is the next block to index, following
        # it needs no second fetch (one call per new block in steady state, not two)
        self._head_bloom = latest
        return latest[0]

    def start_cursor(self) -> int:
        cursor = self.view.cursor()
        if cursor is not None:
            return cursor.indexed_block
        return min(c.start_block for c in self.contracts) - 1

    # ---- one step -------------------------------------------------------------

    async def changes(self, *, to_block: int | None = None) -> Changes:
        """Advance as far as the chain allows now, one change at a time.

        Each yielded change must be committed before the next is asked for:
        the indexer reads the window and cursor back from its view. The last
        item is a StepDone saying whether to step again at once: something
        was indexed (or rolled back) and the head seen at the start is not
        reached yet. Having reached that head, the next new block can only be
        found by the next poll, so asking again at once would cost a call for
        nothing.
        """
        self._moved = False
        head, finalized = await self.heads()
        indexed = self.start_cursor()
        self.state.indexed = indexed
        yield Heads(head, finalized, indexed)
        if not self._checked_window:
            async for change in self.recheck_window(head):
                yield change
            owed = self.view.stamp_checks()
            if owed is not None and owed.found_wrong:
                # found wrong by a process that ended before its check was made: this one
                # does not believe them either, and makes the check first
                self.stamps.trusted = False
                async for change in self._owed_check():
                    yield change
            self._checked_window = True
            indexed = self.start_cursor()
        target = head.number if to_block is None else min(to_block, head.number)
        if indexed < min(finalized, target):
            async for change in self.backfill_range(indexed + 1, min(finalized, target), finalized):
                yield change
            self._moved = True
            indexed = self.start_cursor()
        if indexed >= head.number:
            # no new block, but the head itself may have been replaced (same-height
            # reorg), or the node lags behind us
            async for change in self.check_head(head):
                yield change
        elif indexed < target:
            async for change in self.follow(indexed, target, finalized):
                yield change
        yield StepDone(self._moved and self.start_cursor() < head.number)

    # ---- historical zone ---------------------------------------------------------

    async def backfill_range(self, start: int, end: int, finalized: int) -> Changes:
        """Scan, check, decode and read ahead (``keeper.sync.history``) while earlier
        ranges commit, one batch per range in range order."""
        believed = self.stamps.trusted  # a range started after they were not has no stamps
        async with contextlib.aclosing(self._ranges(start, end, finalized)) as ranges:
            async for item in ranges:
                window = prune([*self.view.window(), item.anchor], finalized, self.settings.window)
                batch = BlockBatch(
                    events=item.events,
                    blocks=[item.anchor],
                    reads=item.reads,
                    indexed_block=item.anchor.number,
                    indexed_hash=item.anchor.hash,
                    finalized=finalized,
                    keep_from=window[0].number,
                    log_stamped=believed,
                    stamps_wrong=not self.stamps.trusted,
                )
                async for change in self.commit(batch):
                    yield change
        if not self.stamps.trusted:
            async for change in self._owed_check():
                yield change

    async def _owed_check(self) -> Changes:
        """The events committed from log timestamps since they were last checked (by this
        process or an earlier one: the store keeps from where), checked against their
        blocks' headers now that the node's log timestamps were found wrong: a Retime for
        those that differ, the last one settling the check.

        After a range, so that the batches in flight when it was found are in too;
        a block whose stored hash is not the header's (a reorg since) is left to the
        reorg handling. One header a block with events, once.
        """
        owed = self.view.stamp_checks()
        if owed is None:
            return
        first, last = owed.unchecked_from, self.start_cursor()
        checked = retimed = 0
        for lo in range(first, last + 1, RETIME_BLOCKS):
            stored = self.view.event_blocks(lo, min(lo + RETIME_BLOCKS - 1, last))
            if not stored:
                continue
            headers = await self.rpc.get_blocks(sorted({n for n, _, _ in stored}), must_exist=True)
            by_number = {h.number: h for h in headers if h is not None}
            wrong = [
                (number, block_hash, header.timestamp)
                for number, block_hash, timestamp in stored
                if (header := by_number.get(number)) is not None
                and header.hash == block_hash
                and header.timestamp != timestamp
            ]
            checked += len(stored)
            if wrong:
                retimed += len(wrong)
                yield Retime(wrong)
        yield Retime([], settled=True)
        log.warning(
            "log_timestamps_rechecked", from_block=first, to_block=last, blocks=checked,
            retimed=retimed,
        )  # fmt: skip

    async def _ranges(self, start: int, end: int, finalized: int) -> AsyncGenerator[Fetched, None]:
        """The range's batches, fetched here until the rest looks large enough for the
        fetch process (``_rest_is_large``) while this process is busy enough on the CPU
        for a second one to help (``busy_enough``), then by it. The child is launched
        then and takes over once it has started: until that, batches are fetched here."""
        least = self.settings.fetch_process_blocks
        candidate = bool(least) and end - start + 1 >= least and self.remote.broken is None
        events, handed, waiting = 0, start, False
        cpu, wall = time.process_time(), time.monotonic()
        try:
            if not candidate or self.settings.fetch_process_events:
                async with contextlib.aclosing(self.history.prefetched(start, end)) as here:
                    async for item in here:
                        yield item
                        events += len(item.events)
                        fetched, handed = handed, item.anchor.number + 1
                        if self.remote.ready and handed <= end:
                            break
                        if not candidate or self.remote.launched or not self._rest_is_large(
                            (events, handed - start), (len(item.events), handed - fetched),
                            end - handed + 1,
                        ):  # fmt: skip
                            continue
                        used, took = time.process_time() - cpu, time.monotonic() - wall
                        if busy_enough(used, took, self.settings.fetch_process_busy):
                            self.remote.launch()
                            continue
                        if not waiting:  # said once a range: its rest stays here while it waits
                            waiting = True
                            log.info("fetch_process_not_needed", from_block=handed, to_block=end,
                                     busy=round(used / max(took, 1e-9), 3))  # fmt: skip
                    else:
                        return
            head = self.state.head.number if self.state.head is not None else None
            log.info("fetch_process_handover", from_block=handed, to_block=end,
                     events_seen=events)  # fmt: skip
            async with contextlib.aclosing(
                self.remote.prefetched(handed, end, finalized=finalized, head=head)
            ) as remote:
                async for item in remote:
                    yield item
        finally:
            await self.remote.discard()  # launched, and the range ended before it started

    def _rest_is_large(self, seen: tuple[int, int], last: tuple[int, int], left: int) -> bool:
        """Whether the rest of a range holds ``fetch_process_events`` at the density of its
        part seen so far or of its last batch, each as (events, blocks): a range whose first
        blocks are quiet (a contract's deployment and set-up) turns dense, and the last
        batch says so long before the whole part seen does."""
        least = self.settings.fetch_process_events
        return rest_is_large(*seen, left, least) or rest_is_large(*last, left, least)

    # ---- realtime zone -------------------------------------------------------------

    async def follow(self, indexed: int, target: int, finalized: int) -> Changes:
        window = self.view.window()
        if not window:
            anchor = await self.window_anchor(indexed)
            if indexed < 0:
                window = [anchor]  # nothing to commit: block 0 is indexed as any block
            else:
                seed = BlockBatch([], [anchor], [], indexed, anchor.hash, finalized, anchor.number)
                async for change in self.commit(seed):
                    yield change
                window = self.view.window()
        n = indexed + 1
        while n <= target:
            cached = self._head_bloom
            if cached is not None and cached[0].number == n:
                fetched: tuple[BlockHeader, str] | None = cached
            else:
                fetched = await self.rpc.get_block_and_bloom(n, must_exist=True)
            if fetched is None:
                return  # the node does not have it yet (or lags): next poll
            header, bloom = fetched
            relation = relate(window, header)
            if isinstance(relation, Extends):
                async for change in self.index_block(header, bloom, finalized, window):
                    yield change
                window = self.view.window()
                n += 1
                self._moved = True
            elif isinstance(relation, Diverged):
                # the block in hand may itself be stale (the chain moved on while we
                # held it): never reuse it after a divergence
                self._head_bloom = None
                fork = await self.fork_of(window)
                async for change in self.roll_back(window, fork):
                    yield change
                self._moved = True
                if window and fork >= window[-1].number:
                    # nothing of ours was replaced: the fetched block was from a branch
                    # the node has already left; fetch afresh on the next poll rather
                    # than relate the same stale block again
                    return
                window = self.view.window()
                n = fork + 1
            elif isinstance(relation, Ahead | Lagging):  # pragma: no cover - sequential walk
                return

    async def window_anchor(self, indexed: int) -> BlockHeader:
        """The cursor block, to anchor an empty window so the next block can be parent-checked.

        With nothing indexed and start_block 0 it is a stand-in for "before
        block 0" (number -1), never committed.
        """
        anchor = await self.rpc.get_block(max(indexed, 0), must_exist=True)
        if anchor is None:
            raise RetryableError(f"node has no block {indexed} to anchor the window")
        if indexed < 0:
            return BlockHeader(-1, anchor.parent_hash, "0x" + "00" * 32, anchor.timestamp)
        return anchor

    async def index_block(
        self, header: BlockHeader, bloom: str, finalized: int, window: Sequence[BlockHeader]
    ) -> Changes:
        # The bloom says for certain when none of our contracts logged in the block:
        # then the block costs one RPC call instead of two.
        if any(bloom_may_contain(bloom, bytes.fromhex(a[2:])) for a in self.addresses):
            logs = await self.rpc.get_logs_by_block_hash(self.addresses, header.hash, bloom=bloom)
        else:
            logs = []
        for lg in logs:
            if lg.block_hash != header.hash or lg.block_number != header.number:
                raise RetryableError(
                    f"node answered logs of block {lg.block_number} for block {header.number}"
                )
        events = self.decode(logs, {header.number: header.timestamp})
        reads = await self.execute_reads(events)
        kept = prune([*window, header], finalized, self.settings.window)
        batch = BlockBatch(
            events=events,
            blocks=[header],
            reads=reads,
            indexed_block=header.number,
            indexed_hash=header.hash,
            finalized=finalized,
            keep_from=kept[0].number,
        )
        async for change in self.commit(batch):
            yield change

    async def fork_of(self, window: Sequence[BlockHeader]) -> int:
        """The highest window block the node still has; a reorg deeper than the window halts."""
        numbers = [h.number for h in window if h.number >= 0]
        canonical_headers = await self.rpc.get_blocks(numbers)
        canonical = {h.number: h.hash for h in canonical_headers if h is not None}
        fork = fork_point(window, canonical)
        if fork is not None:
            return fork
        if window and window[0].number < 0:
            return -1
        lowest = window[0].number if window else -1
        raise DeepReorgError(
            f"reorg deeper than the block window: no block from {lowest} to "
            f"{window[-1].number if window else -1} is still canonical; indexing halted "
            "(re-index from a lower block or widen [chain] window)",
            depth_at_least=len(window),
        )

    async def roll_back(self, window: Sequence[BlockHeader], fork: int) -> Changes:
        depth = (window[-1].number - fork) if window else 0
        if depth <= 0:
            # every block we hold is still canonical: what diverged was a block we
            # fetched from a branch the node has since left, not our index
            log.info("stale_block_ignored", fork_block=fork)
            return
        yield Reorg(fork, depth)
        self.state.reorgs += 1

    async def handle_reorg(self, window: Sequence[BlockHeader]) -> Changes:
        fork = await self.fork_of(window)
        async for change in self.roll_back(window, fork):
            yield change

    async def recheck_window(self, head: BlockHeader) -> Changes:
        """At startup: a reorg may have happened while we were down.

        Compared at the highest window block the node has: a node that lags
        behind our cursor lacks the blocks above its head, which is no reorg.
        """
        window = [h for h in self.view.window() if 0 <= h.number <= head.number]
        if not window:
            return
        top = await self.rpc.get_block(window[-1].number)
        if top is None or top.hash == window[-1].hash:
            return
        async for change in self.handle_reorg(self.view.window()):
            yield change

    async def check_head(self, head: BlockHeader) -> Changes:
        """A head at or below our cursor: lagging if its hash matches ours, else a reorg."""
        window = self.view.window()
        if window and isinstance(relate(window, head), Diverged):
            async for change in self.handle_reorg(window):
                yield change
            self._moved = True

    # ---- shared ---------------------------------------------------------------------

    def decode(self, logs: Iterable[Log], timestamps: Mapping[int, int]) -> list[Event]:
        return decode_logs(logs, self.protocols, timestamps)

    async def execute_reads(self, events: Sequence[Event]) -> list[ChainRead]:
        head = self.state.head.number if self.state.head is not None else None
        return await self.views.execute(events, finalized=self.state.finalized, head=head)

    async def commit(self, batch: BlockBatch) -> Changes:
        """Yield a batch, first adding fresh reads of what was read at the head below it."""
        first = _first_block(batch)
        settled = await self._reread_tip(first)
        if settled:
            batch = replace(batch, reads=[*batch.reads, *settled])
        yield batch
        self.state.indexed = batch.indexed_block
        head = self.state.head.number if self.state.head is not None else batch.indexed_block
        kept = [r for r in self._tip_reads or [] if r.block_number >= first]
        self._tip_reads = kept + [_again(r) for r in batch.reads if r.block_number >= head]

    async def _reread_tip(self, first: int) -> list[ChainRead]:
        """Read again, before a batch starting at block ``first`` is written, what was read
        while its block (below ``first``) was the head.

        A node may answer a call at its head block from state that already holds
        the next block's changes while that block is being built (anvil does, in
        about one call in seven under steady mining). The same call made once a
        later block exists is answered from that block's settled state, so the
        value read at the head is replaced before the cursor moves past it. The
        list is rebuilt from the store after a restart: every read at the cursor.
        """
        if self._tip_reads is None:
            cursor = self.view.cursor()
            self._tip_reads = (
                []
                if cursor is None
                else [
                    _again(r)
                    for r in self.view.reads_from(cursor.indexed_block)
                    if r.kind in READ_KINDS  # an observation is no call to make again
                ]
            )
        below = [r for r in self._tip_reads if r.block_number < first]
        if not below:
            return []  # most commits: nothing was read at a head (no window query either)
        canonical = {h.number: h.hash for h in self.view.window()}
        due = [r for r in below if canonical.get(r.block_number) == r.block_hash]
        if not due:
            return []
        head = self.state.head.number if self.state.head is not None else None
        return await self.views.read(due, head=head)


def _again(read: ChainRead) -> ReadRequest:
    """The request that makes ``read`` again, recording the same fields (see reads); a
    read that failed records its kind's stable fields."""
    kept: tuple[str, ...] = ()
    if read.kind in STABLE_FIELDS:
        kept = tuple(k for k in read.result if k not in ("error", "reason"))
        kept = kept or STABLE_FIELDS[read.kind]
    return ReadRequest(
        read.contract, read.subject, read.kind, read.block_number, read.block_hash, kept
    )


def _first_block(batch: BlockBatch) -> int:
    """The lowest block a batch writes (its anchor when it carries no other block)."""
    return min((b.number for b in batch.blocks), default=batch.indexed_block)
