"""Verification reports: canonical JSON with its own digest, chained across re-verifications.

A report names the exact chain data it was checked against (chain id,
contract, job id, event, tx hash, block hash, log index, reason, deliverable,
evaluator) so that a third party can re-run the checks, and the outcome by
status plus failure codes, pointers and check names only: prose details change between
releases and would make two runs of the same checks differ. Nothing
time-dependent goes in, so re-running on the same data reproduces the report
byte for byte.

Re-verifying a verdict (a source that appeared later, a new release of the
checks) produces a new revision carrying ``parentDigest`` (the previous
report's digest) and ``revisionCount``: a verdict's history is a hash chain
that ``validate_history`` checks without trusting whoever stored it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from keeper.verify.canonical import JsonValue, canonical_bytes, keccak_hex
from keeper.verify.failures import Failure, Status

REPORT_FORMAT = 1
# Bump when a check changes what it concludes: a new release then re-verifies as a new revision.
CHECKS_VERSION = "keeper-verify/2"  # 2: GitHubEval re-run against GitHub's API


@dataclass(frozen=True, slots=True)
class ChainRef:
    """The on-chain verdict a report is about: its event's coordinates and the facts read."""

    chain_id: int
    contract: str
    job_id: int | str  # job number, or task id (0x hex) for a task-market verdict
    event: str
    tx_hash: str
    block_hash: str
    block_number: int
    log_index: int
    reason: str
    deliverable: str | None
    evaluator: str

    def as_json(self) -> dict[str, JsonValue]:
        return {
            "chainId": self.chain_id,
            "contract": self.contract,
            "jobId": str(self.job_id),
            "event": self.event,
            "txHash": self.tx_hash,
            "blockHash": self.block_hash,
            "blockNumber": self.block_number,
            "logIndex": self.log_index,
            "reason": self.reason,
            "deliverable": self.deliverable,
            "evaluator": self.evaluator,
        }


@dataclass(frozen=True, slots=True)
class Report:
    """A report's body, its canonical bytes and their keccak256 digest."""

    body: dict[str, JsonValue]
    canonical: bytes
    digest: str

    @property
    def status(self) -> Status:
        return Status(str(self.body["status"]))

    @property
    def revision_count(self) -> int:
        value = self.body["revisionCount"]
        assert isinstance(value, int)
        return value

    @property
    def parent_digest(self) -> str | None:
        value = self.body["parentDigest"]
        return value if isinstance(value, str) else None

    @property
    def subject(self) -> tuple[JsonValue, JsonValue, JsonValue]:
        chain = self.body["chain"]
        assert isinstance(chain, dict)
        return chain["chainId"], chain["contract"], chain["jobId"]


def build_report(
    chain: ChainRef,
    status: Status,
    failures: Sequence[Failure],
    document_digest: str | None,
    *,
    parent: Report | None = None,
    source: str | None = None,
    checks_version: str = CHECKS_VERSION,
) -> Report:
    """The report for one verification; ``parent`` is the verdict's previous report, if any.

    ``source`` labels where the checked document came from (``api`` for one
    posted to ``POST /v1/verdicts``, ``http:<host>``, ``directory:<name>``).
    """
    body: dict[str, JsonValue] = {
        "format": REPORT_FORMAT,
        "checks": checks_version,
        "chain": chain.as_json(),
        "status": status.value,
        "failures": [_failure_json(f) for f in failures],
        "documentDigest": document_digest,
        "documentSource": source,
        "parentDigest": parent.digest if parent else None,
        "revisionCount": parent.revision_count + 1 if parent else 0,
    }
    return _sealed(body)


def _failure_json(failure: Failure) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {"code": failure.code.value, "pointer": failure.pointer}
    if failure.check:
        out["check"] = failure.check  # a step name, stable across releases like the code
    return out


def report_from_bytes(raw: bytes) -> Report:
    """Re-read a stored or published report; its digest is recomputed, never trusted."""
    body = json.loads(raw)
    if not isinstance(body, dict):
        raise ValueError("a report is a JSON object")
    return _sealed(body)


def stored_report(report_json: str | bytes, claimed_digest: str) -> Report:
    """A report as a store or a third party holds it: the digest is their claim, to be checked."""
    raw = report_json.encode() if isinstance(report_json, str) else report_json
    body = json.loads(raw)
    if not isinstance(body, dict):
        raise ValueError("a report is a JSON object")
    return Report(body, canonical_bytes(body), claimed_digest)


def same_outcome(a: Report, b: Report) -> bool:
    """Whether two reports say the same thing about the same chain data (lineage aside).

    A retry that changes nothing must not grow the history: only a different
    outcome, document or checks version earns a new revision.
    """
    lineage = ("parentDigest", "revisionCount")
    return {k: v for k, v in a.body.items() if k not in lineage} == {
        k: v for k, v in b.body.items() if k not in lineage
    }


def validate_history(reports: Sequence[Report]) -> list[str]:
    """Problems with a verdict's report chain, oldest first; an empty list means it holds."""
    problems: list[str] = []
    for index, report in enumerate(reports):
        if keccak_hex(report.canonical) != report.digest:
            problems.append(f"revision {index}: digest does not match its content")
        if report.revision_count != index:
            problems.append(f"revision {index}: revisionCount is {report.revision_count}")
        expected_parent = reports[index - 1].digest if index else None
        if report.parent_digest != expected_parent:
            problems.append(f"revision {index}: parentDigest does not name revision {index - 1}")
        if report.subject != reports[0].subject:
            problems.append(f"revision {index}: about another verdict than revision 0")
    return problems


def _sealed(body: dict[str, JsonValue]) -> Report:
    canonical = canonical_bytes(body)
    return Report(body, canonical, keccak_hex(canonical))
