"""What a finalize simulation tells the index that no event will: a verdict ended silently.

From revision 21 a verdict whose every award is zero is finalized without an event
(``finalizeVerdict`` pays nobody, emits nothing and leaves the task Accepted), so the
index would keep such a task Appealing for good: wrong on the status page and in the
API, and handed to the keeper at every tick. At a block the index holds, with the task
Appealing by its events, a simulated ``finalizeVerdict`` that answers
``NotInAppealingState`` can only mean that: every other way out of Appealing
(a paid award, a REJECT's cancel, an appeal, an expiry refund) emits an event the
index already has. The answer is recorded as an observation
(``keeper.domain.reads.FINALIZE_SILENT``) that the task reducer applies.

Two simulations give that answer: the gate's, at the decision block, when someone
else finalized first; and a probe of our own confirmed finalize, which the keeper
otherwise never looks at again, once the index has passed its receipt's block.

A dispute resolved with awards that are all zero ends the same way: ``resolveDispute``
settles the task Accepted, refunds the requester and emits nothing, and no keeper call
is ever due on a Disputed task. So the keeper probes each Disputed task that has a
resolver (a ``TaskDisputed`` event; one appealed without a resolver can never be
resolved) every few blocks with ``resolveDispute(taskId, APPROVE, [])`` at the indexed
head. The contract checks the pause, then ``status != Disputed`` (``NotInDisputedState``),
and only then the caller and the awards, so from any address that call answers
``NotInDisputedState`` exactly when the task is no longer Disputed; every other way out
of Disputed (a paid award, an expiry refund) emits an event the index already has. The
answer is recorded as ``keeper.domain.reads.RESOLVE_SILENT``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from keeper.act.simulate import SimResult
from keeper.domain.dialects import CONST, SUBJECT, Arg, CallShape, selector
from keeper.domain.model import BlockHeader, ChainRead, TaskState, TaskStatus, VerdictType
from keeper.domain.planner import ActionKind
from keeper.domain.reads import FINALIZE_SILENT, RESOLVE_SILENT

__all__ = [
    "RESOLVE_PROBE",
    "DisputeProbes",
    "disputes_to_probe",
    "silent_finalizes",
    "silent_resolutions",
]

_NOT_IN_APPEALING: Final = selector("NotInAppealingState()")
_NOT_IN_DISPUTED: Final = selector("NotInDisputedState()")

# never sent, only simulated: a non-REJECT verdict (REJECT is refused after the status
# check too, but a later revision might move that check) and no awards
RESOLVE_PROBE: Final = CallShape(
    "resolveDispute(bytes32,uint8,(address,uint256,uint16)[])",
    (
        Arg(SUBJECT),
        Arg(CONST, VerdictType.APPROVE.value, "a verdict other than REJECT"),
        Arg(CONST, (), "no awards: refused AwardsRequired while the task is Disputed"),
    ),
    permission="the task's dispute resolver; probed from any address",
)


def silent_finalizes(results: Sequence[SimResult], head: BlockHeader) -> list[ChainRead]:
    """The observations in simulations of ``finalizeVerdict`` made at ``head``.

    Whether the task is Appealing by its events at that block is the reducer's check,
    made on what the index holds when the observation is applied.
    """
    return [
        ChainRead(
            res.action.contract,
            res.action.subject,
            FINALIZE_SILENT,
            head.number,
            head.hash,
            {"refused": "NotInAppealingState"},
            f"keeper simulation at block {head.number}",
        )
        for res in results
        if res.action.action is ActionKind.FINALIZE_VERDICT
        and res.revert is not None
        and res.revert[:4] == _NOT_IN_APPEALING
    ]


@dataclass(frozen=True, slots=True)
class DisputeProbes:
    """The Disputed tasks to probe at a head, and when each was last probed afterwards."""

    due: list[TaskState]
    probed: dict[tuple[str, str], int]


def disputes_to_probe(
    tasks: Iterable[TaskState],
    head: int,
    probed: Mapping[tuple[str, str], int],
    every: int,
    skip: Collection[str] = (),
) -> DisputeProbes:
    """Which Disputed tasks to probe for a silent resolution at block ``head``.

    Only a task with a dispute resolver can be resolved at all; a contract in ``skip``
    (paused: every call answers ``EnforcedPause``; or its dialect in doubt) is left
    alone. So is a task whose row the index changed after ``head`` (``updated_block``):
    the indexer goes on while a tick runs, and at ``head`` such a task may not be
    Disputed yet (or not exist), which the probe would answer ``NotInDisputedState``
    too; it is probed at a later head. Each task at most once every ``every`` blocks
    (the confirmed-finalize probe's cadence): a resolution is rare, and each probe is a
    call the node runs (grouped in Multicall3 calls where one is configured). The memory
    keeps only tasks still Disputed, so it is bounded by what the index has Disputed, and
    a task that left Disputed is never probed again.
    """
    due: list[TaskState] = []
    kept: dict[tuple[str, str], int] = {}
    for task in tasks:
        if task.status is not TaskStatus.DISPUTED or task.dispute_resolver is None:
            continue
        key = (task.contract, task.task_id)
        last = probed.get(key)
        if last is not None:
            kept[key] = last
        if task.contract in skip or task.updated_block > head:
            continue
        if last is None or head >= last + every:
            kept[key] = head
            due.append(task)
    return DisputeProbes(due, kept)


def silent_resolutions(
    answers: Iterable[tuple[TaskState, bytes | None]], head: BlockHeader
) -> list[ChainRead]:
    """The observations in the answers (revert data, None if the call would succeed) of
    ``RESOLVE_PROBE`` calls made at ``head``.

    Whether the task is Disputed by its events at that block is the reducer's check.
    """
    return [
        ChainRead(
            task.contract,
            task.task_id,
            RESOLVE_SILENT,
            head.number,
            head.hash,
            {"refused": "NotInDisputedState"},
            f"keeper probe at block {head.number}",
        )
        for task, revert in answers
        if revert is not None and revert[:4] == _NOT_IN_DISPUTED
    ]
