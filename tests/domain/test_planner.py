"""The planner fires each action on the first satisfying timestamp and never earlier."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keeper.domain.model import (
    BlockHeader,
    JobState,
    JobStatus,
    TaskState,
    TaskStatus,
    VerdictType,
)
from keeper.domain.planner import (
    EVALUATION_GRACE_PERIOD,
    HOOK_BLOCKED_RETRY_BLOCKS,
    Action,
    ActionKind,
    PlannerConfig,
    Report,
    ReportKind,
    plan,
    plan_job,
    plan_task,
)
from keeper.domain.sharding import is_mine, shard_of
from keeper.domain.taskmodes import BENCHMARK, BOUNTY, CLAIM

C = "0x" + "11" * 20
T0 = 1_700_000_000
ONE = PlannerConfig()


def head(ts: int, number: int = 100) -> BlockHeader:
    return BlockHeader(
        number=number, hash="0x" + "ab" * 32, parent_hash="0x" + "cd" * 32, timestamp=ts
    )


def job(status: JobStatus, **kw: object) -> JobState:
    base = JobState(contract=C, job_id="1", status=status, expired_at=T0, budget=5, funded_amount=5)
    return replace(base, **kw)  # type: ignore[arg-type]


def task(status: TaskStatus, **kw: object) -> TaskState:
    base = TaskState(contract=C, task_id="0x" + "22" * 32, status=status, expiry_time=T0)
    return replace(base, **kw)  # type: ignore[arg-type]


class TestJobBoundaries:
    """claimRefund mirrors ERC-8183's `>=` comparisons to the second."""

    @pytest.mark.parametrize(
        ("state", "first_due"),
        [
            (job(JobStatus.FUNDED), T0),
            (job(JobStatus.FUNDED, legacy=True), T0),
            # submitted long before expiry: expiredAt decides
            (job(JobStatus.SUBMITTED, submitted_at=T0 - 7200), T0),
            # submitted 10 minutes before expiry: the 1 hour grace decides
            (job(JobStatus.SUBMITTED, submitted_at=T0 - 600), T0 - 600 + EVALUATION_GRACE_PERIOD),
            # legacy has no grace period
            (job(JobStatus.SUBMITTED, submitted_at=T0 - 600, legacy=True), T0),
            (job(JobStatus.OPEN, budget=0, funded_amount=0), T0),
        ],
    )
    def test_fires_at_first_due_second_not_before(self, state: JobState, first_due: int) -> None:
        """One second before the due time nothing is planned; at it, claimRefund is."""
        assert plan_job(state, first_due - 1, ONE) is None
        decision = plan_job(state, first_due, ONE)
        assert isinstance(decision, Action)
        assert decision.action == "claimRefund"
        assert decision.due_at == first_due
        assert decision.subject == state.job_id

    @pytest.mark.parametrize("status", [JobStatus.COMPLETED, JobStatus.REJECTED, JobStatus.EXPIRED])
    def test_terminal_jobs_never_act(self, status: JobStatus) -> None:
        """A finished job is left alone however late it is."""
        assert plan_job(job(status), T0 + 10**6, ONE) is None

    def test_open_job_with_budget_is_reported_never_refunded(self) -> None:
        """An expired Open job with a budget is reported: claimRefund would drain escrow."""
        state = job(JobStatus.OPEN, budget=7, funded_amount=0)
        assert plan_job(state, T0 - 1, ONE) is None
        decision = plan_job(state, T0, ONE)
        assert isinstance(decision, Report)
        assert decision.kind is ReportKind.OPEN_JOB_WITH_BUDGET_EXPIRED
        assert "budget=7" in decision.detail

    def test_legacy_open_job_has_no_expiry_transition(self) -> None:
        """Legacy contracts cannot expire an Open job, so nothing is planned or reported."""
        assert plan_job(job(JobStatus.OPEN, budget=0, legacy=True), T0 + 999, ONE) is None
        assert plan_job(job(JobStatus.OPEN, budget=9, legacy=True), T0 + 999, ONE) is None

    def test_open_unfunded_can_be_switched_off(self) -> None:
        """With expire_open_unfunded off, an empty Open job is not worth the gas."""
        cfg = PlannerConfig(expire_open_unfunded=False)
        assert plan_job(job(JobStatus.OPEN, budget=0), T0 + 5, cfg) is None

    def test_unknown_deadlines_never_guess(self) -> None:
        """A job without expiredAt, or Submitted without submittedAt, is not acted on."""
        assert plan_job(job(JobStatus.FUNDED, expired_at=0), T0, ONE) is None
        assert plan_job(job(JobStatus.SUBMITTED, submitted_at=None), T0 + 10**6, ONE) is None


class TestTaskBoundaries:
    """Task-market actions use `>=` for appeal deadlines and `>` for expiry and evaluation."""

    @pytest.mark.parametrize(
        ("state", "kind", "first_due"),
        [
            (
                task(TaskStatus.APPEALING, appeal_deadline=T0 + 50, expiry_time=T0 + 50),
                ActionKind.FINALIZE_VERDICT,
                T0 + 50,
            ),
            (
                task(TaskStatus.REVIEW, evaluation_deadline=T0 - 20),
                ActionKind.EVALUATOR_TIMEOUT,
                T0 - 19,
            ),
            (task(TaskStatus.OPEN), ActionKind.REFUND_EXPIRED, T0 + 1),
            (task(TaskStatus.CLAIMED), ActionKind.REFUND_EXPIRED, T0 + 1),
            (task(TaskStatus.WORKER_SELECTED), ActionKind.REFUND_EXPIRED, T0 + 1),
            (task(TaskStatus.PENDING_APPROVAL), ActionKind.REFUND_EXPIRED, T0 + 1),
        ],
    )
    def test_fires_at_first_due_second_not_before(
        self, state: TaskState, kind: ActionKind, first_due: int
    ) -> None:
        """One second before the boundary nothing is planned; at it, the action is."""
        assert plan_task(state, first_due - 1) is None
        decision = plan_task(state, first_due)
        assert isinstance(decision, Action)
        assert decision.action is kind
        assert decision.due_at == first_due

    @pytest.mark.parametrize("status", [TaskStatus.OPEN, TaskStatus.CLAIMED])
    def test_unknown_expiry_never_guesses(self, status: TaskStatus) -> None:
        """A task whose expiryTime the projection does not know yet (0) is not refunded."""
        assert plan_task(task(status, expiry_time=0), T0 + 10**6) is None

    @pytest.mark.parametrize(
        ("verdict", "awards", "alone"),
        [
            (VerdictType.APPROVE, "0", True),
            (VerdictType.PARTIAL, "0", True),
            (VerdictType.APPROVE, "1", False),
            (VerdictType.REJECT, "0", False),  # cancels the task: TaskCancelled
            (VerdictType.APPROVE, None, False),  # the verdict's awards were never read
            (None, "0", False),  # a verdict type this release does not know
        ],
    )
    def test_a_finalize_paying_no_award_is_sent_alone(
        self, verdict: VerdictType | None, awards: str | None, alone: bool
    ) -> None:
        """Its success logs nothing, so it must not share a Multicall3 batch, where a call
        is only known to have worked by its subject's log (keeper.act.silent)."""
        extra = {} if awards is None else {"award_total": awards}
        state = task(TaskStatus.APPEALING, appeal_deadline=T0, verdict_type=verdict, extra=extra)
        decision = plan_task(state, T0)
        assert isinstance(decision, Action)
        assert (decision.action, decision.alone) == (ActionKind.FINALIZE_VERDICT, alone)

    def test_appealing_past_expiry_is_finalized_never_refunded(self) -> None:
        """An Appealing task past both its appeal deadline and expiry gets finalizeVerdict only."""
        state = task(TaskStatus.APPEALING, appeal_deadline=T0 - 100, expiry_time=T0 - 200)
        decision = plan_task(state, T0)
        assert isinstance(decision, Action)
        assert decision.action is ActionKind.FINALIZE_VERDICT
        early = plan_task(replace(state, appeal_deadline=T0 + 100), T0)
        assert early is None

    @pytest.mark.parametrize(
        "status", [TaskStatus.ACCEPTED, TaskStatus.CANCELLED, TaskStatus.EXPIRED]
    )
    def test_terminal_tasks_never_act(self, status: TaskStatus) -> None:
        """Accepted, Cancelled and Expired tasks are never refunded again."""
        assert plan_task(task(status), T0 + 10**6) is None

    def test_disputed_past_expiry_is_reported(self) -> None:
        """A Disputed task waits for its resolver: reported, not refunded."""
        decision = plan_task(task(TaskStatus.DISPUTED), T0 + 1)
        assert isinstance(decision, Report)
        assert decision.kind is ReportKind.DISPUTED_PAST_EXPIRY
        assert plan_task(task(TaskStatus.DISPUTED), T0) is None

    def test_denied_timeout_falls_back_to_refund_after_expiry(self) -> None:
        """Where evaluatorTimeout is not ours to call, a Review task is refunded past expiry."""
        state = task(TaskStatus.REVIEW, evaluation_deadline=T0 - 100)
        denied = {(C, state.task_id, "evaluatorTimeout")}
        assert plan_task(state, T0, denied) is None
        decision = plan_task(state, T0 + 1, denied)
        assert isinstance(decision, Action)
        assert decision.action is ActionKind.REFUND_EXPIRED
        other = plan_task(state, T0 + 1, {(C, "0x" + "33" * 32, "evaluatorTimeout")})
        assert isinstance(other, Action) and other.action is ActionKind.EVALUATOR_TIMEOUT

    @pytest.mark.parametrize("mode", [BOUNTY, BENCHMARK])
    def test_contest_with_submissions_is_reported_not_refunded(self, mode: str) -> None:
        """A Bounty/Benchmark with active submissions: the contract says SubmissionsExist."""
        state = task(TaskStatus.OPEN, mode=mode, extra={"active_submissions": "2"})
        decision = plan_task(state, T0 + 1)
        assert isinstance(decision, Report)
        assert decision.kind is ReportKind.SUBMISSIONS_PENDING_PAST_EXPIRY
        # every submission rejected: refundable again; a Claim task never counts them
        for free in (replace(state, extra={"active_submissions": "0"}), replace(state, mode=CLAIM)):
            refund = plan_task(free, T0 + 1)
            assert isinstance(refund, Action) and refund.action is ActionKind.REFUND_EXPIRED

    def test_review_is_left_to_evaluator_timeout(self) -> None:
        """A Review task past expiry but inside its evaluation window gets nothing."""
        state = task(TaskStatus.REVIEW, evaluation_deadline=T0 + 100)
        assert plan_task(state, T0 + 50) is None


class TestPlan:
    """plan() combines decisions, orders them and applies sharding."""

    def test_orders_by_due_time_and_splits_reports(self) -> None:
        """Actions come out oldest-due first; reports are kept apart."""
        jobs = [
            job(JobStatus.FUNDED, job_id="3", expired_at=T0 - 10),
            job(JobStatus.FUNDED, job_id="2", expired_at=T0 - 30),
            job(JobStatus.OPEN, job_id="9", budget=4),
        ]
        tasks = [task(TaskStatus.OPEN, expiry_time=T0 - 20)]
        result = plan(jobs, tasks, head(T0), ONE)
        assert [a.subject for a in result.actions] == ["2", tasks[0].task_id, "3"]
        assert [r.subject for r in result.reports] == ["9"]

    def test_other_shards_work_waits_for_fallback(self) -> None:
        """A keeper skips another shard's due work until the fallback delay has passed."""
        subjects = [str(i) for i in range(1, 40)]
        foreign = next(s for s in subjects if shard_of(s, 3) != 0)
        own = next(s for s in subjects if shard_of(s, 3) == 0)
        cfg = PlannerConfig(shard=0, shards=3, shard_fallback_seconds=300)
        jobs = [job(JobStatus.FUNDED, job_id=s) for s in (foreign, own)]
        assert [a.subject for a in plan(jobs, [], head(T0 + 299), cfg).actions] == [own]
        late = plan(jobs, [], head(T0 + 300), cfg).actions
        assert sorted(a.subject for a in late) == sorted([own, foreign])

    def test_config_rejects_impossible_shard(self) -> None:
        """A shard index outside 0..shards-1, or a negative fallback, is a configuration
        error; a fallback of 0 (take any shard's work at once) is not."""
        with pytest.raises(ValueError):
            PlannerConfig(shard=2, shards=2)
        with pytest.raises(ValueError, match="shard_fallback_seconds"):
            PlannerConfig(shard=0, shards=2, shard_fallback_seconds=-1)
        assert (
            PlannerConfig(shard=0, shards=2, shard_fallback_seconds=0).shard_fallback_seconds == 0
        )


class TestSharding:
    """shard_of is stable and total; every subject has exactly one owner."""

    def test_stable_known_value(self) -> None:
        """The hash does not depend on the process (no Python hash seed), nor on case."""
        assert shard_of("0xABCD", 7) == shard_of("0xabcd", 7)
        assert shard_of("17", 1) == 0

    @given(st.text(min_size=1, max_size=70), st.integers(min_value=1, max_value=16))
    def test_exactly_one_owner_before_fallback(self, subject: str, shards: int) -> None:
        """Before the fallback exactly one of the N keepers takes a due subject."""
        owners = [
            k
            for k in range(shards)
            if is_mine(subject, shard=k, shards=shards, due_at=T0, now=T0, fallback_seconds=60)
        ]
        assert owners == [shard_of(subject, shards)]


_job_status = st.sampled_from(list(JobStatus))
_task_status = st.sampled_from(list(TaskStatus))
_ts = st.integers(min_value=1, max_value=2**40)


@given(
    status=_job_status,
    expired_at=_ts,
    submitted=st.one_of(st.none(), _ts),
    budget=st.integers(min_value=0, max_value=2**256 - 1),
    legacy=st.booleans(),
    now=_ts,
)
def test_job_action_is_only_ever_due_and_never_on_open_budget(
    status: JobStatus, expired_at: int, submitted: int | None, budget: int, legacy: bool, now: int
) -> None:
    """A planned claimRefund is due now, never before expiredAt, never on an Open budget."""
    state = job(status, expired_at=expired_at, submitted_at=submitted, budget=budget, legacy=legacy)
    decision = plan_job(state, now, ONE)
    if isinstance(decision, Action):
        assert expired_at <= decision.due_at <= now
        assert status in (JobStatus.FUNDED, JobStatus.SUBMITTED, JobStatus.OPEN)
        if status is JobStatus.OPEN:
            assert budget == 0 and not legacy
        if status is JobStatus.SUBMITTED and not legacy:
            assert submitted is not None and now >= submitted + EVALUATION_GRACE_PERIOD
        # the same job one second before its due time is not planned
        assert plan_job(state, decision.due_at - 1, ONE) is None


@given(
    status=_task_status,
    expiry=_ts,
    appeal=st.one_of(st.none(), _ts),
    evaluation=st.one_of(st.none(), _ts),
    now=_ts,
)
def test_task_action_respects_contract_comparisons(
    status: TaskStatus, expiry: int, appeal: int | None, evaluation: int | None, now: int
) -> None:
    """Any planned task action satisfies its contract comparison and is monotone in time."""
    state = task(status, expiry_time=expiry, appeal_deadline=appeal, evaluation_deadline=evaluation)
    decision = plan_task(state, now)
    if isinstance(decision, Action):
        if decision.action is ActionKind.REFUND_EXPIRED:
            assert now > expiry
            assert status not in (TaskStatus.APPEALING, TaskStatus.ACCEPTED, TaskStatus.CANCELLED)
            assert status not in (TaskStatus.EXPIRED, TaskStatus.DISPUTED, TaskStatus.REVIEW)
        elif decision.action is ActionKind.FINALIZE_VERDICT:
            assert status is TaskStatus.APPEALING and appeal is not None and now >= appeal
        else:
            assert status is TaskStatus.REVIEW and evaluation is not None and now > evaluation
        assert plan_task(state, decision.due_at - 1) is None
        assert plan_task(state, now + 1000) == decision


class TestERC8183Rules:
    """The ERC8183 dialect's deadlines, claims, pause and hook rules, to the second."""

    @pytest.mark.parametrize(
        ("state", "first_due"),
        [
            (job(JobStatus.FUNDED, dialect="erc8183"), T0),
            # grace from expiredAt however early the submission was
            (job(JobStatus.SUBMITTED, submitted_at=T0 - 7200, dialect="erc8183"),
             T0 + EVALUATION_GRACE_PERIOD),
            (job(JobStatus.SUBMITTED, submitted_at=None, dialect="erc8183"),
             T0 + EVALUATION_GRACE_PERIOD),
            # an Open job expires with no transfer: its budget is no hazard here
            (job(JobStatus.OPEN, budget=900, funded_amount=0, dialect="erc8183"), T0),
        ],
    )  # fmt: skip
    def test_first_due_second(self, state: JobState, first_due: int) -> None:
        """Nothing one second early; the action on the first second allowed."""
        assert plan_job(state, first_due - 1, ONE) is None
        action = plan_job(state, first_due, ONE)
        assert isinstance(action, Action) and action.due_at == first_due

    def test_pending_claim_is_reported_not_refunded(self) -> None:
        """A Funded job with a pending claim waits (report); a Submitted one does not."""
        pending = job(JobStatus.FUNDED, dialect="erc8183", pending_claim_amount=3)
        assert plan_job(pending, T0 - 1, ONE) is None
        report = plan_job(pending, T0 + 50, ONE)
        assert isinstance(report, Report)
        assert report.kind is ReportKind.CLAIM_PENDING_PAST_EXPIRY
        submitted = replace(pending, status=JobStatus.SUBMITTED)
        assert isinstance(plan_job(submitted, T0 + EVALUATION_GRACE_PERIOD, ONE), Action)

    def test_open_expiry_can_be_switched_off(self) -> None:
        """expire_open_unfunded = false leaves expired Open jobs alone, budget or not."""
        cfg = PlannerConfig(expire_open_unfunded=False)
        assert plan_job(job(JobStatus.OPEN, dialect="erc8183"), T0 + 9, cfg) is None

    def test_paused_contract_gets_nothing_planned(self) -> None:
        """No action and no report on a paused contract, an escrow's jobs or a task market's
        tasks; other contracts are unaffected."""
        other = job(JobStatus.FUNDED, dialect="erc8183", contract="0x" + "99" * 20)
        mine = job(JobStatus.FUNDED, dialect="erc8183")
        market = "0x" + "77" * 20
        tasks = [task(TaskStatus.OPEN), task(TaskStatus.OPEN, contract=market)]
        result = plan([mine, other], tasks, head(T0 + 1), ONE, paused={C})
        assert sorted(a.contract for a in result.actions) == sorted([other.contract, market])
        assert result.reports == []

    def test_hook_blocked_is_reported_until_detached_or_retry(self) -> None:
        """While the hook is attached: a report, no action, until the retry interval ends;
        with the hook detached the refund is planned at once."""
        hooked = job(JobStatus.FUNDED, dialect="erc8183", hook="0x" + "4b" * 20)
        blocked = {(C, "1"): 100}
        result = plan([hooked], [], head(T0, number=101), ONE, hook_blocked=blocked)
        assert result.actions == [] and [r.kind for r in result.reports] == [
            ReportKind.HOOK_BLOCKED
        ]
        later = head(T0, number=100 + HOOK_BLOCKED_RETRY_BLOCKS)
        assert len(plan([hooked], [], later, ONE, hook_blocked=blocked).actions) == 1
        detached = replace(hooked, hook="")
        result = plan([detached], [], head(T0, number=101), ONE, hook_blocked=blocked)
        assert len(result.actions) == 1 and result.reports == []

    def test_agentic_commerce_rules_unchanged(self) -> None:
        """The same job in the AgenticCommerce dialect keeps its grace from submission and
        its unfunded-Open hazard report."""
        sub = job(JobStatus.SUBMITTED, submitted_at=T0 - 600, dialect="agentic_commerce")
        action = plan_job(sub, T0 + 3000, ONE)
        assert isinstance(action, Action) and action.due_at == T0 - 600 + EVALUATION_GRACE_PERIOD
        open_ = job(JobStatus.OPEN, budget=900, funded_amount=0, dialect="agentic_commerce")
        report = plan_job(open_, T0, ONE)
        assert isinstance(report, Report)
        assert report.kind is ReportKind.OPEN_JOB_WITH_BUDGET_EXPIRED


# The keeper is handed only the subjects past a deadline (keeper.store.states reads the
# rest not at all): nothing may be decided, action or report, for one before them.
_ahead = st.integers(min_value=1, max_value=2**32)


@pytest.mark.parametrize("dialect", ["", "erc8183", "agentic_commerce", "legacy"])
@pytest.mark.parametrize("status", list(JobStatus))
@given(
    ahead=_ahead,
    submitted=st.one_of(st.none(), _ts),
    budget=st.integers(min_value=0, max_value=2**256 - 1),
    legacy=st.booleans(),
    pending=st.sampled_from([None, 0, 7]),
    hook=st.sampled_from(["", "0x" + "77" * 20]),
    expire_open=st.booleans(),
    now=_ts,
)
def test_nothing_is_decided_for_a_job_before_its_expiry(
    dialect: str,
    status: JobStatus,
    ahead: int,
    submitted: int | None,
    budget: int,
    legacy: bool,
    pending: int | None,
    hook: str,
    expire_open: bool,
    now: int,
) -> None:
    """Whatever the job, its dialect, a pending claim, a blocked hook or the config, a job
    whose expiredAt is still ahead gets neither an action nor a report."""
    state = job(
        status, expired_at=now + ahead, submitted_at=submitted, budget=budget, legacy=legacy,
        dialect=dialect, pending_claim_amount=pending, hook=hook,
    )  # fmt: skip
    config = PlannerConfig(expire_open_unfunded=expire_open)
    assert plan_job(state, now, config) is None
    blocked = {(C, state.job_id): 1}
    assert plan([state], [], head(now), config, hook_blocked=blocked).reports == []


@pytest.mark.parametrize("status", list(TaskStatus))
@given(
    expiry_ahead=st.integers(min_value=0, max_value=2**32),
    appeal_ahead=st.one_of(st.none(), _ahead),
    evaluation_ahead=st.one_of(st.none(), st.integers(min_value=0, max_value=2**32)),
    mode=st.sampled_from([CLAIM, BOUNTY, BENCHMARK]),
    submissions=st.sampled_from(["0", "2"]),
    timeout_denied=st.booleans(),
    now=_ts,
)
def test_nothing_is_decided_for_a_task_before_its_deadlines(
    status: TaskStatus,
    expiry_ahead: int,
    appeal_ahead: int | None,
    evaluation_ahead: int | None,
    mode: str,
    submissions: str,
    timeout_denied: bool,
    now: int,
) -> None:
    """A task is acted on or reported only once now is past its expiry or its evaluation
    deadline, or at its appeal deadline: with each still ahead (or unknown), nothing."""
    state = task(
        status, expiry_time=now + expiry_ahead, mode=mode,
        appeal_deadline=None if appeal_ahead is None else now + appeal_ahead,
        evaluation_deadline=None if evaluation_ahead is None else now + evaluation_ahead,
        extra={"active_submissions": submissions},
    )  # fmt: skip
    denied = {(C, state.task_id, "evaluatorTimeout")} if timeout_denied else set()
    assert plan_task(state, now, denied) is None
