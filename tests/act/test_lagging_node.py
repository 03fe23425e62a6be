"""A lagging endpoint never makes the keeper act twice on one subject.

The fault test's failure, taken apart: an endpoint three blocks behind answers
``latest`` with an old state and an old transaction count. The keeper must not
decide on an older head than one it already ticked on, and a replacement whose
calls fail on such a state must not end the intents the first transaction may
still carry out.
"""

from __future__ import annotations

from pathlib import Path

from keeper_harness import KEEPER_KEYS, Escrows, MakeKeeper, head, make_rpc, nonce_of, run
from support import keeper_books
from support.rpc_proxy import RpcProxy

from keeper.domain.model import JobStatus
from keeper.rpc.client import RpcClient


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
