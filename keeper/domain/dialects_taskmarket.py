"""The Task Market (ERC-8194 / ERC-8195) protocol table: dialects, keeper calls, errors.

Upstream is ``daydreamsai/taskmarket-contracts``: an EIP-2535 diamond since revision 5,
``LibRevision.CURRENT_REVISION = 21`` today. The keeper calls three functions; what
changed across revisions for them is one thing, the refund's second argument:

- revisions 1-6: ``refundExpired(bytes32)``, with ``finalizeVerdict``;
- the single (UUPS) contract before the diamond: ``refundExpired(bytes32)`` and no
  evaluator calls at all, reverting with ``Error(string)`` messages; like every revision
  before 16 it pays a repeated refund again;
- revisions 7-21: ``refundExpired(bytes32 taskId, uint256 requesterAgentId)``; the old
  selector answers ``Error("Diamond: function not found")``.

``finalizeVerdict(bytes32)`` and ``evaluatorTimeout(bytes32)`` never changed selector.
``evaluatorTimeout`` is requester-only through a trusted ERC-8194 forwarder on the
diamond: the keeper's simulation gets ``NotTrustedForwarder()``, which ends that intent
``not_permitted`` once, and the task falls through to ``refundExpired`` after expiry.

Event shapes (both ``TaskCreated`` shapes, ``TaskUpdated``, the known-but-unused ones)
are in ``keeper.domain.event_catalog``; revisions and what the daemon does with each are in
``docs/protocols.md``.
"""

from __future__ import annotations

from typing import Final

from keeper.domain.dialects import (
    CONST,
    SUBJECT,
    Arg,
    CallShape,
    Dialect,
    ErrorClass,
    ErrorRule,
    ProtocolTable,
)
from keeper.domain.model import Protocol
from keeper.domain.planner import ActionKind

__all__ = ["DIAMOND_FUNCTION_NOT_FOUND", "TASKMARKET", "TASKMARKET_CURRENT", "TASKMARKET_PRE7"]

_TM = Protocol.TASKMARKET
_S = Arg(SUBJECT)
# refundExpired's requesterAgentId is the requester's ERC-8004 agent id, used only to send
# reputation feedback about the requester when a Bounty/Benchmark task expires (and only
# when non-zero and a registry is set). The keeper is not the requester's agent and has
# nothing to vouch for: 0 skips the feedback; the refund itself is identical.
_NO_AGENT = Arg(CONST, 0, "requesterAgentId = 0: the keeper is not the requester's agent")

_FINALIZE = CallShape("finalizeVerdict(bytes32)", (_S,))
_TIMEOUT_REQUESTER = CallShape(
    "evaluatorTimeout(bytes32)", (_S,), permission="requester, through a trusted forwarder"
)
_TIMEOUT_OPEN = CallShape(
    "evaluatorTimeout(bytes32)", (_S,), permission="anyone, or the requester on some builds"
)

TASKMARKET_CURRENT: Final = Dialect(
    name="TaskMarket",
    protocol=_TM,
    revisions="7-21 (EIP-2535 diamond; CURRENT_REVISION = 21)",
    calls={
        ActionKind.REFUND_EXPIRED: CallShape(
            "refundExpired(bytes32,uint256)", (_S, _NO_AGENT), permission="anyone"
        ),
        ActionKind.FINALIZE_VERDICT: _FINALIZE,
        ActionKind.EVALUATOR_TIMEOUT: _TIMEOUT_REQUESTER,
    },
    requires=("refundExpired(bytes32,uint256)", "finalizeVerdict(bytes32)"),
    lacks=("refundExpired(bytes32)",),
)

TASKMARKET_PRE7: Final = Dialect(
    name="TaskMarketPre7",
    protocol=_TM,
    revisions="1-6 (monolithic contract, first diamonds)",
    calls={
        ActionKind.REFUND_EXPIRED: CallShape("refundExpired(bytes32)", (_S,)),
        ActionKind.FINALIZE_VERDICT: _FINALIZE,
        ActionKind.EVALUATOR_TIMEOUT: _TIMEOUT_OPEN,
    },
    requires=("refundExpired(bytes32)", "finalizeVerdict(bytes32)"),
    lacks=("refundExpired(bytes32,uint256)",),
)

TASKMARKET_MONOLITHIC: Final = Dialect(
    name="TaskMarketMonolithic",
    protocol=_TM,
    revisions="the single UUPS contract before the diamond, without evaluators",
    calls={ActionKind.REFUND_EXPIRED: CallShape("refundExpired(bytes32)", (_S,))},
    requires=("refundExpired(bytes32)",),
    lacks=("finalizeVerdict(bytes32)", "refundExpired(bytes32,uint256)"),
    note="a repeated refundExpired pays again: only the index's TaskExpired stops the keeper",
)

DIAMOND_FUNCTION_NOT_FOUND: Final = "Diamond: function not found"

_P, _N, _D, _X, _O = (
    ErrorClass.PREEMPTED,
    ErrorClass.NOT_PERMITTED,
    ErrorClass.NOT_YET_DUE,
    ErrorClass.PAUSED,
    ErrorClass.OTHER,
)

TASKMARKET: Final = ProtocolTable(
    protocol=_TM,
    dialects=(TASKMARKET_CURRENT, TASKMARKET_PRE7, TASKMARKET_MONOLITHIC),
    errors=(
        # permission: final for the keeper's key
        ErrorRule("NotTrustedForwarder()", _N, "requester-only call not through a forwarder"),
        ErrorRule("NotRequester()", _N, "requester-only call from someone else"),
        # the task moved on since the planner looked
        ErrorRule("NotInAppealingState()", _P, "finalizeVerdict: no longer Appealing"),
        ErrorRule("NotInReviewState()", _P, "evaluatorTimeout: no longer in Review"),
        ErrorRule("TaskAlreadyAccepted()", _P, "refundExpired: already paid out"),
        ErrorRule("TaskIsCancelled()", _P, "refundExpired: already cancelled"),
        ErrorRule("TaskAlreadyRefunded()", _P, "refundExpired: already Expired (rev 16+)"),
        ErrorRule("SubmissionsExist()", _P, "refundExpired: a Bounty/Benchmark has submissions"),
        # a deadline has not passed on chain yet
        ErrorRule("TaskNotYetExpired()", _D, "refundExpired: now <= expiryTime"),
        ErrorRule("AppealWindowStillOpen()", _D, "finalizeVerdict: now < appeal deadline"),
        ErrorRule("EvaluationWindowNotExpired()", _D, "evaluatorTimeout: now <= deadline"),
        ErrorRule("EnforcedPause()", _X, "the diamond is paused"),
        ErrorRule("NoVerdictIssued()", _O, "finalizeVerdict: Appealing without a verdict"),
        ErrorRule("TaskDoesNotExist()", _O, "no such task at this address"),
        ErrorRule("ReentrancyGuardReentrantCall()", _O, "reentrancy guard"),
        ErrorRule("RefundFailed()", _O, "the USDC transfer to the requester failed"),
        ErrorRule("ForfeitTransferFailed()", _O, "the forfeited stake transfer failed"),
        ErrorRule("StakeReturnFailed()", _O, "the worker stake return failed"),
        # the earlier devnet contract (pre-rev-7 dialect), our own code
        ErrorRule("InvalidStatus()", _P, "earlier devnet contract: wrong status"),
        ErrorRule("Unauthorized()", _N, "earlier devnet contract: caller not allowed"),
        ErrorRule("NotExpired()", _D, "earlier devnet contract: now <= expiryTime"),
        ErrorRule("EvaluationWindowActive()", _D, "earlier devnet contract"),
        ErrorRule("AppealWindowActive()", _D, "earlier devnet contract"),
        ErrorRule("TaskNotFound()", _O, "earlier devnet contract: no such task"),
    ),
    error_strings={
        DIAMOND_FUNCTION_NOT_FOUND: _N,
        # the single contract's require() messages around refundExpired(bytes32)
        "Task not expired": _D,
        "Task already accepted": _P,
        "Task cancelled": _P,
        "Task does not exist": _O,
        "Refund failed": _O,
        "Stake return failed": _O,
        "Worker payment failed": _O,
        "Fee transfer failed": _O,
        "Requester refund failed": _O,
    },
)
