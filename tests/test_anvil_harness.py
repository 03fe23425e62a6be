"""The anvil harness starts a real node, drives time and reorgs, and never leaks it."""

from __future__ import annotations

import os

import pytest

from keeper.devnet.anvil import AnvilProcess, ChainControl, RpcError


def test_node_starts_mines_and_is_reaped() -> None:
    """A started node answers, mines on request, and its process is gone after stop."""
    node = AnvilProcess().start()
    ctl = ChainControl(node.url)
    assert ctl.block_number() == 0
    ctl.mine(5)
    assert ctl.block_number() == 5
    assert node.proc is not None
    pid = node.proc.pid
    node.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_time_travel_sets_exact_timestamps(chain: ChainControl) -> None:
    """mine_at produces a block with exactly the requested timestamp."""
    target = chain.timestamp() + 1000
    chain.mine_at(target)
    assert chain.timestamp() == target
    chain.increase_time(50)
    assert chain.timestamp() >= target + 50


def test_reorg_replaces_blocks(chain: ChainControl) -> None:
    """anvil_reorg swaps the hashes of the last N blocks but keeps the height."""
    chain.mine(6)
    before = [chain.block(n)["hash"] for n in range(1, 7)]
    chain.reorg(3)
    after = [chain.block(n)["hash"] for n in range(1, 7)]
    assert after[:3] == before[:3]
    assert all(a != b for a, b in zip(after[3:], before[3:], strict=True))
    assert chain.block_number() == 6


def test_finalized_tag_lags_head(chain: ChainControl) -> None:
    """With 4 slots an epoch, finalized trails the head by two epochs."""
    chain.mine(20)
    finalized = int(chain.block("finalized")["number"], 16)
    assert finalized == 20 - 8


def test_rpc_errors_surface(chain: ChainControl) -> None:
    """A JSON-RPC error from the node raises RpcError carrying the node's error object."""
    with pytest.raises(RpcError) as info:
        chain.call("anvil_reorg", 10_000, [])
    assert "depth" in str(info.value).lower()


def _send_burst(chain: ChainControl, count: int) -> list[str]:
    """``count`` value transfers from the first dev account, sent as fast as the node takes them."""
    sender = chain.call("eth_accounts")[0]
    tx = {"from": sender, "to": "0x" + "ab" * 20, "value": "0x1"}
    return [str(chain.call("eth_sendTransaction", tx)) for _ in range(count)]


def test_settle_waits_for_automine_to_store_what_was_sent(chain: ChainControl) -> None:
    """anvil answers a send before its miner stores the block; after settle every one is mined."""
    hashes = _send_burst(chain, 40)
    chain.settle()
    assert int(chain.call("txpool_status")["pending"], 16) == 0
    assert all(chain.call("eth_getTransactionReceipt", h) is not None for h in hashes)


def test_settle_returns_at_once_when_automine_is_off(chain: ChainControl) -> None:
    """With automine off nothing would ever mine the pool: settle leaves it as it is."""
    chain.set_automine(False)
    [tx_hash] = _send_burst(chain, 1)
    chain.settle()
    assert int(chain.call("txpool_status")["pending"], 16) == 1
    assert chain.call("eth_getTransactionReceipt", tx_hash) is None


def test_a_reorg_right_after_sends_keeps_the_node_consistent(chain: ChainControl) -> None:
    """Every transaction the new chain holds is counted in its sender's nonce, no more."""
    sender = chain.call("eth_accounts")[0]
    for _ in range(30):
        hashes = _send_burst(chain, 5)
        chain.reorg(3)
        head = chain.block_number()
        kept = [
            r
            for r in (chain.call("eth_getTransactionReceipt", h) for h in hashes)
            if r is not None and chain.block(int(r["blockNumber"], 16))["hash"] == r["blockHash"]
        ]
        mined = int(chain.call("eth_getTransactionCount", sender, hex(head)), 16)
        nonces = [
            int(chain.call("eth_getTransactionByHash", r["transactionHash"])["nonce"], 16)
            for r in kept
        ]
        assert all(n < mined for n in nonces)
