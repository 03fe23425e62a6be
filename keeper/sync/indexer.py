"""The indexer: drives historical scans and realtime heads into the store.

Two zones (see the design notes): below the finalized block, ``eth_getLogs``
range scans with an adaptive range; above it, one block at a time fetched by
number and its logs by block hash, each checked against the persisted window
by parent hash. Every batch (events, window blocks, view reads, cursor) is one
store transaction, so a SIGKILL at any instant loses and duplicates nothing:
on restart we resume from the cursor and re-check the window.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from keeper.domain.events import decode_logs
from keeper.domain.model import ArgValue, BlockHeader, ChainRead, Event, Log
from keeper.domain.model import Protocol as EscrowProtocol
from keeper.domain.ranges import RangePolicy
from keeper.domain.reads import ReadRequest, reads_for
from keeper.domain.reconcile import Ahead, Diverged, Extends, Lagging, fork_point, prune, relate
from keeper.domain.views import decode_view, encode_view
from keeper.errors import DeepReorgError, RetryableError
from keeper.obs.logging import get_logger
from keeper.rpc.client import RpcClient, block_param
from keeper.rpc.errors import ExecutionRevertedError, RpcError
from keeper.rpc.scan import scan_logs
from keeper.rpc.transport import DEFAULT_MAX_BATCH
from keeper.rpc.validate import bloom_may_contain, data
from keeper.store.index_store import ApplyResult, Batch, IndexStore

log = get_logger(__name__)

# eth_calls handed to the RPC client at once. It sends them as JSON-RPC batches
# of its max_batch concurrently, so the node executes four batches in parallel
# instead of one after another (1,000,000-event backfill: 17.7k -> 19.3k ev/s);
# one failing batch still retries only its own calls.
READS_AT_ONCE = 4 * DEFAULT_MAX_BATCH
# Historical ranges fetched ahead of the one being committed: one keeps the node
# busy while we write; more would only hold more logs in memory.
PREFETCH_RANGES = 1


@dataclass(frozen=True, slots=True)
class WatchedContract:
    name: str
    address: str
    protocol: EscrowProtocol
    start_block: int


@dataclass(frozen=True, slots=True)
class _Fetched:
    """One historical range, checked and decoded, with its reads: ready to commit."""

    anchor: BlockHeader
    events: list[Event]
    reads: list[ChainRead]


class IndexListener(Protocol):
    """What the indexer reports; the app wires it to metrics and logs."""

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


@dataclass(slots=True)
class SyncSettings:
    finality: Literal["tag", "confirmations"] = "tag"
    confirmations: int = 12
    window: int = 128
    min_range: int = 1
    max_range: int = 2000


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
    def __init__(
        self,
        rpc: RpcClient,
        store: IndexStore,
        contracts: Sequence[WatchedContract],
        settings: SyncSettings,
        listener: IndexListener | None = None,
    ) -> None:
        if not contracts:
            raise ValueError("no contracts to index")
        self.rpc = rpc
        self.store = store
        self.contracts = list(contracts)
        self.settings = settings
        self.listener: IndexListener = listener or NullListener()
        self.protocols = {c.address: c.protocol for c in contracts}
        self.addresses = sorted(self.protocols)
        self.policy = RangePolicy(
            size=settings.max_range, minimum=settings.min_range, maximum=settings.max_range
        )
        self.state = SyncState()
        self._checked_window = False
        self._head_bloom: tuple[BlockHeader, str] | None = None
        # reads made while their block was the node's head (None: not loaded since start)
        self._tip_reads: list[ReadRequest] | None = None

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
        cursor = self.store.cursor()
        if cursor is not None:
            return cursor.indexed_block
        return min(c.start_block for c in self.contracts) - 1

    # ---- one step -------------------------------------------------------------

    async def step(self, *, to_block: int | None = None) -> bool:
        """Advance as far as the chain allows now.

        Returns True when the caller should step again at once: something was
        indexed (or rolled back) and the head seen at the start is not reached
        yet. Having reached that head, the next new block can only be found
        by the next poll, so asking again at once would cost a call for nothing.
        """
        head, finalized = await self.heads()
        indexed = self.start_cursor()
        self.state.indexed = indexed
        self.listener.on_heads(head, finalized, indexed)
        if not self._checked_window:
            await self.recheck_window(head)
            self._checked_window = True
            indexed = self.start_cursor()
        target = head.number if to_block is None else min(to_block, head.number)
        progressed = False
        if indexed < min(finalized, target):
            await self.backfill_range(indexed + 1, min(finalized, target), finalized)
            progressed = True
            indexed = self.start_cursor()
        if indexed >= head.number:
            # no new block, but the head itself may have been replaced (same-height
            # reorg), or the node lags behind us
            progressed = await self.check_head(head) or progressed
        elif indexed < target:
            progressed = await self.follow(indexed, target, finalized) or progressed
        return progressed and self.start_cursor() < head.number

    async def backfill(self, to_block: int | None = None) -> int:
        """Index up to ``to_block`` (default: the finalized block) and return the cursor."""
        head, finalized = await self.heads()
        target = finalized if to_block is None else min(to_block, head.number)
        while self.start_cursor() < target:
            await self.step(to_block=target)
        return self.start_cursor()

    # ---- historical zone ---------------------------------------------------------

    async def backfill_range(self, start: int, end: int, finalized: int) -> None:
        """Scan, check, decode and read ahead while earlier ranges commit.

        A producer task fetches range k+1 (logs, headers, view reads) while
        range k is written: the node works on the next answer while this
        process spends CPU on SQLite, instead of each waiting for the other.
        Commits stay in range order, one transaction each, so crash safety is
        unchanged; a failure in range k+1 surfaces after range k is committed,
        as it did when the ranges ran one after the other.
        """
        queue: asyncio.Queue[_Fetched | Exception | None] = asyncio.Queue(PREFETCH_RANGES)
        producer = asyncio.create_task(self._fetch_ranges(start, end, queue))
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, Exception):
                    raise item
                window = prune([*self.store.window(), item.anchor], finalized, self.settings.window)
                await self.commit(
                    Batch(
                        events=item.events,
                        blocks=[item.anchor],
                        reads=item.reads,
                        indexed_block=item.anchor.number,
                        indexed_hash=item.anchor.hash,
                        finalized_block=finalized,
                    ),
                    keep_from=window[0].number,
                )
        finally:
            producer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await producer

    async def _fetch_ranges(
        self, start: int, end: int, queue: asyncio.Queue[_Fetched | Exception | None]
    ) -> None:
        try:
            chunks = scan_logs(self.rpc, self.addresses, start, end, self.policy)
            async for _lo, hi, logs in chunks:
                await queue.put(await self._fetch_range(hi, logs))
        except Exception as exc:  # handed to the committing side, which raises it
            await queue.put(exc)
            return
        await queue.put(None)

    async def _fetch_range(self, hi: int, logs: list[Log]) -> _Fetched:
        numbers = sorted({lg.block_number for lg in logs} | {hi})
        headers = await self.rpc.get_blocks(numbers, must_exist=True)
        by_number = {h.number: h for h in headers if h is not None}
        missing = [n for n in numbers if n not in by_number]
        if missing:
            raise RetryableError(f"node has no header for blocks {missing[:5]}")
        for lg in logs:
            if by_number[lg.block_number].hash != lg.block_hash:
                raise RetryableError(
                    f"log at block {lg.block_number} names hash {lg.block_hash} but the "
                    f"node's block has {by_number[lg.block_number].hash}: retrying range"
                )
        events = self.decode(logs, by_number)
        reads = await self.execute_reads(events)
        return _Fetched(by_number[hi], events, reads)

    # ---- realtime zone -------------------------------------------------------------

    async def follow(self, indexed: int, target: int, finalized: int) -> bool:
        window = self.store.window()
        if not window:
            window = await self.seed_window(indexed, finalized)
        n = indexed + 1
        progressed = False
        while n <= target:
            cached = self._head_bloom
            if cached is not None and cached[0].number == n:
                fetched: tuple[BlockHeader, str] | None = cached
            else:
                fetched = await self.rpc.get_block_and_bloom(n, must_exist=True)
            if fetched is None:
                return progressed  # the node does not have it yet (or lags): next poll
            header, bloom = fetched
            relation = relate(window, header)
            if isinstance(relation, Extends):
                await self.index_block(header, bloom, finalized, window)
                window = self.store.window()
                n += 1
                progressed = True
            elif isinstance(relation, Diverged):
                # the block in hand may itself be stale (the chain moved on while we
                # held it): never reuse it after a divergence
                self._head_bloom = None
                fork = await self.handle_reorg(window)
                if window and fork >= window[-1].number:
                    # nothing of ours was replaced: the fetched block was from a branch
                    # the node has already left; fetch afresh on the next poll rather
                    # than relate the same stale block again
                    return True
                window = self.store.window()
                n = fork + 1
                progressed = True
            elif isinstance(relation, Ahead | Lagging):  # pragma: no cover - sequential walk
                return progressed
        return progressed

    async def seed_window(self, indexed: int, finalized: int) -> list[BlockHeader]:
        """Anchor an empty window at the cursor block so the next block can be parent-checked."""
        anchor = await self.rpc.get_block(max(indexed, 0), must_exist=True)
        if anchor is None:
            raise RetryableError(f"node has no block {indexed} to anchor the window")
        if indexed < 0:
            # nothing indexed and start_block 0: block 0 is indexed as an ordinary block
            anchor = BlockHeader(-1, anchor.parent_hash, "0x" + "00" * 32, anchor.timestamp)
            return [anchor]
        await self.commit(
            Batch(
                events=[],
                blocks=[anchor],
                reads=[],
                indexed_block=indexed,
                indexed_hash=anchor.hash,
                finalized_block=finalized,
            ),
            keep_from=anchor.number,
        )
        return self.store.window()

    async def index_block(
        self, header: BlockHeader, bloom: str, finalized: int, window: Sequence[BlockHeader]
    ) -> None:
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
        events = self.decode(logs, {header.number: header})
        reads = await self.execute_reads(events)
        kept = prune([*window, header], finalized, self.settings.window)
        await self.commit(
            Batch(
                events=events,
                blocks=[header],
                reads=reads,
                indexed_block=header.number,
                indexed_hash=header.hash,
                finalized_block=finalized,
            ),
            keep_from=kept[0].number,
        )

    async def handle_reorg(self, window: Sequence[BlockHeader]) -> int:
        numbers = [h.number for h in window if h.number >= 0]
        canonical_headers = await self.rpc.get_blocks(numbers)
        canonical = {h.number: h.hash for h in canonical_headers if h is not None}
        fork = fork_point(window, canonical)
        if fork is None:
            if window and window[0].number < 0:
                fork = -1
            else:
                lowest = window[0].number if window else -1
                raise DeepReorgError(
                    f"reorg deeper than the block window: no block from {lowest} to "
                    f"{window[-1].number if window else -1} is still canonical; indexing halted "
                    "(re-index from a lower block or widen [chain] window)",
                    depth_at_least=len(window),
                )
        depth = (window[-1].number - fork) if window else 0
        if depth <= 0:
            # every block we hold is still canonical: what diverged was a block we
            # fetched from a branch the node has since left, not our index
            log.info("stale_block_ignored", fork_block=fork)
            return fork
        touched = self.store.rollback_to(fork)
        self.state.reorgs += 1
        self.listener.on_reorg(depth, fork)
        log.warning("reorg", fork_block=fork, depth=depth, touched=len(touched))
        return fork

    async def recheck_window(self, head: BlockHeader) -> None:
        """At startup: a reorg may have happened while we were down.

        Compared at the highest window block the node has: a node that lags
        behind our cursor lacks the blocks above its head, which is no reorg.
        """
        window = [h for h in self.store.window() if 0 <= h.number <= head.number]
        if not window:
            return
        top = await self.rpc.get_block(window[-1].number)
        if top is None or top.hash == window[-1].hash:
            return
        await self.handle_reorg(self.store.window())

    async def check_head(self, head: BlockHeader) -> bool:
        """A head at or below our cursor: lagging if its hash matches ours, else a reorg."""
        window = self.store.window()
        if window and isinstance(relate(window, head), Diverged):
            await self.handle_reorg(window)
            return True
        return False

    # ---- shared ---------------------------------------------------------------------

    def decode(self, logs: Iterable[Log], headers: dict[int, BlockHeader]) -> list[Event]:
        return decode_logs(logs, self.protocols, {n: h.timestamp for n, h in headers.items()})

    async def execute_reads(self, events: Sequence[Event]) -> list[ChainRead]:
        requests: dict[tuple[str, str, str, str], ReadRequest] = {}
        for event in events:
            for req in reads_for(event):
                requests[(req.contract, req.subject, req.kind, req.block_hash)] = req
        return await self._read(list(requests.values()))

    async def _read(self, todo: Sequence[ReadRequest]) -> list[ChainRead]:
        out: list[ChainRead] = []
        for i in range(0, len(todo), READS_AT_ONCE):
            chunk = todo[i : i + READS_AT_ONCE]
            results = await self.rpc.batch(
                [
                    (
                        "eth_call",
                        [
                            {"to": r.contract, "data": "0x" + encode_view(r.kind, r.subject).hex()},
                            block_param(r.block_number),
                        ],
                    )
                    for r in chunk
                ],
                nullable=False,
                parse=lambda raw: data(raw, "call"),
            )
            for req, result in zip(chunk, results, strict=True):
                out.append(_to_read(req, result))
        return out

    async def commit(self, batch: Batch, *, keep_from: int) -> None:
        first = _first_block(batch)
        settled = await self._reread_tip(first)
        if settled:
            batch = replace(batch, reads=[*batch.reads, *settled])
        result = self.store.apply_batch(batch, keep_from=keep_from)
        self.state.indexed = batch.indexed_block
        head = self.state.head.number if self.state.head is not None else batch.indexed_block
        kept = [r for r in self._tip_reads or [] if r.block_number >= first]
        self._tip_reads = kept + [
            ReadRequest(r.contract, r.subject, r.kind, r.block_number, r.block_hash)
            for r in batch.reads
            if r.block_number >= head
        ]
        self.listener.on_batch(result, batch.events)

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
            cursor = self.store.cursor()
            self._tip_reads = (
                []
                if cursor is None
                else [ReadRequest(*r) for r in self.store.reads_from(cursor.indexed_block)]
            )
        below = [r for r in self._tip_reads if r.block_number < first]
        if not below:
            return []  # most commits: nothing was read at a head (no window query either)
        canonical = {h.number: h.hash for h in self.store.window()}
        due = [r for r in below if canonical.get(r.block_number) == r.block_hash]
        return await self._read(due) if due else []


def _first_block(batch: Batch) -> int:
    """The lowest block a batch writes (its anchor when it carries no other block)."""
    return min((b.number for b in batch.blocks), default=batch.indexed_block)


def _to_read(req: ReadRequest, result: object) -> ChainRead:
    """Record a view call's outcome; a revert or undecodable answer is recorded, not fatal.

    A transient failure must not be recorded as a fact about the chain, so it
    is re-raised and the batch retried.
    """
    if isinstance(result, Exception):
        if isinstance(result, ExecutionRevertedError):
            values: dict[str, ArgValue] = {"error": "reverted"}
        else:
            raise result
    elif isinstance(result, bytes):
        try:
            values = dict(decode_view(req.kind, result))
        except Exception as exc:  # malformed return data from a non-conforming contract
            values = {"error": f"undecodable: {type(exc).__name__}"}
    else:
        raise TypeError(f"unexpected eth_call result {type(result).__name__}")
    return ChainRead(
        contract=req.contract,
        subject=req.subject,
        kind=req.kind,
        block_number=req.block_number,
        block_hash=req.block_hash,
        result=values,
    )
