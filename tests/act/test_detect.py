"""Dialect detection against every devnet contract shape, pinning, and the undetermined case."""

from __future__ import annotations

from pathlib import Path

import pytest
from keeper_harness import DEPLOYER, Escrows, open_db
from structlog.testing import capture_logs

from keeper.act.detect import DialectMismatchError, detect, detect_all, publish_dialects
from keeper.config import ContractConfig
from keeper.domain.model import Protocol
from keeper.obs.metrics import Metrics
from keeper.rpc.client import RpcClient
from keeper.store.dialects import load_dialects

E, T = Protocol.ERC8183, Protocol.TASKMARKET


def _contract(name: str, protocol: Protocol, address: str, dialect: str = "") -> ContractConfig:
    return ContractConfig(name, protocol, address, 0, dialect)


async def test_each_devnet_shape_is_detected(escrows: Escrows, rpc: RpcClient) -> None:
    """Every escrow the devnet deploys is told apart from the others by what it answers."""
    book = await detect_all(rpc, escrows.d.contract_configs())
    found = {d.name: (d.dialect, d.source, d.diamond) for d in book.detections.values()}
    assert found == {
        "commerce": ("AgenticCommerce", "detected", False),
        "legacy_commerce": ("LegacyACP", "detected", False),
        "erc8183": ("ERC8183", "detected", False),
        "taskmarket": ("TaskMarketPre7", "detected", False),
        "taskmarket_strict": ("TaskMarketPre7", "detected", False),
    }


async def test_erc8183_told_apart_even_paused(escrows: Escrows, rpc: RpcClient) -> None:
    """The three ERC-8183 dialects by which claimRefund answers; a paused ERC8183 escrow
    still answers its probes (EnforcedPause is revert data), and a wrong pin names why."""
    escrows.call(DEPLOYER, escrows.d.erc8183, "pause()")
    d = await detect(rpc, _contract("new", E, escrows.d.erc8183))
    assert (d.dialect, d.source) == ("ERC8183", "detected")
    with pytest.raises(DialectMismatchError) as err:
        await detect(rpc, _contract("new", E, escrows.d.erc8183, "AgenticCommerce"))
    assert "claimRefund(uint256) (5b7baf64) not answered" in str(err.value)
    with pytest.raises(DialectMismatchError) as err:
        await detect(rpc, _contract("old", E, escrows.d.commerce, "ERC8183"))
    assert "claimRefund(uint256,bytes) (d2fd101b) not answered" in str(err.value)


async def test_pinned_dialect_confirmed(escrows: Escrows, rpc: RpcClient) -> None:
    """A pin the contract answers is kept, and says so."""
    d = await detect(rpc, _contract("tm", T, escrows.d.taskmarket, "TaskMarketPre7"))
    assert (d.dialect, d.source) == ("TaskMarketPre7", "pinned")


async def test_wrong_pin_fails_naming_it(escrows: Escrows, rpc: RpcClient) -> None:
    """A pin the contract does not answer is a start-up error naming the pin and the call."""
    with pytest.raises(DialectMismatchError) as err:
        await detect(rpc, _contract("tm", T, escrows.d.taskmarket, "TaskMarket"))
    text = str(err.value)
    assert "'TaskMarket'" in text and "contracts 'tm'" in text
    assert "refundExpired(bytes32,uint256) (3e91a36b) not answered" in text
    with pytest.raises(DialectMismatchError, match="'LegacyACP'"):
        await detect(rpc, _contract("c", E, escrows.d.commerce, "LegacyACP"))


async def test_undetermined_is_recorded_and_said_once(
    escrows: Escrows, rpc: RpcClient, tmp_path: Path
) -> None:
    """A contract no dialect fits (here: the token) is kept, undetermined, with the reason."""
    contracts = [_contract("odd", T, escrows.d.usdc), _contract("c", E, escrows.d.commerce)]
    with capture_logs() as logs:
        book = await detect_all(rpc, contracts)
    warned = [e for e in logs if e["event"] == "contract_dialect_undetermined"]
    assert len(warned) == 1 and warned[0]["contract"] == "odd"
    odd = book.detections[escrows.d.usdc]
    assert odd.dialect is None and "no taskmarket dialect matches" in odd.reason
    assert book.dialect(escrows.d.usdc) is None
    conn = open_db(tmp_path / "d.db")
    metrics = Metrics(contract_names={c.address: c.name for c in contracts})
    publish_dialects(book, conn, 31337, metrics)
    rows = {r["name"]: r for r in load_dialects(conn, 31337)}
    assert rows["odd"]["dialect"] is None and rows["c"]["dialect"] == "AgenticCommerce"
    sample = metrics.registry.get_sample_value(
        "keeper_contract_dialect",
        {"contract": "odd", "dialect": "undetermined", "source": "detected"},
    )
    assert sample == 1.0
