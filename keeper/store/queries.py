"""Aggregate reads over the store, for the API, the status page, metrics and the keeper.

Pure reads on a connection from ``keeper.store.db.connect`` (rows as
``DbRow``; a read-only one in the API and the gauges). Sums of amounts
are exact Python ints, summed in Python: SQLite's SUM goes through int64 or
float and would round or overflow uint256 values. Jobs and tasks themselves,
as served, are :mod:`keeper.store.subjects`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from keeper.domain.model import LIVE_TASK_STATUSES

if TYPE_CHECKING:
    from keeper.store.db import Db

__all__ = [
    "UPGRADE_EVENTS",
    "UpgradeMark",
    "block_timestamp",
    "counts_by_status",
    "escrow_locked",
    "intent_counts",
    "latest_pause",
    "latest_upgrade",
    "overdue_intents",
    "pause_state",
    "recent_verdicts",
    "refundable",
    "status_summary",
    "verifications_by_status",
]

# (contract, label, count) rows of one GROUP BY
CountRows = list[tuple[str, str, int]]
# Escrow is held by a job only once funded; an Open job's budget is a promise.
_HOLDING_JOBS: Final = ("funded", "submitted")


def refundable(status: str, budget: int, settled: int) -> int:
    """What claimRefund returns to the client now: budget - settled of a funded escrow."""
    return max(budget - settled, 0) if status in _HOLDING_JOBS else 0


# the contract-level events a contract's pause state follows (a detail shows it)
PAUSE_EVENTS: Final = ("Paused", "Unpaused")


def _latest_contract_event(columns: str, names: tuple[str, ...], by_chain: bool) -> str:
    """The statement selecting ``columns`` of a contract's latest event named in ``names``.

    Named parameters ``:contract`` and, ``by_chain``, ``:chain``; contract-level
    events are the contract's rows without a subject.
    """
    chain = " AND chain_id = :chain" if by_chain else ""
    return (
        f"SELECT {columns} FROM events WHERE contract = :contract "
        f"AND subject IS NULL AND name IN {names!r}{chain} "
        "ORDER BY block_number DESC, log_index DESC LIMIT 1"
    )


def latest_pause(by_chain: bool) -> str:
    """The statement selecting (name, block) of a contract's latest Paused/Unpaused event."""
    return _latest_contract_event("name, block_number", PAUSE_EVENTS, by_chain)


def pause_state(conn: Db, contract: str, *, chain_id: int | None = None) -> tuple[bool, int] | None:
    """(paused, block) after the contract's latest Paused/Unpaused event; None if it has none.

    A query rather than a projection: the events table is already reorg-safe,
    and the contract-level rows are found through the (contract, subject) index.
    """
    row = conn.execute(
        latest_pause(chain_id is not None), {"contract": contract, "chain": chain_id}
    ).fetchone()
    return None if row is None else (row[0] == "Paused", int(row[1]))


# the contract-level events that change what a contract's code answers: a UUPS proxy's
# new implementation, an EIP-2535 diamond's facets (keeper.act.dialect_watch)
UPGRADE_EVENTS: Final = ("Upgraded", "DiamondCut")
UpgradeMark = tuple[int, int, str]


def latest_upgrade(conn: Db, contract: str, *, chain_id: int) -> UpgradeMark | None:
    """(block, log index, block hash) of the contract's latest upgrade event; None if none.

    The block hash is part of it: an upgrade that a reorg replaced at the same height is
    another upgrade."""
    row = conn.execute(
        _latest_contract_event("block_number, log_index, block_hash", UPGRADE_EVENTS, True),
        {"contract": contract, "chain": chain_id},
    ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]), str(row[2]))


def counts_by_status(
    conn: Db, *, chain_id: int | None = None
) -> dict[str, dict[str, dict[str, int]]]:
    """``{"jobs"|"tasks": {contract: {status: count}}}``, for gauges and the status page."""
    where, params = ("WHERE chain_id = ?", [chain_id]) if chain_id is not None else ("", [])
    out: dict[str, dict[str, dict[str, int]]] = {"jobs": {}, "tasks": {}}
    for table in ("jobs", "tasks"):
        for row in conn.execute(
            f"SELECT contract, status, count(*) FROM {table} {where} GROUP BY contract, status",
            params,
        ):
            out[table].setdefault(str(row[0]), {})[str(row[1])] = int(row[2])
    return out


def escrow_locked(conn: Db, *, chain_id: int | None = None) -> list[dict[str, Any]]:
    """Escrow held per (contract, token): funded jobs' amounts and open tasks' rewards.

    Also reports, per contract, the budget of Open jobs (``open_budget``):
    not held, but what an unguarded ``claimRefund`` on an expired Open job
    would pay out of other jobs' escrow (the hazard in PROTOCOLS.md).
    Task markets pay in one token the index does not see: their token is "".
    """
    # ``+chain_id``: the planner must walk the status index (live subjects only), not
    # the primary key, whose chain_id prefix matches every row of a one-chain file
    chain = " AND +chain_id = ?" if chain_id is not None else ""
    params = [chain_id] if chain_id is not None else []
    acc: dict[tuple[str, str, str], list[int]] = {}

    def add(key: tuple[str, str, str], amount: int, counted: bool) -> None:
        slot = acc.setdefault(key, [0, 0, 0])
        if counted:
            slot[0] += amount
            slot[1] += 1
        else:
            slot[2] += amount

    for row in conn.execute(
        "SELECT contract, token, status, funded_amount, budget, settled_amount FROM jobs "
        f"WHERE status IN ('funded', 'submitted', 'open'){chain}",
        params,
    ):
        key = (str(row[0]), str(row[1]), "jobs")
        if row[2] in _HOLDING_JOBS:  # partial settlements have already left the escrow
            add(key, max(int(row[3]) - int(row[5]), 0), True)
        elif int(row[4]) > 0:
            add(key, int(row[4]), False)
    for row in conn.execute(
        f"SELECT contract, reward FROM tasks WHERE status IN {LIVE_TASK_STATUSES}{chain}",
        params,
    ):
        add((str(row[0]), "", "tasks"), int(row[1]), True)
    return [
        {"contract": c, "token": t, "kind": k, "amount": v[0], "count": v[1], "open_budget": v[2]}
        for (c, t, k), v in sorted(acc.items())
    ]


def status_summary(conn: Db, chain_id: int) -> dict[str, Any]:
    """Where indexing stands: cursor, window, event totals (unknown ones apart)."""
    cur = conn.execute(
        "SELECT indexed_block, indexed_hash, finalized_block, updated_at FROM cursor "
        "WHERE chain_id = ?",
        (chain_id,),
    ).fetchone()
    window = conn.execute(
        "SELECT count(*), min(number), max(number) FROM blocks WHERE chain_id = ?", (chain_id,)
    ).fetchone()
    events = conn.execute(
        "SELECT count(*), count(*) - count(name) FROM events WHERE chain_id = ?", (chain_id,)
    ).fetchone()
    return {
        "chain_id": chain_id,
        "cursor": None if cur is None else {k: cur[k] for k in cur.keys()},  # noqa: SIM118
        "window": {"size": int(window[0]), "lowest": window[1], "highest": window[2]},
        "events": {"total": int(events[0]), "unknown": int(events[1])},
    }


def _where_chain(chain_id: int | None) -> tuple[str, list[Any]]:
    return ("1=1", []) if chain_id is None else ("chain_id = ?", [chain_id])


def block_timestamp(conn: Db, chain_id: int, number: int) -> int | None:
    """The timestamp of a block in the window; None once it is pruned or never seen."""
    row = conn.execute(
        "SELECT timestamp FROM blocks WHERE chain_id = ? AND number = ?", (chain_id, number)
    ).fetchone()
    return None if row is None else int(row[0])


def intent_counts(
    conn: Db, *, chain_id: int | None = None
) -> tuple[dict[str, int], dict[str, int]]:
    """(unfinished intents by action, finished ones by outcome) of the keeper."""
    where, params = _where_chain(chain_id)
    backlog: dict[str, int] = {}
    outcomes: dict[str, int] = {}
    for status, action, outcome, n in conn.execute(
        f"SELECT status, action, outcome, COUNT(*) FROM keeper_intents WHERE {where} "
        "GROUP BY status, action, outcome",
        params,
    ):
        if status != "done":
            backlog[str(action)] = backlog.get(str(action), 0) + int(n)
        elif outcome is not None:
            outcomes[str(outcome)] = outcomes.get(str(outcome), 0) + int(n)
    return backlog, outcomes


def overdue_intents(conn: Db, *, chain_id: int | None = None) -> CountRows:
    """(contract, action, count) of unfinished intents: one is written when an action falls
    due, so an unfinished intent is overdue."""
    where, params = _where_chain(chain_id)
    rows = conn.execute(
        f"SELECT contract, action, COUNT(*) FROM keeper_intents WHERE {where} "
        "AND status != 'done' GROUP BY contract, action",
        params,
    )
    return [(str(r[0]), str(r[1]), int(r[2])) for r in rows]


def verifications_by_status(conn: Db, *, chain_id: int | None = None) -> CountRows:
    """(contract, verification status, count) of the verdicts' latest verifications."""
    where, params = _where_chain(chain_id)
    rows = conn.execute(
        f"SELECT contract, status, COUNT(*) FROM verifications WHERE {where} "
        "GROUP BY contract, status",
        params,
    )
    return [(str(r[0]), str(r[1]), int(r[2])) for r in rows]


def recent_verdicts(
    conn: Db, *, chain_id: int | None = None, limit: int = 10
) -> list[dict[str, Any]]:
    """The latest jobs that ended with an evaluator verdict, newest first."""
    where, params = _where_chain(chain_id)
    rows = conn.execute(
        "SELECT contract, job_id, status, verdict_event, reason, evaluator, updated_block "
        f"FROM jobs WHERE {where} AND verdict_event IS NOT NULL "
        "ORDER BY updated_block DESC, contract, job_id DESC LIMIT ?",
        (*params, limit),
    )
    return [dict(row) for row in rows]
