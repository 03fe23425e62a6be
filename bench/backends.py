"""Benchmark 7: the same backfill into SQLite and into PostgreSQL, beside its ceiling.

One chain (the dense honest workload of ``bench/escrow_workload.py``: job
lifecycles whose ``getJob`` reads all answer), backfilled twice by ``keeper
backfill`` as a subprocess, once into a fresh SQLite file and once into a
fresh database of a PostgreSQL 15 server started for the run (initdb/pg_ctl
as the tests do, on 127.0.0.1; ``fsync`` turned back on so both backends make
their commits durable). Each run is checked the same way: every event and
job stored, every job's description the one the workload created. The
same-run ceiling is the getLogs one of the backfill benchmark (fetch and
JSON-parse the same ranges, nothing stored), measured before the two runs.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import psycopg

from bench.backfill import CONTRACT_NAME, ceiling, check_descriptions, run_backfill
from bench.common import ARCHIVE_ANVIL, Result, write_config
from bench.escrow_workload import (
    ANVIL_ARGS,
    DENSE,
    Workload,
    deploy_driver,
    description,
    indexed_events,
    job_flows,
)
from keeper.devnet.anvil import AnvilProcess
from keeper.devnet.deploy import deploy_all
from keeper.store.index_rows import description_from_json

__all__ = ["bench_backends", "postgres_server"]


def postgres_server() -> Any:
    """The tests' PostgreSQL helper (one way to start a server here), imported late: the
    benchmark runs from the repository root, where ``tests/support`` is importable."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from support.postgres import PostgresServer

    server = PostgresServer().start()
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET fsync = on")
        conn.execute("SELECT pg_reload_conf()")
    return server


def _check_postgres(url: str, wl: Workload) -> tuple[int, int]:
    with psycopg.connect(url) as conn:
        events = conn.execute("SELECT count(*) FROM events").fetchone()
        rows = conn.execute("SELECT job_id, description FROM jobs").fetchall()
    stored = {int(job_id): description_from_json(text) for job_id, text in rows}
    wrong = [
        j for j in range(wl.first_job, wl.first_job + wl.jobs) if stored.get(j) != description(j)
    ]
    if wrong or events is None:
        raise RuntimeError(f"PostgreSQL backfill: {len(wrong)} of {wl.jobs} job descriptions wrong")
    return int(events[0]), len(stored)


def bench_backends(events: int, mode: str) -> Result:
    res = Result("backfill-backends", mode)
    server = postgres_server()
    try:
        with AnvilProcess(extra_args=ARCHIVE_ANVIL + ANVIL_ARGS) as node, \
                tempfile.TemporaryDirectory(prefix="bench-be-") as tmp:  # fmt: skip
            work = Path(tmp)
            d = deploy_all(node.url)
            wl = job_flows(node.url, d, deploy_driver(node.url, d), events, DENSE)
            span = DENSE.max_range
            print(f"[backends] {wl.events:,} events, {wl.jobs:,} jobs in {wl.blocks:,} blocks "
                  f"generated in {wl.seconds:.0f} s", flush=True)  # fmt: skip
            c_secs, c_count = asyncio.run(ceiling(node.url, d.erc8183, d.start_block,
                                                  wl.last_block, span))  # fmt: skip
            expected = indexed_events(node.url, d, wl)
            if c_count != expected:
                raise RuntimeError(f"getLogs returned {c_count} escrow logs of {expected}")
            contracts = [(CONTRACT_NAME, "erc8183", d.erc8183)]

            lite_cfg = write_config(work, "sqlite", node.url, d, contracts, max_range=span)
            l_secs, l_peak, l_summary = run_backfill(lite_cfg)
            conn = sqlite3.connect(work / "sqlite.db")
            l_events = conn.execute("SELECT count(*) FROM events").fetchone()[0]
            conn.close()
            check_descriptions(work / "sqlite.db", wl)

            url = server.database()
            pg_cfg = write_config(work, "postgres", node.url, d, contracts, max_range=span)
            text = pg_cfg.read_text()
            path_line = f"path = {json.dumps(str(work / 'postgres.db'))}"
            pg_cfg.write_text(text.replace(path_line, f"url = {json.dumps(url)}"))
            p_secs, p_peak, p_summary = run_backfill(pg_cfg)
            p_events, _ = _check_postgres(url, wl)
            if l_events != expected or p_events != expected:
                raise RuntimeError(f"stored {l_events} / {p_events} events of {expected}")
    finally:
        server.stop()

    ceiling_eps = c_count / c_secs
    lite_eps, pg_eps = expected / l_secs, expected / p_secs
    res.add("SQLite: events/s end to end", lite_eps, "ev/s")
    res.add("PostgreSQL: events/s end to end", pg_eps, "ev/s")
    res.add("PostgreSQL / SQLite end to end", pg_eps / lite_eps, "x")
    res.add("SQLite: share of the getLogs ceiling", lite_eps / ceiling_eps, "x")
    res.add("PostgreSQL: share of the getLogs ceiling", pg_eps / ceiling_eps, "x")
    res.add("ceiling (getLogs + JSON parse)", ceiling_eps, "ev/s")
    res.add("SQLite: events/s inside the process", l_summary["events_per_second"], "ev/s")
    res.add("PostgreSQL: events/s inside the process", p_summary["events_per_second"], "ev/s")
    res.details.update({
        "events": wl.events, "jobs": wl.jobs, "blocks": wl.blocks, "max_range": span,
        "generate_seconds": round(wl.seconds, 1), "ceiling_seconds": round(c_secs, 2),
        "sqlite_seconds": round(l_secs, 2), "postgres_seconds": round(p_secs, 2),
        "sqlite_peak_kb": l_peak, "postgres_peak_kb": p_peak,
        "postgres": "15, fsync on, on 127.0.0.1 (the same machine)",
    })  # fmt: skip
    return res
