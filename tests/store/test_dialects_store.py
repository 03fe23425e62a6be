"""The start-up's dialect rows: daemons sharing one database record them at the same time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from support.together import at_once

from keeper.store.db import connect
from keeper.store.dialects import load_dialects, record_dialects
from keeper.store.migrations import migrate

CHAIN = 31337


def _detection(contract: str, name: str, dialect: str = "erc8183") -> dict[str, Any]:
    return {
        "contract": contract, "name": name, "protocol": "erc8183", "dialect": dialect,
        "source": "detected", "diamond": False, "revision": 2, "reason": "getJob answers",
    }  # fmt: skip


DETECTIONS = [_detection(f"0x{i:040x}", f"escrow-{i}") for i in range(1, 6)]


def test_daemons_starting_together_record_the_same_rows_without_a_key_error(
    new_db: Callable[[], str],
) -> None:
    url = new_db()
    first = connect(url)
    migrate(first)
    conns = [first, connect(url), connect(url)]
    _, errors = at_once(
        [lambda c=c: record_dialects(c, CHAIN, DETECTIONS) for c in conns],
        rounds=30,
    )
    assert errors == []
    assert [d["contract"] for d in load_dialects(first, CHAIN)] == [
        d["contract"] for d in sorted(DETECTIONS, key=lambda d: d["name"])
    ]


def test_a_contract_no_longer_configured_is_dropped_and_a_changed_one_updated(
    new_db: Callable[[], str],
) -> None:
    conn = connect(new_db())
    migrate(conn)
    record_dialects(conn, CHAIN, DETECTIONS, clock=lambda: 1.0)
    changed = [_detection(DETECTIONS[0]["contract"], "renamed", "legacy"), *DETECTIONS[2:]]
    record_dialects(conn, CHAIN, changed, clock=lambda: 2.0)
    rows = {d["contract"]: d for d in load_dialects(conn, CHAIN)}
    assert set(rows) == {d["contract"] for d in changed}
    first = rows[DETECTIONS[0]["contract"]]
    assert (first["name"], first["dialect"], first["detected_at"]) == ("renamed", "legacy", 2.0)
    record_dialects(conn, CHAIN, [], clock=lambda: 3.0)
    assert load_dialects(conn, CHAIN) == []
