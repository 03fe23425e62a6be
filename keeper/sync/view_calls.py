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
or an undecodable answer is a fact about the contract and is recorded; a
transient failure is not, so it is raised and the batch retried.
"""

from __future__ import annotations

from collections.abc import Sequence

from keeper.domain.model import ArgValue, ChainRead, Event
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
from keeper.domain.views import decode_view, encode_view
from keeper.obs.logging import get_logger
from keeper.rpc.client import RpcClient, block_param
from keeper.rpc.errors import ExecutionRevertedError, StateUnavailableError
from keeper.rpc.transport import DEFAULT_MAX_BATCH
from keeper.rpc.validate import data

__all__ = ["READS_AT_ONCE", "ViewReader"]

log = get_logger(__name__)

# eth_calls handed to the RPC client at once. It sends them as JSON-RPC batches
# of its max_batch concurrently, so the node executes four batches in parallel
# instead of one after another (bench/README.md has the figures); one failing
# batch still retries only its own calls.
READS_AT_ONCE = 4 * DEFAULT_MAX_BATCH


class ViewReader:
    """Makes the reads of indexed events; remembers whether the node keeps the finalized
    block's state."""

    def __init__(self, rpc: RpcClient) -> None:
        self.rpc = rpc
        self.finalized_state = True

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
        out: list[ChainRead] = []
        unavailable: list[tuple[ViewCall, StateUnavailableError]] = []
        at_head = None if self.finalized_state else head
        calls = plan_calls(todo, finalized=finalized, head=at_head)
        await _call_all(self.rpc, calls, out, unavailable)
        if not unavailable:
            return out
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
        await _call_all(self.rpc, retry, out, again)
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
        return out


async def _call_all(
    rpc: RpcClient,
    calls: Sequence[ViewCall],
    out: list[ChainRead],
    unavailable: list[tuple[ViewCall, StateUnavailableError]],
) -> None:
    for i in range(0, len(calls), READS_AT_ONCE):
        chunk = calls[i : i + READS_AT_ONCE]
        results = await rpc.batch(
            [
                (
                    "eth_call",
                    [
                        {"to": c.contract, "data": "0x" + encode_view(c.kind, c.subject).hex()},
                        block_param(c.block_number),
                    ],
                )
                for c in chunk
            ],
            nullable=False,
            parse=lambda raw: data(raw, "call"),
        )
        for call, result in zip(chunk, results, strict=True):
            if isinstance(result, StateUnavailableError):
                unavailable.append((call, result))
                continue
            values = _outcome(call, result)
            out.extend(_read(req, call.source, stable_part(req, values)) for req in call.answers)


def _outcome(call: ViewCall, result: object) -> dict[str, ArgValue]:
    """A view call's answer; a revert or undecodable answer is recorded, not fatal.

    A transient failure must not be recorded as a fact about the chain, so it
    is re-raised and the batch retried.
    """
    if isinstance(result, Exception):
        if isinstance(result, ExecutionRevertedError):
            return {"error": "reverted"}
        raise result
    if isinstance(result, bytes):
        try:
            return dict(decode_view(call.kind, result))
        except Exception as exc:  # malformed return data from a non-conforming contract
            return {"error": f"undecodable: {type(exc).__name__}"}
    raise TypeError(f"unexpected eth_call result {type(result).__name__}")


def _missing(call: ViewCall, exc: StateUnavailableError) -> list[ChainRead]:
    """Reads the node had no state for: recorded, with the node's own words as the reason."""
    values: dict[str, ArgValue] = {
        "error": STATE_UNAVAILABLE,
        "reason": f"no state at block {call.block_number}: {exc.failure.message}"[:300],
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
