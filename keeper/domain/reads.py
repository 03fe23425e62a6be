"""Which on-chain view calls an event calls for, where to make them, and what they carry.

Some state is in no event: a job's description, a legacy contract's payment
token, a task's evaluator windows and its verdict details. The sync engine
asks ``reads_for(event)`` and ``plan_calls`` turns the requests into
``eth_call``s; the answers become ``model.ChainRead`` objects recorded under
the event's block (number and hash) whatever block the state was read at, so
projections stay a pure function of stored data (a rebuild needs no network)
and a reorg drops the reads with their block.

Where each read is made (docs/reliability.md, "Reads on any node"):

- A field that can change (a job's status, budget, token; a task's evaluator
  config, which ``evaluatorTimeout`` clears; its verdict) is read at the
  event's block, and nowhere else: a later block could hold a later value.
- A field that never changes once the event happened (``ReadRequest.stable``:
  a job's description, client, evaluator and expiry, set once in
  ``createJob``; a legacy contract's ``paymentToken``, an immutable) may be
  read at any later block on the same chain. Below the finalized block the
  event cannot be reorged out, so such a read is made at the finalized block:
  every node keeps that state (a full node has no state at old blocks),
  historical state is the slow path even on an archive node, and reads of
  one contract-wide value (``paymentToken``) collapse into one call.
- When the node has no state where a read was asked (``StateUnavailableError``),
  a stable read moves to the head; a read with no stable field is recorded as
  missing with the reason, which the reducers treat like a revert.

A read of a kind with stable fields records only those, wherever it was
made: nothing that can change is ever taken from a later block, and two
indexes of one chain hold the same reads whichever blocks their nodes could
serve. ``ChainRead.source`` says where each read came from. Within the reorg
window (above finality) reads stay at the event's block, as before, so reorg
handling is unchanged there.

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

A read that reverts, cannot be decoded or cannot be had is recorded with an
``error`` key (``MISSING_REASON`` names why); reducers fall back to what the
events say.

Two kinds are observations, not view calls, and are never made again:

``finalizeSilent`` (task market, subject = task id)
    ``refused``: the error name. The keeper's ``finalizeVerdict`` answered
    ``NotInAppealingState`` at an indexed block whose events leave the task
    Appealing: the verdict was finalized by a call that emits nothing (from
    revision 21 a verdict whose every award is zero pays no ``TaskCompleted``).
    Recorded only at a block of the index's window, by the keeper
    (``keeper.act.silent``), so a rollback past that block drops it with the events.

``resolveSilent`` (task market, subject = task id)
    ``refused``: the error name. The keeper's probe ``resolveDispute(taskId, APPROVE,
    [])`` answered ``NotInDisputedState`` at an indexed block whose events leave the
    task Disputed: the resolver settled the dispute by a call that emits nothing (from
    revision 21 a resolution whose every award is zero pays no ``TaskCompleted``).
    Recorded like ``finalizeSilent``, at a block of the index's window only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

from keeper.domain.model import Event, Protocol

V = TypeVar("V")

__all__ = [
    "EVENT_BLOCK",
    "FINALIZE_SILENT",
    "GET_JOB",
    "GET_TASK_EVALUATOR_CONFIG",
    "GET_TASK_VERDICT",
    "MISSING",
    "PAYMENT_TOKEN",
    "READ_KINDS",
    "RESOLVE_SILENT",
    "STABLE_FIELDS",
    "STATE_UNAVAILABLE",
    "ReadRequest",
    "ViewCall",
    "head_calls",
    "plan_calls",
    "reads_for",
    "stable_part",
]

GET_JOB: Final = "getJob"
PAYMENT_TOKEN: Final = "paymentToken"
GET_TASK_EVALUATOR_CONFIG: Final = "getTaskEvaluatorConfig"
GET_TASK_VERDICT: Final = "getTaskVerdict"
FINALIZE_SILENT: Final = "finalizeSilent"
RESOLVE_SILENT: Final = "resolveSilent"

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


EVENT_BLOCK: Final = "event block"
# the source of a read that could not be had anywhere (its result says why)
MISSING: Final = "missing"
# the ``error`` of a read the node had no state for, at the event's block or later
STATE_UNAVAILABLE: Final = "state unavailable"

# getJob fields written only by createJob, in all three dialects (contracts/*.sol)
_JOB_STABLE: Final = ("id", "client", "evaluator", "description", "expiredAt")


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """A view call an event calls for; identifies the ChainRead that answers it.

    ``stable`` names the result fields that cannot change after the event (empty:
    the read is only exact at the event's block).
    """

    contract: str
    subject: str
    kind: str
    block_number: int
    block_hash: str
    stable: tuple[str, ...] = ()


# the legacy dialect copies its immutable token into every job
_STABLE_BY_VARIANT: Final = {(GET_JOB, "legacy"): (*_JOB_STABLE, "paymentToken")}


@dataclass(frozen=True, slots=True)
class ViewCall:
    """One ``eth_call`` at one block, and the requests its answer serves."""

    contract: str
    kind: str
    subject: str
    block_number: int
    source: str
    answers: tuple[ReadRequest, ...]


# (protocol, event name) -> (variant or None for any, kind, per-subject?, stable fields)
_RULES: Final[
    dict[tuple[Protocol, str], tuple[tuple[str | None, str, bool, tuple[str, ...]], ...]]
] = {
    (Protocol.ERC8183, "JobCreated"): ((None, GET_JOB, True, _JOB_STABLE),),
    (Protocol.ERC8183, "BudgetSet"): (("legacy", PAYMENT_TOKEN, False, ("token",)),),
    # assignEvaluator rewrites the config and a timeout clears its evaluator: nothing stable
    (Protocol.TASKMARKET, "EvaluatorAssigned"): ((None, GET_TASK_EVALUATOR_CONFIG, True, ()),),
    (Protocol.TASKMARKET, "TaskSubmitted"): ((None, GET_TASK_EVALUATOR_CONFIG, True, ()),),
    # appeals and disputes rewrite the verdict
    (Protocol.TASKMARKET, "TaskEvaluated"): ((None, GET_TASK_VERDICT, True, ()),),
}

# kind -> the stable fields its reads record (a dialect may add some: _STABLE_BY_VARIANT)
STABLE_FIELDS: Final = {kind: st for rules in _RULES.values() for _, kind, _, st in rules if st}


def reads_for(event: Event) -> list[ReadRequest]:
    """The reads an event needs, identified by the event's block; [] for most events."""
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
            stable=_STABLE_BY_VARIANT.get((kind, event.variant), stable),
        )
        for variant, kind, per_subject, stable in rules
        if variant is None or variant == event.variant
    ]


def plan_calls(
    requests: Sequence[ReadRequest], *, finalized: int, head: int | None = None
) -> list[ViewCall]:
    """The calls that answer ``requests``: stable reads below finality at one later block
    (one call per contract, kind and subject), every other read at its event's block.

    The later block is the finalized one, or ``head`` when given (a node known to
    keep no state at the finalized block).
    """
    calls: list[ViewCall] = []
    later: dict[tuple[str, str, str], list[ReadRequest]] = {}
    for req in requests:
        if req.stable and req.block_number <= finalized:
            later.setdefault((req.contract, req.kind, req.subject), []).append(req)
        else:
            calls.append(
                ViewCall(req.contract, req.kind, req.subject, req.block_number, EVENT_BLOCK, (req,))
            )
    at, source = (
        (finalized, f"finalized block {finalized}")
        if head is None
        else (head, f"head block {head}")
    )
    calls.extend(
        ViewCall(contract, kind, subject, at, source, tuple(reqs))
        for (contract, kind, subject), reqs in later.items()
    )
    return calls


def head_calls(failed: Sequence[ViewCall], *, head: int) -> tuple[list[ViewCall], list[ViewCall]]:
    """Where calls the node had no state for go next: (calls at the head, calls given up).

    A stable read moves to the head block, which every node keeps; one with no
    stable field, or one already made at the head, cannot be had.
    """
    retry: list[ViewCall] = []
    lost: list[ViewCall] = []
    for call in failed:
        movable = tuple(r for r in call.answers if r.stable)
        if movable and call.block_number < head:
            source = f"head block {head}"
            retry.append(ViewCall(call.contract, call.kind, call.subject, head, source, movable))
        else:
            movable = ()
        rest = tuple(r for r in call.answers if r not in movable)
        if rest:
            lost.append(
                ViewCall(
                    call.contract, call.kind, call.subject, call.block_number, call.source, rest
                )
            )
    return retry, lost


def stable_part(req: ReadRequest, result: Mapping[str, V]) -> dict[str, V]:
    """What of a result is recorded for ``req``: only its stable fields (and an
    ``error``) when it has any, wherever it was read, so an index holds the same
    reads whichever blocks the node could serve; every field otherwise."""
    if not req.stable:
        return dict(result)
    return {k: v for k, v in result.items() if k in req.stable or k == "error"}
