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
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Final

BIN: Final = Path(os.environ.get("KEEPER_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """initdb + pg_ctl start on 127.0.0.1; ``database()`` hands out fresh databases."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="keeper-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
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
        options = f"-k {self.root} -c listen_addresses=127.0.0.1 -p {self.port} -c fsync=off"
        args = [str(BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log")]
        if action in ("start", "restart"):
            args += ["-o", options]
        self._run(*args, action, *extra)

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
