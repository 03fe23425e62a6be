"""Which on-chain view calls an event calls for, and what their results carry.

Some state is in no event: a job's description, a legacy contract's payment
token, a task's evaluator windows and its verdict details. The sync engine
asks ``reads_for(event)``, performs each request with ``eth_call`` at the
event's block (by hash), and hands back ``model.ChainRead`` objects. Pinning a
read to a block keeps projections a pure function of stored data: a rebuild
needs no network, and a reorg drops the reads with their block.

Result mappings, by kind (keys are exactly these strings; ints may arrive as
``int`` or as a decimal string, the reducer accepts both):

``getJob`` (ERC-8183, subject = job id)
    ``description``: str (required). Optional: ``paymentToken``: address,
    ``budget``: int, ``status``: int, ``submittedAt``: int.
``paymentToken`` (legacy ERC-8183, subject = ``""``: one per contract)
    ``token``: address.
``getTaskEvaluatorConfig`` (task market, subject = task id)
    ``evaluator``: address, ``evaluatorStake``: int, ``evaluatorFeeBps``: int,
    ``evaluationWindow``: int (seconds), ``appealWindow``: int (seconds),
    ``disputeResolver``: address.
``getTaskVerdict`` (task market, subject = task id)
    ``issued``: bool, ``verdictType``: int, ``score``: int, ``confidence``:
    int, ``evidenceHash``: bytes32 hex.

A read that reverts or fails is simply not recorded; reducers fall back to
what the events say.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from keeper.domain.model import Event, Protocol

__all__ = [
    "GET_JOB",
    "GET_TASK_EVALUATOR_CONFIG",
    "GET_TASK_VERDICT",
    "PAYMENT_TOKEN",
    "READ_KINDS",
    "ReadRequest",
    "reads_for",
]

GET_JOB: Final = "getJob"
PAYMENT_TOKEN: Final = "paymentToken"
GET_TASK_EVALUATOR_CONFIG: Final = "getTaskEvaluatorConfig"
GET_TASK_VERDICT: Final = "getTaskVerdict"

# kind -> the result keys the reducers rely on
READ_KINDS: Final[dict[str, tuple[str, ...]]] = {
    GET_JOB: ("description",),
    PAYMENT_TOKEN: ("token",),
    GET_TASK_EVALUATOR_CONFIG: (
        "evaluator",
        "evaluatorStake",
        "evaluatorFeeBps",
        "evaluationWindow",
        "appealWindow",
        "disputeResolver",
    ),
    GET_TASK_VERDICT: ("issued", "verdictType", "score", "confidence", "evidenceHash"),
}


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """A view call to make at one block; identifies the ChainRead that answers it."""

    contract: str
    subject: str
    kind: str
    block_number: int
    block_hash: str


# (protocol, event name, variant or None for any) -> (kind, per-subject?)
_RULES: Final[dict[tuple[Protocol, str], tuple[tuple[str | None, str, bool], ...]]] = {
    (Protocol.ERC8183, "JobCreated"): ((None, GET_JOB, True),),
    (Protocol.ERC8183, "BudgetSet"): (("legacy", PAYMENT_TOKEN, False),),
    (Protocol.TASKMARKET, "EvaluatorAssigned"): ((None, GET_TASK_EVALUATOR_CONFIG, True),),
    (Protocol.TASKMARKET, "TaskSubmitted"): ((None, GET_TASK_EVALUATOR_CONFIG, True),),
    (Protocol.TASKMARKET, "TaskEvaluated"): ((None, GET_TASK_VERDICT, True),),
}


def reads_for(event: Event) -> list[ReadRequest]:
    """The reads an event needs, at the event's own block; [] for most events."""
    if event.name is None or event.subject is None:
        return []
    rules = _RULES.get((event.protocol, event.name))
    if not rules:
        return []
    log = event.log
    return [
        ReadRequest(
            contract=event.contract,
            subject=event.subject if per_subject else "",
            kind=kind,
            block_number=log.block_number,
            block_hash=log.block_hash,
        )
        for variant, kind, per_subject in rules
        if variant is None or variant == event.variant
    ]
