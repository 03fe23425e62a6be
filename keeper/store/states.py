"""Load live projections back into domain states, for the keeper's planner.

Only subjects the keeper may still act on are loaded (non-terminal jobs and
tasks), so a tick's cost follows the open work, not the history.
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any, Final

from keeper.domain.model import JobState, JobStatus, TaskState, TaskStatus, VerdictType
from keeper.store.db import Db, DbRow
from keeper.store.index_rows import description_from_json

LIVE_JOB_STATUSES: Final = ("open", "funded", "submitted")
TERMINAL_TASK_STATUSES: Final = ("accepted", "expired", "cancelled")

_JOB_INTS: Final = {"budget", "funded_amount", "refunded_amount", "paid_amount", "settled_amount"}
_TASK_INTS: Final = {"reward", "evaluator_stake", "paid_amount", "refunded_amount"}


def live_jobs(conn: Db, chain_id: int) -> list[JobState]:
    marks = ",".join("?" * len(LIVE_JOB_STATUSES))
    rows = conn.execute(
        f"SELECT * FROM jobs WHERE chain_id = ? AND status IN ({marks})",
        (chain_id, *LIVE_JOB_STATUSES),
    ).fetchall()
    return [job_from_row(r) for r in rows]


def live_tasks(conn: Db, chain_id: int) -> list[TaskState]:
    marks = ",".join("?" * len(TERMINAL_TASK_STATUSES))
    rows = conn.execute(
        f"SELECT * FROM tasks WHERE chain_id = ? AND status NOT IN ({marks})",
        (chain_id, *TERMINAL_TASK_STATUSES),
    ).fetchall()
    return [task_from_row(r) for r in rows]


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
