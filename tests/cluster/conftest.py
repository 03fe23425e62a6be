"""Several daemons on one database (each test on SQLite and on PostgreSQL): the indexer and
reliability helpers are shared."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support.postgres import PostgresServer

# the lead's indexer helpers (fresh_index, ...) and the daemon-as-a-child harness
for folder in ("sync", "reliability"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / folder))


# the SQLite variants run under `make reliability` (slow): `make test` keeps PostgreSQL's,
# the backend the several-machine topology needs; the lease and fence on one SQLite
# file are checked in tests/store on both backends
@pytest.fixture(params=[pytest.param("sqlite", marks=pytest.mark.slow), "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database the test's daemons share: a SQLite file, or a new, empty PostgreSQL
    database of the session's server (the daemons migrate it, under the migration lock)."""
    if request.param == "sqlite":
        return str(tmp_path / "shared.db")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.database()
