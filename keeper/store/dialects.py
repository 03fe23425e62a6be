"""The dialects found at start-up, kept so ``keeper status`` can show them offline."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from keeper.store.db import Db, is_missing_table, write_transaction

__all__ = ["load_dialects", "record_dialects"]

_COLS = "contract, name, protocol, dialect, source, diamond, revision, reason, detected_at"


def record_dialects(
    conn: Db,
    chain_id: int,
    detections: Iterable[dict[str, Any]],
    clock: Callable[[], float] = time.time,
) -> None:
    """Replace the chain's rows with this start-up's detections (one transaction).

    Daemons sharing one database start together and record the same detections at
    once: on PostgreSQL a delete-then-insert lets both inserts through the delete and
    the second fails on the key, so rows are upserted (in key order, so two writers
    wait on each other's row locks instead of deadlocking) and only the contracts no
    longer configured are deleted.
    """
    now = clock()
    rows = sorted(
        (chain_id, d["contract"], d["name"], d["protocol"], d["dialect"], d["source"],
         int(bool(d["diamond"])), d["revision"], d["reason"], now)
        for d in detections
    )  # fmt: skip
    updates = ", ".join(f"{c} = excluded.{c}" for c in _COLS.split(", ")[1:])
    kept = [r[1] for r in rows]
    with write_transaction(conn):
        conn.execute(
            "DELETE FROM keeper_dialects WHERE chain_id = ?"
            + (f" AND contract NOT IN ({','.join('?' * len(kept))})" if kept else ""),
            (chain_id, *kept),
        )
        conn.executemany(
            f"INSERT INTO keeper_dialects (chain_id, {_COLS}) VALUES ({','.join('?' * 10)}) "
            f"ON CONFLICT (chain_id, contract) DO UPDATE SET {updates}",
            rows,
        )


def load_dialects(conn: Db, chain_id: int) -> list[dict[str, Any]]:
    """The last start-up's detections; none on a database not yet migrated to keep them."""
    try:
        rows = conn.execute(
            f"SELECT {_COLS} FROM keeper_dialects WHERE chain_id = ? ORDER BY name", (chain_id,)
        ).fetchall()
    except Exception as exc:
        if is_missing_table(exc):
            return []
        raise
    keys = _COLS.split(", ")
    out = []
    for r in rows:
        d = dict(zip(keys, tuple(r), strict=True))
        d["diamond"] = bool(d["diamond"])
        out.append(d)
    return out
