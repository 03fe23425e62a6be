"""What the index could not read: chain reads recorded as missing, counted for the gauges.

A read is missing when no block the node serves could answer it exactly (a field
that can change, asked of a node without state at the event's block;
``keeper.domain.reads``). The partial index ``chain_reads_missing`` holds only
those rows, so a scrape costs what there is to report, not the whole table.
"""

from __future__ import annotations

from keeper.domain.reads import MISSING
from keeper.store.db import Db

__all__ = ["missing_reads"]


def missing_reads(conn: Db, *, chain_id: int | None = None) -> list[tuple[str, str, int]]:
    """(contract, read kind, count) of the reads recorded as missing."""
    sql = "SELECT contract, kind, COUNT(*) FROM chain_reads WHERE source = ?"
    args: list[object] = [MISSING]
    if chain_id is not None:
        sql += " AND chain_id = ?"
        args.append(chain_id)
    rows = conn.execute(sql + " GROUP BY contract, kind ORDER BY contract, kind", args)
    return [(str(c), str(k), int(n)) for c, k, n in rows]
