"""The daemon catching up from an empty database, beside ``keeper backfill`` of the same chain.

``keeper run`` indexes, verifies and keeps at once: a far-behind start is
what an operator sees first. The backfill bench's chain and node are reused
(``bench.backfill``), so the command's end-to-end time measured there is the
baseline: how long the index alone takes the fastest path. Two moments are
timed from the daemon's start: every event indexed (its cursor at the
workload's last block) and every verdict event verified (a row in
``verifications`` for each ``JobCompleted``/``JobRejected``). No document
source is configured, so each verification is recorded as unavailable
without waiting on I/O: the verifier's own cost over the index, nothing else.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from bench.common import TreePeak, free_port, spawn_daemon, stop_daemon, write_config
from keeper.devnet.deploy import Deployment

# the longest a catch-up may take before the bench gives up on it
TIMEOUT_S = 600.0


def _counts(db: Path) -> tuple[int, int, int]:
    """(indexed block, verdict events, verifications) read off the daemon's database."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
    try:
        cursor = conn.execute("SELECT max(indexed_block) FROM cursor").fetchone()
        verdicts = conn.execute(
            "SELECT count(*) FROM events WHERE name IN ('JobCompleted', 'JobRejected')"
        ).fetchone()
        verified = conn.execute("SELECT count(*) FROM verifications").fetchone()
        return int(cursor[0] or -1), int(verdicts[0]), int(verified[0])
    finally:
        conn.close()


def daemon_catchup(
    work: Path,
    url: str,
    d: Deployment,
    contract: tuple[str, str, str],
    last_block: int,
    max_range: int,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> dict[str, Any]:
    """``keeper run`` (API on) from an empty database to every event indexed and verified."""
    name = f"catchup-{time.monotonic_ns()}"
    # the API on: documents posted to it are a verdict source, so the verifier runs
    cfg = write_config(work, name, url, d, [contract], api_port=free_port(), poll_interval=1.0,
                       max_range=max_range)  # fmt: skip
    db = work / f"{name}.db"
    start = time.perf_counter()
    proc = spawn_daemon(cfg, work / f"{name}.log", env, cwd)
    peak = TreePeak(proc.pid)
    indexed_s: float | None = None
    try:
        while True:
            peak.sample()
            if proc.poll() is not None:
                raise RuntimeError(f"keeper run exited {proc.returncode}: see {name}.log")
            if db.exists():
                try:
                    block, verdicts, verified = _counts(db)
                except sqlite3.OperationalError:  # not migrated yet
                    block, verdicts, verified = -1, 0, 0
                if indexed_s is None and block >= last_block:
                    indexed_s = time.perf_counter() - start
                if indexed_s is not None and verified >= verdicts:
                    verified_s = time.perf_counter() - start
                    break
            if time.perf_counter() - start > TIMEOUT_S:
                raise TimeoutError(f"catch-up not done after {TIMEOUT_S:.0f} s: see {name}.log")
            time.sleep(0.05)
    finally:
        stop_daemon(proc)
    return {
        "indexed_seconds": round(indexed_s, 2),
        "verified_seconds": round(verified_s, 2),
        "verdicts": verdicts,
        "peak_kb": peak.peak_kb,
        "daemon_peak_kb": peak.own_kb,
        "fetch_process_peak_kb": max(peak.children_kb.values(), default=0),
    }
