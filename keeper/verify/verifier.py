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

import json
from collections.abc import Awaitable, Callable, Sequence

from keeper.obs.logging import get_logger
from keeper.store import verifications as store
from keeper.store.db import Db
from keeper.verify.checks import VerdictFacts
from keeper.verify.evidence import chain_from_task, verify_evidence
from keeper.verify.failures import Failure, Status
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


async def verify_pending(
    conn: Db, scan: PendingScan, verifier: Verifier, now: int, limit: int = 50
) -> int:
    """Verify newly indexed verdicts and the retries that are due; returns how many ran.

    ``scan`` is the caller's for as long as it runs (see ``keeper.verify.scan``):
    each call takes in the rollbacks since the last, then reads on from where it
    stopped.
    """
    chain_id = scan.chain_id
    scan.sync(conn)
    ran = await _verify_latest(conn, scan, verifier, now)
    jobs = scan.pending_jobs(conn, limit)
    tasks = scan.pending_tasks(conn, limit)
    for job in jobs:
        await verify_and_record(conn, verdict_from_index(job), verifier, now)
        scan.passed(job)
    for task in tasks:
        await verify_task_and_record(conn, task, verifier, now)
        scan.passed(task)
    scan.read_through()
    ran += len(jobs) + len(tasks)
    for due in store.due_for_retry(conn, chain_id, now, limit):
        ran += await _verify_subject(conn, chain_id, due.contract, due.job_id, due.event_name,
                                     verifier, now)  # fmt: skip
    return ran


async def _verify_latest(conn: Db, scan: PendingScan, verifier: Verifier, now: int) -> int:
    """Verify the latest verdict of each subject a rollback left for a check (``scan.recheck``)."""
    ran = 0
    while scan.recheck:
        o = scan.recheck[0]
        ran += await _verify_subject(
            conn, scan.chain_id, o.contract, o.job_id, o.event_name, verifier, now, again=False
        )
        scan.recheck.pop(0)
    return ran


async def _verify_subject(
    conn: Db,
    chain_id: int,
    contract: str,
    subject: str,
    event: str,
    verifier: Verifier,
    now: int,
    *,
    again: bool = True,
) -> int:
    """Verify a subject's latest indexed verdict; 0 when it has none (or, unless ``again``,
    when that very event is verified already: by another daemon, say)."""
    latest: store.IndexedTaskVerdict | store.IndexedVerdict | None
    if event == TASK_EVENT:
        latest = store.indexed_task_verdict(conn, chain_id, contract, subject)
    else:
        latest = store.indexed_verdict(conn, chain_id, contract, subject)
    if latest is None:
        return 0
    if not again:
        done = store.get_verification(conn, chain_id, contract, subject)
        if done is not None and (done.block_hash, done.log_index) == (
            latest.block_hash,
            latest.log_index,
        ):
            return 0
    if isinstance(latest, store.IndexedTaskVerdict):
        await verify_task_and_record(conn, latest, verifier, now)
    else:
        await verify_and_record(conn, verdict_from_index(latest), verifier, now)
    return 1


async def verify_task_and_record(
    conn: Db, task: store.IndexedTaskVerdict, verifier: Verifier, now: int
) -> store.VerificationRow:
    """Check a task verdict's evidence document and store the result."""
    chain = chain_from_task(task)

    async def run(parent: Report | None) -> Outcome:
        return await verify_evidence(chain, verifier, parent=parent)

    return await record_verification(conn, chain, run, verifier.policy, now)


async def verify_and_record(
    conn: Db, verdict: Verdict, verifier: Verifier, now: int
) -> store.VerificationRow:
    """Verify one ERC-8183 verdict and store the result (see ``record_verification``)."""

    async def run(parent: Report | None) -> Outcome:
        return await verify_verdict(verdict, verifier, parent=parent)

    return await record_verification(conn, verdict.chain, run, verifier.policy, now)


async def record_verification(
    conn: Db,
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
    if not store.save_verification(conn, row, new_revision=new_revision):
        # another daemon on the database recorded this revision first: theirs stands
        log.info("verification_recorded_elsewhere", job_id=job_id, revision=row.revision_count)
        latest = store.get_verification(conn, chain.chain_id, chain.contract, job_id)
        return latest if latest is not None else row
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
