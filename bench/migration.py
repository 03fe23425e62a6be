"""Benchmark 8 (``--only migration``): index migration 12 on a large ``jobs`` table.

Migration 12 rewrites every stored job description as the JSON string it is (one
``UPDATE`` through ``json_quote`` on SQLite, ``to_json`` on PostgreSQL), in the one
transaction the daemon's start waits for. Measured on both backends over the same
job rows (the backfill workload's descriptions), beside a baseline taken in the same
run on the same table: the same ``UPDATE`` writing each description back unchanged,
which is what rewriting the rows costs without the function. Each run is checked:
after the migration every description reads back (``description_from_json``) as the
text stored before it.
"""

from __future__ import annotations

import itertools
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.backends import postgres_server
from bench.common import Result
from bench.escrow_workload import description
from keeper.store.db import Db, connect, dialect, write_transaction
from keeper.store.index_rows import JOB_COLS, description_from_json
from keeper.store.migrations import component_migrations, migrate

__all__ = ["bench_migration"]

CHAIN = 31337
CONTRACT = "0x" + "ab" * 20
_BEFORE_12 = 11  # the index version of a release before migration 12
_PENDING = len(component_migrations("index")) - _BEFORE_12  # 12 and any after it


def _job(job_id: int) -> tuple[object, ...]:
    """A completed job's row as a store before migration 12 kept it (raw description)."""
    party = f"0x{job_id:040x}"
    values = dict.fromkeys(JOB_COLS)
    values.update(
        chain_id=CHAIN, contract=CONTRACT, job_id=str(job_id), client=party, provider=party,
        evaluator=party, hook="0x" + "00" * 20, token="0x" + "cd" * 20, budget="1000000",
        funded_amount="1000000", expired_at=1_700_000_000 + job_id, submitted_at=1_700_000_000,
        status="completed", status_code=3, deliverable="0x" + "11" * 32, reason="0x" + "22" * 32,
        description=description(job_id), legacy=0, created_block=job_id // 500 + 1,
        updated_block=job_id // 500 + 1, verdict_event=None, refunded_amount="0",
        paid_amount="1000000", settled_amount="1000000", payout_receiver=party,
        pending_claim_amount="0", dialect="erc8183",
    )  # fmt: skip
    return tuple(values[c] for c in JOB_COLS)


def _fill(conn: Db, jobs: int) -> None:
    """A migrated database holding ``jobs`` rows as a release before 12 wrote them."""
    migrate(conn)
    placeholders = ", ".join("?" for _ in JOB_COLS)
    with write_transaction(conn):
        conn.execute(
            "UPDATE schema_migrations SET version = ? WHERE component = 'index'", (_BEFORE_12,)
        )
        for start in range(0, jobs, 50_000):
            conn.executemany(
                f"INSERT INTO jobs ({', '.join(JOB_COLS)}) VALUES ({placeholders})",
                [_job(j) for j in range(start, min(start + 50_000, jobs))],
            )


def _timed(conn: Db, sql: str) -> float:
    started = time.perf_counter()
    with write_transaction(conn):
        conn.execute(sql)
    return time.perf_counter() - started


def _measure(res: Result, connect_fresh: Callable[[], Db], jobs: int) -> None:
    """The baseline and the migration each on a table of their own, filled the same way:
    neither finds the other's dead row versions or grown pages."""
    conn = connect_fresh()
    backend = dialect(conn)
    try:
        _fill(conn, jobs)
        base = _timed(conn, "UPDATE jobs SET description = description || '' "
                            "WHERE description IS NOT NULL")  # fmt: skip
    finally:
        conn.close()
    conn = connect_fresh()
    try:
        _fill(conn, jobs)
        started = time.perf_counter()
        applied = migrate(conn)["index"]
        secs = time.perf_counter() - started
        if applied != _PENDING:
            raise RuntimeError(
                f"{backend}: {applied} index migrations applied, expected {_PENDING}"
            )
        wrong = sum(
            description_from_json(text) != description(int(job_id))
            for job_id, text in conn.execute("SELECT job_id, description FROM jobs")
        )
    finally:
        conn.close()
    if wrong:
        raise RuntimeError(f"{backend}: {wrong} of {jobs} descriptions not as stored before 12")
    res.add(f"{backend} migration 12", jobs / secs, "jobs/s",
            note=f"{secs:.2f} s for {jobs:,} jobs; baseline {base:.2f} s")  # fmt: skip
    res.details[backend] = {"jobs": jobs, "seconds": round(secs, 3),
                            "baseline_seconds": round(base, 3)}  # fmt: skip
    print(f"[migration] {backend}: {jobs:,} jobs in {secs:.2f} s (baseline, the same "
          f"rewrite without the function: {base:.2f} s)", flush=True)  # fmt: skip


def bench_migration(jobs: int, mode: str) -> Result:
    res = Result("migration-12", mode)
    with tempfile.TemporaryDirectory(prefix="bench-mig-") as tmp:
        files = (Path(tmp) / f"index-{n}.db" for n in itertools.count())
        _measure(res, lambda: connect(next(files)), jobs)
    server = postgres_server()
    try:
        _measure(res, lambda: connect(server.database()), jobs)
    finally:
        server.stop()
    return res
