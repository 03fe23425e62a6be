"""A real PostgreSQL server for the tests: one per session, a fresh database per test.

The server comes from the Debian package (``scripts/ensure-debian-packages postgresql``).
``initdb`` and ``postgres`` refuse to run as root, so as root both run as the
``postgres`` user, in a directory that user owns under a parent it can traverse;
otherwise they run as the current user. ``fsync=off``: a test server's data
may be lost with the machine, and the crash tests stop the server with
``-m immediate``, which fsync does not change.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Final

from keeper.devnet.anvil import free_port

BIN: Final = Path(os.environ.get("KEEPER_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))


def pg_ctl_args(root: Path, data: Path, port: int, action: str) -> list[str]:
    """``pg_ctl ACTION`` for a server in ``data`` listening on 127.0.0.1:``port``."""
    args = [str(BIN / "pg_ctl"), "-D", str(data), "-l", str(root / "log")]
    if action in ("start", "restart"):
        args += ["-o", f"-k {root} -c listen_addresses=127.0.0.1 -p {port} -c fsync=off"]
    return [*args, action]


class PostgresServer:
    """initdb + pg_ctl start on 127.0.0.1; ``database()`` hands out fresh databases."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="keeper-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.as_root = os.geteuid() == 0
        self._names = itertools.count(1)
        self._migrated = ""

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = list(args)
        if self.as_root:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=120)

    def start(self) -> PostgresServer:
        if not (BIN / "initdb").exists():
            raise RuntimeError(
                f"no PostgreSQL at {BIN}: run scripts/ensure-debian-packages postgresql"
            )
        if self.as_root:
            # mkdtemp makes a 0700 directory: the postgres user must own it (data and
            # socket live in it) and reach it through its parents
            shutil.chown(self.root, "postgres", "postgres")
            parent = self.root.parent
            parent.chmod(parent.stat().st_mode | 0o001)
        self._run(
            str(BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
            "--no-sync", "-E", "UTF8", "--locale=C",
        )  # fmt: skip
        self.pg_ctl("start", "-w")
        return self

    def pg_ctl(self, action: str, *extra: str) -> None:
        self._run(*pg_ctl_args(self.root, self.data, self.port, action), *extra)

    def restart_immediate(self) -> None:
        """Crash-restart: no checkpoint, every open connection cut (recovery on start)."""
        self.pg_ctl("restart", "-m", "immediate", "-w")

    def stop(self) -> None:
        """Stop without the shutdown checkpoint and delete the data in the background.

        The data is thrown away, so a checkpoint would only write it. A session's
        databases are tens of thousands of files, whose unlinking took half a minute
        on a busy machine: the tests need not wait for it.
        """
        self._run(str(BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop", check=False)
        subprocess.Popen(
            ["rm", "-rf", str(self.root)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def database(self, *, migrated: bool = False) -> str:
        """A new database (from template0), as a URL; ``migrated``: at the current schema.

        A migrated one is copied from a template migrated once per session, which
        spares each test the migrations' round trips (they are tested on empty ones).
        """
        import psycopg

        template = "template0"
        if migrated:
            if not self._migrated:
                self._migrated = self.database()
                from keeper.store.db import connect
                from keeper.store.migrations import migrate

                conn = connect(self._migrated)
                migrate(conn)
                conn.close()
            template = self._migrated.rsplit("/", 1)[1]
        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return self.url(name)


class PostgresStandby:
    """A streaming hot standby of ``primary``: ``pg_basebackup -R``, then its own port.

    PostgreSQL 15's defaults (``wal_level=replica``, ``max_wal_senders=10``) and the
    ``host replication all 127.0.0.1/32 trust`` line initdb writes make the session's
    server a primary already; ``--checkpoint=fast`` spares the wait for a checkpoint.
    """

    def __init__(self, primary: PostgresServer) -> None:
        self.primary = primary
        self.root = Path(tempfile.mkdtemp(prefix="keeper-pg-standby-"))
        self.data = self.root / "data"
        self.port = free_port()

    def start(self) -> PostgresStandby:
        if self.primary.as_root:
            shutil.chown(self.root, "postgres", "postgres")
        self.primary._run(
            str(BIN / "pg_basebackup"), "-D", str(self.data), "-R", "-h", "127.0.0.1",
            "-p", str(self.primary.port), "-U", "postgres", "--checkpoint=fast", "--no-sync",
        )  # fmt: skip
        self.pg_ctl("start", "-w")
        return self

    def pg_ctl(self, action: str, *extra: str) -> None:
        self.primary._run(*pg_ctl_args(self.root, self.data, self.port, action), *extra)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def on_standby(self, primary_url: str) -> str:
        """The standby's URL for the database ``primary_url`` names."""
        return self.url(primary_url.rsplit("/", 1)[1])

    def wait_replayed(self, timeout: float = 10.0) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        import time

        import psycopg

        with psycopg.connect(self.primary.url(), autocommit=True) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        target = row[0]
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.url(), autocommit=True) as conn:
            while True:
                row = conn.execute(
                    "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (target,)
                ).fetchone()
                if row is not None and row[0]:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the standby did not replay up to {target} in {timeout}s")
                time.sleep(0.02)

    def stop(self) -> None:
        self.pg_ctl("stop", "-m", "immediate")
        shutil.rmtree(self.root, ignore_errors=True)
