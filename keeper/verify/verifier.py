"""Verify and record: the daemon's verification step over the index.

ERC-8183 verdicts (``JobCompleted``/``JobRejected``) get the full check
pipeline (``keeper.verify.verdict``); task-market verdicts (the latest
``TaskEvaluated`` with an evidence hash) get their evidence document checked
(``keeper.verify.evidence``). Call ``verify_pending`` after each committed
batch and periodically for retries, with one ``PendingScan`` for as long as
the caller runs (it drops the verifications a rollback orphaned). A changed
outcome appends a report revision; a repeat only reschedules.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from keeper.obs.logging import get_logger
from keeper.store import verifications as store
from keeper.store.db import Db
from keeper.verify.checks import VerdictFacts
from keeper.verify.evidence import chain_from_task, verify_evidence
from keeper.verify.failures import Failure, checked_again
from keeper.verify.pass_size import SMALLEST
from keeper.verify.report import ChainRef, Report, same_outcome, stored_report
from keeper.verify.scan import PendingScan
from keeper.verify.verdict import (
    Outcome,
    RetryPolicy,
    Verdict,
    Verifier,
    next_retry_at,
    verify_verdict,
)

log = get_logger(__name__)

TASK_EVENT = "TaskEvaluated"


Run = Callable[[Report | None], Awaitable[Outcome]]
# a pass's verifications waiting longer than this for the others' fetches are stored
FLUSH_AFTER_S = 1.0


async def verify_pending(
    conn: Db, scan: PendingScan, verifier: Verifier, now: int, limit: int = SMALLEST
) -> int:
    """Verify newly indexed verdicts and the retries that are due; returns how many ran.

    ``scan`` is the caller's for as long as it runs (see ``keeper.verify.scan``):
    each call takes in the rollbacks since the last, then reads on from where it
    stopped. The pass's results are stored together (``_Pass``).
    """
    chain_id = scan.chain_id
    starting = scan.rollback_seq is None  # a daemon's first pass (keeper.verify.scan)
    scan.sync(conn)
    policy = verifier.retries
    if starting and policy is not None:
        resumed = store.resume_retries(conn, chain_id, now - policy.horizon)
        if resumed:
            log.info("verify_retries_resumed", chain_id=chain_id, verifications=resumed)
    batch = _Pass(conn, policy, now)
    for o in list(scan.recheck):
        latest = _latest(conn, chain_id, o.contract, o.job_id, o.event_name, verifier, again=False)
        if latest is None:
            scan.recheck.remove(o)
        else:
            await batch.add(*latest, done=functools.partial(scan.recheck.remove, o))
    jobs, tasks = scan.pending(conn, limit)
    rows: list[store.IndexedVerdict | store.IndexedTaskVerdict] = [*jobs, *tasks]
    for row in rows:
        await batch.add(*_to_check(row, verifier), functools.partial(scan.passed, row))
    for due in store.due_for_retry(conn, chain_id, now, limit):
        latest = _latest(conn, chain_id, due.contract, due.job_id, due.event_name, verifier)
        if latest is not None:
            await batch.add(*latest)
    batch.flush()
    scan.read_through()
    return batch.ran


class _Pass:
    """One pass's verifications, stored in one transaction when the pass ends.

    A commit per verification was most of the cost of one that fetched
    nothing (a catch-up over a long history records tens of thousands). The
    checks run first (they may await a document), then the writes, with no
    await between them, so the indexer sharing the connection never finds
    the transaction open. A subject met twice in a pass has its first result
    stored before the second is checked (the second builds on it); results
    that waited ``FLUSH_AFTER_S`` for slow fetches are stored without waiting
    for the rest. ``done`` runs once a result is stored: a scan moves past a
    verdict only then.
    """

    def __init__(self, conn: Db, policy: RetryPolicy | None, now: int) -> None:
        self.conn, self.policy, self.now = conn, policy, now
        self.checked: list[tuple[Checked, Callable[[], None] | None]] = []
        self.subjects: set[tuple[str, str]] = set()
        self.since = 0.0
        self.ran = 0

    async def add(self, chain: ChainRef, run: Run, done: Callable[[], None] | None = None) -> None:
        subject = (chain.contract, str(chain.job_id))
        if subject in self.subjects or (
            self.checked and time.monotonic() - self.since > FLUSH_AFTER_S
        ):
            self.flush()
        if not self.checked:
            self.since = time.monotonic()
        self.checked.append((await check(self.conn, chain, run, self.policy, self.now), done))
        self.subjects.add(subject)
        self.ran += 1

    def flush(self) -> None:
        if not self.checked:
            return
        with store.transaction(self.conn):
            for checked, _ in self.checked:
                store_checked(self.conn, checked)
        for _, done in self.checked:
            if done is not None:
                done()
        self.checked.clear()
        self.subjects.clear()


def _latest(
    conn: Db,
    chain_id: int,
    contract: str,
    subject: str,
    event: str,
    verifier: Verifier,
    *,
    again: bool = True,
) -> tuple[ChainRef, Run] | None:
    """A subject's latest indexed verdict to check; ``None`` when it has none (or, unless
    ``again``, when that very event is verified already: by another daemon, say)."""
    latest: store.IndexedTaskVerdict | store.IndexedVerdict | None
    if event == TASK_EVENT:
        latest = store.indexed_task_verdict(conn, chain_id, contract, subject)
    else:
        latest = store.indexed_verdict(conn, chain_id, contract, subject)
    if latest is None:
        return None
    if not again:
        done = store.get_verification(conn, chain_id, contract, subject)
        if done is not None and (done.block_hash, done.log_index) == (
            latest.block_hash,
            latest.log_index,
        ):
            return None
    return _to_check(latest, verifier)


def _to_check(
    row: store.IndexedVerdict | store.IndexedTaskVerdict, verifier: Verifier
) -> tuple[ChainRef, Run]:
    """An indexed verdict's subject and the check it gets: the job pipeline or the evidence."""
    if isinstance(row, store.IndexedVerdict):
        verdict = verdict_from_index(row)
        return verdict.chain, _verdict_run(verdict, verifier)
    chain = chain_from_task(row)

    async def run(parent: Report | None) -> Outcome:
        return await verify_evidence(chain, verifier, parent=parent)

    return chain, run


def _verdict_run(verdict: Verdict, verifier: Verifier) -> Run:
    async def run(parent: Report | None) -> Outcome:
        return await verify_verdict(verdict, verifier, parent=parent)

    return run


async def verify_and_record(
    conn: Db, verdict: Verdict, verifier: Verifier, now: int
) -> store.VerificationRow:
    """Verify one ERC-8183 verdict and store the result (see ``record_verification``)."""
    run = _verdict_run(verdict, verifier)
    return await record_verification(conn, verdict.chain, run, verifier.retries, now)


async def record_verification(
    conn: Db, chain: ChainRef, run: Run, policy: RetryPolicy | None, now: int
) -> store.VerificationRow:
    """Run and store a verification: a changed outcome appends a revision, a repeat reschedules."""
    return store_checked(conn, await check(conn, chain, run, policy, now))


@dataclass(frozen=True, slots=True)
class Checked:
    """A verification run and not yet stored (``store_checked``)."""

    row: store.VerificationRow
    new_revision: bool
    document_digest: str | None
    document: bytes | None


async def check(
    conn: Db, chain: ChainRef, run: Run, policy: RetryPolicy | None, now: int
) -> Checked:
    """Run a verification on top of the stored one: its revision, attempts and next retry
    (none without a ``policy``: ``Verifier.retries``)."""
    job_id = str(chain.job_id)
    previous = store.get_verification(conn, chain.chain_id, chain.contract, job_id)
    parent = stored_report(previous.report_json, previous.report_digest) if previous else None
    outcome = await run(parent)
    new_revision = parent is None or not same_outcome(parent, outcome.report)
    report = outcome.report if new_revision or parent is None else parent
    attempts = (previous.attempts if previous else 0) + 1
    first = previous.first_attempt_at if previous else now
    retry = None
    if policy is not None and checked_again(outcome.status, outcome.committed):
        retry = next_retry_at(attempts, now, first_attempt_at=first, policy=policy)
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
    return Checked(row, new_revision, outcome.document_digest, outcome.document)


def store_checked(conn: Db, checked: Checked) -> store.VerificationRow:
    """Store a checked verification (joining the caller's transaction if one is open)."""
    row = checked.row
    with store.transaction(conn):
        if checked.document is not None and checked.document_digest is not None:
            store.save_document(conn, row.chain_id, row.contract, row.job_id,
                                checked.document_digest, checked.document)  # fmt: skip
        if store.save_verification(conn, row, new_revision=checked.new_revision):
            return row
    # another daemon on the database recorded this revision first: theirs stands
    log.info("verification_recorded_elsewhere", job_id=row.job_id, revision=row.revision_count)
    latest = store.get_verification(conn, row.chain_id, row.contract, row.job_id)
    return latest if latest is not None else row


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
