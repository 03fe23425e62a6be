"""What the keeper is handed each tick: the projections past a deadline, read back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from index_builders import Synth, batch_of
from support.open_escrows import every_open

from keeper.domain.model import BlockHeader
from keeper.domain.planner import PlannerConfig, plan
from keeper.store.db import Db, connect, write_transaction
from keeper.store.index_store import IndexStore
from keeper.store.migrations import migrate
from keeper.store.states import due_jobs, due_tasks

CHAIN = 8453


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def indexed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Db]:
    path: Path | str = tmp_path_factory.mktemp("states") / "index.db"
    if request.param == "postgresql":
        path = request.getfixturevalue("postgres_server").database()
    conn = connect(path)
    migrate(conn)
    synth = Synth(seed=5, events_per_block=10, locality=40)
    IndexStore(conn, CHAIN).apply_batch(batch_of(synth.blocks(1, 80), finalized=80))
    # the synthetic tasks in review expire before their evaluation window ends; a task
    # submitted early, whose evaluation deadline comes long before its expiry, is the
    # case only the evaluation deadline makes due
    with write_transaction(conn):
        conn.execute(
            "UPDATE tasks SET expiry_time = evaluation_deadline + 86400 WHERE status = 'review'"
        )
    yield conn
    conn.close()


def _moments(conn: Db) -> list[int]:
    """Times around every deadline stored: each one, a second before and a second after."""
    rows = conn.execute(
        "SELECT expired_at FROM jobs UNION SELECT expiry_time FROM tasks "
        "UNION SELECT appeal_deadline FROM tasks WHERE appeal_deadline IS NOT NULL "
        "UNION SELECT evaluation_deadline FROM tasks WHERE evaluation_deadline IS NOT NULL"
    ).fetchall()
    return sorted({int(r[0]) + d for r in rows for d in (-1, 0, 1)})


def test_the_workload_has_open_subjects_on_both_sides_of_their_deadlines(indexed: Db) -> None:
    """The comparison below means something: open jobs and tasks, deadlines spread out."""
    jobs, tasks = every_open(indexed, CHAIN)
    assert len(jobs) >= 20 and len(tasks) >= 20
    assert len(_moments(indexed)) >= 40


def test_a_tick_plans_the_same_from_the_subjects_due_as_from_every_open_one(indexed: Db) -> None:
    """At any moment (each deadline, a second either side), the planner's actions and reports
    from what is read are those from every open job and task; the jobs read are exactly
    the open ones past expiredAt, so one not yet due is never loaded."""
    every_job, every_task = every_open(indexed, CHAIN)
    config = PlannerConfig()
    fewer = planned = 0
    for now in _moments(indexed):
        head = BlockHeader(1, "0x" + "ab" * 32, "0x" + "cd" * 32, now)
        jobs, tasks = due_jobs(indexed, CHAIN, now), due_tasks(indexed, CHAIN, now)
        assert sorted(j.job_id for j in jobs) == sorted(
            j.job_id for j in every_job if j.expired_at <= now
        )
        assert {t.task_id for t in tasks} <= {t.task_id for t in every_task}
        result = plan(jobs, tasks, head, config)
        assert result == plan(every_job, every_task, head, config)
        fewer += len(jobs) + len(tasks) < len(every_job) + len(every_task)
        planned += bool(result.actions) and len(result.actions) < len(every_job) + len(every_task)
    assert fewer > 0 and planned > 0
