"""The projection of one ERC-8183 job (all three dialects) from its events and reads.

See ``keeper.domain.reducers`` for the rules both reducers keep.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from keeper.domain.model import (
    ArgValue,
    ChainRead,
    Event,
    JobState,
    JobStatus,
    Protocol,
)
from keeper.domain.reads import (
    GET_JOB,
    PAYMENT_TOKEN,
)
from keeper.domain.reducer_inputs import (
    Reads,
    addr_or_none,
    as_int,
    as_str,
    chain_order,
)

__all__ = ["reduce_job"]


@dataclass(slots=True)
class _JobCtx:
    reads: Reads
    token_reads: dict[str, Mapping[str, ArgValue]]  # block hash -> paymentToken result


# JobCreated's shape names the dialect that emitted it
_DIALECT_OF_VARIANT = {"erc8183": "erc8183", "current": "agentic_commerce", "legacy": "legacy"}


def _job_created(st: JobState, e: Event, ctx: _JobCtx) -> None:
    a = e.args
    st.client = as_str(a["client"])
    st.provider = as_str(a["provider"])
    st.evaluator = as_str(a["evaluator"])
    st.expired_at = as_int(a["expiredAt"])
    st.hook = as_str(a.get("hook"))
    st.legacy = e.variant == "legacy"
    st.dialect = _DIALECT_OF_VARIANT.get(e.variant, st.dialect)
    st.created_block = e.log.block_number
    st.status = JobStatus.OPEN
    job = ctx.reads.at(GET_JOB, e)
    if job is not None:
        desc = job.get("description")
        st.description = desc if isinstance(desc, str) else None
        if not st.token:
            token = addr_or_none(job.get("paymentToken"))
            st.token = token or ""


def _provider_set(st: JobState, e: Event, ctx: _JobCtx) -> None:
    st.provider = as_str(e.args["provider"])


def _budget_set(st: JobState, e: Event, ctx: _JobCtx) -> None:
    st.budget = as_int(e.args["amount"])
    if "token" in e.args:
        st.token = as_str(e.args["token"])
        return
    st.legacy = True
    token = ctx.token_reads.get(e.log.block_hash)
    if token is not None:
        st.token = as_str(token.get("token"))


def _job_funded(st: JobState, e: Event, ctx: _JobCtx) -> None:
    st.funded_amount = as_int(e.args["amount"])
    st.status = JobStatus.FUNDED


def _job_submitted(st: JobState, e: Event, ctx: _JobCtx) -> None:
    st.deliverable = as_str(e.args["deliverable"])
    st.submitted_at = e.block_timestamp
    st.status = JobStatus.SUBMITTED


def _job_completed(st: JobState, e: Event, ctx: _JobCtx) -> None:
    st.reason = as_str(e.args["reason"])
    st.verdict_event = "JobCompleted"
    st.status = JobStatus.COMPLETED


def _job_rejected(st: JobState, e: Event, ctx: _JobCtx) -> None:
    # A client rejecting its own Open job is a cancellation, not an evaluator's
    # verdict: there is no verdict document to verify behind its reason.
    by_evaluator = st.status is not JobStatus.OPEN or as_str(e.args["rejector"]) == st.evaluator
    st.reason = as_str(e.args["reason"])
    st.verdict_event = "JobRejected" if by_evaluator else None
    st.status = JobStatus.REJECTED


def _job_expired(st: JobState, e: Event, ctx: _JobCtx) -> None:
    st.status = JobStatus.EXPIRED


def _payment_released(st: JobState, e: Event, ctx: _JobCtx) -> None:
    st.paid_amount += as_int(e.args["amount"])


def _refunded(st: JobState, e: Event, ctx: _JobCtx) -> None:
    st.refunded_amount += as_int(e.args["amount"])


def _payout_receiver_set(st: JobState, e: Event, ctx: _JobCtx) -> None:
    st.payout_receiver = addr_or_none(e.args["payoutReceiver"])


def _claim_submitted(st: JobState, e: Event, ctx: _JobCtx) -> None:
    st.pending_claim_amount = as_int(e.args["cumulativeAmount"])


def _claim_resolved(st: JobState, e: Event, ctx: _JobCtx) -> None:
    """ClaimApproved / ClaimRejected: nothing awaits a verdict any more (Settled moves money)."""
    st.pending_claim_amount = None


def _settled(st: JobState, e: Event, ctx: _JobCtx) -> None:
    # cumulative, so a replayed or reordered Settled can never double-count
    st.settled_amount = max(st.settled_amount, as_int(e.args["cumulativeAmount"]))


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
    mine = chain_order(events, contract, job_id, Protocol.ERC8183)
    if not mine:
        return st
    ctx = _JobCtx(
        reads=Reads.of(reads, contract, job_id),
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
