"""Time-bucketed reads for the status page: exact uint256 sums and index-bound plans."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.postgres import PostgresServer

from keeper.domain.planner import PlannerConfig
from keeper.store import queries, timeline
from keeper.store.db import Db, connect, connect_sqlite

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))
from api_world import BUDGET, CHAIN_ID, World, build_world

BUCKETS = st.integers(min_value=1, max_value=60)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> World:
    if request.param == "postgresql":
        server: PostgresServer = request.getfixturevalue("postgres_server")
        return build_world(server.database())  # type: ignore[arg-type]
    return build_world(tmp_path_factory.mktemp("timeline") / "keeper.db")


@pytest.fixture
def conn(world: World) -> Db:
    return connect(world.path, readonly=True)


@pytest.fixture(scope="module")
def lite_conn(tmp_path_factory: pytest.TempPathFactory) -> sqlite3.Connection:
    """SQLite's plans are checked on SQLite itself."""
    world = build_world(tmp_path_factory.mktemp("plans") / "keeper.db")
    return connect_sqlite(world.path, readonly=True)


class TestEscrowFlows:
    def test_uint256_amounts_sum_exactly(self, conn: Db, world: World) -> None:
        """2**200 + 7 per job survives the SQL limb sums to the last unit."""
        indexed = timeline.chain_now(conn, CHAIN_ID)
        assert world.head is not None and indexed == (world.head.number, world.head.timestamp)
        now = indexed[1]
        window = timeline.Window.ending(now, 60, 60)
        flows = [f for f in timeline.escrow_flows(conn, CHAIN_ID, window) if f.kind == "jobs"]
        funded = sum(1 for s in world.jobs.values() if s != "open")
        assert sum(f.incoming for f in flows) == BUDGET * funded
        holding = sum(1 for s in world.jobs.values() if s in ("funded", "submitted"))
        released = sum(1 for s in world.jobs.values() if s in ("completed", "rejected"))
        assert sum(f.outgoing for f in flows) == BUDGET * released
        current = {
            r["kind"]: int(r["amount"]) for r in queries.escrow_locked(conn, chain_id=CHAIN_ID)
        }
        net: dict[int, int] = {}
        for f in flows:
            net[f.bucket] = net.get(f.bucket, 0) + f.incoming - f.outgoing
        points = timeline.locked_points(current["jobs"], net, window.buckets)
        assert points[-1] == BUDGET * holding
        assert points[0] == 0  # the whole history fits in the hour

    def test_a_window_after_everything_is_flat(self, conn: Db) -> None:
        indexed = timeline.chain_now(conn, CHAIN_ID)
        assert indexed is not None
        assert timeline.escrow_flows(conn, CHAIN_ID, timeline.Window(indexed[1], 60, 10)) == []


@given(
    st.integers(min_value=0, max_value=2**256),
    st.dictionaries(st.integers(min_value=-3, max_value=70), st.integers(-(10**30), 10**30)),
    BUCKETS,
)
def test_locked_points_walk_back_from_now(current: int, net: dict[int, int], n: int) -> None:
    points = timeline.locked_points(current, net, n)
    assert len(points) == n + 1
    assert points[-1] == current - sum(v for b, v in net.items() if b >= n)
    for b in range(n):
        assert points[b + 1] - points[b] == net.get(b, 0)


def test_window_buckets() -> None:
    w = timeline.Window.ending(1000, 10, 5)
    assert (w.start, w.end) == (950, 1000)
    assert [w.bucket_of(t) for t in (951, 960, 961, 1000, 1001)] == [0, 0, 1, 4, 5]
    with pytest.raises(ValueError, match="width >= 1"):
        timeline.Window(0, 0, 5)


class TestPlans:
    """Each picture's query walks an index; none scans the events table."""

    def plans(self, conn: sqlite3.Connection, run: object) -> list[str]:
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        try:
            run()  # type: ignore[operator]
        finally:
            conn.set_trace_callback(None)
        details = []
        for sql in seen:
            if sql.lstrip().upper().startswith(("WITH", "SELECT")):
                rows = conn.execute("EXPLAIN QUERY PLAN " + sql.replace("?", "NULL")).fetchall()
                details.extend(str(r[3]) for r in rows)
        return details

    def test_event_reads_seek_the_time_index(self, lite_conn: sqlite3.Connection) -> None:
        conn = lite_conn
        w = timeline.Window.ending(2_000_000_000, 60, 60)
        for run in (
            lambda: timeline.escrow_flows(conn, CHAIN_ID, w),
            lambda: timeline.verification_series(conn, CHAIN_ID, w),
            lambda: timeline.verdict_failures(conn, CHAIN_ID, w),
            lambda: timeline.keeper_outcomes(conn, CHAIN_ID, w),
        ):
            details = self.plans(conn, run)
            on_events = [
                d for d in details if d.startswith(("SEARCH e ", "SEARCH events ", "SCAN e"))
            ]
            assert on_events, details
            for d in on_events:
                # by time window, or one block's events for one intent; never a scan
                assert "events_kind_time" in d or "(chain_id=? AND block_number=?)" in d, details

    def test_deadlines_use_the_due_index(self, lite_conn: sqlite3.Connection) -> None:
        conn = lite_conn
        details = self.plans(
            conn, lambda: timeline.deadlines_ahead(conn, CHAIN_ID, 2_000_000_000, PlannerConfig())
        )
        assert "SEARCH jobs USING INDEX jobs_due (status=? AND expired_at<?)" in details, details
        assert "SEARCH tasks USING INDEX tasks_status_page (status=?)" in details, details
