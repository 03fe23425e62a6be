"""The settlement of one nonce, decided from a table of stored attempts and chain facts.

No node: each row is what the books held at a nonce and what the chain said
about it, and the one decision (with what it writes) that must come out.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from keeper.domain.fees import CapHit, FeeDecision, above_signed
from keeper.domain.settlement import (
    Cancel,
    Confirm,
    Decision,
    Dropped,
    Landed,
    Mined,
    NonceFacts,
    Rebroadcast,
    Receipt,
    Replace,
    Resent,
    Rules,
    Wait,
    after_simulation,
    confirmation_lost,
    settle_nonce,
    spent_by_another,
    stuck,
)
from keeper.store.intents import Attempt, Intent

RULES = Rules(confirmations=2, bump_after_blocks=3)
NONCE = 7
HEAD = 100
BLOCK_A = "0x" + "aa" * 32
BLOCK_B = "0x" + "bb" * 32


def attempt(
    id: int,
    status: str = "sent",
    kind: str = "call",
    *,
    sent_block: int | None = 95,
    receipt_hash: str | None = None,
) -> Attempt:
    return Attempt(
        id=id,
        signer="0x" + "34" * 20,
        nonce=NONCE,
        kind=kind,
        to_address="0x" + "12" * 20,
        data=b"",
        max_fee=10,
        tip=1,
        gas_limit=21_000,
        raw_tx=b"\x02",
        tx_hash=f"0x{id:064x}",
        status=status,
        sent_block=sent_block,
        receipt_block=None if receipt_hash is None else 98,
        receipt_hash=receipt_hash,
        receipt_status=None if receipt_hash is None else 1,
    )


def intent(id: int, status: str = "inflight", outcome: str | None = None) -> Intent:
    return Intent(
        id=id,
        contract="0x" + "12" * 20,
        subject=str(id),
        action="claimRefund",
        protocol="erc8183",
        status=status,
        outcome=outcome,
        detail=None,
        due_at=1000,
        decided_block=90,
        decided_hash=BLOCK_A,
        tx_hash=None,
        receipt_block=None,
        attempts=1,
    )


def facts(**changes: Any) -> NonceFacts[Intent]:
    """A nonce at the chain's next one (mined == nonce), the newest attempt known."""
    base: NonceFacts[Intent] = NonceFacts(NONCE, HEAD, NONCE, newest_known=True)
    return dataclasses.replace(base, **changes)


def receipt(
    attempt_id: int, block: int = 98, status: int = 1, moved: frozenset[int] = frozenset()
) -> Receipt:
    return Receipt(attempt_id, Landed(block, BLOCK_A, status), moved)


AT_98 = Landed(98, BLOCK_A, 1)

# (attempts at the nonce, facts, the decision)
ROWS: dict[str, tuple[list[Attempt], NonceFacts[Intent], Decision]] = {
    "confirm: a call at depth confirms its intent": (
        [attempt(1)],
        facts(receipt=receipt(1), linked=(intent(10),)),
        Confirm(1, attempt(1).tx_hash, AT_98, confirmed=(10,)),
    ),
    "confirm: the replacement mined, the original is marked replaced": (
        [attempt(1), attempt(2)],
        facts(receipt=receipt(2), linked=(intent(10),)),
        Confirm(2, attempt(2).tx_hash, AT_98, replaced=(1,), confirmed=(10,)),
    ),
    "confirm: the original mined after all, a refused replacement is not 'replaced'": (
        [attempt(1), attempt(2, "failed")],
        facts(receipt=receipt(1), linked=(intent(10),)),
        Confirm(1, attempt(1).tx_hash, AT_98, confirmed=(10,)),
    ),
    "confirm: a batch where one subject did not move preempts it": (
        [attempt(1, kind="batch")],
        facts(
            receipt=receipt(1, moved=frozenset({10, 12})),
            linked=(intent(10), intent(11), intent(12)),
        ),
        Confirm(1, attempt(1).tx_hash, AT_98, confirmed=(10, 12), preempted=(11,)),
    ),
    "confirm: a reverted receipt ends what it carried as reverted": (
        [attempt(1)],
        facts(receipt=receipt(1, status=0), linked=(intent(10), intent(11, "done", "confirmed"))),
        Confirm(1, attempt(1).tx_hash, Landed(98, BLOCK_A, 0), reverted=(10,)),
    ),
    "confirm: a cancel confirms no intent": (
        [attempt(1), attempt(2, kind="cancel")],
        facts(receipt=receipt(2)),
        Confirm(2, attempt(2).tx_hash, AT_98, replaced=(1,), cancel=True),
    ),
    "confirm: the receipt is the authority over intents a replacement dropped": (
        # intent 11 was decided preempted by the books, 12 is confirmed by another
        # transaction, 13 was refused by the contract: the receipt confirms only 10 and 11
        [attempt(1, kind="batch")],
        facts(
            receipt=receipt(1, moved=frozenset({10, 11, 12, 13})),
            linked=(
                intent(10),
                intent(11, "done", "preempted"),
                intent(12, "done", "confirmed"),
                intent(13, "done", "not_permitted"),
            ),
        ),
        Confirm(1, attempt(1).tx_hash, AT_98, confirmed=(10, 11)),
    ),
    "mined: below the confirmation depth": (
        [attempt(1), attempt(2)],
        facts(receipt=receipt(2, block=HEAD)),
        Mined(2, Landed(HEAD, BLOCK_A, 1), replaced=(1,)),
    ),
    "mined: already stored with this receipt, nothing to rewrite": (
        [attempt(1, "mined", receipt_hash=BLOCK_A)],
        facts(receipt=receipt(1, block=HEAD)),
        Mined(1, Landed(HEAD, BLOCK_A, 1), rewrite=False),
    ),
    "mined: the receipt's block hash changed (moved by a reorg), rewritten": (
        [attempt(1, "mined", receipt_hash=BLOCK_B)],
        facts(receipt=receipt(1, block=HEAD)),
        Mined(1, Landed(HEAD, BLOCK_A, 1), rewrite=True),
    ),
    "mined: a receipt above a lagging head is not deep at all": (
        [attempt(1)],
        facts(receipt=receipt(1, block=HEAD + 3), linked=(intent(10),)),
        Mined(1, Landed(HEAD + 3, BLOCK_A, 1)),
    ),
    "dropped: the nonce spent at the head and at latest, no hash of ours known": (
        [attempt(1), attempt(2, "failed"), attempt(3)],
        facts(mined=NONCE + 1, latest_count=NONCE + 1, any_live_known=False),
        Dropped((1, 3)),
    ),
    "not dropped: the node still knows one of ours (being moved to another block)": (
        [attempt(1)],
        facts(mined=NONCE + 1, latest_count=NONCE + 1, any_live_known=True),
        Wait("pending"),
    ),
    "not dropped: the nonce is spent, but an endpoint did not say whether it knows ours": (
        [attempt(1)],
        facts(mined=NONCE + 1, latest_count=NONCE + 1, any_live_known=None, newest_known=False),
        Wait("the nonce is spent and not every endpoint said whether it knows ours"),
    ),
    "not dropped: a lagging latest count says the nonce is not spent yet": (
        [attempt(1)],
        facts(mined=NONCE + 1, latest_count=NONCE),
        Wait("pending"),
    ),
    "rebroadcast: forgotten by the node, every call still passes": (
        [attempt(1)],
        facts(newest_known=False, carried=(10, 11), passing=(True, True)),
        Rebroadcast(1),
    ),
    "rebroadcast: a forgotten cancel needs no simulation": (
        [attempt(1), attempt(2, kind="cancel")],
        facts(newest_known=False),
        Rebroadcast(2),
    ),
    "replace: forgotten, one call no longer passes: the others at new fees": (
        [attempt(1)],
        facts(newest_known=False, carried=(10, 11, 12), passing=(True, False, True)),
        Replace(1, keep=(10, 12)),
    ),
    "cancel: forgotten and none of its calls passes": (
        [attempt(1)],
        facts(newest_known=False, carried=(10,), passing=(False,)),
        Cancel(1),
    ),
    "cancel: forgotten and it carries nothing in flight any more": (
        [attempt(1)],
        facts(newest_known=False, carried=(), passing=()),
        Cancel(1),
    ),
    "resent: the node holds what we stored as signed (send response lost)": (
        [attempt(1, "signed", sent_block=None)],
        facts(),
        Resent(1),
    ),
    "resent: a reorg put our mined transaction back in the pool": (
        [attempt(1, "mined", receipt_hash=BLOCK_A)],
        facts(),
        Resent(1),
    ),
    "replace: stuck at the chain's next nonce for bump_after blocks": (
        [attempt(1, sent_block=HEAD - 3)],
        facts(),
        Replace(1),
    ),
    "replace: the newest live attempt is the one replaced": (
        [attempt(1, "replaced"), attempt(2, sent_block=HEAD - 5), attempt(3, "failed")],
        facts(),
        Replace(2),
    ),
    "cancel: a stuck cancel is replaced by a cancel": (
        [attempt(1, kind="cancel", sent_block=HEAD - 3)],
        facts(),
        Cancel(1),
    ),
    "wait: pending one block short of a bump": (
        [attempt(1, sent_block=HEAD - 2)],
        facts(),
        Wait("pending"),
    ),
    "wait: a later nonce is never bumped, it waits for the one before": (
        [attempt(1, sent_block=HEAD - 50)],
        facts(mined=NONCE - 1),
        Wait("pending"),
    ),
    "wait: no sent block recorded counts from this head": (
        [attempt(1, sent_block=None)],
        facts(),
        Wait("pending"),
    ),
    "wait: nothing live and no receipt": (
        [attempt(1, "replaced"), attempt(2, "failed")],
        facts(newest_known=None),
        Wait("no live attempt"),
    ),
}


@pytest.mark.parametrize(("attempts", "known", "expected"), ROWS.values(), ids=ROWS.keys())
def test_settle_nonce(
    attempts: list[Attempt], known: NonceFacts[Intent], expected: Decision
) -> None:
    assert settle_nonce(attempts, known, RULES) == expected


def test_every_decision_kind_has_a_row() -> None:
    """The table covers each kind a nonce can be settled with."""
    kinds = {type(d) for _, _, d in ROWS.values()}
    assert kinds == {Confirm, Mined, Dropped, Rebroadcast, Replace, Cancel, Resent, Wait}


def test_a_deeper_confirmation_rule_keeps_it_mined() -> None:
    """Depth is counted inclusively: the receipt block is depth 1."""
    row = facts(receipt=receipt(1, block=HEAD - 1), linked=(intent(10),))
    assert isinstance(settle_nonce([attempt(1)], row, RULES), Confirm)
    deeper = Rules(confirmations=3, bump_after_blocks=3)
    assert isinstance(settle_nonce([attempt(1)], row, deeper), Mined)


class TestPredicates:
    def test_spent_needs_both_counts_and_no_known_hash(self) -> None:
        spent = facts(mined=NONCE + 1, latest_count=NONCE + 1, any_live_known=False)
        assert spent_by_another(spent)
        assert not spent_by_another(dataclasses.replace(spent, mined=NONCE))
        assert not spent_by_another(dataclasses.replace(spent, latest_count=NONCE))
        assert not spent_by_another(dataclasses.replace(spent, any_live_known=None))

    def test_stuck_only_at_the_next_nonce_after_bump_after_blocks(self) -> None:
        assert stuck(5, 5, 100, 97, 3)
        assert not stuck(5, 5, 100, 98, 3)
        assert not stuck(6, 5, 100, 0, 3)
        assert not stuck(5, 5, 100, None, 3)

    def test_after_simulation(self) -> None:
        assert after_simulation(1, [10, 11], [False, True]) == Replace(1, keep=(11,))
        assert after_simulation(1, [10, 11], [False, False]) == Cancel(1)

    @pytest.mark.parametrize(
        ("canonical", "now", "lost"),
        [
            (BLOCK_A, None, False),  # the block at that height is still ours
            (BLOCK_B, Landed(98, BLOCK_A, 1), False),  # an old header from a lagging node
            (BLOCK_B, Landed(99, BLOCK_B, 1), True),  # re-mined elsewhere
            (BLOCK_B, None, True),  # gone
            (None, None, True),  # the height itself is gone
        ],
    )
    def test_confirmation_lost(self, canonical: str | None, now: Landed | None, lost: bool) -> None:
        assert confirmation_lost(BLOCK_A, canonical, now) is lost


class TestReplacementFees:
    """A new signature at a nonce bids over every fee ever signed there."""

    def test_a_fresh_nonce_takes_the_market(self) -> None:
        market = FeeDecision(max_fee=100, tip=10)
        assert above_signed([], 10**6, market) == market

    def test_bumps_over_the_highest_of_each_field(self) -> None:
        # max fee from one attempt, tip from another: both rise >= 12.5% over the highest
        signed = [FeeDecision(max_fee=200, tip=5), FeeDecision(max_fee=120, tip=40)]
        assert above_signed(signed, 10**6, FeeDecision(100, 10)) == FeeDecision(225, 45)

    def test_the_cap_holds(self) -> None:
        signed = [FeeDecision(max_fee=200, tip=5)]
        assert above_signed(signed, 224, FeeDecision(100, 10)) == CapHit(needed=225, cap=224)
