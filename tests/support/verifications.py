"""Reads and deletes of stored verifications that only tests need.

The daemon never lists verifications wholesale nor deletes them by height (a
reorg's rollback uses ``delete_orphans``); tests use these to look at, and to
clear, what the store holds.
"""

from __future__ import annotations

import sqlite3
from dataclasses import fields

from keeper.store.verifications import VerificationRow

_COLUMNS = ", ".join(f.name for f in fields(VerificationRow))


def list_verifications(
    conn: sqlite3.Connection, chain_id: int, *, status: str | None = None, limit: int = 100
) -> list[VerificationRow]:
    """Latest verifications of a chain, newest verdict first, optionally of one status."""
    where = "chain_id = ?"
    params: list[object] = [chain_id]
    if status is not None:
        where += " AND status = ?"
        params.append(status)
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM verifications WHERE {where} "
        "ORDER BY block_number DESC, log_index DESC LIMIT ?",
        (*params, limit),
    ).fetchall()
    return [VerificationRow(*r) for r in rows]


def delete_above_block(conn: sqlite3.Connection, chain_id: int, block_number: int) -> int:
    """Drop verifications of verdicts above ``block_number``, and the history they leave unowned."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        deleted = conn.execute(
            "DELETE FROM verifications WHERE chain_id = ? AND block_number > ?",
            (chain_id, block_number),
        ).rowcount
        conn.execute(
            "DELETE FROM verification_reports WHERE NOT EXISTS (SELECT 1 FROM verifications v "
            "WHERE v.chain_id = verification_reports.chain_id "
            "AND v.contract = verification_reports.contract "
            "AND v.job_id = verification_reports.job_id)"
        )
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return int(deleted)
