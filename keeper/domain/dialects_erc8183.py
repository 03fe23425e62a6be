"""The ERC-8183 (agentic commerce job escrow) protocol table: dialects, keeper calls, errors.

The keeper calls one function, ``claimRefund``. Dialects as deployed today:

- ``AgenticCommerce``: the current reference shape (``setProvider`` with an agent id,
  ``BudgetSet`` with the token), ``claimRefund(uint256)``;
- ``LegacyACP``: the earlier ACP shape (``setProvider(uint256,address)``, one payment
  token per contract), also ``claimRefund(uint256)``;
- ``ERC8183``: the newest reference (``contracts/ERC8183.sol``): ``claimRefund(uint256,
  bytes)`` (``claimRefund(uint256)`` reverts without data there), whenNotPaused and
  hookable; partial settlement through claims, payout receivers, pause.

AgenticCommerce and LegacyACP share the keeper call; they are told apart by
``setProvider``'s shape so status and metrics say which one is deployed. ERC8183 is told
from both by which ``claimRefund`` answers. Event shapes are in ``keeper.domain.event_catalog``.

``JOB_RULES`` maps each dialect to the deadline rules the planner applies to its jobs
(``JobState.dialect``): the grace period of a Submitted job runs from ``submittedAt`` in
AgenticCommerce, from ``expiredAt`` in ERC8183, and does not exist in LegacyACP.
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

__all__ = ["AGENTIC_COMMERCE", "ERC8183", "ERC8183_DIALECT", "JOB_RULES", "LEGACY_ACP"]

_E = Protocol.ERC8183
_CLAIM_REFUND = CallShape("claimRefund(uint256)", (Arg(SUBJECT),))

AGENTIC_COMMERCE: Final = Dialect(
    name="AgenticCommerce",
    protocol=_E,
    revisions="current reference before claimRefund took a bytes argument",
    calls={ActionKind.CLAIM_REFUND: _CLAIM_REFUND},
    requires=("claimRefund(uint256)", "setProvider(uint256,address,uint256)"),
    lacks=("setProvider(uint256,address)", "claimRefund(uint256,bytes)"),
)

LEGACY_ACP: Final = Dialect(
    name="LegacyACP",
    protocol=_E,
    revisions="legacy ACP reference (one payment token per contract)",
    calls={ActionKind.CLAIM_REFUND: _CLAIM_REFUND},
    requires=("claimRefund(uint256)", "setProvider(uint256,address)"),
    lacks=("setProvider(uint256,address,uint256)", "claimRefund(uint256,bytes)"),
)

ERC8183_DIALECT: Final = Dialect(
    name="ERC8183",
    protocol=_E,
    revisions="ERC8183.sol reference: uint48 expiry, claims, pause, payout receivers",
    calls={
        ActionKind.CLAIM_REFUND: CallShape(
            "claimRefund(uint256,bytes)",
            (Arg(SUBJECT), Arg(CONST, b"", "optParams: the keeper passes nothing to a hook")),
        )
    },
    requires=("claimRefund(uint256,bytes)", "setProvider(uint256,address,uint256,bytes)"),
    lacks=("claimRefund(uint256)",),
    note="paused: every lifecycle call reverts EnforcedPause(); a hook may revert claimRefund",
)

# dialect name -> JobState.dialect, the deadline rules the planner applies
JOB_RULES: Final = {
    AGENTIC_COMMERCE.name: "agentic_commerce",
    LEGACY_ACP.name: "legacy",
    ERC8183_DIALECT.name: "erc8183",
}

_P, _N, _D, _O = (
    ErrorClass.PREEMPTED,
    ErrorClass.NOT_PERMITTED,
    ErrorClass.NOT_YET_DUE,
    ErrorClass.OTHER,
)

ERC8183: Final = ProtocolTable(
    protocol=_E,
    dialects=(AGENTIC_COMMERCE, LEGACY_ACP, ERC8183_DIALECT),
    errors=(
        ErrorRule("Unauthorized()", _N, "caller not allowed"),
        ErrorRule("GracePeriodActive()", _D, "a Submitted job's evaluation grace period"),
        ErrorRule("EvaluationWindowActive()", _D, "evaluation window still open"),
        ErrorRule("CallFailed(uint256,bytes)", _O, "a hook call failed"),
        # the devnet's own names: its legacy ACP contract, and its AgenticCommerce as
        # deployed before that took the reference's errors (deployed history, still met)
        ErrorRule("InvalidStatus()", _P, "devnet: the job left Funded/Submitted/Open"),
        ErrorRule("NotExpired()", _D, "devnet: now < expiredAt"),
        ErrorRule("JobNotFound()", _O, "devnet: no such job at this address"),
        ErrorRule("DeadlinePassed()", _O, "devnet: a deadline passed"),
        # the reference's AgenticCommerce.sol and ERC8183.sol (claimRefund's own, then the
        # lifecycle's and the setters')
        ErrorRule("WrongStatus()", _P, "not Open/Funded/Submitted; in AgenticCommerce and "
                  "ERC8183 also claimRefund before expiredAt, but the planner only asks once "
                  "expiredAt has passed on chain, so the job moved on (a reorg that takes "
                  "time back is decided again after redecide_after_blocks, like any preempted "
                  "intent the planner still calls due)"),
        ErrorRule("InvalidJob()", _O, "no such job id"),
        ErrorRule("PendingClaimExists()", _D, "ERC8183: a claim awaits approval or rejection"),
        ErrorRule("EnforcedPause()", ErrorClass.PAUSED, "ERC8183 (OpenZeppelin Pausable): paused"),
        ErrorRule("ExpectedPause()", _O, "ERC8183: an admin call that needs the pause"),
        ErrorRule("ReentrancyGuardReentrantCall()", _O, "ERC8183: re-entered (through a hook)"),
        ErrorRule("InvalidHook()", _O, "createJob: hook lacks the interface"),
        ErrorRule("HookNotWhitelisted()", _O, "createJob"),
        ErrorRule("AccessControlUnauthorizedAccount(address,bytes32)", _O,
                  "AgenticCommerce (OpenZeppelin AccessControl): an admin call by a non-admin"),
        ErrorRule("ZeroBudget()", _O, "AgenticCommerce: declared, raised by no function"),
        ErrorRule("InvalidReceiver()", _O, "ERC8183 payout receiver"),
        ErrorRule("ZeroAddress()", _O, "ERC8183 setters"),
        ErrorRule("ExpiryTooShort()", _O, "createJob: expiredAt <= now + 5 min (devnet: <= now)"),
        ErrorRule("ProviderNotSet()", _O, "ERC8183 fund"),
        ErrorRule("FeesTooHigh()", _O, "ERC8183 fee setters"),
        ErrorRule("BudgetMismatch()", _O, "ERC8183 fund"),
        ErrorRule("PaymentTokenMismatch()", _O, "ERC8183 fund"),
        ErrorRule("ProviderCannotBeEvaluator()", _O, "setProvider/createJob"),
        ErrorRule("ClientCannotBeProvider()", _O, "ERC8183 setProvider/createJob"),
        ErrorRule("PaymentTokenNotAllowed()", _O, "ERC8183 setBudget"),
        ErrorRule("UnexpectedFundedAmount()", _O, "ERC8183 fund: fee-on-transfer token"),
        ErrorRule("NoNewSettlement()", _O, "ERC8183 claims"),
        ErrorRule("ExceedsBudget()", _O, "ERC8183 claims"),
        ErrorRule("ClaimAlreadySubmitted()", _O, "ERC8183 submitClaim"),
        ErrorRule("EmptyDeliverable()", _O, "ERC8183 submitClaim"),
        ErrorRule("NoPendingClaim()", _O, "ERC8183 approveClaim/rejectClaim"),
        ErrorRule("SafeERC20FailedOperation(address)", _O, "ERC8183: a token transfer failed"),
        ErrorRule("AuthorizationExpired()", _O, "ERC8183WithAuthorization"),
        ErrorRule("AuthorizationNonceUsed()", _O, "ERC8183WithAuthorization"),
        ErrorRule("InvalidAuthorizationSignature()", _O, "ERC8183WithAuthorization"),
    ),
)  # fmt: skip
