"""Versioned schema migrations, one ordered list per component.

Each component (``index``, ``keeper``, ``verify``) owns a module
``keeper.store.schema_<component>`` exposing ``MIGRATIONS: list[str]``: SQL
scripts applied in order, never edited once released (append a new one
instead). Versions are tracked per component so the parts of the daemon can
evolve their tables independently.

Both backends run the same scripts at the same version numbers. On
PostgreSQL the SQLite column types are mapped once, mechanically
(:func:`postgres_ddl`): INTEGER is BIGINT (block numbers and saturated
uint256 times need 64 bits), REAL is DOUBLE PRECISION, TEXT compares
byte-wise (``COLLATE "C"``, SQLite's order, so pages and ``dump()`` agree),
and an ``id INTEGER PRIMARY KEY`` (SQLite's rowid) is an identity column.

A migration that only SQLite needs is a :class:`SqliteOnly`: its statements
are given one by one (a trigger's body holds semicolons), and PostgreSQL
records its version without running anything, so the numbers stay aligned.
One whose SQL differs between the two is a :class:`ByDialect`, each run as written.

Daemons starting together on one PostgreSQL database must not both apply a
migration: each migration's transaction first takes a transaction-scoped
advisory lock (released by its COMMIT or ROLLBACK, so it cannot strand), then
reads the version again. On SQLite ``BEGIN IMMEDIATE`` is that lock.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Final

from keeper.errors import StateCorruptedError
from keeper.store.db import Db, dialect, write_transaction
from keeper.store.versions import raised

# pg_advisory_xact_lock key of the migration lock ("keeper" in ASCII)
MIGRATION_LOCK: Final = 0x6B6565706572

COMPONENTS: tuple[str, ...] = ("index", "keeper", "verify")


@dataclass(frozen=True)
class SqliteOnly:
    """A migration for what only the SQLite schema has (e.g. triggers), one statement each."""

    statements: tuple[str, ...]


@dataclass(frozen=True)
class ByDialect:
    """A migration whose SQL differs between the backends (a rewrite of data through
    functions only one of them has), given whole for each, each run as written."""

    sqlite: str
    postgresql: str


Migration = str | SqliteOnly | ByDialect


def version_triggers(table: str, subject: str, shown: tuple[str, ...] | None) -> SqliteOnly:
    """Triggers raising a subject's version whenever a row of ``table`` about it changes.

    For the tables a detail shows beside the index store's rows (the keeper's
    intents, the verifier's verifications): on SQLite a subject's version then
    stamps its whole detail, and the API serves a kept detail until the version
    rises (keeper.api.detailcache). ``shown`` limits the update trigger to the
    columns the detail shows (None: any column). Part of released migrations,
    with the :func:`keeper.store.versions.raised` it embeds: never change what
    either returns; a new trigger is a new migration.
    """

    def raise_for(row: str) -> str:
        return (
            f"UPDATE subject_versions SET version = {raised('sqlite', row + '.chain_id')} "
            f"WHERE chain_id = {row}.chain_id AND contract = {row}.contract "
            f"AND subject = {row}.{subject}; "
        )

    of = f" OF {', '.join(shown)}" if shown else ""
    return SqliteOnly(
        (
            f"CREATE TRIGGER {table}_version_insert AFTER INSERT ON {table} "
            f"BEGIN {raise_for('NEW')}END",
            f"CREATE TRIGGER {table}_version_update AFTER UPDATE{of} ON {table} "
            f"BEGIN {raise_for('NEW')}END",
            f"CREATE TRIGGER {table}_version_delete AFTER DELETE ON {table} "
            f"BEGIN {raise_for('OLD')}END",
        )
    )


def component_migrations(component: str) -> list[Migration]:
    module = importlib.import_module(f"keeper.store.schema_{component}")
    scripts: list[Migration] = module.MIGRATIONS
    return scripts


def statements(script: Migration, postgres: bool) -> list[str]:
    """What one migration runs on a backend, its column types mapped for PostgreSQL."""
    if isinstance(script, SqliteOnly):
        return [] if postgres else list(script.statements)
    if isinstance(script, ByDialect):
        return _split(script.postgresql if postgres else script.sqlite)
    return [postgres_ddl(s) if postgres else s for s in _split(script)]


_SCHEMA_TABLE: Final = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
)


def current_versions(conn: Db) -> dict[str, int]:
    if dialect(conn) == "postgresql":
        with write_transaction(conn):
            conn.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))
            conn.execute(postgres_ddl(_SCHEMA_TABLE))
    else:
        conn.execute(_SCHEMA_TABLE)
    rows = conn.execute("SELECT component, version FROM schema_migrations").fetchall()
    return {str(r[0]): int(r[1]) for r in rows}


def pending(conn: Db) -> dict[str, int]:
    """How many migrations each component still needs (0 when up to date)."""
    versions = current_versions(conn)
    out: dict[str, int] = {}
    for component in COMPONENTS:
        known = len(component_migrations(component))
        have = versions.get(component, 0)
        if have > known:
            raise StateCorruptedError(
                f"database schema for {component!r} is at version {have}, newer than this "
                f"release knows ({known}): refusing to run an older keeper on it"
            )
        out[component] = known - have
    return out


def migrate(conn: Db) -> dict[str, int]:
    """Apply every pending migration, each in its own transaction; return counts applied.

    A migration another process applied meanwhile is skipped (and not counted).
    """
    applied: dict[str, int] = {}
    versions = current_versions(conn)
    pending(conn)  # refuses a database newer than this release
    postgres = dialect(conn) == "postgresql"
    for component in COMPONENTS:
        scripts = component_migrations(component)
        applied[component] = 0
        for version in range(versions.get(component, 0), len(scripts)):
            with write_transaction(conn):
                if postgres:
                    conn.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))
                row = conn.execute(
                    "SELECT version FROM schema_migrations WHERE component = ?", (component,)
                ).fetchone()
                if row is not None and int(row[0]) > version:
                    continue  # applied by another process meanwhile
                for statement in statements(scripts[version], postgres):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations(component, version) VALUES (?, ?) "
                    "ON CONFLICT(component) DO UPDATE SET version = excluded.version",
                    (component, version + 1),
                )
            applied[component] += 1
    return applied


_PG_TYPES: Final = (
    (
        re.compile(r"\bid INTEGER PRIMARY KEY\b"),
        "id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY",
    ),
    (re.compile(r"\bINTEGER\b"), "BIGINT"),
    (re.compile(r"\bREAL\b"), "DOUBLE PRECISION"),
    (re.compile(r"\bTEXT\b"), 'TEXT COLLATE "C"'),
    # a table that is its primary key's B-tree: what every PostgreSQL table with one is
    (re.compile(r"\)\s*WITHOUT ROWID\b"), ")"),
)


def postgres_ddl(statement: str) -> str:
    """A migration statement with SQLite's column types mapped to PostgreSQL's."""
    for pattern, replacement in _PG_TYPES:
        statement = pattern.sub(replacement, statement)
    return statement


def _split(script: str) -> list[str]:
    """Split a migration script into statements (no semicolons inside literals, by rule)."""
    return [s.strip() for s in script.split(";") if s.strip()]
