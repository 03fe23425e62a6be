"""Verify one verdict end to end: fetch, check, re-run, report, and (optionally) record.

Sources are tried in their configured order. The first document whose digest
equals the on-chain reason wins, since the chain names exactly one document;
when none does, the first wrong document is reported (tampered, unreadable or
over the size limit: a bad source must not hide behind "unavailable"), and
only when no source has anything is the verdict ``unavailable``. Deliverable content is fetched
only when a deterministic evaluator will be re-run; content matching the
on-chain hash is preferred, else the first content found is judged as is.
The re-run executes in the verifier's ``Sandbox`` when it has one (the daemon
and ``keeper verify`` do), so a hostile schema costs a bounded time and memory.

``unavailable`` is retried with exponential backoff until a horizon measured
from the first attempt (``next_retry_at``, pure); every other status is final
until something changes (a new release of the checks, a new source).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from keeper.store import verifications as store
from keeper.verify.canonical import JsonValue, keccak_hex
from keeper.verify.checks import (
    CheckConfig,
    DocumentCheck,
    VerdictFacts,
    check_document,
    check_reexecution,
    github_target,
    needs_content,
)
from keeper.verify.failures import Failure, FailureCode, Status, derive_status
from keeper.verify.github_api import GitHubClient
from keeper.verify.github_rerun import rerun as github_rerun
from keeper.verify.report import ChainRef, Report, build_report, same_outcome, stored_report
from keeper.verify.sandbox import Sandbox, SandboxFault, SandboxTimeout
from keeper.verify.sources import FetchContext, Fetched, Problem, Source, SourceFailure


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Backoff for unavailable documents: 1 min doubling to 1 h, for at most a day."""

    base: int = 60  # evaluators publish within seconds of the tx; a minute avoids hammering
    cap: int = 3600  # an hour between tries keeps a long outage cheap
    horizon: int = 86_400  # after a day without a document, the verdict stays unavailable


def next_retry_at(
    attempts: int,
    now: int,
    *,
    first_attempt_at: int | None = None,
    policy: RetryPolicy = RetryPolicy(),
) -> int | None:
    """When to try again after ``attempts`` failed tries, or None once past the horizon."""
    if attempts < 1:
        return now
    delay = min(policy.cap, policy.base * 2 ** min(attempts - 1, 32))
    start = now if first_attempt_at is None else first_attempt_at
    at = now + delay
    return at if at - start <= policy.horizon else None


@dataclass(frozen=True, slots=True)
class Verdict:
    """One on-chain verdict to verify: where it is on chain and what the chain says."""

    chain: ChainRef
    facts: VerdictFacts


@dataclass(frozen=True, slots=True)
class Verifier:
    sources: Sequence[Source]
    content_sources: Sequence[Source] = ()
    checks: CheckConfig = field(default_factory=CheckConfig)
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    # where evaluator re-runs execute; None runs them inline (trusted inputs, tests)
    sandbox: Sandbox | None = None
    # GitHub's API for GitHubEval's online steps; None leaves them not_reproducible
    github: GitHubClient | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    report: Report
    failures: tuple[Failure, ...]
    document: bytes | None  # canonical bytes of the checked document, when it parsed
    document_digest: str | None
    source: str | None  # label of the source the checked document came from
    source_failures: tuple[SourceFailure, ...]

    @property
    def status(self) -> Status:
        return self.report.status


async def verify_verdict(
    verdict: Verdict, verifier: Verifier, *, parent: Report | None = None
) -> Outcome:
    """Fetch, check and report one verdict (no storage; ``parent`` links the report chain)."""
    facts = verdict.facts
    ctx = FetchContext(
        chain_id=verdict.chain.chain_id,
        contract=verdict.chain.contract,
        job_id=facts.job_id,
        reason=facts.reason,
        hash=facts.deliverable or "",
    )
    doc, source, problems = await _find_document(verifier, ctx, facts)
    failures = list(doc.failures)
    if doc.passed and doc.document is not None:
        content = None
        if needs_content(facts, verifier.checks):
            content, content_problems = await fetch_content(verifier.content_sources, ctx)
            problems.extend(content_problems)
        failures = await _reexecute(verifier, doc.document, facts, content)
        target = github_target(doc.document, facts, verifier.checks, content)
        if verifier.github is not None and target is not None:
            failures = await github_rerun(verifier.github, target, facts.block_time)
    status = derive_status(failures)
    report = build_report(verdict.chain, status, failures, doc.digest, parent=parent, source=source)
    return Outcome(report, tuple(failures), doc.canonical, doc.digest, source, tuple(problems))


async def _reexecute(
    verifier: Verifier, document: dict[str, JsonValue], facts: VerdictFacts, content: bytes | None
) -> list[Failure]:
    if verifier.sandbox is None:
        return check_reexecution(document, facts, verifier.checks, content)
    try:
        return await verifier.sandbox.call(
            check_reexecution, document, facts, verifier.checks, content
        )
    except (SandboxTimeout, SandboxFault) as exc:
        return [Failure(FailureCode.NOT_REPRODUCIBLE, "/esito", f"re-run stopped: {exc}")]
    except MemoryError:
        return [Failure(FailureCode.NOT_REPRODUCIBLE, "/esito", "re-run ran out of memory")]


async def fetch_content(
    sources: Sequence[Source], ctx: FetchContext
) -> tuple[bytes | None, list[SourceFailure]]:
    """The deliverable's bytes: the first that hash to ``ctx.hash``, else the first found."""
    problems: list[SourceFailure] = []
    fallback: bytes | None = None
    for source in sources:
        result = await source.fetch(ctx)
        if isinstance(result, SourceFailure):
            problems.append(result)
            continue
        if keccak_hex(result.body) == ctx.hash:
            return result.body, problems
        fallback = result.body if fallback is None else fallback
    return fallback, problems


async def _find_document(
    verifier: Verifier, ctx: FetchContext, facts: VerdictFacts
) -> tuple[DocumentCheck, str | None, list[SourceFailure]]:
    problems: list[SourceFailure] = []
    first_wrong: tuple[DocumentCheck, str] | None = None
    for source in verifier.sources:
        result = await source.fetch(ctx)
        if isinstance(result, SourceFailure):
            problems.append(result)
            if result.problem is Problem.TOO_LARGE and first_wrong is None:
                # an answer too big to be a verdict is a bad document, not a missing one
                too_large = Failure(FailureCode.INVALID_DOCUMENT, "", "document exceeds size limit")
                first_wrong = (DocumentCheck((too_large,)), result.source)
            continue
        checked = _check(result, facts, verifier.checks)
        if checked.digest == facts.reason:
            return checked, result.source, problems
        unavailable = any(f.code is FailureCode.UNAVAILABLE for f in checked.failures)
        if not unavailable and first_wrong is None:
            first_wrong = (checked, result.source)
    if first_wrong is not None:
        return first_wrong[0], first_wrong[1], problems
    return check_document(None, facts, verifier.checks), None, problems


def _check(result: Fetched, facts: VerdictFacts, checks: CheckConfig) -> DocumentCheck:
    return check_document(result.body, facts, checks, result.pointer)


async def verify_and_record(
    conn: sqlite3.Connection, verdict: Verdict, verifier: Verifier, now: int
) -> store.VerificationRow:
    """Verify one ERC-8183 verdict and store the result (see ``record_verification``)."""

    async def run(parent: Report | None) -> Outcome:
        return await verify_verdict(verdict, verifier, parent=parent)

    return await record_verification(conn, verdict.chain, run, verifier.policy, now)


async def record_verification(
    conn: sqlite3.Connection,
    chain: ChainRef,
    run: Callable[[Report | None], Awaitable[Outcome]],
    policy: RetryPolicy,
    now: int,
) -> store.VerificationRow:
    """Run and store a verification: a changed outcome appends a revision, a repeat reschedules."""
    job_id = str(chain.job_id)
    previous = store.get_verification(conn, chain.chain_id, chain.contract, job_id)
    parent = stored_report(previous.report_json, previous.report_digest) if previous else None
    outcome = await run(parent)
    new_revision = parent is None or not same_outcome(parent, outcome.report)
    report = outcome.report if new_revision or parent is None else parent
    attempts = (previous.attempts if previous else 0) + 1
    first = previous.first_attempt_at if previous else now
    retry = None
    if outcome.status is Status.UNAVAILABLE:
        retry = next_retry_at(attempts, now, first_attempt_at=first, policy=policy)
    if outcome.document is not None and outcome.document_digest is not None:
        store.save_document(
            conn, chain.chain_id, chain.contract, job_id, outcome.document_digest, outcome.document
        )
    row = store.VerificationRow(
        chain_id=chain.chain_id,
        contract=chain.contract,
        job_id=job_id,
        status=report.status.value,
        failures_json=failures_json(outcome.failures),
        document_digest=outcome.document_digest,
        report_json=report.canonical.decode("utf-8"),
        report_digest=report.digest,
        parent_digest=report.parent_digest,
        revision_count=report.revision_count,
        event_name=chain.event,
        tx_hash=chain.tx_hash,
        block_hash=chain.block_hash,
        block_number=chain.block_number,
        log_index=chain.log_index,
        attempts=attempts,
        first_attempt_at=first,
        next_retry_at=retry,
    )
    store.save_verification(conn, row, new_revision=new_revision)
    return row


def verdict_from_index(row: store.IndexedVerdict) -> Verdict:
    """The verifier's input from the index: no RPC needed, the indexer already read it all."""
    job_id = int(row.job_id)
    facts = VerdictFacts(
        job_id=job_id,
        event_name=row.event_name,
        reason=row.reason.lower(),
        deliverable=row.deliverable.lower() if row.deliverable else None,
        evaluator=row.evaluator.lower(),
        description=row.description,
        block_time=row.block_timestamp,
    )
    chain = ChainRef(
        chain_id=row.chain_id,
        contract=row.contract,
        job_id=job_id,
        event=row.event_name,
        tx_hash=row.tx_hash,
        block_hash=row.block_hash,
        block_number=row.block_number,
        log_index=row.log_index,
        reason=facts.reason,
        deliverable=facts.deliverable,
        evaluator=facts.evaluator,
    )
    return Verdict(chain, facts)


async def verify_pending(
    conn: sqlite3.Connection, chain_id: int, verifier: Verifier, now: int, limit: int = 50
) -> int:
    """The daemon's step over the index; see ``keeper.verify.pending.verify_pending``."""
    from keeper.verify.pending import verify_pending as step  # pending imports this module

    return await step(conn, chain_id, verifier, now, limit)


async def verify_with_retries(
    verdict: Verdict,
    verifier: Verifier,
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> Outcome:
    """Verify, retrying while unavailable per the policy (for one-shot use without a database)."""
    first = int(clock())
    attempts = 0
    while True:
        outcome = await verify_verdict(verdict, verifier)
        attempts += 1
        if outcome.status is not Status.UNAVAILABLE:
            return outcome
        now = int(clock())
        at = next_retry_at(attempts, now, first_attempt_at=first, policy=verifier.policy)
        if at is None:
            return outcome
        await sleep(max(0, at - now))


def failures_json(failures: Sequence[Failure]) -> str:
    """Failures with their details, for the store and the API (reports keep code and pointer)."""
    return json.dumps(
        [
            {"code": f.code.value, "pointer": f.pointer, "detail": f.detail}
            | ({"check": f.check} if f.check else {})
            for f in failures
        ],
        separators=(",", ":"),
        ensure_ascii=False,
    )
