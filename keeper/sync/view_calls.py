"""The view calls an indexed batch needs, made where ``keeper.domain.reads`` plans them.

Stable reads of events below finality are made at the finalized block, every
other read at its event's block (the module docstring of ``keeper.domain.reads``
says why). A node without state where a call was made (a full node asked
about history) gets the stable reads again at the head; what still cannot be
had is recorded as missing with the reason, never raised, so a full node
indexes history. Once the node has had no state at the finalized block (a
chain whose finality lags far behind its head), stable reads go straight to
the head for the rest of the process: either block is exact for them, and
asking the finalized block first would double every batch's calls. A revert
is a fact about the contract and is recorded; so is an undecodable answer,
once the node has given the same bytes twice (a garbled answer is not given
twice). A transient failure is not a fact, so it is raised and the batch
retried.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from keeper.domain.model import ArgValue, ChainRead, Event
from keeper.domain.multicall import MULTICALL3_ADDRESS, decode_aggregate3, encode_aggregate3
from keeper.domain.reads import (
    EVENT_BLOCK,
    MISSING,
    STATE_UNAVAILABLE,
    ReadRequest,
    ViewCall,
    head_calls,
    plan_calls,
    reads_for,
    stable_part,
)
from keeper.domain.text import clipped
from keeper.domain.views import decode_view, encode_view
from keeper.errors import RetryableError
from keeper.obs.logging import get_logger
from keeper.rpc.client import RpcClient, block_param
from keeper.rpc.errors import (
    ExecutionRevertedError,
    RpcError,
    RpcFatalError,
    StateUnavailableError,
)
from keeper.rpc.transport import DEFAULT_MAX_BATCH
from keeper.rpc.validate import data

__all__ = ["AGGREGATES_AT_ONCE", "AGGREGATE_SIZE", "READS_AT_ONCE", "ViewReader"]

log = get_logger(__name__)

# eth_calls handed to the RPC client at once. It sends them as JSON-RPC batches
# of its max_batch concurrently, so the node executes four batches in parallel
# instead of one after another (bench/README.md has the figures); one failing
# batch still retries only its own calls.
READS_AT_ONCE = 4 * DEFAULT_MAX_BATCH
# Reads in one aggregate3 eth_call: a getJob costs the node about 35k gas, so 200
# stay near 7M, under every node's eth_call gas cap (geth's 50M, anvil's block limit).
AGGREGATE_SIZE = 200
# aggregate3 eth_calls in flight at once, each its own request (the node runs them
# in parallel; one JSON-RPC batch of them would run one after another)
AGGREGATES_AT_ONCE = 4
# times an undecodable answer is asked again before the node's answers are called garbled
CONFIRMS = 3
UNDECODABLE = "undecodable"


class ViewReader:
    """Makes the reads of indexed events; remembers whether the node keeps the finalized
    block's state."""

    def __init__(self, rpc: RpcClient, multicall: str | None = MULTICALL3_ADDRESS) -> None:
        self.rpc = rpc
        self.finalized_state = True
        # the Multicall3 to group reads through; None: every read alone
        self.multicall = multicall.lower() if multicall else None
        self._multicall_checked = False
        # the highest block at which the aggregate was answered with no results (no
        # Multicall3 yet at that block): reads at or below it are made alone
        self._no_multicall_to = -1
        # held by reads until one has asked the finalized block: batches fetched
        # together then learn once whether it has state (and whether Multicall3
        # has code), instead of each asking the node what the first one learns
        self._first = asyncio.Lock()
        self._learned = False

    async def execute(
        self, events: Sequence[Event], *, finalized: int = -1, head: int | None = None
    ) -> list[ChainRead]:
        """Every read the events call for, each once.

        ``finalized`` and ``head`` are the indexer's latest view of the chain; the
        defaults read everything at its event's block, with no head to fall back to.
        """
        requests: dict[tuple[str, str, str, str], ReadRequest] = {}
        for event in events:
            for req in reads_for(event):
                requests[(req.contract, req.subject, req.kind, req.block_hash)] = req
        return await self.read(list(requests.values()), finalized=finalized, head=head)

    async def read(
        self, todo: Sequence[ReadRequest], *, finalized: int = -1, head: int | None = None
    ) -> list[ChainRead]:
        if self._learned:
            return (await self._read(todo, finalized, head))[0]
        async with self._first:
            out, learned = await self._read(todo, finalized, head)
            self._learned = self._learned or learned
            return out

    async def _read(
        self, todo: Sequence[ReadRequest], finalized: int, head: int | None
    ) -> tuple[list[ChainRead], bool]:
        """The reads, and whether a call asked a block other than its event's."""
        out: list[ChainRead] = []
        unavailable: list[tuple[ViewCall, StateUnavailableError]] = []
        at_head = None if self.finalized_state else head
        calls = plan_calls(todo, finalized=finalized, head=at_head)
        learned = any(call.source != EVENT_BLOCK for call in calls)
        await self._call_all(calls, out, unavailable)
        if not unavailable:
            return out, learned
        retry: list[ViewCall] = []
        missing = 0
        for call, exc in unavailable:
            if call.source != EVENT_BLOCK:  # the finalized block (or the head) had no state
                self.finalized_state = False
            moved, lost = head_calls([call], head=-1 if head is None else head)
            retry.extend(moved)
            for c in lost:
                missing += len(c.answers)
                out.extend(_missing(c, exc))
        again: list[tuple[ViewCall, StateUnavailableError]] = []
        await self._call_all(retry, out, again)
        for call, exc in again:
            missing += len(call.answers)
            out.extend(_missing(call, exc))
        log.info(
            "reads_without_state",
            calls=len(unavailable),
            at_head=len(retry),
            missing=missing,
            finalized_state=self.finalized_state,
        )
        return out, learned

    async def _call_all(
        self,
        calls: Sequence[ViewCall],
        out: list[ChainRead],
        unavailable: list[tuple[ViewCall, StateUnavailableError]],
    ) -> None:
        """Answer ``calls`` into ``out`` (or ``unavailable``), grouped where Multicall3 can."""
        alone: Sequence[ViewCall] = calls
        if len(calls) > 1 and await self._has_multicall():
            alone = await self._aggregated(calls, out, unavailable)
        await _call_alone(self.rpc, alone, out, unavailable)

    async def _has_multicall(self) -> bool:
        """Whether the Multicall3 address has code at the head (asked once per process)."""
        if self.multicall is None:
            return False
        if not self._multicall_checked:
            code = await self.rpc.get_code(self.multicall)
            self._multicall_checked = True
            if not code:
                log.info("reads_without_multicall", address=self.multicall)
                self.multicall = None
                return False
        return True

    async def _aggregated(
        self,
        calls: Sequence[ViewCall],
        out: list[ChainRead],
        unavailable: list[tuple[ViewCall, StateUnavailableError]],
    ) -> list[ViewCall]:
        """Make ``calls`` through aggregate3, one block's calls together; the calls that
        must be made alone instead (failed inside an aggregate, or their aggregate did)."""
        by_block: dict[int, list[ViewCall]] = {}
        alone: list[ViewCall] = []
        for call in calls:
            if call.block_number <= self._no_multicall_to:
                alone.append(call)
            else:
                by_block.setdefault(call.block_number, []).append(call)
        chunks: list[list[ViewCall]] = []
        for block_calls in by_block.values():
            if len(block_calls) == 1:
                alone.extend(block_calls)
                continue
            chunks.extend(
                block_calls[i : i + AGGREGATE_SIZE]
                for i in range(0, len(block_calls), AGGREGATE_SIZE)
            )
        for i in range(0, len(chunks), AGGREGATES_AT_ONCE):
            wave = chunks[i : i + AGGREGATES_AT_ONCE]
            answers = await asyncio.gather(*(self._aggregate(chunk) for chunk in wave))
            for chunk, answer in zip(wave, answers, strict=True):
                alone.extend(self._take(chunk, answer, out, unavailable))
        return alone

    async def _aggregate(self, chunk: Sequence[ViewCall]) -> object:
        """One aggregate3 eth_call's answer: its bytes, or the error the node gave."""
        assert self.multicall is not None
        payload = encode_aggregate3([(c.contract, encode_view(c.kind, c.subject)) for c in chunk])
        (result,) = await self.rpc.batch(
            [
                (
                    "eth_call",
                    [
                        {"to": self.multicall, "data": "0x" + payload.hex()},
                        block_param(chunk[0].block_number),
                    ],
                )
            ],
            nullable=False,
            parse=lambda raw: data(raw, "aggregate3 call"),
        )
        return result

    def _take(
        self,
        chunk: Sequence[ViewCall],
        answer: object,
        out: list[ChainRead],
        unavailable: list[tuple[ViewCall, StateUnavailableError]],
    ) -> list[ViewCall]:
        """Record an aggregate's answers; return the calls to make alone."""
        if isinstance(answer, StateUnavailableError):
            unavailable.extend((call, answer) for call in chunk)
            return []
        if isinstance(answer, RpcError) and not isinstance(answer, RpcFatalError):
            raise answer  # transient, retries spent: the batch is retried, as for a lone call
        if not isinstance(answer, bytes):
            # reverted (out of gas?) or refused (too large?): each read alone says what it is
            return list(chunk)
        try:
            results = decode_aggregate3(answer)
        except Exception:  # no Multicall3 at this block (an empty answer) or not its shape
            results = []
        if len(results) != len(chunk):
            if not answer:
                self._no_multicall_to = max(self._no_multicall_to, chunk[0].block_number)
            return list(chunk)
        again: list[ViewCall] = []
        for call, result in zip(chunk, results, strict=True):
            if not result.success:
                again.append(call)
                continue
            values = _outcome(call, result.return_data)
            if _undecodable(values):  # made alone, where an undecodable answer is confirmed
                again.append(call)
                continue
            out.extend(_read(req, call.source, stable_part(req, values)) for req in call.answers)
        return again


async def _call_alone(
    rpc: RpcClient,
    calls: Sequence[ViewCall],
    out: list[ChainRead],
    unavailable: list[tuple[ViewCall, StateUnavailableError]],
) -> None:
    for i in range(0, len(calls), READS_AT_ONCE):
        chunk = calls[i : i + READS_AT_ONCE]
        doubtful: list[tuple[ViewCall, bytes]] = []
        for call, result in zip(chunk, await _ask(rpc, chunk), strict=True):
            if isinstance(result, StateUnavailableError):
                unavailable.append((call, result))
                continue
            values = _outcome(call, result)
            if _undecodable(values):
                assert isinstance(result, bytes)
                doubtful.append((call, result))
                continue
            out.extend(_read(req, call.source, stable_part(req, values)) for req in call.answers)
        if doubtful:
            await _confirm(rpc, doubtful, out)


async def _ask(rpc: RpcClient, calls: Sequence[ViewCall]) -> list[object]:
    """Each call's answer alone, in one JSON-RPC batch: its bytes or the node's error."""
    return await rpc.batch(
        [
            (
                "eth_call",
                [
                    {"to": c.contract, "data": "0x" + encode_view(c.kind, c.subject).hex()},
                    block_param(c.block_number),
                ],
            )
            for c in calls
        ],
        nullable=False,
        parse=lambda raw: data(raw, "call"),
    )


async def _confirm(
    rpc: RpcClient, doubtful: Sequence[tuple[ViewCall, bytes]], out: list[ChainRead]
) -> None:
    """Record an undecodable answer only once the node has given it twice.

    A contract answers the same call at the same block with the same bytes, so an
    answer given twice is a fact about the contract and is recorded. A node that
    garbled one answer (a truncating gateway, say) gives another the next time:
    one that decodes is taken, and answers that keep disagreeing are the node's
    fault, raised as retryable, never recorded for good.
    """
    left = list(doubtful)
    for _ in range(CONFIRMS):
        again: list[tuple[ViewCall, bytes]] = []
        for (call, before), result in zip(left, await _ask(rpc, [c for c, _ in left]), strict=True):
            if isinstance(result, bytes):
                values = _outcome(call, result)
                if not _undecodable(values) or result == before:
                    out.extend(
                        _read(req, call.source, stable_part(req, values)) for req in call.answers
                    )
                    continue
                again.append((call, result))
            elif isinstance(result, RpcError) and not isinstance(result, RpcFatalError):
                raise result  # transient, retries spent: the batch is retried
            else:  # a revert or no state where the node had just answered: ask again
                again.append((call, before))
        if not again:
            return
        left = again
    call = left[0][0]
    raise RetryableError(
        f"{len(left)} view reads answered {CONFIRMS + 1} times, never twice alike (the first: "
        f"{call.kind} of {call.subject} on {call.contract} at block {call.block_number}): the "
        "node garbles its answers; the batch is read again"
    )


def _undecodable(values: dict[str, ArgValue]) -> bool:
    return str(values.get("error", "")).startswith(UNDECODABLE)


def _outcome(call: ViewCall, result: object) -> dict[str, ArgValue]:
    """A view call's answer; a revert or undecodable answer is an error value, not fatal.

    A transient failure must not be recorded as a fact about the chain, so it
    is re-raised and the batch retried; an undecodable answer is recorded only
    once ``_confirm`` has had it twice.
    """
    if isinstance(result, Exception):
        if isinstance(result, ExecutionRevertedError):
            return {"error": "reverted"}
        raise result
    if isinstance(result, bytes):
        try:
            return dict(decode_view(call.kind, result))
        except Exception as exc:  # malformed return data: the contract's, or a garbled answer
            return {"error": f"{UNDECODABLE}: {type(exc).__name__}"}
    raise TypeError(f"unexpected eth_call result {type(result).__name__}")


def _missing(call: ViewCall, exc: StateUnavailableError) -> list[ChainRead]:
    """Reads the node had no state for: recorded, with the node's own words as the reason."""
    values: dict[str, ArgValue] = {
        "error": STATE_UNAVAILABLE,
        "reason": clipped(f"no state at block {call.block_number}: {exc.failure.message}", 300),
    }
    return [_read(req, MISSING, values) for req in call.answers]


def _read(req: ReadRequest, source: str, values: dict[str, ArgValue]) -> ChainRead:
    return ChainRead(
        contract=req.contract,
        subject=req.subject,
        kind=req.kind,
        block_number=req.block_number,
        block_hash=req.block_hash,
        result=values,
        source=source,
    )
