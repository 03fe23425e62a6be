"""TaskMarket, the devnet diamond in the revision-21 shape: routing and loupe, the forwarder
rule, creation order and ids, deadlines, refund guards, TaskUpdated and Bounty contests."""

from __future__ import annotations

from typing import Any

import eth_abi
from escrow_harness import (
    CLIENT,
    DEPLOYER,
    EVALUATOR,
    PROVIDER,
    RESOLVER,
    STRANGER,
    USDC,
    Chain,
    address_of,
)
from eth_utils import keccak
from web3.contract.contract import ContractFunction

from keeper.domain.dialects_taskmarket import TASKMARKET
from keeper.domain.taskmodes import BOUNTY, CLAIM

REWARD = 100 * USDC
EVAL_WINDOW, APPEAL_WINDOW = 600, 900
OPEN, CLAIMED, _, PENDING_APPROVAL, ACCEPTED, EXPIRED, CANCELLED, REVIEW, APPEALING = range(9)
ZERO = "0x" + "00" * 20


def relayed(c: Chain, fn: ContractFunction) -> ContractFunction:
    """The same call through the trusted forwarder (how every party reaches the diamond)."""
    data = bytes.fromhex(fn._encode_transaction_data()[2:])
    return c.forwarder.functions.forward(c.dm.address, data)


def create(
    c: Chain, *, duration: int = 1000, mode: str = CLAIM, evaluator: bool = False, stake: int = 0
) -> tuple[bytes, Any]:
    c.fund_account(CLIENT, REWARD + stake, c.dm.address)
    terms = (
        (address_of(EVALUATOR), stake, 500, EVAL_WINDOW, APPEAL_WINDOW, address_of(RESOLVER))
        if evaluator
        else (ZERO, 0, 0, 0, 0, ZERO)
    )
    fn = c.dm.functions.createTask(
        (REWARD, duration, bytes.fromhex(mode[2:]), 0, 0, b"\0" * 4),
        (True, 250),
        ([], b""),
        (b"\0" * 32, "", []),
        terms,
    )
    receipt = c.send(CLIENT, relayed(c, fn))
    created = [e for e in c.events(receipt, c.dm) if e.name == "TaskCreated"]
    return bytes(created[0].args["taskId"]), receipt


def status(c: Chain, task: bytes) -> int:
    return int(c.dm.functions.getTask(task).call()[3])


def submitted(c: Chain, stake: int = 0) -> tuple[bytes, int]:
    """Claimed and submitted with an evaluator; returns (task, submit block time)."""
    task, _ = create(c, evaluator=True, stake=stake)
    c.send(PROVIDER, relayed(c, c.dm.functions.claimTask(task, 0)))
    r = c.send(PROVIDER, relayed(c, c.dm.functions.submitWork(task, b"\x11" * 32)))
    return task, c.block_time(r)


class TestDiamond:
    def test_loupe_routes_rev21_selectors_only(self, c: Chain) -> None:
        """facetAddress answers the revision-21 refund, not the pre-7 one; version is 21."""
        route = c.dm.functions.facetAddress
        assert route(keccak(text="refundExpired(bytes32,uint256)")[:4]).call() != ZERO
        assert route(keccak(text="refundExpired(bytes32)")[:4]).call() == ZERO
        assert c.dm.functions.diamondVersion().call() == 21

    def test_unrouted_selector_answers_function_not_found(self, c: Chain) -> None:
        """The pre-7 refund selector reverts Error("Diamond: function not found")."""
        data = keccak(text="refundExpired(bytes32)")[:4] + b"\x01" * 32
        trace = c.control.call(
            "debug_traceCall", {"to": c.dm.address, "data": "0x" + data.hex()}, "latest",
            {"tracer": "callTracer"},
        )  # fmt: skip
        out = bytes.fromhex(str(trace["output"])[2:])
        assert out[:4] == keccak(text="Error(string)")[:4]
        assert eth_abi.decode(["string"], out[4:]) == ("Diamond: function not found",)

    def test_diamond_cut_reroutes_for_its_owner_only(self, c: Chain) -> None:
        """EIP-2535's diamondCut: Remove unroutes, Add routes back, each emitting DiamondCut;
        the owner only, no initializer, and every rule of the three actions enforced."""
        refund = keccak(text="refundExpired(bytes32,uint256)")[:4]
        old = keccak(text="refundExpired(bytes32)")[:4]
        route = c.dm.functions.facetAddress
        facet = route(refund).call()
        cut = c.dm.functions.diamondCut
        c.expect_revert(STRANGER, cut([(ZERO, 2, [refund])], ZERO, b""), "NotOwner()")
        c.expect_revert(DEPLOYER, cut([(ZERO, 2, [refund])], facet, b""), "InvalidCut()")
        c.expect_revert(DEPLOYER, cut([(facet, 2, [refund])], ZERO, b""), "InvalidCut()")
        c.expect_revert(DEPLOYER, cut([(facet, 0, [refund])], ZERO, b""), "SelectorTaken(bytes4)")
        c.expect_revert(DEPLOYER, cut([(facet, 1, [old])], ZERO, b""),
                        "SelectorNotRouted(bytes4)")  # fmt: skip
        receipt = c.send(DEPLOYER, cut([(ZERO, 2, [refund])], ZERO, b""))
        assert route(refund).call() == ZERO
        (event,) = c.events(receipt, c.dm)
        assert event.name == "DiamondCut"
        assert list(event.args["_diamondCut"]) == [(ZERO, 2, (refund,))]
        c.send(DEPLOYER, cut([(facet, 0, [refund])], ZERO, b""))
        assert route(refund).call() == facet

    def test_keeper_errors_match_the_table(self, c: Chain) -> None:
        """Every error the devnet diamond declares that the keeper table names has its selector."""
        declared = {
            f"{e['name']}({','.join(i['type'] for i in e['inputs'])})"
            for e in c.dm.abi
            if e["type"] == "error"
        }
        upstream = {r.signature for r in TASKMARKET.errors if "earlier devnet" not in r.why}
        # transfer and reentrancy failures of the deployed code: ours reverts TransferFailed
        internal = {"ReentrancyGuardReentrantCall()", "RefundFailed()",
                    "ForfeitTransferFailed()", "StakeReturnFailed()"}  # fmt: skip
        assert upstream - declared - internal == set()


class TestCreation:
    def test_id_order_and_fields(self, c: Chain) -> None:
        """The contract picks the id; EvaluatorAssigned precedes TaskCreated; getTask has 14."""
        nonce = c.dm.functions.requesterNonce(address_of(CLIENT)).call()
        task, receipt = create(c, evaluator=True)
        expected = keccak(
            eth_abi.encode(
                ["uint256", "address", "address", "uint256"],
                [31337, c.dm.address, address_of(CLIENT), nonce],
            )
        )
        assert task == expected
        assert c.names(receipt, c.dm) == ["EvaluatorAssigned", "TaskCreated"]
        (created,) = [e for e in c.events(receipt, c.dm) if e.name == "TaskCreated"]
        assert (created.args["stakeRequired"], created.args["stakeBps"]) == (True, 250)
        fields = c.dm.functions.getTask(task).call()
        assert len(fields) == 14
        assert fields[1].lower() == address_of(CLIENT).lower() and fields[5] == REWARD
        assert (fields[12], fields[13]) == (True, 250)

    def test_direct_calls_need_the_forwarder(self, c: Chain) -> None:
        """A requester calling the diamond directly gets NotTrustedForwarder."""
        c.fund_account(CLIENT, REWARD, c.dm.address)
        fn = c.dm.functions.createTask(
            (REWARD, 100, bytes.fromhex(CLAIM[2:]), 0, 0, b"\0" * 4),
            (False, 0), ([], b""), (b"\0" * 32, "", []), (ZERO, 0, 0, 0, 0, ZERO),
        )  # fmt: skip
        c.expect_revert(CLIENT, fn, "NotTrustedForwarder()")

    def test_evaluator_terms_are_refused_with_revision_17s_errors(self, c: Chain) -> None:
        """The requester as evaluator or as dispute resolver, and terms without an
        evaluator, each refused with the error that names it."""
        c.fund_account(CLIENT, 3 * REWARD, c.dm.address)
        client, evaluator = address_of(CLIENT), address_of(EVALUATOR)
        for terms, error in (
            ((client, 0, 500, EVAL_WINDOW, APPEAL_WINDOW, ZERO), "EvaluatorCannotBeRequester()"),
            ((evaluator, 0, 500, EVAL_WINDOW, APPEAL_WINDOW, client),
             "DisputeResolverCannotBeRequester()"),
            ((ZERO, 0, 500, 0, 0, ZERO), "InvalidEvaluator()"),
        ):  # fmt: skip
            fn = c.dm.functions.createTask(
                (REWARD, 100, bytes.fromhex(CLAIM[2:]), 0, 0, b"\0" * 4),
                (False, 0), ([], b""), (b"\0" * 32, "", []), terms,
            )  # fmt: skip
            c.expect_revert(CLIENT, relayed(c, fn), error)


class TestEvaluatorTimeout:
    def test_requester_only_through_forwarder(self, c: Chain) -> None:
        """A keeper (direct) gets NotTrustedForwarder, a stranger relayed NotRequester; the
        requester waits for the deadline, then times the evaluator out."""
        task, at = submitted(c)
        fn = c.dm.functions.evaluatorTimeout(task)
        deadline = at + EVAL_WINDOW
        c.expect_revert(STRANGER, fn, "NotTrustedForwarder()", at=deadline + 1)
        c.expect_revert(STRANGER, relayed(c, fn), "NotRequester()")
        r = c.send(CLIENT, relayed(c, fn))
        assert c.names(r, c.dm) == ["EvaluatorTimedOut"]
        assert status(c, task) == PENDING_APPROVAL

    def test_requester_waits_for_the_window(self, c: Chain) -> None:
        task, at = submitted(c)
        fn = relayed(c, c.dm.functions.evaluatorTimeout(task))
        c.expect_revert(CLIENT, fn, "EvaluationWindowNotExpired()", at=at + EVAL_WINDOW)


class TestRefund:
    def test_boundary_and_no_second_refund(self, c: Chain) -> None:
        """TaskNotYetExpired at expiryTime; refunded one second later; TaskAlreadyRefunded."""
        task, _ = create(c, duration=500)
        expiry = c.dm.functions.getTask(task).call()[6]
        fn = c.dm.functions.refundExpired(task, 0)
        c.expect_revert(STRANGER, fn, "TaskNotYetExpired()", at=expiry)
        before = c.balance(address_of(CLIENT))
        r = c.send(STRANGER, fn, at=expiry + 1)
        assert c.names(r, c.dm) == ["TaskExpired"]
        assert c.balance(address_of(CLIENT)) == before + REWARD
        c.expect_revert(STRANGER, fn, "TaskAlreadyRefunded()")

    def test_review_refund_forfeits_evaluator_stake_order(self, c: Chain) -> None:
        """Past expiry a Review task refunds and forfeits the evaluator's stake: first
        EvaluatorTimedOut, then TaskExpired."""
        task, at = submitted(c, stake=7 * USDC)
        expiry = c.dm.functions.getTask(task).call()[6]
        assert expiry >= at + EVAL_WINDOW  # submitWork raised it to the evaluation deadline
        r = c.send(STRANGER, c.dm.functions.refundExpired(task, 0), at=expiry + 1)
        assert c.names(r, c.dm) == ["EvaluatorTimedOut", "TaskExpired"]
        timed_out = c.events(r, c.dm)[0]
        assert timed_out.args["forfeitedStake"] == 7 * USDC
        assert status(c, task) == EXPIRED

    def test_appealing_is_not_refused_by_the_contract(self, c: Chain) -> None:
        """The hazard the keeper must avoid: refundExpired succeeds over an Appealing task."""
        task, _ = submitted(c)
        award = [(address_of(PROVIDER), REWARD // 2, 1)]
        ev = c.dm.functions.evaluate(task, 0, 90, 80, b"\x22" * 32, award)
        c.send(EVALUATOR, relayed(c, ev))
        assert status(c, task) == APPEALING
        expiry = c.dm.functions.getTask(task).call()[6]
        c.send(STRANGER, c.dm.functions.refundExpired(task, 0), at=expiry + 1)
        assert status(c, task) == EXPIRED

    def test_a_zero_award_names_no_worker(self, c: Chain) -> None:
        """Revision 21: a contest's worker is the first paid award, not the first award;
        a zero-only final verdict clears the one an earlier verdict chose."""
        task, _ = create(c, mode=BOUNTY, evaluator=True)
        for key, work in ((STRANGER, b"\x23"), (PROVIDER, b"\x24")):
            c.send(key, relayed(c, c.dm.functions.submitWork(task, work * 32)))
        awards = [(address_of(STRANGER), 0, 1), (address_of(PROVIDER), REWARD // 2, 2)]
        c.send(
            EVALUATOR, relayed(c, c.dm.functions.evaluate(task, 0, 90, 80, b"\x25" * 32, awards))
        )
        assert c.dm.functions.getTask(task).call()[2] == address_of(PROVIDER)
        c.expect_revert(STRANGER, relayed(c, c.dm.functions.appeal(task)), "NotWorker()")
        c.send(PROVIDER, relayed(c, c.dm.functions.appeal(task)))
        zero_only = c.dm.functions.resolveDispute(task, 0, [(address_of(PROVIDER), 0, 1)])
        c.send(RESOLVER, relayed(c, zero_only))
        assert (status(c, task), c.dm.functions.getTask(task).call()[2]) == (ACCEPTED, ZERO)

    def test_task_updated_moves_the_deadline(self, c: Chain) -> None:
        """updateTask emits TaskUpdated; the refund follows the new expiry."""
        task, _ = create(c, duration=500)
        old = c.dm.functions.getTask(task).call()[6]
        upd = c.dm.functions.updateTask(task, 0, old + 1000, 0, 0)
        r = c.send(CLIENT, relayed(c, upd))
        (ev,) = c.events(r, c.dm)
        assert (ev.name, ev.args["newExpiryTime"], ev.args["newReward"]) == (
            "TaskUpdated", old + 1000, REWARD,
        )  # fmt: skip
        c.expect_revert(CLIENT, relayed(c, c.dm.functions.updateTask(task, REWARD, 0, 0, 0)),
                        "NoRewardChange()")  # fmt: skip
        fn = c.dm.functions.refundExpired(task, 0)
        c.expect_revert(STRANGER, fn, "TaskNotYetExpired()", at=old + 1)
        c.send(STRANGER, fn, at=old + 1001)

    def test_rejecting_a_worker_who_never_submitted_frees_nothing(self, c: Chain) -> None:
        """Revision 13's rule: the live submission still blocks the refund after a
        stranger is rejected; rejecting its worker frees it."""
        task, _ = create(c, duration=300, mode=BOUNTY)
        r = c.send(PROVIDER, relayed(c, c.dm.functions.submitWork(task, b"\x34" * 32)))
        expiry = c.dm.functions.getTask(task).call()[6]
        stranger = c.dm.functions.rejectSubmission(task, address_of(STRANGER))
        c.send(CLIENT, relayed(c, stranger))
        fn = c.dm.functions.refundExpired(task, 0)
        c.expect_revert(STRANGER, fn, "SubmissionsExist()", at=max(expiry, c.block_time(r)) + 1)
        c.send(CLIENT, relayed(c, c.dm.functions.rejectSubmission(task, address_of(PROVIDER))))
        assert c.names(c.send(STRANGER, fn), c.dm)[0] == "TaskExpired"

    def test_bounty_with_submissions_is_refused_until_rejected(self, c: Chain) -> None:
        """SubmissionsExist while a submission is active; after rejecting it, refunded."""
        task, _ = create(c, duration=300, mode=BOUNTY)
        r = c.send(PROVIDER, relayed(c, c.dm.functions.submitWork(task, b"\x33" * 32)))
        assert status(c, task) == OPEN  # a contest stays Open
        expiry = c.dm.functions.getTask(task).call()[6]
        fn = c.dm.functions.refundExpired(task, 0)
        c.expect_revert(STRANGER, fn, "SubmissionsExist()", at=max(expiry, c.block_time(r)) + 1)
        rej = c.dm.functions.rejectSubmission(task, address_of(PROVIDER))
        c.send(CLIENT, relayed(c, rej))
        r = c.send(STRANGER, fn)
        assert c.names(r, c.dm) == ["TaskExpired", "RequesterReputation"]
