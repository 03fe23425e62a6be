"""The daemon's verification step over the index: new verdicts first, then due retries.

ERC-8183 verdicts (``JobCompleted``/``JobRejected``) get the full check
pipeline; task-market verdicts (the latest ``TaskEvaluated`` with an evidence
hash) get their evidence document checked. Call ``verify_pending`` after each
committed batch and periodically for retries; after a reorg's rollback call
``keeper.store.verifications.delete_orphans`` first.
"""

from __future__ import annotations

import sqlite3

from keeper.store import verifications as store
from keeper.verify.evidence import chain_from_task, verify_evidence
from keeper.verify.report import Report
from keeper.verify.verifier import (
    Outcome,
    Verifier,
    record_verification,
    verdict_from_index,
    verify_and_record,
)

TASK_EVENT = "TaskEvaluated"


async def verify_pending(
    conn: sqlite3.Connection, chain_id: int, verifier: Verifier, now: int, limit: int = 50
) -> int:
    """Verify newly indexed verdicts and the retries that are due; returns how many ran."""
    jobs = store.pending_verdicts(conn, chain_id, limit)
    tasks = store.pending_task_verdicts(conn, chain_id, limit)
    for due in store.due_for_retry(conn, chain_id, now, limit):
        if due.event_name == TASK_EVENT:
            task = store.indexed_task_verdict(conn, chain_id, due.contract, due.job_id)
            tasks.extend([task] if task is not None else [])
        else:
            job = store.indexed_verdict(conn, chain_id, due.contract, due.job_id)
            jobs.extend([job] if job is not None else [])
    for job in jobs:
        await verify_and_record(conn, verdict_from_index(job), verifier, now)
    for task in tasks:
        await verify_task_and_record(conn, task, verifier, now)
    return len(jobs) + len(tasks)


async def verify_task_and_record(
    conn: sqlite3.Connection, task: store.IndexedTaskVerdict, verifier: Verifier, now: int
) -> store.VerificationRow:
    """Check a task verdict's evidence document and store the result."""
    chain = chain_from_task(task)

    async def run(parent: Report | None) -> Outcome:
        return await verify_evidence(chain, verifier, parent=parent)

    return await record_verification(conn, chain, run, verifier.policy, now)
