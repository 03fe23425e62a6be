"""The daemon's constructor: settings and signer come from the [keeper] config table."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from keeper_harness import KEEPER_KEYS, Escrows, address_of, open_db

from keeper.act import Keeper, KeeperSettings
from keeper.config import KeeperConfig
from keeper.errors import ConfigError
from keeper.rpc.client import RpcClient


def test_settings_follow_the_config() -> None:
    """Gwei cap, batch size, confirmations and shards map one to one, in wei and blocks."""
    cfg = KeeperConfig(
        max_fee_gwei=Decimal("1.5"),
        batch_size=7,
        confirmations=4,
        shard=1,
        shards=3,
        shard_fallback_seconds=90,
        min_balance_wei=5,
    )
    settings = KeeperSettings.from_config(
        cfg, multicall="0xCA11bde05977b3631167028862bE2a173976CA11", reorg_watch_blocks=64
    )
    assert settings.reorg_watch_blocks == 64
    assert settings.max_fee_cap == 1_500_000_000
    assert (settings.batch_size, settings.confirmations, settings.min_balance_wei) == (7, 4, 5)
    assert (settings.planner.shard, settings.planner.shards) == (1, 3)
    assert settings.planner.shard_fallback_seconds == 90
    assert settings.multicall == "0xca11bde05977b3631167028862be2a173976ca11"


async def test_dry_run_needs_no_key(escrows: Escrows, rpc: RpcClient, tmp_path: Path) -> None:
    """A dry-run keeper without a key source plans and simulates from the zero address."""
    keeper = Keeper.from_config(
        KeeperConfig(enabled=True, dry_run=True),
        chain_id=31337,
        rpc=rpc,
        db=open_db(tmp_path / "k.db"),
        multicall=escrows.d.multicall,
        environ={},
        contracts=escrows.d.contract_configs(),
    )
    assert keeper.signer is None
    expiry = escrows.now() + 100
    ids = escrows.funded_jobs(1, expiry)
    escrows.control.mine_at(expiry)
    head = await rpc.get_block("latest")
    assert head is not None
    summary = await keeper.tick(head, escrows.jobs(ids), [])
    assert [r.verdict for r in summary.simulated] == ["ok"] and summary.sent == 0


async def test_sending_keeper_requires_a_key(rpc: RpcClient, tmp_path: Path) -> None:
    """Without dry_run a missing key is a configuration error; with one, its address is used."""
    db = open_db(tmp_path / "k.db")
    with pytest.raises(ConfigError, match=r"no key is configured .*dry_run = true"):
        Keeper.from_config(KeeperConfig(enabled=True), chain_id=31337, rpc=rpc, db=db, environ={})
    keeper = Keeper.from_config(
        KeeperConfig(enabled=True, private_key_env="KP"),
        chain_id=31337,
        rpc=rpc,
        db=db,
        environ={"KP": KEEPER_KEYS[1]},
    )
    assert keeper.address == address_of(KEEPER_KEYS[1])
