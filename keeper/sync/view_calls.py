"""The view calls an indexed batch needs, made at the block each event names.

A revert or an undecodable answer is a fact about the contract and is
recorded; a transient failure is not, so it is raised and the batch retried.
"""

from __future__ import annotations

from collections.abc import Sequence

from keeper.domain.model import ArgValue, ChainRead, Event
from keeper.domain.reads import ReadRequest, reads_for
from keeper.domain.views import decode_view, encode_view
from keeper.rpc.client import RpcClient, block_param
from keeper.rpc.errors import ExecutionRevertedError
from keeper.rpc.transport import DEFAULT_MAX_BATCH
from keeper.rpc.validate import data

__all__ = ["READS_AT_ONCE", "execute_reads", "read_views"]

# eth_calls handed to the RPC client at once. It sends them as JSON-RPC batches
# of its max_batch concurrently, so the node executes four batches in parallel
# instead of one after another (bench/README.md has the figures); one failing
# batch still retries only its own calls.
READS_AT_ONCE = 4 * DEFAULT_MAX_BATCH


async def execute_reads(rpc: RpcClient, events: Sequence[Event]) -> list[ChainRead]:
    """Every read the events call for, each once."""
    requests: dict[tuple[str, str, str, str], ReadRequest] = {}
    for event in events:
        for req in reads_for(event):
            requests[(req.contract, req.subject, req.kind, req.block_hash)] = req
    return await read_views(rpc, list(requests.values()))


async def read_views(rpc: RpcClient, todo: Sequence[ReadRequest]) -> list[ChainRead]:
    out: list[ChainRead] = []
    for i in range(0, len(todo), READS_AT_ONCE):
        chunk = todo[i : i + READS_AT_ONCE]
        results = await rpc.batch(
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
