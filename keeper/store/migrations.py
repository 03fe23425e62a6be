"""Versioned schema migrations, one ordered list per component.

Each component (``index``, ``keeper``, ``verify``) owns a module
``keeper.store.schema_<component>`` exposing ``MIGRATIONS: list[str]``: SQL
scripts applied in order, never edited once released (append a new one
instead). Versions are tracked per component so the parts of the daemon can
evolve their tables independently.
"""

from __future__ import annotations

import importlib
import sqlite3

from keeper.errors import StateCorruptedError

COMPONENTS: tuple[str, ...] = ("index", "keeper", "verify")


def component_migrations(component: str) -> list[str]:
    module = importlib.import_module(f"keeper.store.schema_{component}")
    scripts: list[str] = module.MIGRATIONS
    return scripts


def current_versions(conn: sqlite3.Connection) -> dict[str, int]:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
    )
    rows = conn.execute("SELECT component, version FROM schema_migrations").fetchall()
    return {str(r[0]): int(r[1]) for r in rows}


def pending(conn: sqlite3.Connection) -> dict[str, int]:
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


def migrate(conn: sqlite3.Connection) -> dict[str, int]:
    """Apply every pending migration, each in its own transaction; return counts applied."""
    applied: dict[str, int] = {}
    versions = current_versions(conn)
    pending(conn)  # refuses a database newer than this release
    for component in COMPONENTS:
        scripts = component_migrations(component)
        have = versions.get(component, 0)
        for version in range(have, len(scripts)):
            conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in _split(scripts[version]):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations(component, version) VALUES (?, ?) "
                    "ON CONFLICT(component) DO UPDATE SET version = excluded.version",
                    (component, version + 1),
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        applied[component] = len(scripts) - have
    return applied


def _split(script: str) -> list[str]:
    """Split a migration script into statements (no semicolons inside literals, by rule)."""
    return [s.strip() for s in script.split(";") if s.strip()]
