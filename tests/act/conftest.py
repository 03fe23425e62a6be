"""Keeper tests: a fresh anvil with the contracts deployed, and a keeper factory on it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import pytest
from keeper_harness import KEEPER_KEYS, Escrows, MakeKeeper, make_rpc, open_db

from keeper.act import Keeper, KeeperSettings, Signer
from keeper.config import ContractConfig
from keeper.devnet.anvil import AnvilProcess
from keeper.devnet.deploy import deploy_all
from keeper.obs.metrics import Metrics
from keeper.rpc.client import RpcClient
from keeper.store.index_store import IndexStore


@pytest.fixture
def escrows(anvil: AnvilProcess) -> Iterator[Escrows]:
    yield Escrows(anvil.url, deploy_all(anvil.url))


@pytest.fixture
async def rpc(anvil: AnvilProcess) -> AsyncIterator[RpcClient]:
    async with make_rpc(anvil.url) as client:
        yield client


@pytest.fixture
def make_keeper(escrows: Escrows, rpc: RpcClient, tmp_path: Path) -> MakeKeeper:
    """Build a keeper with its own database (or ``db``, or an index ``store``'s) over the
    devnet's escrows (or ``contracts``); keyword overrides go to KeeperSettings."""

    def build(
        index: int = 0,
        *,
        client: RpcClient | None = None,
        db: Path | None = None,
        metrics: Metrics | None = None,
        contracts: Sequence[ContractConfig] | None = None,
        store: IndexStore | None = None,
        **overrides: object,
    ) -> Keeper:
        settings = KeeperSettings(
            **{
                "max_fee_cap": 100 * 10**9,
                "confirmations": 1,
                "min_balance_wei": 10**15,
                "multicall": escrows.d.multicall,
                **overrides,
            }  # type: ignore[arg-type]
        )
        return Keeper(
            settings=settings,
            chain_id=31337,
            rpc=client or rpc,
            # with an index: on its connection, as the daemon's keeper
            db=store.conn if store is not None else open_db(db or tmp_path / f"keeper{index}.db"),
            signer=Signer(KEEPER_KEYS[index]),
            metrics=metrics,
            contracts=escrows.d.contract_configs() if contracts is None else contracts,
            index=store,
        )

    return build
