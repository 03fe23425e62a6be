"""The check pipeline for one verdict: pure, given the document bytes and the chain's facts.

Order (issue 4): available -> a JSON object within limits -> keccak256 of its
canonical bytes equals the on-chain ``reason`` -> its fields agree with the
chain -> the deterministic evaluator re-run agrees. A step that fails makes the
later ones meaningless for that document, so the pipeline stops there (field
checks all run, so every disagreeing field is reported at once).

The verdict's ``evaluator`` field is a *name* ("SchemaEval"), the chain knows an
*address*. ``CheckConfig.evaluator_names`` maps names to addresses: a configured
name must match the job's evaluator address, an unconfigured name is not
checked (nothing on chain ties a name to an address). A known kind's name must
also match the description's shape (a SchemaEval verdict on a GitHubEval job
is a field mismatch).

Jobs whose description is neither SchemaEval's nor GitHubEval's cannot be
re-run, so their decision is ``not_reproducible`` even when the document is
authentic: "verified" is reserved for verdicts whose outcome we reproduced.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from keeper.verify import githubeval, schemaeval
from keeper.verify.canonical import JsonValue, NotCanonicalizable, canonical_bytes, keccak_hex
from keeper.verify.document import DocumentLimits, InvalidDocument, extract_document, parse_json
from keeper.verify.failures import Failure, FailureCode, Status, derive_status
from keeper.verify.github_checks import Target

__all__ = [
    "CheckConfig",
    "DocumentCheck",
    "Failure",
    "FailureCode",
    "Status",
    "VerdictFacts",
    "check_document",
    "check_reexecution",
    "derive_status",
    "description_kind",
    "field_failures",
    "github_target",
    "needs_content",
    "run_checks",
]

EVENT_ESITO: Mapping[str, str] = {"JobCompleted": "complete", "JobRejected": "reject"}
ZERO_HASH = "0x" + "00" * 32
Kind = Literal["schemaeval", "githubeval"]
_KIND_NAMES: Mapping[str, Kind] = {"SchemaEval": "schemaeval", "GitHubEval": "githubeval"}


@dataclass(frozen=True, slots=True)
class VerdictFacts:
    """What the chain says about one verdict (event plus ``getJob`` and ``JobSubmitted``)."""

    job_id: int
    event_name: str  # "JobCompleted" | "JobRejected"
    reason: str  # bytes32, lowercase 0x hex
    deliverable: str | None  # bytes32 of the last JobSubmitted, None if never submitted
    evaluator: str  # the job's evaluator address, lowercase
    description: str | None  # the job description from getJob
    block_time: int | None = None  # the verdict block's timestamp (GitHub state after it changed)


@dataclass(frozen=True, slots=True)
class CheckConfig:
    limits: DocumentLimits = field(default_factory=DocumentLimits)
    content_limits: DocumentLimits = field(default_factory=DocumentLimits)
    evaluator_names: Mapping[str, str] = field(default_factory=dict)  # name -> lowercase address


@dataclass(frozen=True, slots=True)
class DocumentCheck:
    """Outcome of steps 1-4; ``document`` is set once the bytes parsed as an object."""

    failures: tuple[Failure, ...]
    document: dict[str, JsonValue] | None = None
    canonical: bytes | None = None
    digest: str | None = None

    @property
    def passed(self) -> bool:
        return not self.failures


def check_document(
    body: bytes | None, facts: VerdictFacts, config: CheckConfig, pointer: str = ""
) -> DocumentCheck:
    """Steps 1-4 on a source's response ``body`` (the document sits at ``pointer`` inside it)."""
    if body is None:
        return DocumentCheck((Failure(FailureCode.UNAVAILABLE, "", "no source has the document"),))
    try:
        document = extract_document(body, pointer, config.limits)
    except InvalidDocument as exc:
        return DocumentCheck((Failure(FailureCode.INVALID_DOCUMENT, exc.pointer, exc.detail),))
    if document is None:
        return DocumentCheck(
            (Failure(FailureCode.UNAVAILABLE, "", "source has no verdict for this job yet"),)
        )
    try:
        canonical = canonical_bytes(document)
    except NotCanonicalizable as exc:
        return DocumentCheck(
            (Failure(FailureCode.INVALID_DOCUMENT, "", f"no canonical form: {exc}"),)
        )
    digest = keccak_hex(canonical)
    if digest != facts.reason.lower():
        failure = Failure(
            FailureCode.VERDICT_HASH_MISMATCH,
            "/reason",
            f"digest {digest} != reason {facts.reason}",
        )
        return DocumentCheck((failure,), document, canonical, digest)
    fields = field_failures(document, facts, config)
    return DocumentCheck(tuple(fields), document, canonical, digest)


def field_failures(
    document: Mapping[str, JsonValue], facts: VerdictFacts, config: CheckConfig
) -> list[Failure]:
    """Step 4: jobId, deliverable, evaluator and esito against the chain."""
    out: list[Failure] = []
    job_id = document.get("jobId")
    if not (job_id == str(facts.job_id) or (type(job_id) is int and job_id == facts.job_id)):
        out.append(_mismatch("/jobId", f"{job_id!r} is not job {facts.job_id}"))
    out.extend(_deliverable_failures(document, facts))
    out.extend(_evaluator_failures(document, facts, config))
    esito = document.get("esito")
    expected = EVENT_ESITO.get(facts.event_name)
    if esito != expected:
        out.append(_mismatch("/esito", f"{esito!r} but the chain emitted {facts.event_name}"))
    return out


def description_kind(
    description: str | None, limits: DocumentLimits
) -> tuple[Kind | None, JsonValue]:
    """Which deterministic evaluator a job description belongs to, with the parsed description."""
    if description is None:
        return None, None
    try:
        parsed = parse_json(description.encode("utf-8", "surrogatepass"), limits)
    except InvalidDocument:
        return None, None
    if githubeval.is_githubeval(parsed):
        return "githubeval", parsed
    if schemaeval.is_schemaeval(parsed):
        return "schemaeval", parsed
    return None, parsed


def needs_content(facts: VerdictFacts, config: CheckConfig) -> bool:
    """Whether step 5/6 will want the deliverable's content (so the caller fetches it)."""
    kind, _ = description_kind(facts.description, config.limits)
    return kind is not None and facts.deliverable not in (None, ZERO_HASH)


def check_reexecution(
    document: Mapping[str, JsonValue],
    facts: VerdictFacts,
    config: CheckConfig,
    content: bytes | None,
) -> list[Failure]:
    """Steps 5-6: re-run SchemaEval, or GitHubEval's offline part, and compare with the verdict."""
    kind, description = description_kind(facts.description, config.limits)
    if kind is None or not isinstance(description, dict):
        return [
            Failure(
                FailureCode.NOT_REPRODUCIBLE, "/esito", "no deterministic evaluator for this job"
            )
        ]
    if facts.deliverable in (None, ZERO_HASH):
        return [Failure(FailureCode.NOT_REPRODUCIBLE, "/deliverable", "nothing was submitted")]
    assert facts.deliverable is not None
    if content is None:
        return [
            Failure(
                FailureCode.UNAVAILABLE, "/deliverable", "no content source has the deliverable"
            )
        ]
    if kind == "schemaeval":
        return schemaeval.check(
            document, description, content, facts.deliverable, config.content_limits
        )
    return githubeval.check(document, description, content, facts.deliverable)


def github_target(
    document: Mapping[str, JsonValue],
    facts: VerdictFacts,
    config: CheckConfig,
    content: bytes | None,
) -> Target | None:
    """The PR a GitHubEval verdict's online re-run reads, once the offline steps pass."""
    kind, description = description_kind(facts.description, config.limits)
    if kind != "githubeval" or not isinstance(description, dict) or content is None:
        return None
    if facts.deliverable in (None, ZERO_HASH):
        return None
    assert facts.deliverable is not None
    return githubeval.online_target(document, description, content, facts.deliverable)


def run_checks(
    body: bytes | None,
    facts: VerdictFacts,
    config: CheckConfig,
    content: bytes | None,
    pointer: str = "",
) -> tuple[DocumentCheck, list[Failure]]:
    """The whole pipeline with the content already at hand (the verifier fetches it lazily)."""
    doc = check_document(body, facts, config, pointer)
    if not doc.passed or doc.document is None:
        return doc, list(doc.failures)
    return doc, check_reexecution(doc.document, facts, config, content)


def _deliverable_failures(document: Mapping[str, JsonValue], facts: VerdictFacts) -> list[Failure]:
    value = document.get("deliverable")
    if facts.deliverable in (None, ZERO_HASH):
        if value in (None, ZERO_HASH):
            return []
        return [_mismatch("/deliverable", "nothing was submitted on chain")]
    if not isinstance(value, str) or value.lower() != facts.deliverable:
        return [_mismatch("/deliverable", f"{value!r} is not {facts.deliverable}")]
    return []


def _evaluator_failures(
    document: Mapping[str, JsonValue], facts: VerdictFacts, config: CheckConfig
) -> list[Failure]:
    name = document.get("evaluator")
    if not isinstance(name, str):
        return [_mismatch("/evaluator", "evaluator is not a name")]
    address = config.evaluator_names.get(name)
    if address is not None and address.lower() != facts.evaluator.lower():
        return [
            _mismatch("/evaluator", f"{name} is {address.lower()}, the job's is {facts.evaluator}")
        ]
    named_kind = _KIND_NAMES.get(name)
    if named_kind is not None:
        kind, _ = description_kind(facts.description, config.limits)
        if kind is not None and kind != named_kind:
            return [_mismatch("/evaluator", f"{name} verdict on a {kind} job")]
    return []


def _mismatch(pointer: str, detail: str) -> Failure:
    return Failure(FailureCode.FIELD_MISMATCH, pointer, detail)
