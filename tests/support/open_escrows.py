"""Every open job and task read back whole: what a keeper tick read before it read only
the subjects due (``keeper.store.states``).

The daemon no longer reads these; the store test compares the planner's decisions from
both reads, and the keeper benchmark times this read beside the daemon's.
"""

from __future__ import annotations

from keeper.domain.model import LIVE_JOB_STATUSES, TERMINAL_TASK_STATUSES, JobState, TaskState
from keeper.store.db import Db
from keeper.store.states import job_from_row, task_from_row


def every_open(conn: Db, chain_id: int) -> tuple[list[JobState], list[TaskState]]:
    """The chain's non-terminal jobs and tasks, due or not."""
    live = ",".join("?" * len(LIVE_JOB_STATUSES))
    ended = ",".join("?" * len(TERMINAL_TASK_STATUSES))
    job_rows = conn.execute(
        f"SELECT * FROM jobs WHERE chain_id = ? AND status IN ({live})",
        (chain_id, *LIVE_JOB_STATUSES),
    )
    task_rows = conn.execute(
        f"SELECT * FROM tasks WHERE chain_id = ? AND status NOT IN ({ended})",
        (chain_id, *TERMINAL_TASK_STATUSES),
    )
    jobs = [job_from_row(r) for r in job_rows.fetchall()]
    return jobs, [task_from_row(r) for r in task_rows.fetchall()]
