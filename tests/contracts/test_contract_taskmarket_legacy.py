"""LegacyTaskMarket (the pre-revision-7 task market): every transition, its reverts, and exact
deadline comparisons of finalizeVerdict, evaluatorTimeout and refundExpired."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from escrow_harness import (
    CLIENT,
    EVALUATOR,
    PROVIDER,
    RESOLVER,
    STRANGER,
    USDC,
    WORKER2,
    Chain,
    address_of,
)
from eth_utils import keccak
from web3.contract import Contract

from keeper.devnet.deploy import TASK_PLATFORM_FEE_BPS

(
    OPEN,
    CLAIMED,
    WORKER_SELECTED,
    PENDING_APPROVAL,
    ACCEPTED,
    EXPIRED,
    CANCELLED,
    REVIEW,
    APPEALING,
    DISPUTED,
) = range(10)
APPROVE, REJECT, PARTIAL = range(3)
REWARD = 100 * USDC
MODE = b"bnty"
EVAL_WINDOW = 600
APPEAL_WINDOW = 300
STAKE = 5 * USDC
EVAL_FEE_BPS = 200
EVAL_FEE = REWARD * EVAL_FEE_BPS // 10_000
DELIVERABLE = b"\x0d" * 32
EVIDENCE = b"\x0e" * 32


_labels = itertools.count()


def cs(key: str) -> str:
    return address_of(key)


def low(key: str) -> str:
    return address_of(key).lower()


def fee(amount: int) -> int:
    return amount * TASK_PLATFORM_FEE_BPS // 10_000


def create(
    c: Chain,
    tm: Contract | None = None,
    *,
    label: str | None = None,
    expires_in: int = 3600,
    evaluator: bool = True,
) -> tuple[bytes, int]:
    """A task from CLIENT (with evaluator config unless told); return (id, expiryTime)."""
    tm = tm or c.tm
    task = keccak(text=label or f"task-{next(_labels)}")
    expiry = c.now() + expires_in
    c.fund_account(CLIENT, REWARD, tm.address)
    c.send(CLIENT, tm.functions.createTask(task, REWARD, expiry, MODE))
    if evaluator:
        c.send(
            CLIENT,
            tm.functions.assignEvaluator(
                task, cs(EVALUATOR), STAKE, EVAL_FEE_BPS, EVAL_WINDOW, APPEAL_WINDOW, cs(RESOLVER)
            ),
        )
    return task, expiry


def submitted(
    c: Chain, tm: Contract | None = None, *, expires_in: int = 3600, evaluator: bool = True
) -> tuple[bytes, int]:
    """A task claimed by PROVIDER and submitted; return (id, submittedAt)."""
    tm = tm or c.tm
    task, _ = create(c, tm, expires_in=expires_in, evaluator=evaluator)
    c.send(PROVIDER, tm.functions.claimTask(task))
    at = c.now() + 5
    c.send(PROVIDER, tm.functions.submitWork(task, DELIVERABLE), at=at)
    return task, at


def awards(*pairs: tuple[str, int]) -> list[tuple[str, int, int]]:
    return [(cs(key), amount, rank) for rank, (key, amount) in enumerate(pairs, start=1)]


def evaluated(
    c: Chain, verdict: int, award_list: list[Any], tm: Contract | None = None
) -> tuple[bytes, int]:
    """A submitted task with a verdict issued; return (id, evaluatedAt)."""
    tm = tm or c.tm
    task, _ = submitted(c, tm)
    at = c.now() + 7
    c.send(EVALUATOR, tm.functions.evaluate(task, verdict, 80, 90, EVIDENCE, award_list), at=at)
    return task, at


def task_status(c: Chain, task: bytes, tm: Contract | None = None) -> int:
    return int((tm or c.tm).functions.getTask(task).call()[6])


def expiry_of(c: Chain, task: bytes) -> int:
    return int(c.tm.functions.getTask(task).call()[4])


class TestCreate:
    def test_create_escrows_and_emits_indexed_mode(self, c: Chain) -> None:
        """createTask pulls the reward; TaskCreated has the mode as its fourth topic."""
        task = keccak(text="created")
        expiry = c.now() + 999
        c.fund_account(CLIENT, REWARD, c.tm.address)
        receipt = c.send(CLIENT, c.tm.functions.createTask(task, REWARD, expiry, MODE))
        (log,) = [x for x in receipt["logs"] if x["address"] == c.tm.address]
        assert bytes(log["topics"][3]) == MODE + b"\x00" * 28
        (ev,) = c.events(receipt, c.tm)
        assert ev.signature == "TaskCreated(bytes32,address,uint256,bytes4,uint256)"
        assert ev.args == {
            "taskId": task,
            "requester": low(CLIENT),
            "reward": REWARD,
            "mode": MODE,
            "expiryTime": expiry,
        }
        assert c.balance(c.tm.address) == REWARD
        assert task_status(c, task) == OPEN

    def test_create_guards(self, c: Chain) -> None:
        """Zero id, reused id, zero reward and a past expiry all revert."""
        c.fund_account(CLIENT, 2 * REWARD, c.tm.address)
        fn = c.tm.functions.createTask
        later = c.now() + 500
        c.expect_revert(CLIENT, fn(b"\x00" * 32, REWARD, later, MODE), "InvalidTaskId()")
        c.expect_revert(CLIENT, fn(b"\x01" * 32, 0, later, MODE), "InvalidReward()")
        now = c.now()
        c.expect_revert(
            CLIENT, fn(b"\x01" * 32, REWARD, now + 1, MODE), "InvalidExpiry()", at=now + 1
        )
        c.send(CLIENT, fn(b"\x01" * 32, REWARD, later, MODE))
        c.expect_revert(CLIENT, fn(b"\x01" * 32, REWARD, later, MODE), "TaskExists()")

    def test_cancel_open_task_refunds(self, c: Chain) -> None:
        """The requester may cancel an unclaimed task and gets the reward back."""
        task, _ = create(c, evaluator=False)
        c.expect_revert(STRANGER, c.tm.functions.cancelTask(task), "Unauthorized()")
        before = c.balance(cs(CLIENT))
        receipt = c.send(CLIENT, c.tm.functions.cancelTask(task))
        assert c.events(receipt, c.tm)[0].args["refundAmount"] == REWARD
        assert c.balance(cs(CLIENT)) - before == REWARD
        assert task_status(c, task) == CANCELLED
        c.expect_revert(CLIENT, c.tm.functions.cancelTask(task), "InvalidStatus()")


class TestWorkerFlow:
    def test_claim_submit_accept_without_evaluator(self, c: Chain) -> None:
        """Open -> Claimed -> PendingApproval -> Accepted pays the worker minus platform fee."""
        task, _ = create(c, evaluator=False)
        c.expect_revert(CLIENT, c.tm.functions.claimTask(task), "Unauthorized()")
        receipt = c.send(PROVIDER, c.tm.functions.claimTask(task))
        assert c.events(receipt, c.tm)[0].args == {
            "taskId": task,
            "worker": low(PROVIDER),
            "stakeAmount": 0,
        }
        c.expect_revert(WORKER2, c.tm.functions.submitWork(task, DELIVERABLE), "Unauthorized()")
        c.send(PROVIDER, c.tm.functions.submitWork(task, DELIVERABLE))
        assert task_status(c, task) == PENDING_APPROVAL
        c.expect_revert(PROVIDER, c.tm.functions.acceptSubmission(task), "Unauthorized()")
        before = c.balance(cs(PROVIDER))
        receipt = c.send(CLIENT, c.tm.functions.acceptSubmission(task))
        (ev,) = c.events(receipt, c.tm)
        assert ev.name == "TaskCompleted"
        assert (ev.args["workerPayment"], ev.args["platformFee"]) == (
            REWARD - fee(REWARD),
            fee(REWARD),
        )
        assert c.balance(cs(PROVIDER)) - before == REWARD - fee(REWARD)
        assert task_status(c, task) == ACCEPTED

    def test_select_worker(self, c: Chain) -> None:
        """The requester selects a worker (replacing a claimant); only that worker submits."""
        task, _ = create(c, evaluator=False)
        c.send(PROVIDER, c.tm.functions.claimTask(task))
        c.expect_revert(STRANGER, c.tm.functions.selectWorker(task, cs(WORKER2)), "Unauthorized()")
        receipt = c.send(CLIENT, c.tm.functions.selectWorker(task, cs(WORKER2)))
        assert c.names(receipt, c.tm) == ["TaskWorkerSelected"]
        assert task_status(c, task) == WORKER_SELECTED
        c.expect_revert(PROVIDER, c.tm.functions.submitWork(task, DELIVERABLE), "Unauthorized()")
        c.send(WORKER2, c.tm.functions.submitWork(task, DELIVERABLE))
        assert task_status(c, task) == PENDING_APPROVAL

    def test_claim_and_submit_deadlines(self, c: Chain) -> None:
        """Claiming and submitting are allowed at expiryTime and revert one second after."""
        task, expiry = create(c, expires_in=100, evaluator=False)
        c.send(PROVIDER, c.tm.functions.claimTask(task), at=expiry)
        late, late_expiry = create(c, label="late", expires_in=100, evaluator=False)
        c.expect_revert(
            PROVIDER, c.tm.functions.claimTask(late), "DeadlinePassed()", at=late_expiry + 1
        )
        c.expect_revert(PROVIDER, c.tm.functions.submitWork(task, DELIVERABLE), "DeadlinePassed()")


class TestAssignEvaluator:
    def test_assign_rules(self, c: Chain) -> None:
        """Requester only, while Open and unclaimed, once, with a sane config."""
        task, _ = create(c, evaluator=False)
        args = (cs(EVALUATOR), STAKE, EVAL_FEE_BPS, EVAL_WINDOW, APPEAL_WINDOW, cs(RESOLVER))
        c.expect_revert(STRANGER, c.tm.functions.assignEvaluator(task, *args), "Unauthorized()")
        bad = (cs(EVALUATOR), STAKE, EVAL_FEE_BPS, 0, APPEAL_WINDOW, cs(RESOLVER))
        c.expect_revert(CLIENT, c.tm.functions.assignEvaluator(task, *bad), "InvalidConfig()")
        receipt = c.send(CLIENT, c.tm.functions.assignEvaluator(task, *args))
        (ev,) = c.events(receipt, c.tm)
        assert ev.args == {"taskId": task, "evaluator": low(EVALUATOR), "stakeAmount": STAKE}
        assert c.tm.functions.getTaskEvaluatorConfig(task).call() == (
            cs(EVALUATOR),
            STAKE,
            EVAL_FEE_BPS,
            EVAL_WINDOW,
            APPEAL_WINDOW,
            cs(RESOLVER),
        )
        c.expect_revert(
            CLIENT, c.tm.functions.assignEvaluator(task, *args), "EvaluatorAlreadyAssigned()"
        )
        claimed, _ = create(c, label="claimed", evaluator=False)
        c.send(PROVIDER, c.tm.functions.claimTask(claimed))
        c.expect_revert(CLIENT, c.tm.functions.assignEvaluator(claimed, *args), "InvalidStatus()")

    def test_submit_goes_to_review_and_raises_expiry(self, c: Chain) -> None:
        """With an evaluator, submitWork -> Review and expiryTime >= submittedAt + window."""
        task, at = submitted(c, expires_in=60)
        assert task_status(c, task) == REVIEW
        assert expiry_of(c, task) == at + EVAL_WINDOW
        far, far_at = submitted(c, expires_in=10 * EVAL_WINDOW)
        assert expiry_of(c, far) > far_at + EVAL_WINDOW  # raised, never lowered


class TestEvaluate:
    def test_evaluate_records_verdict_and_raises_expiry(self, c: Chain) -> None:
        """Review -> Appealing; verdict stored; expiryTime >= evaluatedAt + appealWindow."""
        task, sub_at = submitted(c, expires_in=60)
        award_list = awards((PROVIDER, 60 * USDC))
        fn = c.tm.functions.evaluate(task, PARTIAL, 75, 88, EVIDENCE, award_list)
        c.expect_revert(STRANGER, fn, "Unauthorized()")
        at = sub_at + EVAL_WINDOW - 10  # so the appeal deadline outlasts the raised expiry
        receipt = c.send(EVALUATOR, fn, at=at)
        (ev,) = c.events(receipt, c.tm)
        assert ev.args == {
            "taskId": task,
            "evaluator": low(EVALUATOR),
            "verdictType": PARTIAL,
            "score": 75,
        }
        assert task_status(c, task) == APPEALING
        got = c.tm.functions.getTask(task).call()
        assert got[10] == at
        assert got[4] == at + APPEAL_WINDOW
        verdict = c.tm.functions.getTaskVerdict(task).call()
        assert verdict == (True, PARTIAL, 75, 88, [], EVIDENCE, [tuple(award_list[0])])
        c.expect_revert(EVALUATOR, fn, "InvalidStatus()")

    @pytest.mark.parametrize(
        ("verdict", "pairs"),
        [
            (APPROVE, ()),
            (REJECT, ((PROVIDER, 1),)),
            (APPROVE, ((PROVIDER, REWARD - EVAL_FEE + 1),)),
        ],
    )
    def test_invalid_awards(self, c: Chain, verdict: int, pairs: tuple[Any, ...]) -> None:
        """APPROVE needs awards, REJECT takes none, awards cannot exceed reward minus fee."""
        task, _ = submitted(c)
        fn = c.tm.functions.evaluate(task, verdict, 1, 1, EVIDENCE, awards(*pairs))
        c.expect_revert(EVALUATOR, fn, "InvalidAwards()")

    def test_evaluate_window_is_inclusive(self, c: Chain) -> None:
        """evaluate succeeds at the evaluation deadline and reverts one second after it."""
        on_time, at = submitted(c)
        c.send(
            EVALUATOR,
            c.tm.functions.evaluate(on_time, REJECT, 0, 0, EVIDENCE, []),
            at=at + EVAL_WINDOW,
        )
        late, late_at = submitted(c)
        c.expect_revert(
            EVALUATOR,
            c.tm.functions.evaluate(late, REJECT, 0, 0, EVIDENCE, []),
            "DeadlinePassed()",
            at=late_at + EVAL_WINDOW + 1,
        )


class TestFinalizeVerdict:
    def test_boundary_and_approve_payout(self, c: Chain) -> None:
        """Reverts one second before evaluatedAt + appealWindow; at it anyone finalizes,
        paying the award, the evaluator fee and refunding the unawarded rest."""
        award = 70 * USDC
        task, at = evaluated(c, APPROVE, awards((PROVIDER, award)))
        fn = c.tm.functions.finalizeVerdict(task)
        c.expect_revert(STRANGER, fn, "AppealWindowActive()", at=at + APPEAL_WINDOW - 1)
        before = {k: c.balance(cs(k)) for k in (PROVIDER, EVALUATOR, CLIENT)}
        receipt = c.send(STRANGER, fn, at=at + APPEAL_WINDOW)
        (ev,) = c.events(receipt, c.tm)
        assert ev.name == "TaskCompleted"
        assert ev.args["worker"] == low(PROVIDER)
        assert (ev.args["workerPayment"], ev.args["platformFee"]) == (
            award - fee(award),
            fee(award),
        )
        assert c.balance(cs(PROVIDER)) - before[PROVIDER] == award - fee(award)
        assert c.balance(cs(EVALUATOR)) - before[EVALUATOR] == EVAL_FEE
        assert c.balance(cs(CLIENT)) - before[CLIENT] == REWARD - EVAL_FEE - award
        assert task_status(c, task) == ACCEPTED
        c.expect_revert(STRANGER, fn, "InvalidStatus()")

    def test_partial_emits_one_completed_per_award(self, c: Chain) -> None:
        """PARTIAL with two awards emits two TaskCompleted, one per worker."""
        task, at = evaluated(c, PARTIAL, awards((PROVIDER, 30 * USDC), (WORKER2, 20 * USDC)))
        receipt = c.send(STRANGER, c.tm.functions.finalizeVerdict(task), at=at + APPEAL_WINDOW)
        evs = c.events(receipt, c.tm)
        assert [(e.name, e.args["worker"]) for e in evs] == [
            ("TaskCompleted", low(PROVIDER)),
            ("TaskCompleted", low(WORKER2)),
        ]
        assert c.balance(c.tm.address) == 0

    def test_reject_cancels_and_refunds(self, c: Chain) -> None:
        """A REJECT verdict finalizes to Cancelled with TaskCancelled refunding the rest."""
        task, at = evaluated(c, REJECT, [])
        before = c.balance(cs(CLIENT))
        receipt = c.send(STRANGER, c.tm.functions.finalizeVerdict(task), at=at + APPEAL_WINDOW)
        (ev,) = c.events(receipt, c.tm)
        assert (ev.name, ev.args["refundAmount"]) == ("TaskCancelled", REWARD - EVAL_FEE)
        assert c.balance(cs(CLIENT)) - before == REWARD - EVAL_FEE
        assert task_status(c, task) == CANCELLED

    def test_needs_appealing(self, c: Chain) -> None:
        """A task in Review cannot be finalized."""
        task, _ = submitted(c)
        c.expect_revert(STRANGER, c.tm.functions.finalizeVerdict(task), "InvalidStatus()")


class TestAppealAndDispute:
    def test_appeal_boundary_and_events(self, c: Chain) -> None:
        """The worker appeals up to one second before the appeal deadline, not at it."""
        task, at = evaluated(c, REJECT, [])
        c.expect_revert(STRANGER, c.tm.functions.appeal(task), "Unauthorized()")
        receipt = c.send(PROVIDER, c.tm.functions.appeal(task), at=at + APPEAL_WINDOW - 1)
        evs = c.events(receipt, c.tm)
        assert [(e.name, e.args) for e in evs] == [
            ("TaskAppealed", {"taskId": task, "appellant": low(PROVIDER)}),
            ("TaskDisputed", {"taskId": task, "disputeResolver": low(RESOLVER)}),
        ]
        assert task_status(c, task) == DISPUTED

    def test_appeal_closed_at_deadline(self, c: Chain) -> None:
        """appeal at evaluatedAt + appealWindow reverts AppealWindowClosed."""
        task, at = evaluated(c, REJECT, [])
        c.expect_revert(
            PROVIDER, c.tm.functions.appeal(task), "AppealWindowClosed()", at=at + APPEAL_WINDOW
        )

    def test_resolver_overrides_verdict(self, c: Chain) -> None:
        """The resolver settles a dispute with a new verdict; others cannot."""
        task, _ = evaluated(c, REJECT, [])
        c.send(PROVIDER, c.tm.functions.appeal(task))
        award_list = awards((PROVIDER, 50 * USDC))
        fn = c.tm.functions.resolveDispute(task, APPROVE, award_list)
        c.expect_revert(EVALUATOR, fn, "Unauthorized()")
        receipt = c.send(RESOLVER, fn)
        assert c.names(receipt, c.tm) == ["TaskCompleted"]
        assert task_status(c, task) == ACCEPTED
        assert c.tm.functions.getTaskVerdict(task).call()[1] == APPROVE
        c.expect_revert(RESOLVER, fn, "InvalidStatus()")

    def test_resolver_reject_cancels(self, c: Chain) -> None:
        """A REJECT resolution cancels the task with a refund."""
        task, _ = evaluated(c, APPROVE, awards((PROVIDER, 10 * USDC)))
        c.send(PROVIDER, c.tm.functions.appeal(task))
        receipt = c.send(RESOLVER, c.tm.functions.resolveDispute(task, REJECT, []))
        assert c.names(receipt, c.tm) == ["TaskCancelled"]
        assert task_status(c, task) == CANCELLED


class TestEvaluatorTimeout:
    def test_anyone_after_deadline(self, c: Chain) -> None:
        """At submittedAt + window it reverts; one second later anyone times the evaluator out."""
        task, at = submitted(c)
        fn = c.tm.functions.evaluatorTimeout(task)
        c.expect_revert(STRANGER, fn, "EvaluationWindowActive()", at=at + EVAL_WINDOW)
        receipt = c.send(STRANGER, fn, at=at + EVAL_WINDOW + 1)
        (ev,) = c.events(receipt, c.tm)
        assert ev.args == {"taskId": task, "evaluator": low(EVALUATOR), "forfeitedStake": STAKE}
        assert task_status(c, task) == PENDING_APPROVAL
        c.expect_revert(STRANGER, fn, "InvalidStatus()")
        c.send(CLIENT, c.tm.functions.acceptSubmission(task))
        assert task_status(c, task) == ACCEPTED

    def test_requester_only_contract(self, c: Chain) -> None:
        """On the strict market a stranger gets Unauthorized even after the deadline."""
        assert c.tm_strict.functions.requesterOnlyTimeout().call() is True
        assert c.tm.functions.requesterOnlyTimeout().call() is False
        task, at = submitted(c, c.tm_strict)
        fn = c.tm_strict.functions.evaluatorTimeout(task)
        c.expect_revert(STRANGER, fn, "Unauthorized()", at=at + EVAL_WINDOW + 1)
        receipt = c.send(CLIENT, fn)
        assert c.names(receipt, c.tm_strict) == ["EvaluatorTimedOut"]
        assert task_status(c, task, c.tm_strict) == PENDING_APPROVAL

    def test_requester_still_waits_for_deadline(self, c: Chain) -> None:
        """Even the requester cannot time out the evaluator inside the window."""
        task, at = submitted(c, c.tm_strict)
        c.expect_revert(
            CLIENT,
            c.tm_strict.functions.evaluatorTimeout(task),
            "EvaluationWindowActive()",
            at=at + EVAL_WINDOW,
        )


class TestRefundExpired:
    def test_boundary_after_expiry_time(self, c: Chain) -> None:
        """At expiryTime it reverts NotExpired; one second later anyone refunds the reward."""
        task, expiry = create(c, expires_in=100)
        fn = c.tm.functions.refundExpired(task)
        c.expect_revert(STRANGER, fn, "NotExpired()", at=expiry)
        before = c.balance(cs(CLIENT))
        receipt = c.send(STRANGER, fn, at=expiry + 1)
        (ev,) = c.events(receipt, c.tm)
        assert ev.args == {"taskId": task, "requester": low(CLIENT), "refundAmount": REWARD}
        assert c.balance(cs(CLIENT)) - before == REWARD
        assert task_status(c, task) == EXPIRED
        c.expect_revert(STRANGER, fn, "InvalidStatus()")

    def test_review_uses_raised_expiry(self, c: Chain) -> None:
        """A task in Review is refundable only after the raised expiry (evaluation deadline)."""
        task, at = submitted(c, expires_in=30)
        fn = c.tm.functions.refundExpired(task)
        c.expect_revert(STRANGER, fn, "NotExpired()", at=at + EVAL_WINDOW)
        c.send(STRANGER, fn, at=at + EVAL_WINDOW + 1)
        assert task_status(c, task) == EXPIRED

    def test_accepted_cannot_be_refunded(self, c: Chain) -> None:
        """Accepted tasks revert InvalidStatus long after expiry."""
        task, at = evaluated(c, APPROVE, awards((PROVIDER, 10 * USDC)))
        c.send(STRANGER, c.tm.functions.finalizeVerdict(task), at=at + APPEAL_WINDOW)
        c.expect_revert(
            STRANGER, c.tm.functions.refundExpired(task), "InvalidStatus()", at=at + 10**5
        )

    def test_appealing_past_deadline_is_refundable_hazard(self, c: Chain) -> None:
        """Hazard kept: an APPROVE verdict past its appeal window can still be refunded to
        the requester if nobody finalizes first (the keeper must finalize first)."""
        task, at = evaluated(c, APPROVE, awards((PROVIDER, 10 * USDC)))
        expiry = expiry_of(c, task)
        assert expiry >= at + APPEAL_WINDOW
        before = c.balance(cs(CLIENT))
        c.send(STRANGER, c.tm.functions.refundExpired(task), at=expiry + 1)
        assert c.balance(cs(CLIENT)) - before == REWARD
        assert task_status(c, task) == EXPIRED
