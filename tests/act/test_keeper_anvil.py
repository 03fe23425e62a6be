"""The keeper against a real anvil: boundaries, races, permission, fees, batching."""

from __future__ import annotations

from conftest import MakeKeeper
from keeper_harness import KEEPER_KEYS, Escrows, address_of

from keeper.act import Keeper
from keeper.domain.model import BlockHeader, JobStatus
from keeper.rpc.client import RpcClient


async def head(rpc: RpcClient) -> BlockHeader:
    block = await rpc.get_block("latest")
    assert block is not None
    return block


async def run(
    keeper: Keeper, escrows: Escrows, rpc: RpcClient, ids: list[str], ticks: int = 1
) -> None:
    """Tick the keeper ``ticks`` times on fresh heads, mining one block between ticks."""
    for i in range(ticks):
        if i:
            escrows.control.mine()
        await keeper.tick(await head(rpc), escrows.jobs(ids), [])


def nonce_of(escrows: Escrows, key: str) -> int:
    return int(escrows.control.call("eth_getTransactionCount", address_of(key), "latest"), 16)


class TestBoundary:
    """claimRefund fires on the first block at expiredAt and not one block earlier."""

    async def test_fires_at_expiry_not_before(
        self, escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
    ) -> None:
        """At expiredAt - 1 nothing is sent; at expiredAt the refund is sent and confirmed."""
        expiry = escrows.now() + 1000
        ids = escrows.funded_jobs(1, expiry)
        keeper = make_keeper()
        escrows.control.mine_at(expiry - 1)
        summary = await keeper.tick(await head(rpc), escrows.jobs(ids), [])
        assert summary.sent == 0 and summary.planned == 0
        assert keeper.store.all_intents() == []
        escrows.control.mine_at(expiry)
        summary = await keeper.tick(await head(rpc), escrows.jobs(ids), [])
        assert summary.sent == 1
        assert escrows.jobs(ids)[0].status is JobStatus.EXPIRED
        await run(keeper, escrows, rpc, ids, ticks=2)
        [intent] = keeper.store.all_intents()
        assert (intent.status, intent.outcome) == ("done", "confirmed")
        assert nonce_of(escrows, KEEPER_KEYS[0]) == 1
