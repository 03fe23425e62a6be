"""Read replicas: an API-only daemon serving its pages from a real streaming standby
(``pg_basebackup -R`` of the session's server), its lag exported, its fallbacks."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from api_world import ACP, CHAIN_ID, TM, World, build_world
from structlog.testing import capture_logs
from support.postgres import PostgresServer, PostgresStandby

from keeper.api.replicas import (
    MONITOR_APPLICATION,
    PRIMARY,
    ReadConnection,
    ReadTargets,
    refusal,
)
from keeper.config import DEFAULT_REPLICA_LAG_SECONDS as LAG
from keeper.config import Config, parse_config
from keeper.daemon import Daemon
from keeper.devnet.anvil import free_port
from keeper.errors import ConfigError
from keeper.store.db import connect
from keeper.store.pg import PgConnection


@pytest.fixture(scope="module")
def standby(postgres_server: PostgresServer) -> Iterator[PostgresStandby]:
    node = PostgresStandby(postgres_server).start()
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="module")
def replicated(postgres_server: PostgresServer, standby: PostgresStandby) -> World:
    world = build_world(postgres_server.database())  # type: ignore[arg-type]
    standby.wait_replayed()
    return world


def _dead_url() -> str:
    return f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"


def _config(primary: str, read_urls: list[str], **sections: Any) -> Config:
    raw: dict[str, Any] = {
        "chain": {"chain_id": CHAIN_ID, "rpc_urls": ["http://127.0.0.1:9"]},
        "contracts": [
            {"name": "acp", "protocol": "erc8183", "address": ACP},
            {"name": "tm", "protocol": "taskmarket", "address": TM},
        ],
        "database": {"url": primary, "read_urls": read_urls},
        "indexer": {"enabled": False},
        "api": {"listen": f"127.0.0.1:{free_port()}"},
        **sections,
    }
    return parse_config(raw, {})


def _get(port: int, path: str) -> Any:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            body = response.read().decode()
    except urllib.error.HTTPError as exc:  # /readyz answers 503 with its checks
        body = exc.read().decode()
    return json.loads(body) if path != "/metrics" else body


def _sample(metrics: str, name: str, replica: str) -> float | None:
    found = re.search(rf'^{name}{{replica="{replica}"}} (\S+)$', metrics, re.M)
    return None if found is None else float(found.group(1))


def _jobs_gauge(metrics: str, status: str) -> float:
    found = re.search(rf'^keeper_jobs{{contract="acp",status="{status}"}} (\S+)$', metrics, re.M)
    assert found is not None, metrics[:2000]
    return float(found.group(1))


def test_writes_on_the_primary_reach_the_standby_which_refuses_writes(
    postgres_server: PostgresServer, standby: PostgresStandby
) -> None:
    url = postgres_server.database()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (n int)")
        conn.execute("INSERT INTO t VALUES (1), (2)")
    standby.wait_replayed()
    with psycopg.connect(standby.on_standby(url), autocommit=True) as conn:
        row = conn.execute("SELECT pg_is_in_recovery(), count(*) FROM t").fetchone()
        assert row == (True, 2)
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("INSERT INTO t VALUES (3)")


def test_an_api_only_daemon_serves_pages_from_the_standby_with_its_lag(
    postgres_server: PostgresServer, standby: PostgresStandby, replicated: World
) -> None:
    """The daemon's own API (Daemon.start_api) on read_urls: the pages come from the
    standby (a write on the primary stays unseen while its replay is paused, the byte
    lag shows it, and it is served once replay resumes, the detail kept from before
    too); lag and status are exported."""
    primary = str(replicated.path)
    daemon = Daemon(_config(primary, [standby.on_standby(primary)]))
    daemon.start_api()
    assert daemon.api is not None
    port = daemon.api.port
    try:
        jobs = _get(port, "/v1/jobs?limit=500")["items"]
        assert sorted(j["job_id"] for j in jobs) == sorted(replicated.jobs)
        before = _get(port, "/v1/jobs/acp/3")
        expired = _jobs_gauge(_get(port, "/metrics"), "expired")
        with psycopg.connect(standby.url(), autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_pause()")
        try:
            with psycopg.connect(primary) as conn:  # one transaction, as the index store's
                conn.execute(
                    "UPDATE jobs SET description = '\"changed\"', status = 'expired', "
                    "status_code = 5 WHERE job_id = '3'"
                )
                # the version the kept detail is checked against, replayed with the row
                conn.execute(
                    "UPDATE subject_versions SET version = version + 1 WHERE subject = '3'"
                )
            assert _get(port, "/v1/jobs/acp/3") == before  # the standby has not replayed it
            metrics = _get(port, "/metrics")
            assert (_sample(metrics, "keeper_database_replica_lag_bytes", "read0") or 0) > 0
            assert _jobs_gauge(metrics, "expired") == expired  # the gauges read it too
        finally:
            with psycopg.connect(standby.url(), autocommit=True) as conn:
                conn.execute("SELECT pg_wal_replay_resume()")
        standby.wait_replayed()
        assert _get(port, "/v1/jobs/acp/3")["description"] == "changed"
        metrics = _get(port, "/metrics")
        assert _jobs_gauge(metrics, "expired") == expired + 1
        assert _sample(metrics, "keeper_database_replica_up", "read0") == 1.0
        assert _sample(metrics, "keeper_database_replica_lag_bytes", "read0") == 0.0
        assert _sample(metrics, "keeper_database_replica_lag_seconds", "read0") is not None
        assert standby.url().split("@")[1].split("/")[0] not in metrics  # names, not URLs
        status = _get(port, "/v1/status")
        database = status["database"]
        assert database["reads_from"] == ["read0"]
        assert database["replicas"][0]["name"] == "read0" and database["replicas"][0]["standby"]
        assert status["indexer"] == {"enabled": False}
        # not ready only because no RPC call was made here (run() checks the chain id)
        ready = _get(port, "/readyz")["checks"]
        assert ready["cursor"]["ok"] and "API-only" in ready["cursor"]["detail"]
        assert [name for name, check in ready.items() if not check["ok"]] == ["rpc"]
    finally:
        daemon.api.stop()
        daemon.c.conn.close()


def test_a_page_reads_one_snapshot_of_the_standby(
    replicated: World, standby: PostgresStandby
) -> None:
    """The API's read transaction (BEGIN: REPEATABLE READ) on a standby keeps one
    snapshot while replay goes on underneath; the next page sees the new rows."""
    primary = str(replicated.path)
    conn = ReadConnection(ReadTargets(primary, [standby.on_standby(primary)], max_lag_seconds=LAG))
    try:
        assert conn.name == "read0"
        read = "SELECT description FROM jobs WHERE job_id = '4'"
        conn.execute("BEGIN")
        first = conn.execute(read).fetchone()[0]
        with psycopg.connect(primary, autocommit=True) as writer:
            writer.execute("UPDATE jobs SET description = '\"later\"' WHERE job_id = '4'")
        standby.wait_replayed()
        assert conn.execute(read).fetchone()[0] == first != '"later"'
        conn.execute("COMMIT")
        assert conn.execute(read).fetchone()[0] == '"later"'
    finally:
        conn.close()


def test_a_replica_that_is_down_is_skipped_then_the_primary_serves(
    replicated: World, standby: PostgresStandby, caplog: pytest.LogCaptureFixture
) -> None:
    primary = str(replicated.path)
    dead = _dead_url()
    targets = ReadTargets(primary, [dead, standby.on_standby(primary)], max_lag_seconds=LAG)
    conn = ReadConnection(targets)
    try:
        assert conn.name == "read1"
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone()[0] is True
        assert targets.fallbacks() == {"read0": 1, "read1": 0}
        # the standby's session is cut under a statement: it is retried on a new choice
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        with psycopg.connect(standby.url(), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == len(replicated.jobs)
        assert targets.fallbacks()["read1"] == 1 and conn.name == "read1"
    finally:
        conn.close()
    only_dead = ReadTargets(primary, [dead], max_lag_seconds=LAG)
    conn = ReadConnection(only_dead)
    try:
        assert conn.name == PRIMARY
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone()[0] is False
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("DELETE FROM jobs")  # the primary is read read-only too
    finally:
        conn.close()
    try:
        lags = {lag.name: lag for lag in only_dead.lags()}
        assert not lags["read0"].up and only_dead.status()["replicas"][0]["up"] is False
        assert dead.rsplit(":", 1)[0] not in json.dumps(only_dead.status())
    finally:
        only_dead.close()


def test_keeper_and_verifier_are_given_the_primary_only(
    replicated: World, standby: PostgresStandby
) -> None:
    """Structurally: nothing the keeper or the verifier holds reaches a read replica."""
    primary = str(replicated.path)
    cfg = _config(
        primary,
        [standby.on_standby(primary)],
        indexer={"enabled": True},
        keeper={"enabled": True, "dry_run": True},
    )
    daemon = Daemon(cfg)
    try:
        daemon.build_keeper()
        daemon.build_verifier()
        assert daemon.keeper.db is daemon.c.conn
        assert isinstance(daemon.c.conn, PgConnection) and daemon.c.conn.url == primary
        assert daemon.c.conn.execute("SELECT pg_is_in_recovery()").fetchone()[0] is False
        for root in (daemon.keeper, daemon.verifier, daemon.c.indexing):
            for found in _reachable(root):
                assert not isinstance(found, ReadTargets | ReadConnection), root
                assert not (isinstance(found, PgConnection) and found.url != primary), root
    finally:
        daemon.c.conn.close()


def test_an_api_only_daemon_cannot_keep() -> None:
    with pytest.raises(ConfigError, match=r"indexer\.enabled"):
        _config(_dead_url(), [], keeper={"enabled": True, "dry_run": True})
    with pytest.raises(ConfigError, match="read_urls"):
        parse_config(
            {
                "chain": {"chain_id": 1, "rpc_urls": ["http://127.0.0.1:9"]},
                "contracts": [],
                "database": {"read_urls": [_dead_url()]},
            },
            {},
        )


def _reachable(root: object, depth: int = 4) -> Iterator[object]:
    """Objects reachable from ``root`` through attributes, lists and dicts (bounded)."""
    seen: set[int] = set()
    frontier = [root]
    for _ in range(depth):
        nxt: list[object] = []
        for obj in frontier:
            if id(obj) in seen or isinstance(obj, str | bytes | int | float | type):
                continue
            seen.add(id(obj))
            yield obj
            if isinstance(obj, dict):
                nxt += list(obj.values())
            elif isinstance(obj, list | tuple | set):
                nxt += list(obj)
            else:
                slots = getattr(type(obj), "__slots__", ())
                values = [getattr(obj, s, None) for s in slots if isinstance(s, str)]
                nxt += values + list(getattr(obj, "__dict__", {}).values())
        frontier = nxt


def test_connect_reads_a_standby_data_version(replicated: World, standby: PostgresStandby) -> None:
    """The page cache's version works on a standby (pg_current_wal_lsn refuses there)."""
    from keeper.store.db import data_version

    conn = connect(standby.on_standby(str(replicated.path)), readonly=True)
    try:
        assert data_version(conn) > 0
    finally:
        conn.close()


def test_a_reader_that_fell_back_returns_to_the_standby_once_it_answers(
    replicated: World, postgres_server: PostgresServer, standby: PostgresStandby
) -> None:
    """read0 names a database the standby does not have yet: pages go to the primary;
    once the database is created on the primary and replayed, the reader moves back."""
    primary = str(replicated.path)
    name = f"later_{free_port()}"
    targets = ReadTargets(
        primary, [standby.url(name)], max_lag_seconds=LAG, retry_preferred_seconds=0.2
    )
    conn = ReadConnection(targets)
    try:
        assert conn.name == PRIMARY and targets.fallbacks() == {"read0": 1}
        conn.execute("BEGIN")
        with psycopg.connect(postgres_server.url(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        standby.wait_replayed()
        time.sleep(0.3)
        # a page never moves: the one begun on the primary ends there
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone()[0] is False
        conn.execute("COMMIT")
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone()[0] is True
        assert conn.name == "read0"
    finally:
        conn.close()
        with psycopg.connect(postgres_server.url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}"')


def test_keeper_run_as_an_api_only_daemon_on_the_standby(
    module_anvil: Any, replicated: World, standby: PostgresStandby, tmp_path: Path
) -> None:
    """The real process: `keeper run` with [indexer] enabled = false and the URLs from the
    environment (passwords in them, which trust auth ignores) gets ready, serves the
    world from read0, indexes nothing, never shows a password and stops on SIGTERM."""
    primary = str(replicated.path)
    with_password = lambda url: url.replace("postgres@", "postgres:hunter2pw@")  # noqa: E731
    port = free_port()
    config = tmp_path / "keeper.toml"
    config.write_text(
        f"[chain]\nchain_id = {CHAIN_ID}\nrpc_urls = [{json.dumps(module_anvil.url)}]\n"
        f'[indexer]\nenabled = false\n[api]\nlisten = "127.0.0.1:{port}"\n'
        f'[[contracts]]\nname = "acp"\nprotocol = "erc8183"\naddress = "{ACP}"\n'
        f'[[contracts]]\nname = "tm"\nprotocol = "taskmarket"\naddress = "{TM}"\n'
    )
    env = {
        **os.environ,
        "KEEPER_DATABASE__URL": with_password(primary),
        "KEEPER_DATABASE__READ_URLS": with_password(standby.on_standby(primary)),
        "KEEPER_LOG__FORMAT": "json",
    }
    log = tmp_path / "daemon.log"
    with psycopg.connect(primary) as conn:
        cursor_before = conn.execute("SELECT * FROM cursor").fetchall()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "keeper", "run", "--config", str(config)],
            stdout=out, stderr=out, env=env,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while _get_status(port, "/readyz") != 200:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        jobs = _get(port, "/v1/jobs?limit=500")["items"]
        assert len(jobs) == len(replicated.jobs)
        status = _get(port, "/v1/status")
        assert status["database"]["reads_from"] == ["read0"]
        metrics = _get(port, "/metrics")
        assert _sample(metrics, "keeper_database_replica_up", "read0") == 1.0
        time.sleep(1.0)  # an indexer would have moved the cursor over the anvil chain by now
        with psycopg.connect(primary) as conn:
            assert conn.execute("SELECT * FROM cursor").fetchall() == cursor_before
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert '"indexer": false' in text or '"indexer":false' in text, text[-3000:]
    for shown in (text, json.dumps(status), metrics):
        assert "hunter2pw" not in shown


def _get_status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


@pytest.mark.parametrize(
    ("standby", "lag", "why"),
    [
        (True, None, None),
        (True, 0.0, None),
        (True, 2.0, None),
        (True, 2.5, "replay 2.5 s behind, over the 2 s ceiling"),
        (False, 0.0, "not in recovery (promoted): it no longer follows the primary"),
    ],
)
def test_when_a_target_may_serve_pages(standby: bool, lag: float | None, why: str | None) -> None:
    assert refusal(standby, lag, 2.0) == why


def _write_on(primary: str) -> None:
    with psycopg.connect(primary, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS lag_probe (at DOUBLE PRECISION)")
        conn.execute("INSERT INTO lag_probe VALUES (%s)", (time.time(),))


def _skips(logs: list[dict[str, Any]]) -> list[str]:
    return [str(e["reason"]) for e in logs if e["event"] == "database_replica_skipped"]


def test_a_standby_lagging_past_the_ceiling_serves_no_page_until_it_catches_up(
    replicated: World, standby: PostgresStandby
) -> None:
    """Replay paused on the standby while the primary commits: a reader on it moves to
    the primary at its next page, a new reader does not pick it, and both come back
    once it has replayed everything."""
    primary = str(replicated.path)
    targets = ReadTargets(
        primary, [standby.on_standby(primary)], retry_preferred_seconds=0.2, max_lag_seconds=0.5
    )
    staying = ReadConnection(targets)
    assert staying.name == "read0"
    admin = psycopg.connect(standby.url(), autocommit=True)
    try:
        admin.execute("SELECT pg_wal_replay_pause()")
        _write_on(primary)
        time.sleep(1.2)  # past the ceiling, and past the reader's recheck interval
        _write_on(primary)
        with capture_logs() as logs:
            # between pages the reader looks again, and leaves
            assert staying.execute("SELECT pg_is_in_recovery()").fetchone()[0] is False
            assert staying.name == PRIMARY
            fresh = ReadConnection(targets)
            assert fresh.name == PRIMARY
        # once where the reader was, once as it chose again, once for the new reader
        assert targets.fallbacks() == {"read0": 3}
        assert len(_skips(logs)) == 3 and "over the 0.5 s ceiling" in _skips(logs)[0], logs
    finally:
        admin.execute("SELECT pg_wal_replay_resume()")
        admin.close()
    standby.wait_replayed()
    time.sleep(0.3)  # past retry_preferred_seconds
    for reader in (staying, fresh):
        assert reader.execute("SELECT pg_is_in_recovery()").fetchone()[0] is True
        assert reader.name == "read0"
        reader.close()


def test_a_promoted_standby_serves_no_page(
    replicated: World, postgres_server: PostgresServer
) -> None:
    """After ``pg_ctl promote`` the standby answers as a primary of its own, which the
    writers do not use: pages go to the configured primary instead."""
    primary = str(replicated.path)
    node = PostgresStandby(postgres_server).start()
    try:
        node.wait_replayed()
        node.pg_ctl("promote", "-w")
        targets = ReadTargets(primary, [node.on_standby(primary)], max_lag_seconds=LAG)
        with capture_logs() as logs:
            conn = ReadConnection(targets)
        try:
            assert conn.name == PRIMARY and targets.fallbacks() == {"read0": 1}
            assert conn.execute("SELECT count(*) FROM jobs").fetchone()[0] == len(replicated.jobs)
        finally:
            conn.close()
        assert ["not in recovery (promoted)" in why for why in _skips(logs)] == [True], logs
    finally:
        node.stop()


def _monitor_sessions(url: str, besides: frozenset[int] = frozenset()) -> list[int]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
            (MONITOR_APPLICATION,),
        ).fetchall()
    return [int(r[0]) for r in rows if int(r[0]) not in besides]


def _monitor_sessions_once_closed(url: str, besides: frozenset[int]) -> list[int]:
    """The monitor sessions left once closed ones have gone: a backend whose client hung up
    leaves ``pg_stat_activity`` when it exits, a moment later on a loaded machine."""
    deadline = time.monotonic() + 10
    while (left := _monitor_sessions(url, besides)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_the_lag_figures_keep_one_session_per_server_across_scrapes(
    replicated: World, postgres_server: PostgresServer, standby: PostgresStandby
) -> None:
    """Scrapes and /v1/status measure the lag on kept sessions: one on the standby and
    one on the primary however often they are read; a cut session is opened again."""
    primary = str(replicated.path)
    # another test's daemon may still be closing its own
    others = frozenset(_monitor_sessions(standby.url()) + _monitor_sessions(postgres_server.url()))
    targets = ReadTargets(primary, [standby.on_standby(primary)], max_lag_seconds=LAG)
    try:
        for _ in range(3):
            assert [lag.up for lag in targets.lags()] == [True]
        [kept] = _monitor_sessions(standby.url(), others)
        assert len(_monitor_sessions(postgres_server.url(), others)) == 1
        with psycopg.connect(standby.url(), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (kept,))
        assert [lag.up for lag in targets.lags()] == [False]  # the cut session, dropped
        assert [lag.up for lag in targets.lags()] == [True]  # and opened again
        assert _monitor_sessions(standby.url(), others) not in ([], [kept])
    finally:
        targets.close()
    assert _monitor_sessions_once_closed(standby.url(), others) == []
    assert _monitor_sessions_once_closed(postgres_server.url(), others) == []
