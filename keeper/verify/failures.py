"""Failure codes, the status they add up to, and the exit code a command derives from it.

A failure names a code and a JSON pointer into the verdict document so that a
caller branches on data, never on prose; ``detail`` is for humans and is kept
out of report digests (its wording may change between releases).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class FailureCode(StrEnum):
    UNAVAILABLE = "unavailable"
    INVALID_DOCUMENT = "invalid_document"
    VERDICT_HASH_MISMATCH = "verdict_hash_mismatch"
    FIELD_MISMATCH = "field_mismatch"
    EVALUATOR_DISAGREES = "evaluator_disagrees"
    CHANGED_SINCE_VERDICT = "changed_since_verdict"
    NOT_REPRODUCIBLE = "not_reproducible"


class Status(StrEnum):
    VERIFIED = "verified"
    MISMATCH = "mismatch"
    INVALID_DOCUMENT = "invalid_document"
    UNAVAILABLE = "unavailable"
    EVALUATOR_DISAGREES = "evaluator_disagrees"
    CHANGED_SINCE_VERDICT = "changed_since_verdict"
    NOT_REPRODUCIBLE = "not_reproducible"


@dataclass(frozen=True, slots=True)
class Failure:
    code: FailureCode
    pointer: str
    detail: str = ""
    check: str = ""  # the evaluator step at fault ("ci:test"), where the re-run names one


# Worst first: a document we could not get or read says nothing about the rest,
# a document that contradicts the chain outranks a disagreement about its merits.
_PRECEDENCE: tuple[tuple[FailureCode, Status], ...] = (
    (FailureCode.UNAVAILABLE, Status.UNAVAILABLE),
    (FailureCode.INVALID_DOCUMENT, Status.INVALID_DOCUMENT),
    (FailureCode.VERDICT_HASH_MISMATCH, Status.MISMATCH),
    (FailureCode.FIELD_MISMATCH, Status.MISMATCH),
    (FailureCode.EVALUATOR_DISAGREES, Status.EVALUATOR_DISAGREES),
    (FailureCode.CHANGED_SINCE_VERDICT, Status.CHANGED_SINCE_VERDICT),
    (FailureCode.NOT_REPRODUCIBLE, Status.NOT_REPRODUCIBLE),
)

FAILED: frozenset[Status] = frozenset(
    {Status.MISMATCH, Status.INVALID_DOCUMENT, Status.EVALUATOR_DISAGREES}
)


def checked_again(status: Status, committed: bool) -> bool:
    """Whether an outcome is retried on the unavailable schedule: nothing was found, or
    it failed on inputs that are not what the chain committed to (``committed``: a
    verdict document that did not hash to the reason, content that did not hash to the
    deliverable). The source may serve the committed ones later (a cache, a proxy, a
    document put up late); a failure of the committed inputs themselves is final."""
    return status is Status.UNAVAILABLE or (status in FAILED and not committed)


def derive_status(failures: list[Failure] | tuple[Failure, ...]) -> Status:
    """The status a set of failures amounts to; no failure at all is ``verified``."""
    codes = {f.code for f in failures}
    for code, status in _PRECEDENCE:
        if code in codes:
            return status
    return Status.VERIFIED


def exit_code(status: Status) -> int:
    """0 verified, 1 failed (mismatch, invalid, disagrees), 3 undetermined (changed included)."""
    if status is Status.VERIFIED:
        return 0
    return 1 if status in FAILED else 3
