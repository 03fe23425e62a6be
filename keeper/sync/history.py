"""The historical zone's fetching: log ranges scanned, cut, checked, decoded and read.

Below the finalized block the indexer scans ``eth_getLogs`` ranges sized by
the range policy. :func:`prefetched` runs the scan in a producer task that
fetches the next batches (logs, headers, view reads) while the indexer has
one committed: the node works on the next answers while the daemon spends
CPU on SQLite, instead of each waiting for the other. A commit holds the
event loop (SQLite is synchronous), so only requests already sent are
answered meanwhile: the batches after the next one are fetched by tasks of
their own, each sending its headers and reads request as soon as the loop
runs, rather than one after the other once the committing side waits.
Items come out in range order, so commits stay in order and crash safety
is unchanged; a failure in a later batch surfaces after the earlier ones
are committed.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from keeper.domain.model import BlockHeader, ChainRead, Event, Log
from keeper.domain.ranges import RangePolicy, split_by_block
from keeper.errors import RetryableError
from keeper.obs.logging import get_logger
from keeper.rpc.client import RpcClient
from keeper.rpc.scan import scan_logs, wire_size
from keeper.sync.log_stamps import StampTrust, disagreements, headers_to_read
from keeper.waiting import cancel_and_wait

__all__ = ["CHILD_FETCHING_AHEAD", "FETCHING_AHEAD", "PREFETCH_RANGES", "Fetched", "RangeFetcher"]

log = get_logger(__name__)

# Historical batches ready ahead of the one being committed, and batches being
# fetched (headers and reads in flight) behind them. Without the second, the
# headers and reads of the next batch are only asked for once the committing
# side waits, and both sides then wait for the node. Each batch is bounded by
# ``batch_events`` and ``batch_bytes`` (one block at least), so what is held is
# at most the answer being cut, the batch being committed, PREFETCH_RANGES
# ready, one fetched and waiting for room, and FETCHING_AHEAD being fetched:
# five batches. The fetch process fetches none ahead: its next batch waits in the
# pipe while this process commits anyway, and its memory adds to this one's (one
# fewer batch held was 5 MB off the two processes' peak, for no measured speed).
PREFETCH_RANGES = 1
FETCHING_AHEAD = 2
CHILD_FETCHING_AHEAD = 0


@dataclass(frozen=True, slots=True)
class Fetched:
    """One historical range, checked and decoded, with its reads: ready to commit."""

    anchor: BlockHeader
    events: list[Event]
    reads: list[ChainRead]


# logs and their blocks' timestamps -> events
Decoder = Callable[[Iterable[Log], Mapping[int, int]], list[Event]]
Reader = Callable[[Sequence[Event]], Awaitable[list[ChainRead]]]


class RangeFetcher:
    """Fetches historical ranges for the indexer; decoding and reads are the indexer's."""

    def __init__(
        self,
        rpc: RpcClient,
        addresses: Sequence[str],
        policy: RangePolicy,
        decode: Decoder,
        execute_reads: Reader,
        *,
        stamps: StampTrust,
        ahead: int = FETCHING_AHEAD,
    ) -> None:
        self.rpc = rpc
        self.addresses = list(addresses)
        self.policy = policy
        self.decode = decode
        self.execute_reads = execute_reads
        self.ahead = ahead  # batches fetched behind the one ready (FETCHING_AHEAD)
        self.stamps = stamps  # believed until they disagree with the node's headers
        self.sample = random.Random()  # which timed block's header a batch reads

    async def prefetched(self, start: int, end: int) -> AsyncGenerator[Fetched, None]:
        """Blocks ``start``..``end`` as ready batches, the next fetched while one is used."""
        queue: asyncio.Queue[Fetched | Exception | None] = asyncio.Queue(PREFETCH_RANGES)
        producer = asyncio.create_task(self._fetch_ranges(start, end, queue))
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, Exception):
                    raise item
                # one turn of the loop before the commit holds it: the fetches in
                # flight send what their answers so far let them ask next
                await asyncio.sleep(0)
                yield item
        finally:
            await cancel_and_wait(producer)

    async def _fetch_ranges(
        self, start: int, end: int, queue: asyncio.Queue[Fetched | Exception | None]
    ) -> None:
        fetching: deque[asyncio.Task[Fetched]] = deque()
        try:
            chunks = scan_logs(self.rpc, self.addresses, start, end, self.policy)
            async for _lo, hi, logs in chunks:
                stamps = logs.timestamps
                for piece, piece_hi in self._pieces(logs, hi):
                    fetch = self._fetch_range(piece_hi, piece, stamps)
                    fetching.append(asyncio.create_task(fetch))
                    while len(fetching) > self.ahead:
                        await queue.put(await fetching.popleft())
                del logs, piece, stamps  # the answer is not held while the next one is fetched
            while fetching:
                await queue.put(await fetching.popleft())
        except Exception as exc:  # handed to the committing side, which raises it
            await _cancel_all(fetching)
            await queue.put(exc)
            return
        except asyncio.CancelledError:  # the committing side closed the scan
            await _cancel_all(fetching)
            raise
        await queue.put(None)

    def _pieces(self, logs: list[Log], hi: int) -> list[tuple[list[Log], int]]:
        """An answer cut at block boundaries into batches within the batch bounds.

        Usually one piece (the policy sized the range to fit); several when the
        density jumped inside the range. Each piece but the last ends at its
        last log's block, the last at ``hi``, so the pieces cover the range
        without a gap and each commits its own cursor.
        """
        cuts = split_by_block(
            logs,
            lambda lg: lg.block_number,
            wire_size,
            max_items=self.policy.max_events,
            max_bytes=self.policy.max_bytes,
        )
        if len(cuts) <= 1:
            return [(logs, hi)]
        pieces = [(logs[a:b], logs[b - 1].block_number) for a, b in cuts]
        pieces[-1] = (pieces[-1][0], hi)
        log.debug("log_answer_split", to_block=hi, logs=len(logs), batches=len(pieces))
        return pieces

    async def _fetch_range(self, hi: int, logs: list[Log], stamps: Mapping[int, int]) -> Fetched:
        """Headers for the range's blocks, then the range decoded and its reads made.

        A block whose logs carried its timestamp (``stamps``) needs no header: below
        finality its logs' hash is taken as canonical (a deeper reorg is one the
        configured finality rules out; docs/reliability.md). Only ``hi`` (the
        cursor's anchor) and one such block drawn at random, to check the node's
        log timestamps against its headers (keeper.sync.log_stamps), are read for
        them; on a sparse chain that is one header a batch instead of one a block,
        and on a public endpoint, which counts every call, a fraction of the calls.
        A node whose log timestamps disagree with its headers has every header read
        from then on, by the batches still in flight too; what was committed before
        is checked once the range is done (``Indexer._retimed``).
        """
        blocks = {lg.block_number for lg in logs}
        trust = self.stamps
        stamped = {n: stamps[n] for n in blocks if n in stamps} if trust.trusted else {}
        by_number = await self._headers(headers_to_read(blocks, stamped, hi, self.sample))
        wrong = disagreements(stamped, by_number)
        if wrong and trust.trusted:  # said once, by the first of the batches in flight
            trust.trusted = False
            block, said, header_block, read = wrong[0]
            log.warning(
                "log_timestamps_disagree",
                block=block,
                log_timestamp=said,
                header_block=header_block,
                header_timestamp=read,
                effect="each block's header is read for its timestamp from now on, and "
                "the blocks committed before are checked against theirs after this range",
            )
        if stamped and not trust.trusted:  # this batch's finding or another's
            by_number |= await self._headers(blocks - by_number.keys())
            stamped = {}
        for lg in logs:
            header = by_number.get(lg.block_number)
            if header is not None and header.hash != lg.block_hash:
                raise RetryableError(
                    f"log at block {lg.block_number} names hash {lg.block_hash} but the "
                    f"node's block has {header.hash}: retrying range"
                )
        timestamps = stamped | {n: h.timestamp for n, h in by_number.items()}
        events = self.decode(logs, timestamps)
        reads = await self.execute_reads(events)
        return Fetched(by_number[hi], events, reads)

    async def _headers(self, numbers: Iterable[int]) -> dict[int, BlockHeader]:
        wanted = sorted(numbers)
        if not wanted:
            return {}
        headers = await self.rpc.get_blocks(wanted, must_exist=True)
        by_number = {h.number: h for h in headers if h is not None}
        missing = [n for n in wanted if n not in by_number]
        if missing:
            raise RetryableError(f"node has no header for blocks {missing[:5]}")
        return by_number


async def _cancel_all(tasks: deque[asyncio.Task[Fetched]]) -> None:
    """Cancel the fetches still held and wait for them: none outlives the scan."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    tasks.clear()
