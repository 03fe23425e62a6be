"""Task-market verdicts: check the evidence document behind ``evidenceHash``.

``evaluate`` commits a ``bytes32 evidenceHash``; the indexer records it with
the verdict from ``getTaskVerdict``. The evidence format is not specified, so
we accept the two readings of "hash of the evidence": keccak256 of the exact
bytes, or keccak256 of the RFC 8785 canonical form of a JSON document (the
rule ERC-8183 verdicts follow). Only the digest can be checked: there is no
deterministic evaluator to re-run, so an authentic document is ``verified``
as evidence, and a zero hash (no evidence committed) is ``not_reproducible``.
Failures point at ``/evidenceHash``, the on-chain field the document must match.
"""

from __future__ import annotations

from dataclasses import dataclass

from keeper.store import verifications as store
from keeper.verify.canonical import NotCanonicalizable, canonical_bytes, keccak_hex
from keeper.verify.checks import ZERO_HASH, CheckConfig
from keeper.verify.document import InvalidDocument, extract_document
from keeper.verify.failures import Failure, FailureCode, derive_status
from keeper.verify.report import ChainRef, Report, build_report
from keeper.verify.sources import FetchContext, Fetched, SourceFailure
from keeper.verify.verdict import Outcome, Verifier


@dataclass(frozen=True, slots=True)
class EvidenceCheck:
    failures: tuple[Failure, ...]
    canonical: bytes | None = None
    digest: str | None = None


def check_evidence(
    body: bytes | None, evidence_hash: str, config: CheckConfig, pointer: str = ""
) -> EvidenceCheck:
    """Whether ``body`` (or the document at ``pointer`` in it) is the committed evidence."""
    if evidence_hash == ZERO_HASH:
        return EvidenceCheck((Failure(FailureCode.NOT_REPRODUCIBLE, "/evidenceHash", "none"),))
    if body is None:
        return EvidenceCheck((Failure(FailureCode.UNAVAILABLE, "", "no source has the evidence"),))
    if pointer == "" and keccak_hex(body) == evidence_hash:
        return EvidenceCheck((), None, evidence_hash)
    try:
        document = extract_document(body, pointer, config.limits)
    except InvalidDocument as exc:
        return EvidenceCheck((Failure(FailureCode.INVALID_DOCUMENT, exc.pointer, exc.detail),))
    if document is None:
        return EvidenceCheck((Failure(FailureCode.UNAVAILABLE, "", "no evidence there yet"),))
    try:
        canonical = canonical_bytes(document)
    except NotCanonicalizable as exc:
        return EvidenceCheck((Failure(FailureCode.INVALID_DOCUMENT, "", str(exc)),))
    digest = keccak_hex(canonical)
    if digest != evidence_hash:
        failure = Failure(FailureCode.VERDICT_HASH_MISMATCH, "/evidenceHash", f"digest {digest}")
        return EvidenceCheck((failure,), canonical, digest)
    return EvidenceCheck((), canonical, digest)


async def verify_evidence(
    chain: ChainRef, verifier: Verifier, *, parent: Report | None = None
) -> Outcome:
    """Fetch the evidence from the configured sources (``{reason}`` = evidenceHash) and check it."""
    evidence_hash = chain.reason
    ctx = FetchContext(chain.chain_id, chain.contract, chain.job_id, reason=evidence_hash)
    problems: list[SourceFailure] = []
    chosen: tuple[EvidenceCheck, str] | None = None
    if evidence_hash != ZERO_HASH:
        for source in verifier.sources:
            result = await source.fetch(ctx)
            if isinstance(result, SourceFailure):
                problems.append(result)
                continue
            checked = _check(result, evidence_hash, verifier.checks)
            if not checked.failures:
                chosen = (checked, result.source)
                break
            if chosen is None and checked.failures[0].code is not FailureCode.UNAVAILABLE:
                chosen = (checked, result.source)
    if chosen is None:
        chosen = (check_evidence(None, evidence_hash, verifier.checks), "")
    checked, label = chosen
    report = build_report(
        chain,
        derive_status(checked.failures),
        checked.failures,
        checked.digest,
        parent=parent,
        source=label or None,
    )
    committed = evidence_hash == ZERO_HASH or checked.digest == evidence_hash
    return Outcome(
        report,
        checked.failures,
        checked.canonical,
        checked.digest,
        label or None,
        tuple(problems),
        committed,
    )


def _check(result: Fetched, evidence_hash: str, config: CheckConfig) -> EvidenceCheck:
    return check_evidence(result.body, evidence_hash, config, result.pointer)


def chain_from_task(row: store.IndexedTaskVerdict) -> ChainRef:
    """The report's chain reference for an indexed task verdict (evidenceHash as ``reason``)."""
    return ChainRef(
        chain_id=row.chain_id,
        contract=row.contract,
        job_id=row.task_id,
        event=row.event_name,
        tx_hash=row.tx_hash,
        block_hash=row.block_hash,
        block_number=row.block_number,
        log_index=row.log_index,
        reason=row.evidence_hash.lower(),
        deliverable=row.deliverable.lower() if row.deliverable else None,
        evaluator=(row.evaluator or "").lower(),
    )
