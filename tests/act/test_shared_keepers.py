"""Two keepers with their own signers on ONE database, on a real anvil: each action once.

The keepers are the production ``Keeper`` with claims (as the daemon builds
it); "dying" is simply never ticking that keeper again, which is all a
SIGKILL leaves behind in the shared database.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from keeper_harness import KEEPER_KEYS, Escrows, MakeKeeper, address_of, nonce_of, run
from support import keeper_books

from keeper.obs.metrics import Metrics
from keeper.rpc.client import RpcClient

# long enough that a loaded machine gets from one keeper's claim to the other's look before
# it lapses (the first test needs the claim still live then)
CLAIM = 2.5


async def test_due_refunds_are_split_without_a_second_transaction(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, tmp_path: Path
) -> None:
    """Both tick on every head; every refund goes out once, from whichever claimed it."""
    ids = escrows.expired_jobs(6)
    db = tmp_path / "shared.db"
    a = make_keeper(0, db=db, claim_seconds=30.0)
    b = make_keeper(1, db=db, claim_seconds=30.0)
    escrows.control.set_automine(False)
    try:
        await run(a, escrows, rpc, ids)  # a claims and sends all six (pending)
        await run(b, escrows, rpc, ids)  # b sees them claimed and in flight: sends nothing
    finally:
        escrows.control.set_automine(True)
    for _ in range(3):
        escrows.control.mine()
        await run(a, escrows, rpc, ids)
        await run(b, escrows, rpc, ids)
    books = keeper_books.all_attempts(a.store)
    assert {x.signer for x in books} == {address_of(KEEPER_KEYS[0])}
    assert nonce_of(escrows, KEEPER_KEYS[1]) == 0  # b signed nothing
    assert keeper_books.outcome_counts(a.store) == {"confirmed": 6}


async def test_a_dead_keepers_unsent_transaction_is_rebroadcast_not_resigned(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, tmp_path: Path
) -> None:
    """A dies after its send and the node forgets it; B adopts and sends A's stored bytes."""
    ids = escrows.expired_jobs(1)
    db = tmp_path / "shared.db"
    a = make_keeper(0, db=db, claim_seconds=CLAIM)
    escrows.control.set_automine(False)
    try:
        await run(a, escrows, rpc, ids)
        [sent] = keeper_books.all_attempts(a.store)
        escrows.control.drop_transaction(sent.tx_hash)  # and a is never ticked again
        b = make_keeper(1, db=db, claim_seconds=30.0)
        await run(b, escrows, rpc, ids)  # a's claim is still live: b leaves it alone
        assert escrows.control.call("eth_getTransactionByHash", sent.tx_hash) is None
        await asyncio.sleep(CLAIM + 0.2)
        await run(b, escrows, rpc, ids)
        assert escrows.control.call("eth_getTransactionByHash", sent.tx_hash) is not None
    finally:
        escrows.control.set_automine(True)
    escrows.control.mine()
    for _ in range(2):
        await run(b, escrows, rpc, ids)
        escrows.control.mine()
    [again] = keeper_books.all_attempts(b.store)
    assert (again.tx_hash, again.status, again.signer) == (sent.tx_hash, "confirmed", sent.signer)
    assert nonce_of(escrows, KEEPER_KEYS[1]) == 0  # b never signed anything
    [intent] = keeper_books.all_intents(b.store)
    assert (intent.status, intent.outcome) == ("done", "confirmed")
    assert intent.claimed_by == address_of(KEEPER_KEYS[1])


async def test_a_stalled_keeper_sends_nothing_after_its_claim_was_taken(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, tmp_path: Path
) -> None:
    """A decided but stalled past its claim before sending; B took the intent and sent it."""
    ids = escrows.expired_jobs(1)
    db = tmp_path / "shared.db"
    a = make_keeper(0, db=db, claim_seconds=CLAIM, metrics=Metrics())
    b = make_keeper(1, db=db, claim_seconds=30.0)
    head = await rpc.get_block("latest")
    assert head is not None
    jobs = escrows.jobs(ids)
    # a's tick stalls right after the gate (its decision and claim are written)
    gate = a._gate

    async def stall(*args: object, **kwargs: object) -> object:
        survivors = await gate(*args, **kwargs)  # type: ignore[arg-type]
        await asyncio.sleep(CLAIM + 0.2)
        # b finds the claim expired and sends the refund; pending, so a's estimate passes
        await b.tick(head, jobs, [])
        return survivors

    a._gate = stall  # type: ignore[method-assign]
    escrows.control.set_automine(False)
    try:
        await a.tick(head, jobs, [])
    finally:
        escrows.control.set_automine(True)
    assert a.metrics is not None
    assert a.metrics.registry.get_sample_value("keeper_claims_lost_total") == 1.0
    escrows.control.mine()
    await run(b, escrows, rpc, ids, ticks=2)
    assert nonce_of(escrows, KEEPER_KEYS[0]) == 0  # a's signed bytes never left it
    assert nonce_of(escrows, KEEPER_KEYS[1]) == 1
    [only] = keeper_books.all_attempts(b.store)
    assert only.signer == address_of(KEEPER_KEYS[1]) and only.status == "confirmed"
