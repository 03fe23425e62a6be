"""The fault proxy itself: forwards faithfully, injects exactly what it is told, counts it."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from rpc_fixtures import EMITTER, LogChain
from support.rpc_proxy import RpcProxy

from keeper.devnet.anvil import RpcError, rpc_call


def post(url: str, body: Any) -> tuple[int, bytes]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_sync_use_forwards_and_counts(log_chain: LogChain) -> None:
    """Used from sync code, the proxy forwards calls and records them."""
    with RpcProxy(log_chain.url) as proxy:
        assert rpc_call(proxy.url, "eth_chainId") == "0x7a69"
        assert proxy.requests_for("eth_chainId") == [[]]
        assert proxy.stats[("eth_chainId", "forwarded")] == 1


def test_budgets_are_consumed_in_order(log_chain: LogChain) -> None:
    """A budget of N faults hits exactly the next N calls of that method."""
    with RpcProxy(log_chain.url) as proxy:
        proxy.rules.on("eth_chainId", rate_limit=1, retry_after=2, garbage=1)
        status, _ = post(proxy.url, {"jsonrpc": "2.0", "id": 1, "method": "eth_chainId"})
        assert status == 429
        status, body = post(proxy.url, {"jsonrpc": "2.0", "id": 1, "method": "eth_chainId"})
        assert status == 200 and not body.startswith(b"{")
        assert rpc_call(proxy.url, "eth_chainId") == "0x7a69"
        assert proxy.count("rate_limit") == 1 and proxy.count("garbage") == 1


def test_an_aimed_error_budget_hits_only_calls_to_its_address(log_chain: LogChain) -> None:
    """``to`` keeps the budget for the calls to one address, whatever arrives first."""
    other = "0x" + "11" * 20
    with RpcProxy(log_chain.url) as proxy:
        proxy.rules.on("eth_call", error=1, error_message="header not found", to=EMITTER.upper())
        assert rpc_call(proxy.url, "eth_call", [{"to": other, "data": "0x"}, "latest"]) == "0x"
        with pytest.raises(RpcError) as info:
            rpc_call(proxy.url, "eth_call", [{"to": EMITTER, "data": "0x"}, "latest"])
        assert info.value.error["message"] == "header not found"
        rpc_call(proxy.url, "eth_call", [{"to": EMITTER, "data": "0x"}, "latest"])  # spent
        assert proxy.count("error", "eth_call") == 1


def test_latency_holds_every_request(log_chain: LogChain) -> None:
    """A latency set is waited out by each request, a batch as one, before it is served."""
    with RpcProxy(log_chain.url) as proxy:
        proxy.rules.latency = 0.2
        start = time.monotonic()
        assert rpc_call(proxy.url, "eth_chainId") == "0x7a69"
        status, _ = post(proxy.url, [{"jsonrpc": "2.0", "id": i, "method": "eth_chainId"}
                                     for i in range(3)])  # fmt: skip
        assert status == 200
        assert time.monotonic() - start >= 2 * 0.2


def test_range_refusal_styles(log_chain: LogChain) -> None:
    """Oversized log queries get the configured provider's refusal, with its hint."""
    with RpcProxy(log_chain.url) as proxy:
        proxy.rules.max_log_range = 10
        flt = {"address": EMITTER, "fromBlock": "0x0", "toBlock": "0x63"}
        proxy.rules.range_style = "alchemy"
        with pytest.raises(RpcError) as info:
            rpc_call(proxy.url, "eth_getLogs", [flt])
        assert "[0x0, 0x9]" in info.value.error["message"]
        proxy.rules.range_style = "reth"
        with pytest.raises(RpcError) as info:
            rpc_call(proxy.url, "eth_getLogs", [flt])
        assert "retry with the range 0-9" in info.value.error["message"]
        ok = rpc_call(proxy.url, "eth_getLogs", [{**flt, "toBlock": "0x9"}])
        assert isinstance(ok, list)


def test_lag_rewrites_head_and_latest(log_chain: LogChain) -> None:
    """A lagging proxy reports head minus k, serves "latest" as that block, hides newer ones."""
    with RpcProxy(log_chain.url) as proxy:
        proxy.rules.lag = 5
        head = log_chain.ctl.block_number()
        assert int(rpc_call(proxy.url, "eth_blockNumber"), 16) == head - 5
        latest = rpc_call(proxy.url, "eth_getBlockByNumber", ["latest", False])
        assert int(latest["number"], 16) == head - 5
        assert rpc_call(proxy.url, "eth_getBlockByNumber", [hex(head), False]) is None


def test_empty_logs_mode(log_chain: LogChain) -> None:
    """The empty-logs fault hides logs that exist, once."""
    with RpcProxy(log_chain.url) as proxy:
        proxy.rules.on("eth_getLogs", empty_logs=1)
        flt = {"address": EMITTER, "fromBlock": "0x0", "toBlock": "0x78"}
        assert rpc_call(proxy.url, "eth_getLogs", [flt]) == []
        assert len(rpc_call(proxy.url, "eth_getLogs", [flt])) == 13
        assert proxy.count("empty_logs") == 1


def test_flaky_is_reproducible(log_chain: LogChain) -> None:
    """The random fault rate is driven by a seeded RNG: same seed, same failures."""
    outcomes: list[list[int]] = []
    for _ in range(2):
        with RpcProxy(log_chain.url) as proxy:
            proxy.rules.on("eth_chainId", flaky=0.5)
            outcomes.append(
                [
                    post(proxy.url, {"jsonrpc": "2.0", "id": 1, "method": "eth_chainId"})[0]
                    for _ in range(12)
                ]
            )
    assert outcomes[0] == outcomes[1]
    assert 200 in outcomes[0] and 503 in outcomes[0]


def test_batch_faults_per_item(log_chain: LogChain) -> None:
    """In a batch, item-level faults hit only the matching items."""
    with RpcProxy(log_chain.url) as proxy:
        proxy.rules.on("eth_chainId", error=1, error_message="nonce too low")
        status, body = post(
            proxy.url,
            [
                {"jsonrpc": "2.0", "id": 1, "method": "eth_chainId"},
                {"jsonrpc": "2.0", "id": 2, "method": "eth_blockNumber"},
            ],
        )
        replies = {r["id"]: r for r in json.loads(body)}
        assert status == 200
        assert replies[1]["error"]["message"] == "nonce too low"
        assert "result" in replies[2]
