"""Keeper tests: a fresh anvil with the contracts deployed, and a keeper factory on it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from keeper_harness import KEEPER_KEYS, Escrows, open_db

from keeper.act import Keeper, KeeperSettings, Signer
from keeper.devnet.anvil import AnvilProcess
from keeper.devnet.deploy import deploy_all
from keeper.obs.metrics import Metrics
from keeper.rpc.client import RpcClient
from keeper.rpc.config import EndpointConfig

MakeKeeper = Callable[..., Keeper]


@pytest.fixture
def escrows(anvil: AnvilProcess) -> Iterator[Escrows]:
    yield Escrows(anvil.url, deploy_all(anvil.url))


def make_rpc(url: str, *, attempts: int = 3) -> RpcClient:
    """A real client: generous throttle, short retries so a fault surfaces quickly."""
    endpoint = EndpointConfig.from_url(url, name="node", rate=10_000)
    return RpcClient(
        [endpoint], timeout=3.0, max_attempts=attempts, deadline=10.0, retry_initial=0.01
    )


@pytest.fixture
async def rpc(anvil: AnvilProcess) -> AsyncIterator[RpcClient]:
    async with make_rpc(anvil.url) as client:
        yield client


@pytest.fixture
def make_keeper(escrows: Escrows, rpc: RpcClient, tmp_path: Path) -> MakeKeeper:
    """Build a keeper with its own database; keyword overrides go to KeeperSettings."""

    def build(
        index: int = 0,
        *,
        client: RpcClient | None = None,
        db: Path | None = None,
        metrics: Metrics | None = None,
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
            db=open_db(db or tmp_path / f"keeper{index}.db"),
            signer=Signer(KEEPER_KEYS[index]),
            metrics=metrics,
            contracts=escrows.d.contract_configs(),
        )

    return build
