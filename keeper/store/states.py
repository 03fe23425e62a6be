"""Load the projections the keeper's planner may act on back into domain states.

Only subjects with something due are loaded: non-terminal jobs and tasks whose
deadline has passed at the head's time. The planner decides nothing for a job
before its ``expiredAt``, nor for a task before its appeal deadline, its
evaluation deadline or its expiry (``keeper.domain.planner``; the planner's
tests hold it to that), so a tick's cost follows the work due, not every open
escrow: a marketplace with tens of thousands of open jobs would otherwise have
each of them read back and planned on every block.
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any, Final

from keeper.domain.model import (
    LIVE_JOB_STATUSES,
    LIVE_TASK_STATUSES,
    JobState,
    JobStatus,
    TaskState,
    TaskStatus,
    VerdictType,
)
from keeper.store.db import Db, DbRow, dialect
from keeper.store.index_rows import description_from_json

_JOB_INTS: Final = {"budget", "funded_amount", "refunded_amount", "paid_amount", "settled_amount"}
_TASK_INTS: Final = {"reward", "evaluator_stake", "paid_amount", "refunded_amount"}


def due_jobs(conn: Db, chain_id: int, now: int) -> list[JobState]:
    """Non-terminal jobs whose ``expiredAt`` is ``now`` or before, off ``jobs_due``."""
    marks = ",".join("?" * len(LIVE_JOB_STATUSES))
    rows = conn.execute(
        f"SELECT * FROM jobs WHERE status IN ({marks}) AND expired_at <= ? AND {_chain(conn)} = ?",
        (*LIVE_JOB_STATUSES, now, chain_id),
    ).fetchall()
    return [job_from_row(r) for r in rows]


def due_tasks(conn: Db, chain_id: int, now: int) -> list[TaskState]:
    """Non-terminal tasks past one of their deadlines at ``now``: expired, or an appeal
    window or evaluation window over (a deadline still unknown is NULL, never past). Off
    ``tasks_status_page``, so the ended tasks of the history are never read."""
    marks = ",".join("?" * len(LIVE_TASK_STATUSES))
    rows = conn.execute(
        f"SELECT * FROM tasks WHERE status IN ({marks}) AND {_chain(conn)} = ? "
        "AND (expiry_time < ? OR appeal_deadline <= ? OR evaluation_deadline < ?)",
        (*LIVE_TASK_STATUSES, chain_id, now, now, now),
    ).fetchall()
    return [task_from_row(r) for r in rows]


def disputed_tasks(conn: Db, chain_id: int) -> list[TaskState]:
    """Disputed tasks with a dispute resolver: the ones a resolution paying no award can
    end without an event, which only the keeper's probe learns (``keeper.act.silent``).
    Off ``tasks_status_page``, whose prefix is the status; few at any time, as a dispute
    waits only on its resolver."""
    rows = conn.execute(
        f"SELECT * FROM tasks WHERE status = ? AND {_chain(conn)} = ? "
        "AND dispute_resolver IS NOT NULL",
        (TaskStatus.DISPUTED.label, chain_id),
    ).fetchall()
    return [task_from_row(r) for r in rows]


def _chain(conn: Db) -> str:
    """The chain column as the deadline reads compare it: ``+chain_id`` keeps SQLite's
    planner off the primary key, whose chain_id prefix matches every row of a one-chain
    file, and on the status indexes, whatever its statistics say (PostgreSQL's planner
    weighs that from its own)."""
    return "chain_id" if dialect(conn) == "postgresql" else "+chain_id"


def job_from_row(row: DbRow) -> JobState:
    values: dict[str, Any] = {}
    columns = set(row.keys())  # DbRow's `in` looks at values, not column names
    for f in fields(JobState):
        if f.name == "status":
            values["status"] = JobStatus(int(row["status_code"]))
        elif f.name == "legacy":
            values["legacy"] = bool(row["legacy"])
        elif f.name in _JOB_INTS:
            values[f.name] = int(row[f.name])
        elif f.name == "description":
            values["description"] = description_from_json(row["description"])
        elif f.name == "pending_claim_amount":
            raw = row[f.name]
            values[f.name] = None if raw is None else int(raw)
        elif f.name in columns:
            values[f.name] = row[f.name]
    return JobState(**values)


def task_from_row(row: DbRow) -> TaskState:
    values: dict[str, Any] = {}
    columns = set(row.keys())
    for f in fields(TaskState):
        if f.name == "status":
            values["status"] = TaskStatus(int(row["status_code"]))
        elif f.name == "verdict_type":
            raw = row["verdict_type"]
            values["verdict_type"] = None if raw is None else VerdictType(int(raw))
        elif f.name == "extra":
            values["extra"] = json.loads(row["extra_json"])
        elif f.name in _TASK_INTS:
            values[f.name] = int(row[f.name])
        elif f.name in columns:
            values[f.name] = row[f.name]
    return TaskState(**values)
