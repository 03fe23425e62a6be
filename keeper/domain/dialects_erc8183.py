"""The ERC-8183 (agentic commerce job escrow) protocol table: dialects, keeper calls, errors.

The keeper calls one function, ``claimRefund``. Dialects as deployed today:

- ``AgenticCommerce``: the current reference shape (``setProvider`` with an agent id,
  ``BudgetSet`` with the token), ``claimRefund(uint256)``;
- ``LegacyACP``: the earlier ACP shape (``setProvider(uint256,address)``, one payment
  token per contract), also ``claimRefund(uint256)``.

Both share the keeper call; they are told apart by ``setProvider``'s shape so status and
metrics say which one is deployed. Event shapes are in ``keeper.domain.events``.
"""

from __future__ import annotations

from typing import Final

from keeper.domain.dialects import (
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

__all__ = ["AGENTIC_COMMERCE", "ERC8183", "LEGACY_ACP"]

_E = Protocol.ERC8183
_CLAIM_REFUND = CallShape("claimRefund(uint256)", (Arg(SUBJECT),))

AGENTIC_COMMERCE: Final = Dialect(
    name="AgenticCommerce",
    protocol=_E,
    revisions="current reference before claimRefund took a bytes argument",
    calls={ActionKind.CLAIM_REFUND: _CLAIM_REFUND},
    requires=("claimRefund(uint256)", "setProvider(uint256,address,uint256)"),
    lacks=("setProvider(uint256,address)",),
)

LEGACY_ACP: Final = Dialect(
    name="LegacyACP",
    protocol=_E,
    revisions="legacy ACP reference (one payment token per contract)",
    calls={ActionKind.CLAIM_REFUND: _CLAIM_REFUND},
    requires=("claimRefund(uint256)", "setProvider(uint256,address)"),
    lacks=("setProvider(uint256,address,uint256)",),
)

_P, _N, _D, _O = (
    ErrorClass.PREEMPTED,
    ErrorClass.NOT_PERMITTED,
    ErrorClass.NOT_YET_DUE,
    ErrorClass.OTHER,
)

ERC8183: Final = ProtocolTable(
    protocol=_E,
    dialects=(AGENTIC_COMMERCE, LEGACY_ACP),
    errors=(
        ErrorRule("InvalidStatus()", _P, "the job left Funded/Submitted/Open"),
        ErrorRule("Unauthorized()", _N, "caller not allowed"),
        ErrorRule("NotExpired()", _D, "now < expiredAt"),
        ErrorRule("GracePeriodActive()", _D, "a Submitted job's evaluation grace period"),
        ErrorRule("EvaluationWindowActive()", _D, "evaluation window still open"),
        ErrorRule("JobNotFound()", _O, "no such job at this address"),
        ErrorRule("DeadlinePassed()", _O, "a deadline passed"),
        ErrorRule("CallFailed(uint256,bytes)", _O, "a hook call failed"),
    ),
)
