"""Subjects' versions (``subject_versions``): raised in commit order by every writer of a detail.

A raise sets a subject's version to one more than the chain's highest
version (and always above its own), inside the writing transaction. SQLite
runs one write transaction at a time, so there a version committed later is
always higher: a reader that has seen every version up to ``v`` learns what
changed since from the versions above ``v`` (:func:`changed_since`, through
the ``(chain_id, version)`` index), instead of asking about each subject.
PostgreSQL commits concurrent transactions in any order, so there only a
subject's own version is compared (it still rises with every raise).
"""

from __future__ import annotations

from keeper.store.db import Db, Dialect

__all__ = ["changed_since", "next_version", "raised", "top_version"]


def next_version(chain: str) -> str:
    """The version a new subject starts at: above every one of the chain (``chain``: its SQL)."""
    return f"(SELECT coalesce(max(version), 0) + 1 FROM subject_versions WHERE chain_id = {chain})"


def raised(dialect: Dialect, chain: str) -> str:
    """The expression a raise sets ``version`` to: the next version, and above its own.

    Released migrations embed it (the SQLite triggers): change it only with a new one.
    """
    greatest = "greatest" if dialect == "postgresql" else "max"
    return f"{greatest}(subject_versions.version + 1, {next_version(chain)})"


def top_version(conn: Db, chain_id: int) -> int:
    """The chain's highest version (0 without any)."""
    row = conn.execute(f"SELECT {next_version('?')} - 1", (chain_id,)).fetchone()
    return int(row[0])


def changed_since(conn: Db, chain_id: int, seen: int) -> tuple[list[tuple[str, str]], int]:
    """The subjects (contract, subject) raised above version ``seen``, and the highest version.

    Only meaningful on SQLite, where versions rise in commit order (module docstring).
    """
    rows = conn.execute(
        "SELECT contract, subject, version FROM subject_versions "
        "WHERE chain_id = ? AND version > ?",
        (chain_id, seen),
    ).fetchall()
    top = max((int(r[2]) for r in rows), default=seen)
    return [(str(r[0]), str(r[1])) for r in rows], top
