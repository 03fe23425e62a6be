"""A lagging endpoint never makes the keeper act twice on one subject.

The fault test's failure, taken apart: an endpoint three blocks behind answers
``latest`` with an old state and an old transaction count. The keeper must not
decide on an older head than one it already ticked on, and a replacement whose
calls fail on such a state must not end the intents the first transaction may
still carry out.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from keeper_harness import KEEPER_KEYS, Escrows, MakeKeeper, head, make_rpc, nonce_of, run
from support import keeper_books
from support.rpc_proxy import RpcProxy

from keeper.act import Keeper
from keeper.domain.model import JobStatus
from keeper.rpc.client import RpcClient
from keeper.rpc.config import EndpointConfig
from keeper.rpc.errors import RpcError
from keeper.store.intents import Attempt


def sent_nonces(escrows: Escrows) -> int:
    """Nonces the keeper's address has spent on the canonical chain."""
    return nonce_of(escrows, KEEPER_KEYS[0])


async def test_a_head_below_one_already_ticked_on_decides_nothing(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
) -> None:
    """A lagging endpoint's head is older than the keeper's last: no decision is made on it,
    and the next head at or above the last one decides as usual."""
    ids = escrows.expired_jobs(1)
    old = await head(rpc)
    escrows.control.mine(3)
    keeper = make_keeper()
    # the keeper has ticked on a newer head while the job was not yet passed to it
    await keeper.tick(await head(rpc), [], [])
    summary = await keeper.tick(old, escrows.jobs(ids), [])
    assert (summary.planned, summary.sent) == (0, 0)
    assert keeper_books.all_intents(keeper.store) == []
    summary = await keeper.tick(await head(rpc), escrows.jobs(ids), [])
    assert summary.sent == 1
    escrows.control.mine()
    await run(keeper, escrows, rpc, ids)
    assert escrows.jobs(ids)[0].status is JobStatus.EXPIRED
    assert keeper_books.all_intents(keeper.store)[0].outcome == "confirmed"


async def test_after_a_restart_a_head_below_the_last_decision_decides_nothing(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, tmp_path: Path
) -> None:
    """The newest head decided on is in the intents: a keeper started on the same database
    whose first head comes from a lagging endpoint does not decide on it either."""
    db = tmp_path / "restart.db"
    ids = escrows.expired_jobs(2)
    done, due = ids[:1], ids[1:]
    old = await head(rpc)  # both jobs are due on it
    escrows.control.mine(3)
    first = make_keeper(db=db)
    await run(first, escrows, rpc, done, ticks=2)
    assert escrows.jobs(done)[0].status is JobStatus.EXPIRED
    restarted = make_keeper(db=db)
    summary = await restarted.tick(old, escrows.jobs(due), [])
    assert (summary.planned, summary.sent) == (0, 0)
    summary = await restarted.tick(await head(rpc), escrows.jobs(due), [])
    assert summary.sent == 1


async def test_a_replacement_that_fails_because_the_first_send_landed_confirms_the_first(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
) -> None:
    """A retried tick on the head the refund was decided at asks a replica that knows
    neither the receipt nor the transaction: to the keeper its send looks forgotten. The
    re-simulation fails (the refund is already done: by that very transaction), so the
    nonce goes to a cancel, which the node refuses. The intent must stay with the first
    transaction and end confirmed with its hash, never preempted and free to be sent again."""
    ids = escrows.expired_jobs(1)
    async with RpcProxy(escrows.url) as proxy, make_rpc(proxy.url, attempts=1) as replica:
        keeper = make_keeper(client=replica, multicall=None)
        decided = await head(rpc)
        await keeper.tick(decided, escrows.jobs(ids), [])  # automine: mined in the next block
        [first] = keeper_books.all_attempts(keeper.store)
        proxy.rules.on("eth_getTransactionReceipt", null_result=1)
        proxy.rules.on("eth_getTransactionByHash", null_result=1)
        await keeper.tick(decided, escrows.jobs(ids), [])
        kinds = [(a.kind, a.status) for a in keeper_books.all_attempts(keeper.store)]
        assert kinds == [("call", "sent"), ("cancel", "failed")], kinds
        [intent] = keeper_books.all_intents(keeper.store)
        assert intent.status == "inflight", intent
        escrows.control.mine()
        await run(keeper, escrows, rpc, ids)
    assert escrows.jobs(ids)[0].status is JobStatus.EXPIRED
    [intent] = keeper_books.all_intents(keeper.store)
    assert (intent.outcome, intent.tx_hash) == ("confirmed", first.tx_hash)
    assert sent_nonces(escrows) == 1


def replica_first(replica: str, primary: str) -> RpcClient:
    """A client over a replica (first: the one asked) and the primary behind it."""
    return RpcClient(
        [
            EndpointConfig.from_url(replica, name="replica", rate=10_000),
            EndpointConfig.from_url(primary, name="primary", rate=10_000),
        ],
        timeout=3.0,
        max_attempts=1,
        deadline=10.0,
        retry_initial=0.01,
    )


async def sent_then_unknown_to_replica(
    keeper: Keeper,
    escrows: Escrows,
    client: RpcClient,
    ids: list[str],
    replica: RpcProxy,
    primary: RpcProxy,
) -> Attempt:
    """The refund sent (automine: mined at once) and buried two blocks deep, then unknown to
    the replica, which the keeper asks first."""
    await keeper.tick(await head(client), escrows.jobs(ids), [])
    [first] = keeper_books.all_attempts(keeper.store)
    escrows.control.mine(2)
    primary.rules.on("eth_blockNumber", http_error=1)  # one failure ranks it behind the replica
    with pytest.raises(RpcError):
        await client.request_at("primary", "eth_blockNumber")
    replica.rules.on("eth_getTransactionReceipt", null_result=1_000)
    replica.rules.on("eth_getTransactionByHash", null_result=1_000)
    return first


async def test_a_replica_that_lacks_a_mined_send_does_not_make_it_dropped(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
) -> None:
    """The nonce is spent and the endpoint asked knows neither the receipt nor the
    transaction: before ending the send ``dropped`` every endpoint is asked, and the one
    that holds the receipt confirms it."""
    ids = escrows.expired_jobs(1)
    async with (
        RpcProxy(escrows.url) as replica,
        RpcProxy(escrows.url) as primary,
        replica_first(replica.url, primary.url) as client,
    ):
        keeper = make_keeper(client=client, multicall=None)
        first = await sent_then_unknown_to_replica(keeper, escrows, client, ids, replica, primary)
        await keeper.tick(await head(rpc), escrows.jobs(ids), [])
        [attempt] = keeper_books.all_attempts(keeper.store)
        [intent] = keeper_books.all_intents(keeper.store)
        assert attempt.status != "dropped", attempt
        assert (intent.outcome, intent.tx_hash) == ("confirmed", first.tx_hash), intent
        assert primary.requests_for("eth_getTransactionReceipt"), "the primary was never asked"
    assert sent_nonces(escrows) == 1


async def test_a_spent_nonce_with_an_endpoint_silent_is_left_undecided(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
) -> None:
    """The replica knows nothing of the send and the primary does not answer: the send is
    neither dropped nor resent nor replaced, and the next tick with both answering
    confirms it."""
    ids = escrows.expired_jobs(1)
    async with (
        RpcProxy(escrows.url) as replica,
        RpcProxy(escrows.url) as primary,
        replica_first(replica.url, primary.url) as client,
    ):
        keeper = make_keeper(client=client, multicall=None)
        first = await sent_then_unknown_to_replica(keeper, escrows, client, ids, replica, primary)
        primary.rules.on("eth_getTransactionReceipt", http_error=1_000)
        await keeper.tick(await head(rpc), escrows.jobs(ids), [])
        [attempt] = keeper_books.all_attempts(keeper.store)
        [intent] = keeper_books.all_intents(keeper.store)
        assert (attempt.tx_hash, attempt.status) == (first.tx_hash, "sent"), attempt
        assert intent.status == "inflight", intent
        replica.rules.clear()
        primary.rules.clear()
        await keeper.tick(await head(rpc), escrows.jobs(ids), [])
        [intent] = keeper_books.all_intents(keeper.store)
        assert (intent.outcome, intent.tx_hash) == ("confirmed", first.tx_hash), intent
    assert sent_nonces(escrows) == 1
