"""scan_logs covers a range gap-free, learns provider limits, and ignores rate limits."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from rpc_fixtures import EMITTER, EMITTER_B, LogChain
from support.rpc_proxy import RpcProxy

from keeper.domain.model import Log
from keeper.domain.ranges import RangePolicy
from keeper.rpc import EndpointConfig, RangeTooLargeError, RpcClient, scan_logs

ADDRESSES = [EMITTER, EMITTER_B]


async def collect(
    client: RpcClient, lo: int, hi: int, policy: RangePolicy
) -> tuple[list[tuple[int, int]], list[Log]]:
    ranges: list[tuple[int, int]] = []
    logs: list[Log] = []
    async for a, b, chunk in scan_logs(client, ADDRESSES, lo, hi, policy):
        ranges.append((a, b))
        logs.extend(chunk)
    return ranges, logs


def spans(proxy: RpcProxy) -> list[int]:
    """Block spans of the getLogs queries the proxy received, in order."""
    out = []
    for params in proxy.requests_for("eth_getLogs"):
        flt: dict[str, Any] = params[0]
        out.append(int(flt["toBlock"], 16) - int(flt["fromBlock"], 16) + 1)
    return out


def assert_covers(ranges: list[tuple[int, int]], lo: int, hi: int) -> None:
    assert ranges[0][0] == lo and ranges[-1][1] == hi
    for (_, end), (start, _) in itertools.pairwise(ranges):
        assert start == end + 1


class TestScan:
    async def test_consecutive_ranges_find_every_log(
        self, client: RpcClient, log_chain: LogChain
    ) -> None:
        """Chunks are consecutive, cover the range, and together hold every log once."""
        ranges, logs = await collect(client, 0, 120, RangePolicy(size=17, grow_after=2))
        assert_covers(ranges, 0, 120)
        assert [lg.block_number for lg in logs] == log_chain.log_blocks

    async def test_answers_over_the_byte_cap_are_dropped_and_the_range_shrunk(
        self, client: RpcClient, proxy: RpcProxy, log_chain: LogChain
    ) -> None:
        """With a byte bound that fits one log, longer multi-block answers are dropped while
        read, fewer blocks asked for, and every log is still found exactly once."""
        policy = RangePolicy(size=64, maximum=64, max_bytes=300)
        assert policy.answer_cap(2) == 600
        for _ in range(5):  # a quiet stretch before: density allows the full size
            policy.on_answer(policy.span, 0, 0)
        assert policy.span == 64
        ranges, logs = await collect(client, 0, 120, policy)
        assert_covers(ranges, 0, 120)
        assert [lg.block_number for lg in logs] == log_chain.log_blocks
        assert len(spans(proxy)) > len(ranges)  # some answers were dropped and asked again
        per_range = [sum(1 for b in log_chain.log_blocks if lo <= b <= hi) for lo, hi in ranges]
        assert all(n <= 1 for (lo, hi), n in zip(ranges, per_range, strict=True) if hi > lo)
        assert policy.size == 64  # the provider's size is not what refused

    @pytest.mark.parametrize("style", ["alchemy", "infura", "reth"])
    async def test_suggested_range_is_used(
        self, style: str, client: RpcClient, proxy: RpcProxy, log_chain: LogChain
    ) -> None:
        """A refusal with a suggested range jumps straight to the suggested span."""
        proxy.rules.max_log_range = 13
        proxy.rules.range_style = style
        ranges, logs = await collect(client, 0, 120, RangePolicy(size=100, grow_after=1000))
        assert spans(proxy)[:2] == [100, 13]
        assert all(b - a + 1 <= 13 for a, b in ranges)
        assert_covers(ranges, 0, 120)
        assert [lg.block_number for lg in logs] == log_chain.log_blocks
        assert proxy.count("range_too_large") == 1

    @pytest.mark.parametrize("style", ["quicknode", "geth"])
    async def test_announced_cap_becomes_ceiling(
        self, style: str, client: RpcClient, proxy: RpcProxy
    ) -> None:
        """A provider's announced span cap is adopted and growth never passes it."""
        proxy.rules.max_log_range = 10
        proxy.rules.range_style = style
        policy = RangePolicy(size=64, grow_after=1)
        ranges, _ = await collect(client, 0, 120, policy)
        assert spans(proxy)[:2] == [64, 10]
        assert proxy.count("range_too_large") == 1
        assert policy.ceiling == 10
        assert_covers(ranges, 0, 120)

    async def test_bare_refusal_halves(self, client: RpcClient, proxy: RpcProxy) -> None:
        """Without any hint the span halves until the provider accepts it."""
        proxy.rules.max_log_range = 20
        proxy.rules.range_style = "bare"
        ranges, _ = await collect(client, 0, 120, RangePolicy(size=100, grow_after=1000))
        assert spans(proxy)[:4] == [100, 50, 25, 12]
        assert_covers(ranges, 0, 120)

    async def test_rate_limits_never_shrink_the_range(
        self, client: RpcClient, proxy: RpcProxy, log_chain: LogChain
    ) -> None:
        """429s on getLogs are waited out; every query keeps the same span."""
        proxy.rules.on("eth_getLogs", rate_limit=3, retry_after=0.05)
        policy = RangePolicy(size=30, grow_after=1000)
        ranges, logs = await collect(client, 0, 119, policy)
        assert proxy.count("rate_limit") == 3
        assert set(spans(proxy)) == {30}
        assert policy.size == 30
        assert ranges == [(0, 29), (30, 59), (60, 89), (90, 119)]
        assert [lg.block_number for lg in logs] == [b for b in log_chain.log_blocks if b <= 119]

    async def test_timeout_shrinks_heavy_range(self, proxy: RpcProxy) -> None:
        """A log query that keeps timing out is retried as smaller ranges."""
        proxy.rules.on("eth_getLogs", timeout=2, delay=1.0)
        client = RpcClient(
            [EndpointConfig("rpc0", proxy.url)],
            timeout=0.2,
            max_attempts=2,
            retry_initial=0.01,
            backoff_base=0.01,
        )
        async with client:
            ranges, _ = await collect(client, 0, 39, RangePolicy(size=40, grow_after=1000))
        assert spans(proxy)[:3] == [40, 40, 20]
        assert ranges == [(0, 19), (20, 39)]

    async def test_single_block_refusal_raises(self, client: RpcClient, proxy: RpcProxy) -> None:
        """When even one block is refused there is nothing left to shrink: it raises."""
        proxy.rules.on(
            "eth_getLogs",
            error=100,
            error_code=-32005,
            error_message="query returned more than 10000 results",
        )
        with pytest.raises(RangeTooLargeError):
            await collect(client, 0, 120, RangePolicy(size=8))
        assert spans(proxy) == [8, 4, 2, 1]
