"""Job and task projections folded from real encoded logs and pinned reads."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.abi_events import encode_event

from keeper.domain.event_catalog import spec_for
from keeper.domain.events import decode_log
from keeper.domain.model import (
    ArgValue,
    ChainRead,
    Event,
    JobStatus,
    Log,
    TaskStatus,
    VerdictType,
)
from keeper.domain.reads import FINALIZE_SILENT, RESOLVE_SILENT, reads_for
from keeper.domain.reducers import reduce_job, reduce_task
from keeper.domain.taskmodes import BOUNTY

JOBS = "0x" + "a1" * 20
TASKS = "0x" + "b2" * 20
CLIENT, PROVIDER, EVALUATOR = ("0x" + c * 20 for c in ("c1", "c2", "c3"))
TOKEN, RESOLVER = "0x" + "70" * 20, "0x" + "d4" * 20
TASK = "0x" + "5a" * 32
DELIVERABLE, REASON = "0x" + "de" * 32, "0x" + "ee" * 32


class Chain:
    """Emits encoded logs in chain order, one block per call unless told otherwise."""

    def __init__(self) -> None:
        self.block = 100
        self.time = 1_000_000
        self.index = 0

    def next_block(self, seconds: int = 12) -> None:
        self.block += 1
        self.time += seconds
        self.index = 0

    def hash(self, block: int | None = None) -> str:
        return "0x" + f"{block or self.block:064x}"

    def ev(self, contract: str, name: str, variant: str = "current", **values: Any) -> Event:
        spec = spec_for(name, variant)
        topics, data = encode_event(spec, values)
        log = Log(
            contract,
            topics,
            data,
            self.block,
            self.hash(),
            "0x" + f"{self.block:060x}{self.index:04x}",
            0,
            self.index,
        )
        self.index += 1
        event = decode_log(log, spec.protocol, self.time)
        assert event.name == name
        return event

    def read(self, contract: str, subject: str, kind: str, **result: ArgValue) -> ChainRead:
        return ChainRead(contract, subject, kind, self.block, self.hash(), result)


def _job_created(c: Chain, job: int, variant: str = "current", **kw: Any) -> Event:
    values = {
        "jobId": job,
        "client": CLIENT,
        "provider": PROVIDER,
        "evaluator": EVALUATOR,
        "expiredAt": c.time + 3600,
        "hook": "0x" + "00" * 20,
    } | kw
    if variant == "legacy":
        values.pop("hook")
    return c.ev(JOBS, "JobCreated", variant, **values)


def _job_step(c: Chain, step: str) -> Event:
    if step == "fund":
        return c.ev(JOBS, "JobFunded", jobId=5, client=CLIENT, amount=7)
    if step == "submit":
        return c.ev(JOBS, "JobSubmitted", jobId=5, provider=PROVIDER, deliverable=DELIVERABLE)
    if step == "reject":
        return c.ev(JOBS, "JobRejected", jobId=5, rejector=EVALUATOR, reason=REASON)
    if step == "expire":
        return c.ev(JOBS, "JobExpired", jobId=5)
    return c.ev(JOBS, "Refunded", jobId=5, client=CLIENT, amount=7)


class TestJobs:
    def test_happy_path_to_completed(self) -> None:
        """A funded, submitted, completed job carries every field its events set."""
        c = Chain()
        evs = [_job_created(c, 1)]
        reads = [c.read(JOBS, "1", "getJob", description='{"brief":"x"}')]
        c.next_block()
        evs.append(c.ev(JOBS, "BudgetSet", jobId=1, token=TOKEN, amount=10**24))
        evs.append(c.ev(JOBS, "JobFunded", jobId=1, client=CLIENT, amount=10**24))
        c.next_block(30)
        submit_time = c.time
        evs.append(c.ev(JOBS, "JobSubmitted", jobId=1, provider=PROVIDER, deliverable=DELIVERABLE))
        c.next_block()
        evs.append(c.ev(JOBS, "JobCompleted", jobId=1, evaluator=EVALUATOR, reason=REASON))
        evs.append(c.ev(JOBS, "PaymentReleased", jobId=1, provider=PROVIDER, amount=9 * 10**23))
        st_ = reduce_job(JOBS, "1", evs, reads)
        assert st_.status is JobStatus.COMPLETED
        assert (st_.client, st_.provider, st_.evaluator, st_.token) == (
            CLIENT,
            PROVIDER,
            EVALUATOR,
            TOKEN,
        )
        assert (st_.budget, st_.funded_amount, st_.paid_amount) == (10**24, 10**24, 9 * 10**23)
        assert st_.submitted_at == submit_time
        assert (st_.deliverable, st_.reason, st_.verdict_event) == (
            DELIVERABLE,
            REASON,
            "JobCompleted",
        )
        assert st_.description == '{"brief":"x"}'
        assert (st_.created_block, st_.updated_block, st_.legacy) == (100, 103, False)

    def test_status_table(self) -> None:
        """Each terminal or intermediate event sequence yields its documented status."""
        cases: list[tuple[list[str], JobStatus]] = [
            ([], JobStatus.OPEN),
            (["fund"], JobStatus.FUNDED),
            (["fund", "submit"], JobStatus.SUBMITTED),
            (["fund", "expire", "refund"], JobStatus.EXPIRED),
            (["fund", "submit", "reject", "refund"], JobStatus.REJECTED),
            (["expire"], JobStatus.EXPIRED),
            (["submit"], JobStatus.SUBMITTED),
        ]
        for steps, expected in cases:
            c = Chain()
            evs = [_job_created(c, 5)]
            for step in steps:
                c.next_block()
                evs.append(_job_step(c, step))
            result = reduce_job(JOBS, "5", evs, [])
            assert result.status is expected, steps
            assert result.refunded_amount == (7 if "refund" in steps else 0)

    def test_client_rejecting_open_job_is_not_a_verdict(self) -> None:
        """The client's rejection of an Open job records the reason but no verdict event."""
        c = Chain()
        evs = [_job_created(c, 2)]
        c.next_block()
        evs.append(c.ev(JOBS, "JobRejected", jobId=2, rejector=CLIENT, reason=REASON))
        st_ = reduce_job(JOBS, "2", evs, [])
        assert (st_.status, st_.reason, st_.verdict_event) == (JobStatus.REJECTED, REASON, None)

    @pytest.mark.parametrize("rejector", [EVALUATOR, PROVIDER])
    def test_a_rejection_of_a_funded_job_is_a_verdict(self, rejector: str) -> None:
        """Past Open only the evaluator may reject, so the rejection is a verdict to verify,
        even where the projection's evaluator is not the rejector's address."""
        c = Chain()
        evs = [_job_created(c, 2)]
        c.next_block()
        evs.append(c.ev(JOBS, "JobFunded", jobId=2, client=CLIENT, amount=1))
        evs.append(c.ev(JOBS, "JobRejected", jobId=2, rejector=rejector, reason=REASON))
        assert reduce_job(JOBS, "2", evs, []).verdict_event == "JobRejected"

    def test_legacy_job_takes_token_from_read_at_budget_block(self) -> None:
        """A legacy BudgetSet has no token: the paymentToken read at its block supplies it."""
        c = Chain()
        evs = [_job_created(c, 3, "legacy")]
        c.next_block()
        evs.append(c.ev(JOBS, "ProviderSet", "legacy", jobId=3, provider=EVALUATOR))
        evs.append(c.ev(JOBS, "BudgetSet", "legacy", jobId=3, amount=500))
        token_read = c.read(JOBS, "", "paymentToken", token=TOKEN)
        elsewhere = replace(token_read, block_hash=c.hash(1), block_number=1)
        with_read = reduce_job(JOBS, "3", evs, [token_read])
        assert (with_read.legacy, with_read.hook, with_read.provider) == (True, "", EVALUATOR)
        assert (with_read.token, with_read.budget) == (TOKEN, 500)
        assert reduce_job(JOBS, "3", evs, [elsewhere]).token == ""
        # each read that is not this contract's paymentToken answer is no token, alone
        for unusable in (
            replace(token_read, contract=TASKS),  # another contract's
            replace(token_read, kind="getJob"),  # another view's answer holding "token"
            replace(token_read, subject="3"),  # kept under a subject
            replace(token_read, result={"error": "reverted", "token": TOKEN}),  # a failed read
        ):
            assert reduce_job(JOBS, "3", evs, [unusable]).token == "", unusable

    def test_created_job_takes_the_token_its_getjob_read_answers(self) -> None:
        """Without a BudgetSet token, the getJob read at creation supplies paymentToken."""
        c = Chain()
        created = _job_created(c, 4)
        read = c.read(JOBS, "4", "getJob", description="d", paymentToken=TOKEN)
        state = reduce_job(JOBS, "4", [created], [read])
        assert (state.token, state.description) == (TOKEN, "d")
        assert reduce_job(JOBS, "4", [created], []).token == ""

    def test_unknown_subject_gives_empty_open_state(self) -> None:
        """A subject without events reduces to the default state, not an error."""
        st_ = reduce_job(JOBS, "99", [], [])
        assert (st_.status, st_.created_block, st_.client) == (JobStatus.OPEN, 0, "")


RECEIVER = "0x" + "e5" * 20


class TestERC8183Jobs:
    """The ERC8183.sol dialect: actor-indexed setters, claims, settlement, payout receiver."""

    def _funded(self, c: Chain) -> list[Event]:
        evs = [_job_created(c, 8, "erc8183", provider="0x" + "00" * 20)]
        c.next_block()
        evs.append(
            c.ev(JOBS, "ProviderSet", "erc8183", jobId=8, actor=CLIENT, provider=PROVIDER,
                 agentId=12)
        )  # fmt: skip
        evs.append(
            c.ev(JOBS, "PayoutReceiverSet", "erc8183", jobId=8, actor=PROVIDER,
                 payoutReceiver=RECEIVER)
        )  # fmt: skip
        evs.append(
            c.ev(JOBS, "BudgetSet", "erc8183", jobId=8, actor=PROVIDER, token=TOKEN, amount=1000)
        )
        evs.append(c.ev(JOBS, "JobFunded", jobId=8, client=CLIENT, amount=1000))
        return evs

    def _claim(self, c: Chain, cumulative: int, delta: int) -> Event:
        return c.ev(JOBS, "ClaimSubmitted", "erc8183", jobId=8, provider=PROVIDER,
                    cumulativeAmount=cumulative, delta=delta, deliverable=DELIVERABLE,
                    optParams=b"\x01\x02")  # fmt: skip

    def test_every_field_from_the_new_shapes(self) -> None:
        """Provider, receiver, token, budget and expiry come from the actor-indexed events."""
        c = Chain()
        evs = self._funded(c)
        expiry = evs[0].args["expiredAt"]
        st_ = reduce_job(JOBS, "8", evs, [])
        assert (st_.provider, st_.payout_receiver, st_.token, st_.budget) == (
            PROVIDER,
            RECEIVER,
            TOKEN,
            1000,
        )
        assert (st_.expired_at, st_.dialect, st_.legacy) == (expiry, "erc8183", False)
        assert (st_.status, st_.refundable_amount, st_.pending_claim_amount) == (
            JobStatus.FUNDED,
            1000,
            None,
        )

    def test_claim_pending_then_approved_settles_part_of_the_budget(self) -> None:
        """A submitted claim is pending; its approval settles it and shrinks the refund."""
        c = Chain()
        evs = self._funded(c)
        c.next_block()
        evs.append(self._claim(c, 300, 300))
        pending = reduce_job(JOBS, "8", evs, [])
        assert (pending.pending_claim_amount, pending.settled_amount) == (300, 0)
        c.next_block()
        evs.append(c.ev(JOBS, "Settled", "erc8183", jobId=8, cumulativeAmount=300, delta=300))
        evs.append(
            c.ev(JOBS, "ClaimApproved", "erc8183", jobId=8, approver=CLIENT,
                 cumulativeAmount=300, delta=300, deliverable=DELIVERABLE)
        )  # fmt: skip
        evs.append(c.ev(JOBS, "PaymentReleased", jobId=8, provider=RECEIVER, amount=300))
        st_ = reduce_job(JOBS, "8", evs, [])
        assert (st_.pending_claim_amount, st_.settled_amount, st_.paid_amount) == (None, 300, 300)
        assert st_.refundable_amount == 700

    def test_rejected_claim_settles_nothing_and_expiry_clears_it(self) -> None:
        """A rejected claim leaves the escrow whole; a terminal job has no claim pending."""
        c = Chain()
        evs = self._funded(c)
        evs.append(self._claim(c, 500, 500))
        evs.append(c.ev(JOBS, "ClaimRejected", "erc8183", jobId=8, rejector=CLIENT, reason=REASON))
        st_ = reduce_job(JOBS, "8", evs, [])
        assert (st_.pending_claim_amount, st_.refundable_amount) == (None, 1000)
        evs.append(self._claim(c, 400, 400))
        evs.append(c.ev(JOBS, "JobExpired", jobId=8))
        done = reduce_job(JOBS, "8", evs, [])
        assert (done.status, done.pending_claim_amount, done.refundable_amount) == (
            JobStatus.EXPIRED,
            None,
            0,
        )

    def test_settled_is_cumulative_and_hook_detach_clears_the_hook(self) -> None:
        """Settled carries the cumulative amount (never summed twice); HookDetached unhooks."""
        c = Chain()
        evs = [_job_created(c, 8, "erc8183", hook=RESOLVER)]
        evs.append(c.ev(JOBS, "Settled", "erc8183", jobId=8, cumulativeAmount=200, delta=200))
        evs.append(c.ev(JOBS, "Settled", "erc8183", jobId=8, cumulativeAmount=500, delta=300))
        assert reduce_job(JOBS, "8", evs, []).hook == RESOLVER
        evs.append(c.ev(JOBS, "HookDetached", "erc8183", jobId=8, hook=RESOLVER))
        st_ = reduce_job(JOBS, "8", evs, [])
        assert (st_.settled_amount, st_.hook) == (500, "")

    def test_dialect_follows_the_created_shape(self) -> None:
        """JobCreated's shape names the dialect: agentic_commerce, legacy or erc8183."""
        for variant, dialect in (
            ("current", "agentic_commerce"),
            ("legacy", "legacy"),
            ("erc8183", "erc8183"),
        ):
            c = Chain()
            assert reduce_job(JOBS, "1", [_job_created(c, 1, variant)], []).dialect == dialect


def _task_created(c: Chain, expiry: int, task: str = TASK) -> Event:
    return c.ev(
        TASKS,
        "TaskCreated",
        taskId=task,
        requester=CLIENT,
        reward=10**6,
        mode="0x636c6169",
        expiryTime=expiry,
        stakeRequired=False,
        stakeBps=0,
    )


def _config(c: Chain, evaluation: int, appeal: int) -> ChainRead:
    return c.read(
        TASKS,
        TASK,
        "getTaskEvaluatorConfig",
        evaluator=EVALUATOR,
        evaluatorStake="250",
        evaluatorFeeBps=500,
        evaluationWindow=evaluation,
        appealWindow=appeal,
        disputeResolver=RESOLVER,
    )


class TestTasks:
    def _reviewed(self, c: Chain) -> tuple[list[Event], list[ChainRead], int]:
        """Create, assign an evaluator, claim and submit; return events, reads, submit time."""
        evs = [_task_created(c, c.time + 100)]
        evs.append(
            c.ev(TASKS, "EvaluatorAssigned", taskId=TASK, evaluator=EVALUATOR, stakeAmount=250)
        )
        reads = [_config(c, 86_400, 300)]
        c.next_block()
        evs.append(c.ev(TASKS, "TaskClaimed", taskId=TASK, worker=PROVIDER, stakeAmount=0))
        c.next_block()
        evs.append(
            c.ev(TASKS, "TaskSubmitted", taskId=TASK, worker=PROVIDER, deliverable=DELIVERABLE)
        )
        reads.append(_config(c, 86_400, 300))
        return evs, reads, c.time

    def test_submission_with_evaluator_enters_review_with_deadline(self) -> None:
        """evaluation_deadline = submit block time + evaluationWindow; expiry is raised to it."""
        c = Chain()
        evs, reads, t_submit = self._reviewed(c)
        st_ = reduce_task(TASKS, TASK, evs, reads)
        assert st_.status is TaskStatus.REVIEW
        assert st_.evaluation_deadline == t_submit + 86_400
        assert st_.expiry_time == t_submit + 86_400
        assert (st_.evaluator, st_.evaluator_stake, st_.evaluator_fee_bps) == (EVALUATOR, 250, 500)
        assert (st_.dispute_resolver, st_.worker, st_.mode) == (RESOLVER, PROVIDER, "0x636c6169")

    def test_missing_config_read_leaves_deadline_unknown(self) -> None:
        """Without any config read the deadline is None rather than a guess."""
        c = Chain()
        evs, _, _ = self._reviewed(c)
        st_ = reduce_task(TASKS, TASK, evs, [])
        assert (st_.status, st_.evaluation_deadline) == (TaskStatus.REVIEW, None)

    def test_failed_config_read_is_ignored(self) -> None:
        """A reverted read ({"error": ...}) neither removes the evaluator nor resets windows."""
        c = Chain()
        evs, reads, t_submit = self._reviewed(c)
        failed = replace(reads[-1], result={"error": "reverted"})
        st_ = reduce_task(TASKS, TASK, evs, [reads[0], failed])
        assert (st_.status, st_.evaluator) == (TaskStatus.REVIEW, EVALUATOR)
        assert st_.evaluation_deadline == t_submit + 86_400

    def test_evaluator_assigned_before_created_in_one_transaction(self) -> None:
        """Rev 18+: EvaluatorAssigned precedes TaskCreated; the evaluator survives creation."""
        c = Chain()
        reads = [_config(c, 86_400, 300)]
        evs = [
            c.ev(TASKS, "EvaluatorAssigned", taskId=TASK, evaluator=EVALUATOR, stakeAmount=250),
            _task_created(c, c.time + 100),
        ]
        c.next_block()
        evs.append(c.ev(TASKS, "TaskClaimed", taskId=TASK, worker=PROVIDER, stakeAmount=0))
        c.next_block()
        evs.append(
            c.ev(TASKS, "TaskSubmitted", taskId=TASK, worker=PROVIDER, deliverable=DELIVERABLE)
        )
        reads.append(_config(c, 86_400, 300))
        st_ = reduce_task(TASKS, TASK, evs, reads)
        assert (st_.status, st_.evaluator, st_.requester) == (TaskStatus.REVIEW, EVALUATOR, CLIENT)
        assert st_.evaluation_deadline == c.time + 86_400
        assert st_.extra["stake_required"] == "0"

    def test_task_updated_moves_reward_and_deadline(self) -> None:
        """TaskUpdated sets reward and expiryTime (a later or an earlier one)."""
        c = Chain()
        evs = [_task_created(c, 5_000)]
        c.next_block()
        evs.append(
            c.ev(TASKS, "TaskUpdated", taskId=TASK, newReward=3 * 10**6, newExpiryTime=9_000)
        )
        st_ = reduce_task(TASKS, TASK, evs, [])
        assert (st_.reward, st_.expiry_time, st_.status) == (3 * 10**6, 9_000, TaskStatus.OPEN)
        c.next_block()
        evs.append(c.ev(TASKS, "TaskUpdated", taskId=TASK, newReward=10**6, newExpiryTime=4_000))
        assert reduce_task(TASKS, TASK, evs, []).expiry_time == 4_000

    def test_contest_submissions_keep_open_and_count(self) -> None:
        """Bounty: submissions keep the task Open; a rejection removes that worker's count."""
        c = Chain()
        created = c.ev(TASKS, "TaskCreated", taskId=TASK, requester=CLIENT, reward=10**6,
                       mode=BOUNTY, expiryTime=5_000, stakeRequired=False, stakeBps=0)  # fmt: skip
        evs = [created]
        for worker in (PROVIDER, PROVIDER, EVALUATOR):
            c.next_block()
            evs.append(
                c.ev(TASKS, "TaskSubmitted", taskId=TASK, worker=worker, deliverable=DELIVERABLE)
            )
        st_ = reduce_task(TASKS, TASK, evs, [])
        assert (st_.status, st_.worker, st_.extra["active_submissions"]) == (
            TaskStatus.OPEN,
            None,
            "3",
        )
        c.next_block()
        evs.append(c.ev(TASKS, "SubmissionRejected", taskId=TASK, worker=PROVIDER))
        assert reduce_task(TASKS, TASK, evs, []).extra["active_submissions"] == "1"

    def test_old_and_new_created_shapes_give_the_same_row(self) -> None:
        """Pre-14 and rev-14 TaskCreated reduce to the same requester, reward, mode, expiry."""
        fields = {"taskId": TASK, "requester": CLIENT, "reward": 7, "mode": "0x636c6169",
                  "expiryTime": 1234}  # fmt: skip
        old = reduce_task(TASKS, TASK, [Chain().ev(TASKS, "TaskCreated", "pre14", **fields)], [])
        new = reduce_task(
            TASKS,
            TASK,
            [Chain().ev(TASKS, "TaskCreated", stakeRequired=True, stakeBps=250, **fields)],
            [],
        )
        pick = lambda t: (t.requester, t.reward, t.mode, t.expiry_time, t.status)  # noqa: E731
        assert pick(old) == pick(new) == (CLIENT, 7, "0x636c6169", 1234, TaskStatus.OPEN)
        assert new.extra == {"stake_required": "1", "stake_bps": "250"} and old.extra == {}

    def test_submission_without_evaluator_awaits_approval(self) -> None:
        """No evaluator: a submission goes to the requester (pending_approval)."""
        c = Chain()
        evs = [_task_created(c, 5_000_000)]
        c.next_block()
        evs.append(c.ev(TASKS, "TaskWorkerSelected", taskId=TASK, worker=PROVIDER))
        assert reduce_task(TASKS, TASK, evs, []).status is TaskStatus.WORKER_SELECTED
        evs.append(
            c.ev(TASKS, "TaskSubmitted", taskId=TASK, worker=PROVIDER, deliverable=DELIVERABLE)
        )
        st_ = reduce_task(TASKS, TASK, evs, [])
        assert (st_.status, st_.evaluation_deadline, st_.expiry_time) == (
            TaskStatus.PENDING_APPROVAL,
            None,
            5_000_000,
        )

    def test_evaluation_opens_appeal_window_then_payout(self) -> None:
        """TaskEvaluated -> appealing with appeal deadline; TaskCompleted per award -> accepted."""
        c = Chain()
        evs, reads, _ = self._reviewed(c)
        c.next_block(600)
        t_eval = c.time
        evs.append(
            c.ev(TASKS, "TaskEvaluated", taskId=TASK, evaluator=EVALUATOR, verdictType=2, score=81)
        )
        reads.append(
            c.read(
                TASKS,
                TASK,
                "getTaskVerdict",
                issued=True,
                verdictType=2,
                score=81,
                confidence=90,
                evidenceHash=REASON,
            )
        )
        st_ = reduce_task(TASKS, TASK, evs, reads)
        assert st_.status is TaskStatus.APPEALING
        assert (st_.verdict_type, st_.score, st_.evaluated_at) == (VerdictType.PARTIAL, 81, t_eval)
        assert st_.appeal_deadline == t_eval + 300
        assert (st_.evidence_hash, st_.extra["confidence"]) == (REASON, "90")
        c.next_block(301)
        for worker, pay in ((PROVIDER, 600_000), (CLIENT, 300_000)):
            evs.append(
                c.ev(
                    TASKS,
                    "TaskCompleted",
                    taskId=TASK,
                    requester=CLIENT,
                    worker=worker,
                    workerPayment=pay,
                    platformFee=1000,
                )
            )
        st_ = reduce_task(TASKS, TASK, evs, reads)
        assert (st_.status, st_.paid_amount, st_.worker) == (TaskStatus.ACCEPTED, 900_000, PROVIDER)
        assert (st_.extra["platform_fee"], st_.extra["awards"]) == ("2000", "2")

    def test_a_silent_finalize_ends_appealing_only_from_its_block_on(self) -> None:
        """A verdict paying no award is finalized without an event; the keeper's observation
        (finalizeVerdict refused as no longer Appealing) moves the task to Accepted from the
        block it was made at, after that block's events; one made earlier, or once the events
        have moved the task on, changes nothing."""
        c = Chain()
        evs, reads, _ = self._reviewed(c)
        early = c.read(TASKS, TASK, FINALIZE_SILENT, refused="NotInAppealingState")
        c.next_block()
        evs.append(
            c.ev(TASKS, "TaskEvaluated", taskId=TASK, evaluator=EVALUATOR, verdictType=0, score=90)
        )
        at_verdict = c.read(TASKS, TASK, FINALIZE_SILENT, refused="NotInAppealingState")
        c.next_block(700)
        seen = c.read(TASKS, TASK, FINALIZE_SILENT, refused="NotInAppealingState")
        assert reduce_task(TASKS, TASK, evs, [*reads, early]).status is TaskStatus.APPEALING
        paying = [(PROVIDER, 0, 1), (CLIENT, "0", 2)]  # JSON gives ints back as either
        verdict = ChainRead(TASKS, TASK, "getTaskVerdict", at_verdict.block_number,
                            at_verdict.block_hash, {"issued": True, "awards": paying})  # fmt: skip
        assert reduce_task(TASKS, TASK, evs, [*reads, verdict]).extra["award_total"] == "0"
        paying[1] = (CLIENT, "7", 2)
        assert reduce_task(TASKS, TASK, evs, [*reads, verdict]).extra["award_total"] == "7"
        assert "award_total" not in reduce_task(TASKS, TASK, evs, reads).extra
        st_ = reduce_task(TASKS, TASK, evs, [*reads, seen])
        assert (st_.status, st_.extra["finalized_silently_at"], st_.updated_block) == (
            TaskStatus.ACCEPTED,
            str(c.block),
            c.block,
        )
        assert st_.paid_amount == 0
        # made on the state the verdict's block left: after its events
        assert reduce_task(TASKS, TASK, evs, [*reads, at_verdict]).status is TaskStatus.ACCEPTED
        c.next_block()
        evs.append(c.ev(TASKS, "TaskAppealed", taskId=TASK, appellant=PROVIDER))
        later = c.read(TASKS, TASK, FINALIZE_SILENT, refused="NotInAppealingState")
        st_ = reduce_task(TASKS, TASK, evs, [*reads, later])
        assert (st_.status, "finalized_silently_at" in st_.extra) == (TaskStatus.DISPUTED, False)

    def test_appeal_and_dispute(self) -> None:
        """An appeal and the dispute event both put the task in disputed."""
        c = Chain()
        evs, reads, _ = self._reviewed(c)
        c.next_block()
        evs.append(
            c.ev(TASKS, "TaskEvaluated", taskId=TASK, evaluator=EVALUATOR, verdictType=1, score=10)
        )
        c.next_block()
        evs.append(c.ev(TASKS, "TaskAppealed", taskId=TASK, appellant=PROVIDER))
        assert reduce_task(TASKS, TASK, evs, reads).status is TaskStatus.DISPUTED
        evs.append(c.ev(TASKS, "TaskDisputed", taskId=TASK, disputeResolver=RESOLVER))
        st_ = reduce_task(TASKS, TASK, evs, reads)
        assert (st_.status, st_.dispute_resolver) == (TaskStatus.DISPUTED, RESOLVER)

    def test_a_silent_resolution_ends_disputed_only_from_its_block_on(self) -> None:
        """A dispute resolved paying no award settles without an event; the keeper's
        observation (resolveDispute refused as no longer Disputed) moves the task to
        Accepted from the block it was made at, after that block's events. One made before
        the dispute, or once the events have moved the task on, changes nothing; a silent
        finalize observation does not end a dispute."""
        c = Chain()
        evs, reads, _ = self._reviewed(c)
        c.next_block()
        evs.append(
            c.ev(TASKS, "TaskEvaluated", taskId=TASK, evaluator=EVALUATOR, verdictType=0, score=9)
        )
        early = c.read(TASKS, TASK, RESOLVE_SILENT, refused="NotInDisputedState")
        c.next_block()
        evs.append(c.ev(TASKS, "TaskAppealed", taskId=TASK, appellant=PROVIDER))
        evs.append(c.ev(TASKS, "TaskDisputed", taskId=TASK, disputeResolver=RESOLVER))
        at_dispute = c.read(TASKS, TASK, RESOLVE_SILENT, refused="NotInDisputedState")
        finalized = c.read(TASKS, TASK, FINALIZE_SILENT, refused="NotInAppealingState")
        c.next_block(50)
        seen = c.read(TASKS, TASK, RESOLVE_SILENT, refused="NotInDisputedState")
        # made while the task was still Appealing by its events: before the dispute
        st_ = reduce_task(TASKS, TASK, evs, [*reads, early])
        assert (st_.status, "resolved_silently_at" in st_.extra) == (TaskStatus.DISPUTED, False)
        assert reduce_task(TASKS, TASK, evs, [*reads, finalized]).status is TaskStatus.DISPUTED
        st_ = reduce_task(TASKS, TASK, evs, [*reads, seen])
        assert (st_.status, st_.extra["resolved_silently_at"], st_.updated_block) == (
            TaskStatus.ACCEPTED,
            str(c.block),
            c.block,
        )
        assert (st_.paid_amount, st_.dispute_resolver) == (0, RESOLVER)
        # made on the state the dispute's block left: after its events
        st_ = reduce_task(TASKS, TASK, evs, [*reads, at_dispute])
        assert (st_.status, st_.extra["resolved_silently_at"]) == (
            TaskStatus.ACCEPTED,
            str(at_dispute.block_number),
        )
        # the first observation decides; a later one finds the task Accepted already
        st_ = reduce_task(TASKS, TASK, evs, [*reads, seen, at_dispute])
        assert st_.extra["resolved_silently_at"] == str(at_dispute.block_number)
        # the events moved it on (an expiry refund) before the observation's block
        evs.append(c.ev(TASKS, "TaskExpired", taskId=TASK, requester=CLIENT, refundAmount=7))
        c.next_block()
        later = c.read(TASKS, TASK, RESOLVE_SILENT, refused="NotInDisputedState")
        st_ = reduce_task(TASKS, TASK, evs, [*reads, later])
        assert (st_.status, "resolved_silently_at" in st_.extra) == (TaskStatus.EXPIRED, False)

    def test_evaluator_timeout_then_reopen_then_resubmit(self) -> None:
        """After a timeout the evaluator is gone: a reopened task's resubmission awaits approval."""
        c = Chain()
        evs, reads, _ = self._reviewed(c)
        c.next_block(90_000)
        evs.append(
            c.ev(TASKS, "EvaluatorTimedOut", taskId=TASK, evaluator=EVALUATOR, forfeitedStake=250)
        )
        st_ = reduce_task(TASKS, TASK, evs, reads)
        assert (st_.status, st_.evaluator) == (TaskStatus.PENDING_APPROVAL, None)
        c.next_block()
        evs.append(c.ev(TASKS, "TaskReopened", taskId=TASK))
        st_ = reduce_task(TASKS, TASK, evs, reads)
        assert (st_.status, st_.worker, st_.deliverable) == (TaskStatus.OPEN, None, None)
        c.next_block()
        evs.append(
            c.ev(TASKS, "TaskSubmitted", taskId=TASK, worker=CLIENT, deliverable=DELIVERABLE)
        )
        assert reduce_task(TASKS, TASK, evs, reads).status is TaskStatus.PENDING_APPROVAL

    def test_terminal_refunds_and_older_shapes(self) -> None:
        """Expired/cancelled record refunds; older TaskCreated and TaskAccepted are understood."""
        for name, status in (
            ("TaskExpired", TaskStatus.EXPIRED),
            ("TaskCancelled", TaskStatus.CANCELLED),
        ):
            c = Chain()
            evs = [_task_created(c, 10)]
            c.next_block()
            evs.append(c.ev(TASKS, name, taskId=TASK, requester=CLIENT, refundAmount=10**6))
            st_ = reduce_task(TASKS, TASK, evs, [])
            assert (st_.status, st_.refunded_amount) == (status, 10**6)
        c = Chain()
        evs = [
            c.ev(
                TASKS,
                "TaskCreated",
                "older",
                taskId=TASK,
                requester=CLIENT,
                reward=77,
                expiryTime=123,
                mode="0x62656e63",
            )
        ]
        c.next_block()
        evs.append(
            c.ev(
                TASKS,
                "TaskAccepted",
                "older",
                taskId=TASK,
                requester=CLIENT,
                worker=PROVIDER,
                workerPayment=70,
                platformFee=7,
            )
        )
        st_ = reduce_task(TASKS, TASK, evs, [])
        assert (st_.status, st_.reward, st_.expiry_time, st_.mode) == (
            TaskStatus.ACCEPTED,
            77,
            123,
            "0x62656e63",
        )
        assert (st_.paid_amount, st_.worker) == (70, PROVIDER)


def _random_history(data: st.DataObject) -> tuple[list[Event], list[ChainRead]]:
    """Several tasks and jobs with random event sequences, interleaved in chain order."""
    c = Chain()
    events: list[Event] = []
    reads: list[ChainRead] = []
    tasks = ["0x" + f"{i:064x}" for i in range(1, 4)]
    for _ in range(data.draw(st.integers(1, 25), label="steps")):
        c.next_block(data.draw(st.integers(1, 5000)))
        task = data.draw(st.sampled_from(tasks))
        kinds = ["create", "assign", "submit", "evaluate", "appeal", "complete", "reopen", "job"]
        kind = data.draw(st.sampled_from(kinds))
        if kind == "create":
            events.append(_task_created(c, c.time + 50, task))
        elif kind == "assign":
            events.append(
                c.ev(TASKS, "EvaluatorAssigned", taskId=task, evaluator=EVALUATOR, stakeAmount=1)
            )
            reads.append(replace(_config(c, 100, 50), subject=task))
        elif kind == "submit":
            events.append(
                c.ev(TASKS, "TaskSubmitted", taskId=task, worker=PROVIDER, deliverable=DELIVERABLE)
            )
            reads.append(replace(_config(c, 100, 50), subject=task))
        elif kind == "evaluate":
            events.append(
                c.ev(
                    TASKS, "TaskEvaluated", taskId=task, evaluator=EVALUATOR, verdictType=0, score=1
                )
            )
        elif kind == "appeal":
            events.append(c.ev(TASKS, "TaskAppealed", taskId=task, appellant=PROVIDER))
        elif kind == "complete":
            events.append(
                c.ev(
                    TASKS,
                    "TaskCompleted",
                    taskId=task,
                    requester=CLIENT,
                    worker=PROVIDER,
                    workerPayment=3,
                    platformFee=0,
                )
            )
        elif kind == "reopen":
            events.append(c.ev(TASKS, "TaskReopened", taskId=task))
        else:
            events.append(c.ev(JOBS, "JobExpired", jobId=data.draw(st.integers(1, 3))))
    return events, reads


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_projection_ignores_other_subjects_and_input_order(data: st.DataObject) -> None:
    """reduce(all events) equals reduce(own events), whatever else is mixed in or its order."""
    events, reads = _random_history(data)
    shuffled = data.draw(st.permutations(events), label="shuffle")
    for i in range(1, 4):
        task = "0x" + f"{i:064x}"
        own = [e for e in events if e.subject == task and e.contract == TASKS]
        own_reads = [r for r in reads if r.subject == task]
        expected = reduce_task(TASKS, task, own, own_reads)
        assert reduce_task(TASKS, task, shuffled, reads) == expected
        assert reduce_task(TASKS, task, events, list(reversed(reads))) == expected
        assert expected.updated_block == max((e.log.block_number for e in own), default=0)


class TestReadsFor:
    def test_each_event_asks_for_its_documented_reads(self) -> None:
        """JobCreated -> getJob, legacy BudgetSet -> contract-wide paymentToken, tasks -> config
        and verdict; all pinned to the event's own block."""
        c = Chain()
        cases: list[tuple[Event, list[tuple[str, str]]]] = [
            (_job_created(c, 9), [("9", "getJob")]),
            (_job_created(c, 10, "legacy"), [("10", "getJob")]),
            (c.ev(JOBS, "BudgetSet", "legacy", jobId=9, amount=1), [("", "paymentToken")]),
            (c.ev(JOBS, "BudgetSet", jobId=9, token=TOKEN, amount=1), []),
            (c.ev(JOBS, "JobFunded", jobId=9, client=CLIENT, amount=1), []),
            (
                c.ev(TASKS, "EvaluatorAssigned", taskId=TASK, evaluator=EVALUATOR, stakeAmount=0),
                [(TASK, "getTaskEvaluatorConfig")],
            ),
            (
                c.ev(TASKS, "TaskSubmitted", taskId=TASK, worker=PROVIDER, deliverable=REASON),
                [(TASK, "getTaskEvaluatorConfig")],
            ),
            (
                c.ev(
                    TASKS, "TaskEvaluated", taskId=TASK, evaluator=EVALUATOR, verdictType=0, score=1
                ),
                [(TASK, "getTaskVerdict")],
            ),
            (c.ev(TASKS, "TaskReopened", taskId=TASK), []),
        ]
        for event, expected in cases:
            requests = reads_for(event)
            assert [(r.subject, r.kind) for r in requests] == expected, event.name
            for r in requests:
                assert (r.contract, r.block_number, r.block_hash) == (
                    event.contract,
                    event.log.block_number,
                    event.log.block_hash,
                )
        unknown = replace(cases[0][0], name=None, variant="unknown", subject=None, args={})
        assert reads_for(unknown) == []


def test_only_the_legacy_dialect_may_take_a_jobs_token_from_a_later_block() -> None:
    """Legacy copies its immutable token into every job; elsewhere setBudget changes it."""
    c = Chain()
    (legacy,) = reads_for(_job_created(c, 1, "legacy"))
    (current,) = reads_for(_job_created(c, 2))
    assert "paymentToken" in legacy.stable and "description" in legacy.stable
    assert "paymentToken" not in current.stable and "description" in current.stable
    assert "status" not in legacy.stable and "budget" not in current.stable
