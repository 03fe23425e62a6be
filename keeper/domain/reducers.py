"""Projections: one job or task folded from its events plus its pinned reads.

Pure and deterministic: the same events and reads give the same state, in any
input order (events are sorted by ``(block_number, log_index)`` here) and
whatever other subjects' events or reads are mixed in (they are filtered
out). That is what lets the store rebuild any subject, or all of them, after
a reorg or an upgrade and get byte-identical tables.

A read recorded as failed (result key ``error``, e.g. a reverted call) is
ignored. A read is used only when it was taken at the block of one of the
subject's own events (the description, which never changes, may come from any
earlier read of the same job). A read can therefore only change a projection
together with an event of that subject, and incremental and full rebuilds
agree.

Events are trusted over expectations: a status follows the last event, even
if a contract skipped a state we think it should have passed through.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from keeper.domain.model import (
    ArgValue,
    ChainRead,
    Event,
    JobState,
    JobStatus,
    Protocol,
    TaskState,
    TaskStatus,
    VerdictType,
)
from keeper.domain.reads import (
    GET_JOB,
    GET_TASK_EVALUATOR_CONFIG,
    GET_TASK_VERDICT,
    PAYMENT_TOKEN,
)
from keeper.domain.taskmodes import CONTEST_MODES

__all__ = ["ZERO_ADDRESS", "reduce_job", "reduce_task"]

ZERO_ADDRESS = "0x" + "0" * 40
_VERDICT_VALUES = frozenset(v.value for v in VerdictType)


def _int(value: ArgValue | None, default: int = 0) -> int:
    """Read results may come back from JSON as decimal strings; events give ints."""
    if value is None:
        return default
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value, 0) if value.startswith("0x") else int(value)
        except ValueError:
            return default
    return default


def _str(value: ArgValue | None) -> str:
    return value.lower() if isinstance(value, str) else ""


def _addr_or_none(value: ArgValue | None) -> str | None:
    s = _str(value)
    return s if s and s != ZERO_ADDRESS else None


def _chain_order(events: Sequence[Event], contract: str, subject: str, p: Protocol) -> list[Event]:
    mine = [
        e
        for e in events
        if e.subject == subject and e.contract == contract and e.protocol is p and e.name
    ]
    mine.sort(key=lambda e: (e.log.block_number, e.log.log_index))
    return mine


@dataclass(slots=True)
class _Reads:
    """A subject's reads by kind, ordered by block, with the pinning rule above."""

    by_kind: dict[str, list[ChainRead]] = field(default_factory=dict)

    @classmethod
    def of(cls, reads: Sequence[ChainRead], contract: str, subject: str) -> _Reads:
        out = cls()
        for r in reads:
            if r.contract == contract and r.subject == subject:
                out.by_kind.setdefault(r.kind, []).append(r)
        for lst in out.by_kind.values():
            lst.sort(key=lambda r: (r.block_number, r.block_hash))
        return out

    def at(self, kind: str, event: Event, *, exact: bool = False) -> Mapping[str, ArgValue] | None:
        """The read taken at the event's block, else (unless exact) the latest before it."""
        best: ChainRead | None = None
        for r in self.by_kind.get(kind, ()):
            if "error" in r.result:  # a reverted/undecodable call is no information
                continue
            if r.block_hash == event.log.block_hash:
                return r.result
            if not exact and r.block_number < event.log.block_number:
                best = r
        return best.result if best is not None else None


# --- jobs -----------------------------------------------------------------------------


@dataclass(slots=True)
class _JobCtx:
    reads: _Reads
    token_reads: dict[str, Mapping[str, ArgValue]]  # block hash -> paymentToken result


# JobCreated's shape names the dialect that emitted it
_DIALECT_OF_VARIANT = {"erc8183": "erc8183", "current": "agentic_commerce", "legacy": "legacy"}


def _job_created(st: JobState, e: Event, ctx: _JobCtx) -> None:
    a = e.args
    st.client = _str(a["client"])
    st.provider = _str(a["provider"])
    st.evaluator = _str(a["evaluator"])
    st.expired_at = _int(a["expiredAt"])
    st.hook = _str(a.get("hook"))
    st.legacy = e.variant == "legacy"
    st.dialect = _DIALECT_OF_VARIANT.get(e.variant, st.dialect)
    st.created_block = e.log.block_number
    st.status = JobStatus.OPEN
    job = ctx.reads.at(GET_JOB, e)
    if job is not None:
        desc = job.get("description")
        st.description = desc if isinstance(desc, str) else None
        if not st.token:
            token = _addr_or_none(job.get("paymentToken"))
            st.token = token or ""


def _provider_set(st: JobState, e: Event, ctx: _JobCtx) -> None:
    st.provider = _str(e.args["provider"])


def _budget_set(st: JobState, e: Event, ctx: _JobCtx) -> None:
    st.budget = _int(e.args["amount"])
    if "token" in e.args:
        st.token = _str(e.args["token"])
        return
    st.legacy = True
    token = ctx.token_reads.get(e.log.block_hash)
    if token is not None:
        st.token = _str(token.get("token"))


def _job_funded(st: JobState, e: Event, ctx: _JobCtx) -> None:
    st.funded_amount = _int(e.args["amount"])
    st.status = JobStatus.FUNDED


def _job_submitted(st: JobState, e: Event, ctx: _JobCtx) -> None:
    st.deliverable = _str(e.args["deliverable"])
    st.submitted_at = e.block_timestamp
    st.status = JobStatus.SUBMITTED


def _job_completed(st: JobState, e: Event, ctx: _JobCtx) -> None:
    st.reason = _str(e.args["reason"])
    st.verdict_event = "JobCompleted"
    st.status = JobStatus.COMPLETED


def _job_rejected(st: JobState, e: Event, ctx: _JobCtx) -> None:
    # A client rejecting its own Open job is a cancellation, not an evaluator's
    # verdict: there is no verdict document to verify behind its reason.
    by_evaluator = st.status is not JobStatus.OPEN or _str(e.args["rejector"]) == st.evaluator
    st.reason = _str(e.args["reason"])
    st.verdict_event = "JobRejected" if by_evaluator else None
    st.status = JobStatus.REJECTED


def _job_expired(st: JobState, e: Event, ctx: _JobCtx) -> None:
    st.status = JobStatus.EXPIRED


def _payment_released(st: JobState, e: Event, ctx: _JobCtx) -> None:
    st.paid_amount += _int(e.args["amount"])


def _refunded(st: JobState, e: Event, ctx: _JobCtx) -> None:
    st.refunded_amount += _int(e.args["amount"])


def _payout_receiver_set(st: JobState, e: Event, ctx: _JobCtx) -> None:
    st.payout_receiver = _addr_or_none(e.args["payoutReceiver"])


def _claim_submitted(st: JobState, e: Event, ctx: _JobCtx) -> None:
    st.pending_claim_amount = _int(e.args["cumulativeAmount"])


def _claim_resolved(st: JobState, e: Event, ctx: _JobCtx) -> None:
    """ClaimApproved / ClaimRejected: nothing awaits a verdict any more (Settled moves money)."""
    st.pending_claim_amount = None


def _settled(st: JobState, e: Event, ctx: _JobCtx) -> None:
    # cumulative, so a replayed or reordered Settled can never double-count
    st.settled_amount = max(st.settled_amount, _int(e.args["cumulativeAmount"]))


def _hook_detached(st: JobState, e: Event, ctx: _JobCtx) -> None:
    st.hook = ""


def _no_change(st: object, e: Event, ctx: object) -> None:
    """Fee events and the like: they move updated_block only."""


_JOB_HANDLERS: dict[str, Callable[[JobState, Event, _JobCtx], None]] = {
    "JobCreated": _job_created,
    "ProviderSet": _provider_set,
    "BudgetSet": _budget_set,
    "JobFunded": _job_funded,
    "JobSubmitted": _job_submitted,
    "JobCompleted": _job_completed,
    "JobRejected": _job_rejected,
    "JobExpired": _job_expired,
    "PaymentReleased": _payment_released,
    "Refunded": _refunded,
    "PlatformFeePaid": _no_change,
    "EvaluatorFeePaid": _no_change,
    "PayoutReceiverSet": _payout_receiver_set,
    "ClaimSubmitted": _claim_submitted,
    "ClaimApproved": _claim_resolved,
    "ClaimRejected": _claim_resolved,
    "ClaimSettled": _no_change,
    "Settled": _settled,
    "Disbursed": _no_change,
    "HookDetached": _hook_detached,
}


def reduce_job(
    contract: str, job_id: str, events: Sequence[Event], reads: Sequence[ChainRead]
) -> JobState:
    """Fold an ERC-8183 job from its events; other subjects' events are ignored."""
    st = JobState(contract=contract, job_id=job_id)
    mine = _chain_order(events, contract, job_id, Protocol.ERC8183)
    if not mine:
        return st
    ctx = _JobCtx(
        reads=_Reads.of(reads, contract, job_id),
        token_reads={
            r.block_hash: r.result
            for r in reads
            if r.contract == contract
            and r.subject == ""
            and r.kind == PAYMENT_TOKEN
            and "error" not in r.result
        },
    )
    st.created_block = mine[0].log.block_number
    for e in mine:
        if e.variant == "legacy":
            st.legacy = True
        handler = _JOB_HANDLERS.get(e.name or "")
        if handler is not None:
            handler(st, e, ctx)
        st.updated_block = e.log.block_number
    if st.status not in (JobStatus.OPEN, JobStatus.FUNDED, JobStatus.SUBMITTED):
        st.pending_claim_amount = None  # a terminal job has no claim pending (the contract agrees)
    return st


# --- tasks ----------------------------------------------------------------------------


@dataclass(slots=True)
class _TaskCtx:
    reads: _Reads
    config_known: bool = False


def _raise_expiry(st: TaskState, deadline: int) -> None:
    """The contract raises expiryTime to at least each new deadline; mirror it."""
    st.expiry_time = max(st.expiry_time, deadline)


def _apply_config(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    # exact: an older config would resurrect an evaluator removed since (timeout)
    cfg = ctx.reads.at(GET_TASK_EVALUATOR_CONFIG, e, exact=True)
    if cfg is None:
        return
    ctx.config_known = True
    st.evaluator = _addr_or_none(cfg.get("evaluator"))
    st.evaluator_stake = _int(cfg.get("evaluatorStake"))
    st.evaluator_fee_bps = _int(cfg.get("evaluatorFeeBps"))
    st.evaluation_window = _int(cfg.get("evaluationWindow"))
    st.appeal_window = _int(cfg.get("appealWindow"))
    st.dispute_resolver = _addr_or_none(cfg.get("disputeResolver"))


def _task_created(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    """Every TaskCreated shape (rev 14+, pre-14, older) gives the same fields.

    On the rev 18+ diamond EvaluatorAssigned comes first in the same transaction, so
    nothing it set is reset here.
    """
    a = e.args
    st.requester = _str(a["requester"])
    st.reward = _int(a["reward"])
    st.mode = _str(a["mode"])
    st.expiry_time = _int(a["expiryTime"])
    st.status = TaskStatus.OPEN
    if "stakeRequired" in a:
        st.extra["stake_required"] = "1" if a["stakeRequired"] else "0"
        st.extra["stake_bps"] = str(_int(a["stakeBps"]))


def _task_updated(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    """The requester changed an Open task's reward and expiry: the deadline moves."""
    st.reward = _int(e.args["newReward"])
    st.expiry_time = _int(e.args["newExpiryTime"])


def _submitters(st: TaskState) -> dict[str, int]:
    raw = st.extra.get("submitters")
    return {k: int(v) for k, v in json.loads(raw).items()} if raw else {}


def _contest_submitted(st: TaskState, worker: str) -> None:
    """A Bounty/Benchmark submission: the task stays Open and counts it."""
    counts = _submitters(st)
    counts[worker] = counts.get(worker, 0) + 1
    st.extra["submitters"] = json.dumps(counts, sort_keys=True)
    st.extra["active_submissions"] = str(_int(st.extra.get("active_submissions")) + 1)


def _submission_rejected(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    """The contract subtracts the worker's whole submission count (at least 1)."""
    worker = _str(e.args["worker"])
    counts = _submitters(st)
    decrement = max(counts.pop(worker, 0), 1)
    st.extra["submitters"] = json.dumps(counts, sort_keys=True)
    active = _int(st.extra.get("active_submissions"))
    st.extra["active_submissions"] = str(max(active - decrement, 0))


def _evaluator_assigned(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    _apply_config(st, e, ctx)
    st.evaluator = _addr_or_none(e.args["evaluator"])
    st.evaluator_stake = _int(e.args["stakeAmount"])


def _task_claimed(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    st.worker = _str(e.args["worker"])
    st.extra["worker_stake"] = str(_int(e.args["stakeAmount"]))
    st.status = TaskStatus.CLAIMED


def _worker_selected(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    st.worker = _str(e.args["worker"])
    st.status = TaskStatus.WORKER_SELECTED


def _task_submitted(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    _apply_config(st, e, ctx)
    if st.mode in CONTEST_MODES:
        _contest_submitted(st, _str(e.args["worker"]))
        st.submitted_at = e.block_timestamp
        return
    st.worker = _str(e.args["worker"])
    st.deliverable = _str(e.args["deliverable"])
    st.submitted_at = e.block_timestamp
    if st.evaluator is None:
        st.status = TaskStatus.PENDING_APPROVAL
        st.evaluation_deadline = None
        return
    st.status = TaskStatus.REVIEW
    if ctx.config_known:
        st.evaluation_deadline = e.block_timestamp + st.evaluation_window
        _raise_expiry(st, st.evaluation_deadline)
    else:
        st.evaluation_deadline = None


def _task_evaluated(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    raw = _int(e.args["verdictType"])
    st.verdict_type = VerdictType(raw) if raw in _VERDICT_VALUES else None
    if st.verdict_type is None:
        st.extra["verdict_type_raw"] = str(raw)
    st.score = _int(e.args["score"])
    st.evaluator = _str(e.args["evaluator"])
    st.evaluated_at = e.block_timestamp
    st.status = TaskStatus.APPEALING
    if ctx.config_known:
        st.appeal_deadline = e.block_timestamp + st.appeal_window
        _raise_expiry(st, st.appeal_deadline)
    verdict = ctx.reads.at(GET_TASK_VERDICT, e, exact=True)
    if verdict is not None and verdict.get("issued") in (True, 1, "1", "true"):
        st.evidence_hash = _str(verdict.get("evidenceHash")) or None
        st.extra["confidence"] = str(_int(verdict.get("confidence")))


def _task_appealed(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    st.extra["appellant"] = _str(e.args["appellant"])
    st.status = TaskStatus.DISPUTED


def _task_disputed(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    st.dispute_resolver = _addr_or_none(e.args["disputeResolver"])
    st.status = TaskStatus.DISPUTED


def _evaluator_timed_out(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    # The evaluator is removed: the requester reviews, and a later submission
    # (after a reopen) goes to pending approval, not to review.
    st.extra["timed_out_evaluator"] = _str(e.args["evaluator"])
    st.extra["forfeited_stake"] = str(_int(e.args["forfeitedStake"]))
    st.evaluator = None
    st.evaluation_deadline = None
    st.status = TaskStatus.PENDING_APPROVAL


def _task_paid(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    """TaskCompleted (one per award) or the older TaskAccepted."""
    st.paid_amount += _int(e.args["workerPayment"])
    fees = _int(st.extra.get("platform_fee")) + _int(e.args["platformFee"])
    st.extra["platform_fee"] = str(fees)
    st.extra["awards"] = str(_int(st.extra.get("awards")) + 1)
    if st.worker is None:
        st.worker = _str(e.args["worker"])
    st.status = TaskStatus.ACCEPTED


def _task_expired(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    st.refunded_amount += _int(e.args["refundAmount"])
    st.status = TaskStatus.EXPIRED


def _task_cancelled(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    st.refunded_amount += _int(e.args["refundAmount"])
    st.status = TaskStatus.CANCELLED


def _task_reopened(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    """Back to Open for a new round: the previous round's work and verdict are void."""
    st.status = TaskStatus.OPEN
    st.worker = None
    st.deliverable = None
    st.submitted_at = None
    st.evaluation_deadline = None
    st.evaluated_at = None
    st.appeal_deadline = None
    st.verdict_type = None
    st.score = None
    st.evidence_hash = None
    for key in ("worker_stake", "verdict_type_raw", "confidence", "appellant"):
        st.extra.pop(key, None)


_TASK_HANDLERS: dict[str, Callable[[TaskState, Event, _TaskCtx], None]] = {
    "TaskCreated": _task_created,
    "TaskUpdated": _task_updated,
    "SubmissionRejected": _submission_rejected,
    "EvaluatorAssigned": _evaluator_assigned,
    "TaskClaimed": _task_claimed,
    "TaskWorkerSelected": _worker_selected,
    "TaskSubmitted": _task_submitted,
    "TaskEvaluated": _task_evaluated,
    "TaskAppealed": _task_appealed,
    "TaskDisputed": _task_disputed,
    "EvaluatorTimedOut": _evaluator_timed_out,
    "TaskCompleted": _task_paid,
    "TaskAccepted": _task_paid,
    "TaskExpired": _task_expired,
    "TaskCancelled": _task_cancelled,
    "TaskReopened": _task_reopened,
}


def reduce_task(
    contract: str, task_id: str, events: Sequence[Event], reads: Sequence[ChainRead]
) -> TaskState:
    """Fold a task-market task from its events; other subjects' events are ignored."""
    st = TaskState(contract=contract, task_id=task_id)
    mine = _chain_order(events, contract, task_id, Protocol.TASKMARKET)
    if not mine:
        return st
    ctx = _TaskCtx(reads=_Reads.of(reads, contract, task_id))
    st.created_block = mine[0].log.block_number
    for e in mine:
        handler = _TASK_HANDLERS.get(e.name or "")
        if handler is not None:
            handler(st, e, ctx)
        st.updated_block = e.log.block_number
    return st
