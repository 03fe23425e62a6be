"""What the fetch process and the indexer say to each other over a pipe.

Length-prefixed pickles, one message per frame, from a child this process
started itself (the same interpreter and code), so unpickling trusts no one
it did not already trust. Fetched batches travel as flat tuples: a slotted
dataclass pickles field by field through ``__getstate__``, three times slower
to write and twice as slow to read back as the tuple it is rebuilt from.
"""

from __future__ import annotations

import asyncio
import pickle
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Literal

from keeper.domain.model import BlockHeader, ChainRead, Event, Log, Protocol
from keeper.domain.ranges import RangePolicy
from keeper.rpc.health import EndpointHealth
from keeper.sync.history import Fetched

__all__ = [
    "FetchSpec",
    "Kind",
    "Message",
    "RecordingObserver",
    "encode",
    "from_wire",
    "read_message",
    "read_ready",
    "read_spec",
    "replay",
    "to_wire",
    "write_frame",
    "write_ready",
]

_LENGTH = struct.Struct(">I")
# the child's first frame, empty: its interpreter and imports are done and it waits for
# its range (a parent may start it ahead of knowing the range, keeper.sync.fetch_process)
_READY = _LENGTH.pack(0)
_PROTOCOLS = {p.value: p for p in Protocol}

# what a child reports: a batch, the end of the range, the exception that ended it, or
# (every second while a batch is being fetched) nothing but its calls; each with the RPC
# calls made since the last message, and the range policy, the endpoints' health and
# whether the node's log timestamps are still believed, as learned so far (the next
# range, or a retry after a failure, starts from them, as it would in process)
Kind = Literal["batch", "done", "error", "calls"]
Message = tuple[Kind, Any, list[tuple[Any, ...]], RangePolicy, list[EndpointHealth], bool]


@dataclass(frozen=True, slots=True)
class FetchSpec:
    """Everything the child needs to fetch ``start``..``end`` as the indexer would."""

    client: dict[str, Any]  # RpcClient settings(): endpoint URLs are secrets
    addresses: list[str]
    protocols: dict[str, Protocol]
    policy: RangePolicy
    multicall: str | None
    health: list[EndpointHealth]
    finalized: int
    head: int | None
    start: int
    end: int
    stamps_trusted: bool = True  # the node's log timestamps (keeper.sync.log_stamps)
    log_format: str = "auto"
    log_level: str = "info"
    secrets: tuple[str, ...] = field(default=(), repr=False)
    gc_threshold: tuple[int, ...] = ()

    def __repr__(self) -> str:  # never the endpoints' URLs
        return f"FetchSpec(blocks {self.start}..{self.end}, {len(self.addresses)} contracts)"


class RecordingObserver:
    """The child's RPC observer: keeps each call for the parent's observer to replay."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def on_request(self, endpoint: str, method: str, outcome: str, seconds: float) -> None:
        self.calls.append(("request", endpoint, method, outcome, seconds))

    def on_backoff(self, endpoint: str, seconds: float) -> None:
        self.calls.append(("backoff", endpoint, seconds))

    def drain(self) -> list[tuple[Any, ...]]:
        calls, self.calls = self.calls, []
        return calls


def replay(calls: Sequence[tuple[Any, ...]], observer: Any) -> None:
    """Report the child's RPC calls to this process's observer, as if made here."""
    for call in calls:
        if call[0] == "request":
            observer.on_request(*call[1:])
        else:
            observer.on_backoff(*call[1:])


def to_wire(item: Fetched) -> tuple[Any, ...]:
    a = item.anchor
    return (
        (a.number, a.hash, a.parent_hash, a.timestamp),
        [
            (e.contract, e.protocol.value, e.name, e.variant, e.subject, e.args,
             lg.address, lg.topics, lg.data, lg.block_number, lg.block_hash, lg.tx_hash,
             lg.tx_index, lg.log_index, e.block_timestamp)
            for e in item.events
            for lg in (e.log,)
        ],
        [
            (r.contract, r.subject, r.kind, r.block_number, r.block_hash, r.result, r.source)
            for r in item.reads
        ],
    )  # fmt: skip


def from_wire(body: tuple[Any, ...]) -> Fetched:
    anchor, events, reads = body
    protocols: Mapping[str, Protocol] = _PROTOCOLS
    return Fetched(
        BlockHeader(*anchor),
        [Event(t[0], protocols[t[1]], t[2], t[3], t[4], t[5], Log(*t[6:14]), t[14])
         for t in events],
        [ChainRead(*t) for t in reads],
    )  # fmt: skip


def encode(message: object) -> bytes:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(payload)) + payload


def write_frame(out: BinaryIO, message: object) -> None:
    """One message, whole (blocks while the reader is behind: the child's backpressure)."""
    out.write(encode(message))
    out.flush()


def write_ready(out: BinaryIO) -> None:
    out.write(_READY)
    out.flush()


async def read_ready(source: asyncio.StreamReader) -> None:
    """The child's ready frame; ``asyncio.IncompleteReadError`` when the child is gone."""
    frame = await source.readexactly(_LENGTH.size)
    if frame != _READY:
        (length,) = _LENGTH.unpack(frame)
        raise ValueError(f"the fetch process began with a {length}-byte frame, not ready")


def read_spec(source: BinaryIO) -> FetchSpec | None:
    """The range to fetch, or None when the parent closed the pipe without one (it
    stopped a child it had started ahead, or it is gone)."""
    head = source.read(_LENGTH.size)
    if not head:
        return None
    (length,) = _LENGTH.unpack(head)
    spec = pickle.loads(source.read(length))
    if not isinstance(spec, FetchSpec):
        raise TypeError(f"expected a FetchSpec on stdin, got {type(spec).__name__}")
    return spec


async def read_message(source: asyncio.StreamReader) -> Message:
    """The next message; ``asyncio.IncompleteReadError`` when the child is gone."""
    (length,) = _LENGTH.unpack(await source.readexactly(_LENGTH.size))
    message: Message = pickle.loads(await source.readexactly(length))
    return message
