"""The projection of one task-market task from its events and reads.

See ``keeper.domain.reducers`` for the rules both reducers keep.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from keeper.domain.model import (
    ArgValue,
    ChainRead,
    Event,
    Protocol,
    TaskState,
    TaskStatus,
    VerdictType,
)
from keeper.domain.reads import (
    FINALIZE_SILENT,
    GET_TASK_EVALUATOR_CONFIG,
    GET_TASK_VERDICT,
    RESOLVE_SILENT,
)
from keeper.domain.reducer_inputs import (
    Reads,
    addr_or_none,
    as_int,
    as_str,
    chain_order,
)
from keeper.domain.taskmodes import CONTEST_MODES

__all__ = ["reduce_task"]

_VERDICT_VALUES = frozenset(v.value for v in VerdictType)


@dataclass(slots=True)
class _TaskCtx:
    reads: Reads
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
    st.evaluator = addr_or_none(cfg.get("evaluator"))
    st.evaluator_stake = as_int(cfg.get("evaluatorStake"))
    st.evaluator_fee_bps = as_int(cfg.get("evaluatorFeeBps"))
    st.evaluation_window = as_int(cfg.get("evaluationWindow"))
    st.appeal_window = as_int(cfg.get("appealWindow"))
    st.dispute_resolver = addr_or_none(cfg.get("disputeResolver"))


def _task_created(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    """Every TaskCreated shape (rev 14+, pre-14, older) gives the same fields.

    On the rev 18+ diamond EvaluatorAssigned comes first in the same transaction, so
    nothing it set is reset here.
    """
    a = e.args
    st.requester = as_str(a["requester"])
    st.reward = as_int(a["reward"])
    st.mode = as_str(a["mode"])
    st.expiry_time = as_int(a["expiryTime"])
    st.status = TaskStatus.OPEN
    if "stakeRequired" in a:
        st.extra["stake_required"] = "1" if a["stakeRequired"] else "0"
        st.extra["stake_bps"] = str(as_int(a["stakeBps"]))


def _task_updated(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    """The requester changed an Open task's reward and expiry: the deadline moves."""
    st.reward = as_int(e.args["newReward"])
    st.expiry_time = as_int(e.args["newExpiryTime"])


def _submitters(st: TaskState) -> dict[str, int]:
    raw = st.extra.get("submitters")
    return {k: int(v) for k, v in json.loads(raw).items()} if raw else {}


def _contest_submitted(st: TaskState, worker: str) -> None:
    """A Bounty/Benchmark submission: the task stays Open and counts it."""
    counts = _submitters(st)
    counts[worker] = counts.get(worker, 0) + 1
    st.extra["submitters"] = json.dumps(counts, sort_keys=True)
    st.extra["active_submissions"] = str(as_int(st.extra.get("active_submissions")) + 1)


def _submission_rejected(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    """The worker's whole submission count, and at least 1: the most any revision subtracts.

    Revisions before 8 subtract 1, 8-12 the worker's count or 1 for a worker who never
    submitted, 13 on the count and nothing for such a worker; an event does not say which
    revision emitted it. Subtracting the most keeps the count at or below the chain's, so
    the planner errs toward a refund the chain still refuses (``SubmissionsExist`` in the
    simulation, looked at again a few blocks later), never away from one it owes.
    """
    worker = as_str(e.args["worker"])
    counts = _submitters(st)
    decrement = max(counts.pop(worker, 0), 1)
    st.extra["submitters"] = json.dumps(counts, sort_keys=True)
    active = as_int(st.extra.get("active_submissions"))
    st.extra["active_submissions"] = str(max(active - decrement, 0))


def _evaluator_assigned(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    _apply_config(st, e, ctx)
    st.evaluator = addr_or_none(e.args["evaluator"])
    st.evaluator_stake = as_int(e.args["stakeAmount"])


def _task_claimed(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    st.worker = as_str(e.args["worker"])
    st.extra["worker_stake"] = str(as_int(e.args["stakeAmount"]))
    st.status = TaskStatus.CLAIMED


def _worker_selected(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    st.worker = as_str(e.args["worker"])
    st.status = TaskStatus.WORKER_SELECTED


def _task_submitted(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    _apply_config(st, e, ctx)
    if st.mode in CONTEST_MODES:
        _contest_submitted(st, as_str(e.args["worker"]))
        st.submitted_at = e.block_timestamp
        return
    st.worker = as_str(e.args["worker"])
    st.deliverable = as_str(e.args["deliverable"])
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
    raw = as_int(e.args["verdictType"])
    st.verdict_type = VerdictType(raw) if raw in _VERDICT_VALUES else None
    if st.verdict_type is None:
        st.extra["verdict_type_raw"] = str(raw)
    st.score = as_int(e.args["score"])
    st.evaluator = as_str(e.args["evaluator"])
    st.evaluated_at = e.block_timestamp
    st.status = TaskStatus.APPEALING
    if ctx.config_known:
        st.appeal_deadline = e.block_timestamp + st.appeal_window
        _raise_expiry(st, st.appeal_deadline)
    st.extra.pop("award_total", None)
    verdict = ctx.reads.at(GET_TASK_VERDICT, e, exact=True)
    if verdict is not None and verdict.get("issued") in (True, 1, "1", "true"):
        st.evidence_hash = as_str(verdict.get("evidenceHash")) or None
        st.extra["confidence"] = str(as_int(verdict.get("confidence")))
        total = _award_total(verdict.get("awards"))
        if total is not None:
            st.extra["award_total"] = str(total)


def _award_total(awards: ArgValue | None) -> int | None:
    """What a verdict's ``(worker, amount, ...)`` awards add up to; None if not read.

    Zero, for a verdict other than REJECT, is one whose finalize emits nothing
    (``keeper.act.silent``)."""
    if not isinstance(awards, list | tuple):
        return None
    total = 0
    for award in awards:
        if not isinstance(award, list | tuple) or len(award) < 2:
            return None
        total += as_int(award[1])
    return total


def _task_appealed(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    st.extra["appellant"] = as_str(e.args["appellant"])
    st.status = TaskStatus.DISPUTED


def _task_disputed(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    st.dispute_resolver = addr_or_none(e.args["disputeResolver"])
    st.status = TaskStatus.DISPUTED


def _evaluator_timed_out(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    # The evaluator is removed: the requester reviews, and a later submission
    # (after a reopen) goes to pending approval, not to review.
    st.extra["timed_out_evaluator"] = as_str(e.args["evaluator"])
    st.extra["forfeited_stake"] = str(as_int(e.args["forfeitedStake"]))
    st.evaluator = None
    st.evaluation_deadline = None
    st.status = TaskStatus.PENDING_APPROVAL


def _task_paid(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    """TaskCompleted (one per award) or the older TaskAccepted."""
    st.paid_amount += as_int(e.args["workerPayment"])
    fees = as_int(st.extra.get("platform_fee")) + as_int(e.args["platformFee"])
    st.extra["platform_fee"] = str(fees)
    st.extra["awards"] = str(as_int(st.extra.get("awards")) + 1)
    if st.worker is None:
        st.worker = as_str(e.args["worker"])
    st.status = TaskStatus.ACCEPTED


def _task_expired(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    st.refunded_amount += as_int(e.args["refundAmount"])
    st.status = TaskStatus.EXPIRED


def _task_cancelled(st: TaskState, e: Event, ctx: _TaskCtx) -> None:
    st.refunded_amount += as_int(e.args["refundAmount"])
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


def _finalized_silently(st: TaskState, read: ChainRead) -> None:
    """``finalizeVerdict`` refused at this block as no longer Appealing, and no event says
    why: the one way out of Appealing that emits nothing is a finalize paying no award
    (``keeper.domain.reads``). A task the events already moved on is left as they say."""
    if st.status == TaskStatus.APPEALING:
        st.status = TaskStatus.ACCEPTED
        st.extra["finalized_silently_at"] = str(read.block_number)
        st.updated_block = max(st.updated_block, read.block_number)


def _resolved_silently(st: TaskState, read: ChainRead) -> None:
    """``resolveDispute`` refused at this block as no longer Disputed, and no event says
    why: every other way out of Disputed emits one (a paid award ``TaskCompleted``, an
    expiry refund ``TaskExpired``), so the resolver settled it paying no award
    (``keeper.domain.reads``) and the requester got the rest back. A task the events
    already moved on is left as they say."""
    if st.status == TaskStatus.DISPUTED:
        st.status = TaskStatus.ACCEPTED
        st.extra["resolved_silently_at"] = str(read.block_number)
        st.updated_block = max(st.updated_block, read.block_number)


# the observations (keeper.domain.reads) and what each does to the task
_OBSERVED: dict[str, Callable[[TaskState, ChainRead], None]] = {
    FINALIZE_SILENT: _finalized_silently,
    RESOLVE_SILENT: _resolved_silently,
}


def reduce_task(
    contract: str, task_id: str, events: Sequence[Event], reads: Sequence[ChainRead]
) -> TaskState:
    """Fold a task-market task from its events; other subjects' events are ignored.

    An observation of a silent finalize or resolution applies after every event of its
    block (it was made on the state that block left) and before the next block's."""
    st = TaskState(contract=contract, task_id=task_id)
    mine = chain_order(events, contract, task_id, Protocol.TASKMARKET)
    if not mine:
        return st
    ctx = _TaskCtx(reads=Reads.of(reads, contract, task_id))
    seen = sorted(
        (r for kind in _OBSERVED for r in ctx.reads.by_kind.get(kind, ())),
        key=lambda r: r.block_number,
    )
    st.created_block = mine[0].log.block_number
    for e in mine:
        while seen and seen[0].block_number < e.log.block_number:
            read = seen.pop(0)
            _OBSERVED[read.kind](st, read)
        handler = _TASK_HANDLERS.get(e.name or "")
        if handler is not None:
            handler(st, e, ctx)
        st.updated_block = e.log.block_number
    for read in seen:
        _OBSERVED[read.kind](st, read)
    return st
