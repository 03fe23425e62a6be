"""Cover a block range with ``eth_getLogs`` queries sized by a ``RangePolicy``.

Yields consecutive, gap-free ``(from, to, logs)`` chunks so a caller can
commit each chunk with its cursor. A refusal shrinks the next query (to the
provider's suggested span when it gave one) and the same blocks are asked
again; a rate limit never shrinks anything, the transport has already
waited it out and the error here means the retries ran out.

Each answer also teaches the policy its density (logs and bytes per block),
so with a bounded policy the next range stays under its event and byte
targets whatever the chain's density. Where density jumps inside a range
(a quiet contract turning busy), an answer longer than the policy's
``answer_cap`` is dropped while it is read, before it is parsed, and fewer
blocks are asked for: what one answer can cost in memory stays bounded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any, Protocol

from keeper.domain.model import Log, Logs
from keeper.domain.ranges import RangePolicy, span_hint
from keeper.obs.logging import get_logger
from keeper.rpc.errors import (
    AnswerTooLargeError,
    RangeTooLargeError,
    RateLimitedError,
    RpcTimeoutError,
)

log = get_logger(__name__)

# What one log costs on the wire besides its topics and data: the field names,
# the address, block and transaction hashes and the hex numbers of a getLogs
# entry (anvil's entries, with their ``blockTimestamp``, are about this long).
LOG_WIRE_FIXED = 330
# One topic: 66 hex characters, quotes and a comma.
TOPIC_WIRE = 69


def wire_size(lg: Log) -> int:
    """The bytes ``lg`` took in the JSON answer, estimated from its fields.

    The answer's own length is gone by the time logs are validated; this
    estimate, close to it, is what bounds a batch's bytes.
    """
    return LOG_WIRE_FIXED + TOPIC_WIRE * len(lg.topics) + 2 * len(lg.data)


class LogSource(Protocol):
    """What the scanner needs from a client (``RpcClient`` satisfies it)."""

    async def get_logs(
        self,
        addresses: Iterable[str],
        from_block: int,
        to_block: int,
        *,
        topics: Sequence[Any] | None = None,
        max_bytes: int | None = None,
    ) -> Logs: ...


async def scan_logs(
    client: LogSource,
    addresses: Iterable[str],
    from_block: int,
    to_block: int,
    policy: RangePolicy,
    *,
    topics: Sequence[Any] | None = None,
) -> AsyncIterator[tuple[int, int, Logs]]:
    """Yield ``(lo, hi, logs)`` chunks covering ``[from_block, to_block]`` in order.

    Raises ``RangeTooLargeError`` only when even a single-block query (or the
    policy's minimum span) is refused, since no shrinking can help then; a
    timeout after the transport's retries is treated like a silent refusal of a
    multi-block range (heavy log queries time out before they are refused).
    """
    addrs = list(addresses)
    cursor = from_block
    while (rng := policy.next_range(cursor, to_block)) is not None:
        lo, hi = rng
        span = hi - lo + 1
        try:
            logs = await client.get_logs(
                addrs, lo, hi, topics=topics, max_bytes=policy.answer_cap(span)
            )
        except AnswerTooLargeError:
            # denser than the last answers said: ask for fewer blocks, not read it all
            new = policy.on_answer_too_large(span)
            log.info("log_answer_over_bound", from_block=lo, to_block=hi, size=new)
            continue
        except RangeTooLargeError as exc:
            suggested, cap = span_hint(exc.failure.suggested_range, exc.failure.max_span)
            new = policy.on_too_large(suggested, hard_cap=cap, tried=span)
            if new >= span:  # nothing smaller to try: shrinking cannot help
                raise
            log.info("log_range_shrunk", from_block=lo, to_block=hi, size=new, hinted=suggested)
            continue
        except RpcTimeoutError:
            new = policy.on_too_large(None, tried=span)
            if new >= span:
                raise
            log.info("log_range_shrunk_after_timeout", from_block=lo, to_block=hi, size=new)
            continue
        except RateLimitedError:
            policy.on_rate_limited()
            raise
        policy.on_answer(span, len(logs), sum(map(wire_size, logs)))
        yield lo, hi, logs
        del logs  # not held while the next answer is awaited
        cursor = hi + 1
