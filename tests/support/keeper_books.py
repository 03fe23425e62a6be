"""The whole of a keeper's books, for assertions: every intent, every attempt, outcome counts.

Production code only ever asks the store for what one decision needs; these
read everything of one chain, through the store's own row mapping.
"""

from __future__ import annotations

from keeper.store.intents import Attempt, Intent, IntentStore


def all_intents(store: IntentStore) -> list[Intent]:
    """Every intent of the store's chain, in id order."""
    rows = store.conn.execute(
        "SELECT id FROM keeper_intents WHERE chain_id = ?", (store.chain_id,)
    ).fetchall()
    return store.intents(int(r[0]) for r in rows)


def all_attempts(store: IntentStore) -> list[Attempt]:
    """Every attempt of the store's chain, in id order."""
    rows = store.conn.execute(
        "SELECT DISTINCT signer, nonce FROM keeper_attempts WHERE chain_id = ?", (store.chain_id,)
    ).fetchall()
    attempts = [a for r in rows for a in store.attempts_at(str(r[0]), int(r[1]))]
    return sorted(attempts, key=lambda a: a.id)


def outcome_counts(store: IntentStore) -> dict[str, int]:
    """Intents by outcome (by status while they have none)."""
    rows = store.conn.execute(
        "SELECT COALESCE(outcome, status), COUNT(*) FROM keeper_intents"
        " WHERE chain_id = ? GROUP BY 1",
        (store.chain_id,),
    ).fetchall()
    return {str(r[0]): int(r[1]) for r in rows}
