"""Shared fixtures: a real anvil node per test (or per module), a real PostgreSQL server
per session (a fresh database per test), always reaped."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog
from support.postgres import PostgresServer

from keeper.devnet.anvil import AnvilProcess, ChainControl
from keeper.process_tuning import tune_recursion

# a process a test leaves running is killed and fails that test (tests/support/child_reaper.py)
pytest_plugins = ["support.child_reaper"]


@pytest.fixture(autouse=True)
def _logging_outlives_the_test() -> Iterator[None]:
    """A command run in-process (``keeper.cli.main``) points logging at pytest's captured
    stderr, which is closed when the test ends; a later test's first line would then fail
    with "I/O operation on closed file". Put back what was configured before, only then."""
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    stream = getattr(structlog.get_config()["logger_factory"], "_file", None)
    if stream is not None and getattr(stream, "closed", False):
        structlog.configure(**saved)
        root.handlers[:] = handlers
        root.setLevel(level)


@pytest.fixture(autouse=True)
def _recursion_limit_as_in_the_daemon() -> None:
    """The daemon runs at CPython's recursion limit (keeper.process_tuning.tune_recursion);
    eth_account's import of py_ecc, here at collection or in any test, raises it to
    100,000, where a deeply nested reply would overflow the C stack instead of raising."""
    tune_recursion()


@pytest.fixture
def anvil() -> Iterator[AnvilProcess]:
    with AnvilProcess() as node:
        yield node


@pytest.fixture
def chain(anvil: AnvilProcess) -> ChainControl:
    return ChainControl(anvil.url)


@pytest.fixture(scope="module")
def module_anvil() -> Iterator[AnvilProcess]:
    with AnvilProcess() as node:
        yield node


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One server for the whole session, started only if a test asks for it."""
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A fresh, empty database of the session's server."""
    return postgres_server.database()


@pytest.fixture(params=["sqlite", "postgresql"])
def new_db(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], str]:
    """Each call a new database on the test's backend, as what ``keeper.store.db.connect``
    opens: a SQLite file path (empty) or a PostgreSQL URL (already migrated: migrating
    again is a no-op, and migrations are tested on empty databases)."""
    if request.param == "sqlite":
        names = itertools.count(1)
        return lambda: str(tmp_path / f"keeper-{next(names)}.db")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return lambda: server.database(migrated=True)
