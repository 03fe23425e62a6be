"""RPC faults at volume: a full devnet run through two proxies failing ~30% of calls (HTTP 503s,
provider error strings, 429s, lost send replies, pool refusals), the second also lagging.

The state must still come out right (tables equal a fresh backfill, every due
action confirmed once), the log range must never shrink because of 429s, and
no intent may be sent twice.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from rel_checks import converge_and_check, fail
from rel_daemon import DaemonProc, keeper_traffic
from rel_report import REPORT
from rel_sizes import SIZES, Size
from support.rpc_proxy import RpcProxy
from sync_support import write_config

from keeper.devnet.anvil import AnvilProcess, ChainControl
from keeper.devnet.deploy import deploy_all

FLAKY = 0.3
MAX_RANGE = 16
CONFIRMATIONS = 4
METHODS = (
    "eth_chainId", "eth_blockNumber", "eth_getBlockByNumber", "eth_getBlockByHash",
    "eth_getLogs", "eth_call", "eth_estimateGas", "eth_getTransactionCount",
    "eth_getTransactionReceipt", "eth_getTransactionByHash", "eth_sendRawTransaction",
    "eth_feeHistory", "eth_getBalance", "eth_maxPriorityFeePerGas", "eth_gasPrice", "batch",
)  # fmt: skip
FAULT_KINDS = (
    "flaky", "error", "rate_limit", "timeout", "garbage", "truncate", "null_result",
    "drop_reply", "empty_logs", "lag", "http_error", "wrong_id",
)  # fmt: skip


def arm(proxy: RpcProxy, size: Size) -> None:
    """~30% of every method fails, plus budgets of the provider-specific failures.

    A budget fails the next N calls in a row, so only the ones that are harmless
    in a row (429s, lost send replies) grow with the run; the rest stay at the
    fast size. Scaled by six, 60 consecutive bad block replies from the only
    endpoint that has the head are an outage, not volume: the long run's volume
    comes from its 160 steps at 30% random failures.
    """
    scale = max(1, size.fault_steps // 24)
    for method in METHODS:
        proxy.rules.on(method, flaky=FLAKY)
    proxy.rules.on("eth_getLogs", rate_limit=10 * scale, retry_after=0.05)
    proxy.rules.on("eth_call", error=20, error_message="header not found")
    proxy.rules.on("eth_getBlockByNumber", garbage=5, truncate=5)
    proxy.rules.on("eth_getTransactionReceipt", null_result=5)
    arm_sends(proxy, scale)


def arm_sends(proxy: RpcProxy, scale: int) -> None:
    """Replies lost after forwarding, and a pool refusal in geth's words (either endpoint
    may carry the sends: the client prefers the healthier one)."""
    proxy.rules.on("eth_sendRawTransaction", drop_reply=3 * scale)
    proxy.rules.reject_tx("already_known", client="geth", count=1)


def range_spans(proxy: RpcProxy) -> list[tuple[int, int]]:
    out = []
    for params in proxy.requests_for("eth_getLogs"):
        flt = params[0] if params else {}
        if isinstance(flt, dict) and "fromBlock" in flt and "toBlock" in flt:
            out.append((int(flt["fromBlock"], 16), int(flt["toBlock"], 16)))
    return out


@pytest.mark.parametrize("size", SIZES)
async def test_a_devnet_run_through_30_percent_faults_and_a_lagging_endpoint(
    size: Size, anvil: AnvilProcess, chain: ChainControl, tmp_path: Path
) -> None:
    """~30% failures on both endpoints, one also lagging: right tables, whole log ranges,
    no duplicate sends."""
    fig = REPORT.figures(size.name)
    deployed = await asyncio.to_thread(deploy_all, anvil.url)
    gen = keeper_traffic(anvil.url, deployed, interval=0.1)
    for _ in range(6):  # a history for the first backfill to range-scan
        await asyncio.to_thread(gen.step)
    await asyncio.to_thread(chain.mine, 6 * MAX_RANGE)
    history_head = await asyncio.to_thread(chain.block_number)
    async with RpcProxy(anvil.url) as faulty, RpcProxy(anvil.url) as lagging:
        arm(faulty, size)
        lagging.rules.lag = 3
        for method in METHODS:  # the fallback fails as often: 30% of all traffic, wherever sent
            lagging.rules.on(method, flaky=FLAKY)
        arm_sends(lagging, 1)
        cfg = write_config(
            tmp_path, "faults", [faulty.url, lagging.url], deployed, poll_interval=0.1,
            window=32, finality="confirmations", confirmations=CONFIRMATIONS,
            max_range=MAX_RANGE, request_timeout=1.0,
        )  # fmt: skip
        daemon = DaemonProc.for_config(tmp_path / "faults.toml", tmp_path / "faults.log")
        daemon.start()
        try:
            took = await daemon.wait_ready(120, min_indexed=history_head - CONFIRMATIONS)
            assert fail(fig, took is not None, "never ready under faults"), daemon.tail()
            await gen.run(size.fault_steps)
            final = await converge_and_check(
                daemon, cfg, chain, anvil.url, deployed, tmp_path, fig, within=240
            )
        finally:
            if daemon.alive():
                daemon.kill()
            for proxy in (faulty, lagging):
                for kind in FAULT_KINDS:
                    fig.faults_injected[kind] += proxy.count(kind)
            REPORT.flush()
        # ranges of the first backfill that ended below the finalized block never shrank:
        # each start was asked with one end only (no shrink and ask again), and the spans
        # only grew, from the policy's first few blocks (density unknown) to MAX_RANGE
        inside = history_head - CONFIRMATIONS - MAX_RANGE
        spans = sorted(
            {(a, b) for a, b in range_spans(faulty) + range_spans(lagging) if b < inside}
        )
        assert len(spans) >= 5, spans
        widths = [b - a + 1 for a, b in spans]
        shrunk = len({a for a, _ in spans}) != len(spans) or widths != sorted(widths)
        assert fail(fig, not shrunk, f"log range shrank under 429s: {spans[:8]}"), spans
        assert widths[-1] == MAX_RANGE, spans
        assert faulty.count("rate_limit", "eth_getLogs") >= 1
        # faults are drawn per HTTP request: about 30% of them failed, on either endpoint
        injected = sum(p.count(k) for p in (faulty, lagging) for k in FAULT_KINDS if k != "lag")
        received = faulty.count("received") + lagging.count("received")
        assert injected >= 0.25 * received, (injected, received)
        dropped = faulty.count("drop_reply") + lagging.count("drop_reply")
        assert dropped >= 1 and final.audit.txs >= 3, final


async def test_a_transient_rpc_error_at_start_up_does_not_kill_the_daemon(
    anvil: AnvilProcess, tmp_path: Path
) -> None:
    """Blocks unavailable for the first few calls: the daemon waits them out and gets ready."""
    deployed = await asyncio.to_thread(deploy_all, anvil.url)
    async with RpcProxy(anvil.url) as proxy:
        # one more failure than a request's five attempts: the first recovery attempt fails
        proxy.rules.on("eth_getBlockByNumber", error=6, error_message="upstream timeout")
        write_config(tmp_path, "startup", [proxy.url], deployed, poll_interval=0.1)
        daemon = DaemonProc.for_config(tmp_path / "startup.toml", tmp_path / "startup.log")
        daemon.start()
        try:
            assert await daemon.wait_ready(90) is not None, daemon.tail()
            assert "startup_step_failed" in daemon.output()  # it did fail, and lived on
        finally:
            if daemon.alive():
                daemon.kill()
