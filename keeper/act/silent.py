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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from keeper.act.simulate import SimResult
from keeper.domain.dialects import selector
from keeper.domain.model import BlockHeader, ChainRead
from keeper.domain.planner import ActionKind
from keeper.domain.reads import FINALIZE_SILENT

__all__ = ["silent_finalizes"]

_NOT_IN_APPEALING: Final = selector("NotInAppealingState()")


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
