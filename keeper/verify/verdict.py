"""Verify one verdict end to end without storage: fetch, check, re-run, report.

Sources are tried in their configured order. The first document whose digest
equals the on-chain reason wins, since the chain names exactly one document;
a source that answers a wrong document is asked once more (the second answer
wins if it is the right one: a glitch on the way is not tampering); when none
does, the first wrong document is reported (tampered, unreadable or over the
size limit: a bad source must not hide behind "unavailable"), and
only when no source has anything is the verdict ``unavailable``. Deliverable content is fetched
only when a deterministic evaluator will be re-run; content matching the
on-chain hash is preferred (a source answering other bytes is asked again too),
else the first content found is judged as is.
The re-run executes in the verifier's ``Sandbox`` when it has one (the daemon
and ``keeper verify`` do), so a hostile schema costs a bounded time and memory.

``unavailable`` is retried with exponential backoff until a horizon measured
from the first attempt (``next_retry_at``, pure), where a source could answer later
(``Verifier.retries``), and so is a failure judged on
a document or content that was not the committed one (``checked_again``: a
source serving a wrong answer for longer than two asks may serve the right one
later, and the verdict then turns ``verified``); every other status is final until
something changes (a new release of the checks, a new source). Storing the
outcome is ``keeper.verify.verifier``'s job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

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
from keeper.verify.report import ChainRef, Report, build_report
from keeper.verify.sandbox import Sandbox, SandboxFault, SandboxTimeout
from keeper.verify.sources import FetchContext, Fetched, Problem, Source, SourceFailure
from keeper.verify.submission import StoredDocumentSource


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

    @property
    def retries(self) -> RetryPolicy | None:
        """The retry schedule, or None when a retry could find nothing this try did not.

        Only a source that is asked (not the posted documents: a post makes its
        verdict's verification due at once), content to fetch or GitHub's API can
        answer later. Without any, every verdict of a catch-up would be checked some
        thirty times in a day for nothing.
        """
        fetching = any(not isinstance(s, StoredDocumentSource) for s in self.sources)
        if fetching or self.content_sources or self.github is not None:
            return self.policy
        return None


@dataclass(frozen=True, slots=True)
class Outcome:
    report: Report
    failures: tuple[Failure, ...]
    document: bytes | None  # canonical bytes of the checked document, when it parsed
    document_digest: str | None
    source: str | None  # label of the source the checked document came from
    source_failures: tuple[SourceFailure, ...]
    # judged on what the chain committed to: the document that hashes to the reason, and
    # the content that hashes to the deliverable where a re-run used content
    committed: bool

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
    committed = doc.digest == facts.reason.lower()
    if doc.passed and doc.document is not None:
        content = None
        if needs_content(facts, verifier.checks):
            content, deliverable, content_problems = await fetch_content(
                verifier.content_sources, ctx
            )
            problems.extend(content_problems)
            committed = committed and (content is None or deliverable)
        failures = await _reexecute(verifier, doc.document, facts, content)
        target = github_target(doc.document, facts, verifier.checks, content)
        if verifier.github is not None and target is not None:
            failures = await github_rerun(verifier.github, target, facts.block_time)
    status = derive_status(failures)
    report = build_report(verdict.chain, status, failures, doc.digest, parent=parent, source=source)
    return Outcome(
        report, tuple(failures), doc.canonical, doc.digest, source, tuple(problems), committed
    )


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
) -> tuple[bytes | None, bool, list[SourceFailure]]:
    """The deliverable's bytes: the first that hash to ``ctx.hash``, else the first found;
    and whether they are the deliverable (hash to it)."""
    problems: list[SourceFailure] = []
    fallback: bytes | None = None
    for source in sources:
        result = await source.fetch(ctx)
        if isinstance(result, SourceFailure):
            problems.append(result)
            continue
        if keccak_hex(result.body) == ctx.hash:
            return result.body, True, problems
        # judged as is it could make a genuine verdict evaluator_disagrees: asked again first
        again = await _asked_again(source, ctx)
        if again is not None and keccak_hex(again.body) == ctx.hash:
            return again.body, True, problems
        fallback = result.body if fallback is None else fallback
    return fallback, False, problems


async def _asked_again(source: Source, ctx: FetchContext) -> Fetched | None:
    """A source's second answer, after a first that was wrong (None: it has none now).

    Wrong answers lead to final statuses, so one garbled on its way (a proxy's error
    page served as 200, a stale cache) must not decide: the right answer the second
    time wins, and where both are wrong the first is kept.
    """
    again = await source.fetch(ctx)
    return None if isinstance(again, SourceFailure) else again


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
        if any(f.code is FailureCode.UNAVAILABLE for f in checked.failures):
            continue
        again = await _asked_again(source, ctx)
        if again is not None:
            confirmed = _check(again, facts, verifier.checks)
            if confirmed.digest == facts.reason:
                return confirmed, again.source, problems
        if first_wrong is None:
            first_wrong = (checked, result.source)
    if first_wrong is not None:
        return first_wrong[0], first_wrong[1], problems
    return check_document(None, facts, verifier.checks), None, problems


def _check(result: Fetched, facts: VerdictFacts, checks: CheckConfig) -> DocumentCheck:
    return check_document(result.body, facts, checks, result.pointer)
