"""The keeper's decisions: which permissionless call is due for which subject.

Pure: projections, the head block and the config come in; actions and reports
go out. Every comparison is against ``head.timestamp`` (what the contract will
see as ``block.timestamp`` at the earliest in the next block), never the wall
clock, and mirrors the contract's own ``require`` exactly so that the keeper
fires on the first block that can succeed and never one block earlier.

``due_at`` is the first chain timestamp at which the call can succeed, so the
boundary is the same ``head.timestamp >= due_at`` for every action (a strict
``>`` in the contract becomes ``deadline + 1``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TypeAlias

from keeper.domain.model import (
    BlockHeader,
    JobState,
    JobStatus,
    Protocol,
    TaskState,
    TaskStatus,
    VerdictType,
)
from keeper.domain.sharding import is_mine
from keeper.domain.taskmodes import CONTEST_MODES

__all__ = [
    "EVALUATION_GRACE_PERIOD",
    "Action",
    "ActionKind",
    "Denied",
    "PlanResult",
    "PlannerConfig",
    "Report",
    "ReportKind",
    "plan",
    "plan_job",
    "plan_task",
]

# ERC-8183 AgenticCommerce and ERC8183: a Submitted job gives the evaluator one hour
# (after submission in AgenticCommerce, after expiredAt in ERC8183) before the client
# may take the money back.
EVALUATION_GRACE_PERIOD = 3600
# A claimRefund a hook reverted is not simulated again while the hook stays attached,
# except once per this many blocks (the hook's owner may have relented).
HOOK_BLOCKED_RETRY_BLOCKS = 1800


class ActionKind(StrEnum):
    """The contract function the keeper calls; the value is the Solidity name."""

    CLAIM_REFUND = "claimRefund"
    FINALIZE_VERDICT = "finalizeVerdict"
    REFUND_EXPIRED = "refundExpired"
    EVALUATOR_TIMEOUT = "evaluatorTimeout"


class ReportKind(StrEnum):
    """Conditions the keeper sees but must not act on."""

    # current-reference claimRefund would pay out a budget that was never funded
    OPEN_JOB_WITH_BUDGET_EXPIRED = "open_job_with_budget_expired"
    # only the dispute resolver can move it; the escrow waits on a person
    DISPUTED_PAST_EXPIRY = "disputed_past_expiry"
    # a Bounty/Benchmark with active submissions: the requester must accept or reject
    # them; the contract refuses the refund (SubmissionsExist) and so do we
    SUBMISSIONS_PENDING_PAST_EXPIRY = "submissions_pending_past_expiry"
    # ERC8183: a claim awaits the client's or evaluator's verdict; claimRefund would
    # revert PendingClaimExists, so the refund waits for the claim to be resolved
    CLAIM_PENDING_PAST_EXPIRY = "claim_pending_past_expiry"
    # ERC8183: the job's hook reverted claimRefund; the admin must detach it
    HOOK_BLOCKED = "hook_blocked"


@dataclass(frozen=True, slots=True)
class Action:
    """One due call: ``action(subject)`` on ``contract``, possible from ``due_at`` on."""

    contract: str
    subject: str
    action: ActionKind
    due_at: int
    protocol: Protocol
    # sent from the signer itself, never inside a Multicall3 batch: a call whose success
    # logs nothing (a finalize paying no award), which only its own receipt's status shows
    alone: bool = False


@dataclass(frozen=True, slots=True)
class Report:
    """Something an operator should see; ``detail`` holds no secrets, only chain facts."""

    contract: str
    subject: str
    kind: ReportKind
    detail: str


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    """Sharding and policy knobs of the planner.

    ``expire_open_unfunded``: the current ERC-8183 reference lets anyone expire
    an Open job once ``expiredAt`` passes; with budget 0 it moves no money and
    only tidies state, so an operator may prefer to save the gas.
    """

    shard: int = 0
    shards: int = 1
    shard_fallback_seconds: int = 600
    expire_open_unfunded: bool = True

    def __post_init__(self) -> None:
        if self.shards < 1 or not 0 <= self.shard < self.shards:
            raise ValueError(f"shard {self.shard} out of range for shards={self.shards}")
        if self.shard_fallback_seconds < 0:
            raise ValueError("shard_fallback_seconds must be >= 0")


@dataclass(slots=True)
class PlanResult:
    actions: list[Action] = field(default_factory=list)
    reports: list[Report] = field(default_factory=list)


# Statuses from which the task market's refundExpired refunds the requester
# (the contract accepts any status but Accepted/Cancelled/Expired; before revision 16
# it even paid an Expired task again, out of other tasks' escrow). Appealing is
# left to finalizeVerdict: a refund there would override an APPROVE verdict.
# Disputed is left to the dispute resolver: its expiry usually passes with the
# appeal deadline, so refunding would void every appeal the moment it is made.
# Review goes to evaluatorTimeout first, and to refundExpired only where that
# call is denied to us (a requester-only contract), so it cannot stay stuck.
_REFUNDABLE_TASK = frozenset(
    {
        TaskStatus.OPEN,
        TaskStatus.CLAIMED,
        TaskStatus.WORKER_SELECTED,
        TaskStatus.PENDING_APPROVAL,
        TaskStatus.REVIEW,
    }
)

# (contract, subject, action) triples the keeper was told are not its to call.
Denied: TypeAlias = Collection[tuple[str, str, str]]


# (contract, subject) -> block at which the job's hook reverted claimRefund
HookBlocked: TypeAlias = Mapping[tuple[str, str], int]


def plan_job(job: JobState, now: int, config: PlannerConfig) -> Action | Report | None:
    """The claimRefund decision for one ERC-8183 job at chain time ``now``."""
    if job.expired_at <= 0:
        return None  # deadline not known yet (projection incomplete): never guess
    if job.dialect == "erc8183":
        return _plan_erc8183_job(job, now, config)
    due: int | None = None
    if job.status is JobStatus.FUNDED:
        due = job.expired_at
    elif job.status is JobStatus.SUBMITTED:
        due = job.expired_at
        if not job.legacy:
            if job.submitted_at is None:
                return None  # the grace period cannot be checked without it
            due = max(due, job.submitted_at + EVALUATION_GRACE_PERIOD)
    elif job.status is JobStatus.OPEN and not job.legacy:
        if now < job.expired_at:
            return None
        if job.budget != 0:
            return Report(
                job.contract,
                job.job_id,
                ReportKind.OPEN_JOB_WITH_BUDGET_EXPIRED,
                f"budget={job.budget} expiredAt={job.expired_at}",
            )
        if config.expire_open_unfunded:
            due = job.expired_at
    if due is None or now < due:
        return None
    return Action(job.contract, job.job_id, ActionKind.CLAIM_REFUND, due, Protocol.ERC8183)


def _plan_erc8183_job(job: JobState, now: int, config: PlannerConfig) -> Action | Report | None:
    """ERC8183.sol's rules: grace from expiredAt, claims first, Open expires with no transfer."""
    if now < job.expired_at:
        return None
    due: int | None = None
    if job.status is JobStatus.FUNDED:
        if job.pending_claim_amount is not None:
            return Report(
                job.contract,
                job.job_id,
                ReportKind.CLAIM_PENDING_PAST_EXPIRY,
                f"claim of cumulative {job.pending_claim_amount} pending; "
                f"expiredAt={job.expired_at}",
            )
        due = job.expired_at
    elif job.status is JobStatus.SUBMITTED:
        due = job.expired_at + EVALUATION_GRACE_PERIOD  # a pending claim does not block it
    elif job.status is JobStatus.OPEN and config.expire_open_unfunded:
        due = job.expired_at  # nothing is transferred, whatever the budget says
    if due is None or now < due:
        return None
    return Action(job.contract, job.job_id, ActionKind.CLAIM_REFUND, due, Protocol.ERC8183)


def plan_task(task: TaskState, now: int, denied: Denied = ()) -> Action | Report | None:
    """The task-market decision for one task at chain time ``now``.

    ``denied`` holds actions that ended ``not_permitted`` for this keeper, so a
    Review task whose evaluatorTimeout is requester-only falls through to
    refundExpired once it is past expiry instead of waiting forever.
    """
    status = task.status
    if status is TaskStatus.APPEALING:
        if task.appeal_deadline is not None and now >= task.appeal_deadline:
            action = _task_action(task, ActionKind.FINALIZE_VERDICT, task.appeal_deadline)
            silent = (
                task.extra.get("award_total") == "0"
                and task.verdict_type is not None
                and task.verdict_type is not VerdictType.REJECT
            )
            return replace(action, alone=True) if silent else action
        return None
    if status is TaskStatus.REVIEW:
        deadline = task.evaluation_deadline
        timeout = (task.contract, task.task_id, ActionKind.EVALUATOR_TIMEOUT.value)
        if timeout not in denied:
            if deadline is not None and now > deadline:
                return _task_action(task, ActionKind.EVALUATOR_TIMEOUT, deadline + 1)
            return None
    if task.expiry_time <= 0 or now <= task.expiry_time:
        return None
    if status is TaskStatus.DISPUTED:
        return Report(
            task.contract,
            task.task_id,
            ReportKind.DISPUTED_PAST_EXPIRY,
            f"expiryTime={task.expiry_time}",
        )
    if status not in _REFUNDABLE_TASK:
        return None
    if task.mode in CONTEST_MODES and int(task.extra.get("active_submissions", "0")) > 0:
        return Report(
            task.contract,
            task.task_id,
            ReportKind.SUBMISSIONS_PENDING_PAST_EXPIRY,
            f"active_submissions={task.extra['active_submissions']} expiryTime={task.expiry_time}",
        )
    return _task_action(task, ActionKind.REFUND_EXPIRED, task.expiry_time + 1)


def _task_action(task: TaskState, kind: ActionKind, due_at: int) -> Action:
    return Action(task.contract, task.task_id, kind, due_at, Protocol.TASKMARKET)


def plan(
    jobs: Iterable[JobState],
    tasks: Iterable[TaskState],
    head: BlockHeader,
    config: PlannerConfig,
    denied: Denied = (),
    *,
    paused: Collection[str] = (),
    hook_blocked: HookBlocked | None = None,
) -> PlanResult:
    """All actions due at ``head`` that belong to this keeper, plus reports.

    Reports are never sharded: every keeper sees the hazards. Actions come out
    oldest due first, then by contract and subject, so a batch limit always
    serves the longest-waiting escrows and two runs give the same order.

    ``paused``: contracts whose last pause event was Paused; nothing is planned on them
    (no simulation either), the caller says so once per contract. ``hook_blocked``: jobs
    whose hook reverted claimRefund, with the block it happened at; while the job still
    has a hook it is reported, not planned, until ``HOOK_BLOCKED_RETRY_BLOCKS`` pass.
    """
    now = head.timestamp
    result = PlanResult()
    blocked = hook_blocked or {}
    decisions: list[Action | Report | None] = []
    for job in jobs:
        if job.contract in paused:
            continue
        decision = plan_job(job, now, config)
        at = blocked.get((job.contract, job.job_id))
        if (
            isinstance(decision, Action)
            and at is not None
            and job.hook
            and head.number < at + HOOK_BLOCKED_RETRY_BLOCKS
        ):
            decision = Report(
                job.contract,
                job.job_id,
                ReportKind.HOOK_BLOCKED,
                f"hook {job.hook} reverted claimRefund at block {at}; detach it "
                "(batchDetachHook) to let the refund through",
            )
        decisions.append(decision)
    decisions += [plan_task(t, now, denied) for t in tasks if t.contract not in paused]
    for decision in decisions:
        if isinstance(decision, Report):
            result.reports.append(decision)
        elif decision is not None and is_mine(
            decision.subject,
            shard=config.shard,
            shards=config.shards,
            due_at=decision.due_at,
            now=now,
            fallback_seconds=config.shard_fallback_seconds,
        ):
            result.actions.append(decision)
    result.actions.sort(key=lambda a: (a.due_at, a.contract, a.subject, a.action.value))
    result.reports.sort(key=lambda r: (r.contract, r.subject, r.kind.value))
    return result
