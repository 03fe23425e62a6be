"""Read queries over the index tables, for the API, the status page and metrics.

Pure reads on a connection from ``keeper.store.db.connect`` (rows as
``sqlite3.Row``; a read-only one in the API). Amounts come back
as exact Python ints, summed in Python: SQLite's SUM goes through int64 or
float and would round or overflow uint256 values. Lists use keyset
pagination on ``(created_block, contract, id)`` newest first, with an opaque
``after`` token, so pages stay stable while the indexer writes.
"""

from __future__ import annotations

import base64
import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from keeper.domain.model import JobStatus, TaskStatus, VerdictType

__all__ = [
    "JsonPage",
    "Page",
    "counts_by_status",
    "decode_after",
    "encode_after",
    "escrow_locked",
    "events_for",
    "get_job",
    "get_task",
    "list_jobs",
    "list_json",
    "list_tasks",
    "pause_state",
    "refundable",
    "status_summary",
]

MAX_LIMIT: Final = 500
_JOB_AMOUNTS: Final = (
    "budget", "funded_amount", "refunded_amount", "paid_amount", "settled_amount",
)  # fmt: skip
_TASK_AMOUNTS: Final = ("reward", "evaluator_stake", "paid_amount", "refunded_amount")
_TERMINAL_TASKS: Final = ("accepted", "expired", "cancelled")
# Escrow is held by a job only once funded; an Open job's budget is a promise.
_HOLDING_JOBS: Final = ("funded", "submitted")
_LIVE_TASKS: Final = tuple(s.label for s in TaskStatus if s.label not in _TERMINAL_TASKS)


@dataclass(frozen=True, slots=True)
class Page:
    """One page of rows and the token for the next page (None on the last)."""

    items: list[dict[str, Any]]
    next_after: str | None


@dataclass(frozen=True, slots=True)
class JsonPage:
    """One page as its JSON objects' texts joined by commas, and the token for the next."""

    items: str
    count: int
    next_after: str | None


def encode_after(created_block: int, contract: str, subject: str) -> str:
    """An opaque page token; clients pass it back verbatim."""
    raw = json.dumps([created_block, contract, subject], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_after(token: str) -> tuple[int, str, str]:
    """Inverse of encode_after; ValueError for anything a client made up."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        block, contract, subject = json.loads(raw)
    except (ValueError, TypeError) as exc:
        raise ValueError("invalid page token") from exc
    if not (isinstance(block, int) and isinstance(contract, str) and isinstance(subject, str)):
        raise ValueError("invalid page token")
    return block, contract, subject


def _labels(status: str | Sequence[str] | None, valid: Iterable[str]) -> list[str]:
    if status is None:
        return []
    wanted = [status] if isinstance(status, str) else list(status)
    known = set(valid)
    bad = [s for s in wanted if s not in known]
    if bad:
        raise ValueError(f"unknown status {bad[0]!r}; expected one of {sorted(known)}")
    return wanted


def _filters(
    id_col: str,
    filters: dict[str, Any],
    statuses: list[str],
    after: str | None,
    chain_id: int | None,
) -> tuple[str, list[Any]]:
    """The WHERE clause (with its parameters) of a list page."""
    clauses: list[str] = []
    params: list[Any] = []
    if chain_id is not None:
        clauses.append("chain_id = ?")
        params.append(chain_id)
    for column, value in filters.items():
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value.lower() if isinstance(value, str) else value)
    if statuses:
        clauses.append(f"status IN ({','.join('?' * len(statuses))})")
        params.extend(statuses)
    if after is not None:
        clauses.append(f"(created_block, contract, {id_col}) < (?, ?, ?)")
        params.extend(decode_after(after))
    return (f"WHERE {' AND '.join(clauses)}" if clauses else ""), params


def _page(
    conn: sqlite3.Connection,
    table: str,
    id_col: str,
    filters: dict[str, Any],
    statuses: list[str],
    limit: int,
    after: str | None,
    chain_id: int | None,
) -> tuple[list[sqlite3.Row], str | None]:
    where, params = _filters(id_col, filters, statuses, after, chain_id)
    limit = max(1, min(limit, MAX_LIMIT))
    rows = conn.execute(
        f"SELECT * FROM {table} {where} "
        f"ORDER BY created_block DESC, contract DESC, {id_col} DESC LIMIT ?",
        (*params, limit + 1),
    ).fetchall()
    nxt = None
    if len(rows) > limit:
        last = rows[limit - 1]
        nxt = encode_after(int(last["created_block"]), str(last["contract"]), str(last[id_col]))
    return rows[:limit], nxt


def _job(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(zip(row.keys(), row, strict=True))
    for k in _JOB_AMOUNTS:
        out[k] = int(out[k])
    claim = out.get("pending_claim_amount")
    out["pending_claim_amount"] = None if claim is None else int(claim)
    out["legacy"] = bool(out["legacy"])
    out["refundable_amount"] = refundable(out["status"], out["budget"], out["settled_amount"])
    return out


def refundable(status: str, budget: int, settled: int) -> int:
    """What claimRefund returns to the client now: budget - settled of a funded escrow."""
    return max(budget - settled, 0) if status in _HOLDING_JOBS else 0


def pause_state(
    conn: sqlite3.Connection, contract: str, *, chain_id: int | None = None
) -> tuple[bool, int] | None:
    """(paused, block) after the contract's latest Paused/Unpaused event; None if it has none.

    A query rather than a projection: the events table is already reorg-safe,
    and the contract-level rows are found through the (contract, subject) index.
    """
    chain = " AND chain_id = ?" if chain_id is not None else ""
    row = conn.execute(
        "SELECT name, block_number FROM events WHERE contract = ? AND subject IS NULL "
        f"AND name IN ('Paused', 'Unpaused'){chain} "
        "ORDER BY block_number DESC, log_index DESC LIMIT 1",
        (contract, *([chain_id] if chain_id is not None else [])),
    ).fetchone()
    return None if row is None else (row[0] == "Paused", int(row[1]))


def _task(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(zip(row.keys(), row, strict=True))
    for k in _TASK_AMOUNTS:
        out[k] = int(out[k])
    verdict = out["verdict_type"]
    out["verdict_type"] = None if verdict is None else VerdictType(verdict).name.lower()
    out["extra"] = json.loads(out.pop("extra_json"))
    return out


def list_jobs(
    conn: sqlite3.Connection,
    *,
    contract: str | None = None,
    status: str | Sequence[str] | None = None,
    client: str | None = None,
    provider: str | None = None,
    evaluator: str | None = None,
    limit: int = 50,
    after: str | None = None,
    chain_id: int | None = None,
) -> Page:
    """Jobs newest first, filtered; ``after`` is the previous page's ``next_after``."""
    statuses = _labels(status, (s.label for s in JobStatus))
    filters = {"contract": contract, "client": client, "provider": provider,
               "evaluator": evaluator}  # fmt: skip
    rows, nxt = _page(conn, "jobs", "job_id", filters, statuses, limit, after, chain_id)
    return Page([_job(r) for r in rows], nxt)


def list_tasks(
    conn: sqlite3.Connection,
    *,
    contract: str | None = None,
    status: str | Sequence[str] | None = None,
    requester: str | None = None,
    worker: str | None = None,
    evaluator: str | None = None,
    limit: int = 50,
    after: str | None = None,
    chain_id: int | None = None,
) -> Page:
    """Tasks newest first, filtered; ``after`` is the previous page's ``next_after``."""
    statuses = _labels(status, (s.label for s in TaskStatus))
    filters = {"contract": contract, "requester": requester, "worker": worker,
               "evaluator": evaluator}  # fmt: skip
    rows, nxt = _page(conn, "tasks", "task_id", filters, statuses, limit, after, chain_id)
    return Page([_task(r) for r in rows], nxt)


_LIST_KEYS: Final = {"jobs": "job_id", "tasks": "task_id"}
_PARTIES: Final = {"jobs": ("client", "provider", "evaluator"),
                   "tasks": ("requester", "worker", "evaluator")}  # fmt: skip
_STATUS_LABELS: Final = {"jobs": tuple(s.label for s in JobStatus),
                         "tasks": tuple(s.label for s in TaskStatus)}  # fmt: skip


def list_json(
    conn: sqlite3.Connection,
    table: str,
    wire: str,
    wire_params: Sequence[Any] = (),
    *,
    contract: str | None = None,
    status: str | Sequence[str] | None = None,
    parties: Mapping[str, str] | None = None,
    limit: int = 50,
    after: str | None = None,
    chain_id: int | None = None,
) -> JsonPage:
    """The page ``list_jobs``/``list_tasks`` would return, as the JSON texts of ``wire``.

    ``wire`` is an SQL expression over the table's columns (a ``json_object``;
    its ``?`` take ``wire_params``) that SQLite evaluates per row. The whole
    page and whether another follows come back from one statement in one
    step: one consistent snapshot, and one GIL release and reacquisition
    instead of one per row (under the indexer's load each of those may wait
    for the GIL; bench/README.md has the profile).
    ``parties`` maps party columns of ``table`` to addresses.
    """
    id_col = _LIST_KEYS[table]
    filters: dict[str, Any] = {"contract": contract}
    for name, value in (parties or {}).items():
        if name not in _PARTIES[table]:
            raise ValueError(f"unknown party {name!r}; expected one of {_PARTIES[table]}")
        filters[name] = value
    statuses = _labels(status, _STATUS_LABELS[table])
    where, params = _filters(id_col, filters, statuses, after, chain_id)
    limit = max(1, min(limit, MAX_LIMIT))
    # one pass over the page's rows feeds both aggregates, so they see the rows in the
    # same (page) order: the texts, and each row's key with the length of its text
    row = conn.execute(
        "SELECT group_concat(w, ','), json_group_array(json_array(b, c, i, length(w))) FROM "
        f"(SELECT created_block AS b, contract AS c, {id_col} AS i, {wire} AS w FROM {table} "
        f"{where} ORDER BY created_block DESC, contract DESC, {id_col} DESC LIMIT ?)",
        (*wire_params, *params, limit + 1),
    ).fetchone()
    items: str = row[0] or ""
    keys: list[list[Any]] = json.loads(row[1])
    nxt = None
    if len(keys) > limit:  # the row past the page only says there is a next one
        items = items[: len(items) - int(keys[limit][3]) - 1]
        block, last_contract, subject, _ = keys[limit - 1]
        nxt = encode_after(int(block), str(last_contract), str(subject))
        keys = keys[:limit]
    return JsonPage(items, len(keys), nxt)


def _one(
    conn: sqlite3.Connection, table: str, id_col: str, contract: str, subject: str,
    chain_id: int | None,
) -> sqlite3.Row | None:  # fmt: skip
    sql = f"SELECT * FROM {table} WHERE contract = ? AND {id_col} = ?"
    params: list[Any] = [contract.lower(), subject.lower()]
    if chain_id is not None:
        sql += " AND chain_id = ?"
        params.append(chain_id)
    row: sqlite3.Row | None = conn.execute(sql + " ORDER BY chain_id LIMIT 1", params).fetchone()
    return row


def get_job(
    conn: sqlite3.Connection, contract: str, job_id: str, *, chain_id: int | None = None
) -> dict[str, Any] | None:
    row = _one(conn, "jobs", "job_id", contract, job_id, chain_id)
    return None if row is None else _job(row)


def get_task(
    conn: sqlite3.Connection, contract: str, task_id: str, *, chain_id: int | None = None
) -> dict[str, Any] | None:
    row = _one(conn, "tasks", "task_id", contract, task_id, chain_id)
    return None if row is None else _task(row)


def events_for(
    conn: sqlite3.Connection, contract: str, subject: str, *, chain_id: int | None = None
) -> list[dict[str, Any]]:
    """A subject's events in chain order; args keep uint256 values as decimal strings."""
    sql = (
        "SELECT chain_id, block_number, block_hash, block_timestamp, tx_hash, log_index, "
        "name, variant, args_json FROM events WHERE contract = ? AND subject = ?"
    )
    params: list[Any] = [contract.lower(), subject.lower()]
    if chain_id is not None:
        sql += " AND chain_id = ?"
        params.append(chain_id)
    out = []
    for row in conn.execute(sql + " ORDER BY chain_id, block_number, log_index", params):
        item = {k: row[k] for k in row.keys() if k != "args_json"}  # noqa: SIM118
        item["args"] = json.loads(row["args_json"])
        out.append(item)
    return out


def counts_by_status(
    conn: sqlite3.Connection, *, chain_id: int | None = None
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


def escrow_locked(conn: sqlite3.Connection, *, chain_id: int | None = None) -> list[dict[str, Any]]:
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
        f"SELECT contract, reward FROM tasks WHERE status IN {_LIVE_TASKS}{chain}",
        params,
    ):
        add((str(row[0]), "", "tasks"), int(row[1]), True)
    return [
        {"contract": c, "token": t, "kind": k, "amount": v[0], "count": v[1], "open_budget": v[2]}
        for (c, t, k), v in sorted(acc.items())
    ]


def status_summary(conn: sqlite3.Connection, chain_id: int) -> dict[str, Any]:
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
