"""Reading receipts: where a transaction landed and which subjects it moved.

Pure helpers over the node's JSON (hex strings or ints, both accepted).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from keeper.act.calls import subject_topic
from keeper.domain.settlement import Landed

__all__ = ["Landed", "landed", "moved_subject"]


def _int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        return int(value, 16) if value.startswith(("0x", "0X")) else int(value)
    raise TypeError(f"not an integer field: {type(value).__name__}")


def landed(receipt: Mapping[str, Any]) -> Landed:
    """Block and status of a receipt, normalised to ints and lowercase hex."""
    return Landed(
        block_number=_int(receipt["blockNumber"]),
        block_hash=str(receipt["blockHash"]).lower(),
        status=_int(receipt.get("status", 1)),
    )


def moved_subject(receipt: Mapping[str, Any], contract: str, subject: str) -> bool:
    """Whether ``contract`` logged an event about ``subject`` in this receipt.

    Every event the keeper's actions cause (JobExpired, TaskExpired,
    TaskCompleted, TaskCancelled, EvaluatorTimedOut) carries the subject id as
    its first indexed argument, so a call that failed inside a Multicall3
    batch is the one whose subject has no log.
    """
    topic = subject_topic(subject)
    for log in receipt.get("logs") or ():
        topics = list(log.get("topics") or [])
        if (
            str(log.get("address", "")).lower() == contract.lower()
            and len(topics) > 1
            and str(topics[1]).lower() == topic
        ):
            return True
    return False
