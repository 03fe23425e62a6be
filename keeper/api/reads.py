"""The API's read model: SQL over read-only connections, returning JSON-ready dicts.

Each worker thread holds its own read-only connection (WAL lets it read while
the indexer writes), and the aiohttp handlers call these methods through a
thread pool, so a slow query never stalls the event loop the daemon shares.
Amounts stay the exact decimal strings stored in the database; nothing here
converts them to numbers.

Tables of components that have not been migrated yet simply read as empty,
so the API comes up on a fresh database.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from keeper.api.params import ListQuery, encode_cursor
from keeper.store import verifications as vstore
from keeper.store.db import connect

__all__ = ["JOB_FIELDS", "TASK_FIELDS", "ApiReads", "Page"]

T = TypeVar("T")

JOB_FIELDS: tuple[str, ...] = (
    "contract", "job_id", "status", "client", "provider", "evaluator", "hook", "token",
    "budget", "funded_amount", "paid_amount", "refunded_amount", "expired_at", "submitted_at",
    "deliverable", "reason", "description", "legacy", "verdict_event", "created_block",
    "updated_block",
)  # fmt: skip
TASK_FIELDS: tuple[str, ...] = (
    "contract", "task_id", "status", "requester", "worker", "reward", "mode", "expiry_time",
    "deliverable", "evaluator", "evaluator_stake", "evaluator_fee_bps", "evaluation_window",
    "appeal_window", "dispute_resolver", "submitted_at", "evaluation_deadline", "evaluated_at",
    "appeal_deadline", "verdict_type", "score", "evidence_hash", "paid_amount",
    "refunded_amount", "created_block", "updated_block",
)  # fmt: skip
_VERDICT_TYPES = ("approve", "reject", "partial")
_INTENT_FIELDS = (
    "action", "status", "outcome", "detail", "due_at", "tx_hash", "receipt_block", "attempts",
)  # fmt: skip
_EVENT_FIELDS = (
    "name", "variant", "block_number", "block_hash", "block_timestamp", "tx_hash", "log_index",
    "args_json",
)  # fmt: skip


class Page:
    """One page of a list and the cursor of the next (None on the last page)."""

    def __init__(self, items: list[dict[str, Any]], next_cursor: str | None) -> None:
        self.items = items
        self.next_cursor = next_cursor


class ApiReads:
    """Read queries for one chain's database (``chain_id`` None: every chain in the file)."""

    def __init__(self, path: str | Path, chain_id: int | None = None) -> None:
        self.path = path
        self.chain_id = chain_id
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    # --- connection -------------------------------------------------------------------

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self.path, readonly=True)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        try:
            return list(self._conn().execute(sql, tuple(params)).fetchall())
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise

    def _snapshot(self, read: Callable[[], T]) -> T:
        """Run several queries against one consistent snapshot of the database."""
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            return read()
        finally:
            conn.execute("COMMIT")

    def _chain(self, alias: str = "") -> tuple[str, list[Any]]:
        if self.chain_id is None:
            return "1=1", []
        return f"{alias}chain_id = ?", [self.chain_id]

    # --- lists ------------------------------------------------------------------------

    def list_subjects(self, query: ListQuery) -> Page:
        if query.kind == "jobs":
            table, id_col, fields = "jobs", "job_id", JOB_FIELDS
        else:
            table, id_col, fields = "tasks", "task_id", TASK_FIELDS
        where, params = self._chain()
        clauses = [where]
        if query.contract is not None:
            clauses.append("contract = ?")
            params.append(query.contract)
        if query.statuses:
            clauses.append(f"status IN ({','.join('?' * len(query.statuses))})")
            params.extend(query.statuses)
        for column, value in sorted(query.parties.items()):
            clauses.append(f"{column} = ?")
            params.append(value)
        if query.after is not None:
            clauses.append(f"(created_block, contract, {id_col}) < (?, ?, ?)")
            params.extend(query.after)
        sql = (
            f"SELECT {', '.join(fields)} FROM {table} WHERE {' AND '.join(clauses)} "
            f"ORDER BY created_block DESC, contract DESC, {id_col} DESC LIMIT ?"
        )
        rows = self._rows(sql, [*params, query.limit + 1])
        items = [_subject(query.kind, row) for row in rows[: query.limit]]
        next_cursor = None
        if len(rows) > query.limit:
            last = rows[query.limit - 1]
            key = (int(last["created_block"]), str(last["contract"]), str(last[id_col]))
            next_cursor = encode_cursor(query.kind, key)
        return Page(items, next_cursor)

    # --- one subject ------------------------------------------------------------------

    def job(self, contract: str, job_id: str) -> dict[str, Any] | None:
        return self._snapshot(lambda: self._one("jobs", "job_id", JOB_FIELDS, contract, job_id))

    def task(self, contract: str, task_id: str) -> dict[str, Any] | None:
        return self._snapshot(lambda: self._one("tasks", "task_id", TASK_FIELDS, contract, task_id))

    def _one(
        self, table: str, id_col: str, fields: tuple[str, ...], contract: str, subject: str
    ) -> dict[str, Any] | None:
        where, params = self._chain()
        rows = self._rows(
            f"SELECT {', '.join(fields)} FROM {table} WHERE {where} AND contract = ? "
            f"AND {id_col} = ?",
            [*params, contract, subject],
        )
        if not rows:
            return None
        out = _subject("jobs" if table == "jobs" else "tasks", rows[0])
        out["events"] = self._events(contract, subject)
        out["intents"] = self._intents(contract, subject)
        return out

    def _events(self, contract: str, subject: str) -> list[dict[str, Any]]:
        where, params = self._chain()
        rows = self._rows(
            f"SELECT {', '.join(_EVENT_FIELDS)} FROM events WHERE {where} AND contract = ? "
            "AND subject = ? ORDER BY block_number, log_index",
            [*params, contract, subject],
        )
        out = []
        for row in rows:
            event = {k: row[k] for k in _EVENT_FIELDS if k != "args_json"}
            event["args"] = json.loads(row["args_json"])
            out.append(event)
        return out

    def _intents(self, contract: str, subject: str) -> list[dict[str, Any]]:
        where, params = self._chain()
        rows = self._rows(
            f"SELECT {', '.join(_INTENT_FIELDS)} FROM keeper_intents WHERE {where} "
            "AND contract = ? AND subject = ? ORDER BY id",
            [*params, contract, subject],
        )
        return [{k: row[k] for k in _INTENT_FIELDS} for row in rows]

    # --- verification -----------------------------------------------------------------

    def verification(self, contract: str, job_id: str) -> dict[str, Any] | None:
        """The latest verification of a job's verdict: status, failures, report digest."""
        row = self._verification_row(contract, job_id)
        if row is None:
            return None
        return {
            "status": row.status,
            "failures": json.loads(row.failures_json),
            "report_digest": row.report_digest,
            "document_digest": row.document_digest,
            "revision_count": row.revision_count,
            "event": {
                "name": row.event_name,
                "tx_hash": row.tx_hash,
                "block_number": row.block_number,
                "log_index": row.log_index,
            },
            "attempts": row.attempts,
            "next_retry_at": row.next_retry_at,
        }

    def verdict(self, contract: str, job_id: str) -> dict[str, Any] | None:
        """The stored verdict document, the latest report and the report chain of a job."""
        return self._snapshot(lambda: self._verdict(contract, job_id))

    def _verdict(self, contract: str, job_id: str) -> dict[str, Any] | None:
        row = self._verification_row(contract, job_id)
        if row is None:
            return None
        conn = self._conn()
        body = vstore.get_document(conn, row.document_digest) if row.document_digest else None
        revisions = vstore.history(conn, row.chain_id, contract, job_id)
        return {
            "status": row.status,
            "document": json.loads(body) if body is not None else None,
            "document_digest": row.document_digest,
            "report": json.loads(row.report_json),
            "report_digest": row.report_digest,
            "history": [
                {
                    "revision_count": h.revision_count,
                    "report_digest": h.report_digest,
                    "parent_digest": h.parent_digest,
                    "status": h.status,
                }
                for h in revisions
            ],
        }

    def _verification_row(self, contract: str, job_id: str) -> vstore.VerificationRow | None:
        if self.chain_id is None:
            return None  # verifications are per chain; without one there is nothing to pick
        try:
            return vstore.get_verification(self._conn(), self.chain_id, contract, job_id)
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return None
            raise

    # --- status -----------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """What the database knows: cursor, counts by contract and status, keeper backlog."""
        return self._snapshot(self._status)

    def _status(self) -> dict[str, Any]:
        where, params = self._chain()
        cursor_rows = self._rows(
            "SELECT chain_id, indexed_block, indexed_hash, finalized_block, updated_at "
            f"FROM cursor WHERE {where} ORDER BY chain_id",
            params,
        )
        cursor = dict(cursor_rows[0]) if cursor_rows else None
        indexed_timestamp = None
        if cursor is not None:
            ts = self._rows(
                "SELECT timestamp FROM blocks WHERE chain_id = ? AND number = ?",
                [cursor["chain_id"], cursor["indexed_block"]],
            )
            indexed_timestamp = int(ts[0][0]) if ts else None
        counts: dict[str, dict[str, dict[str, int]]] = {}
        for table in ("jobs", "tasks"):
            for row in self._rows(
                f"SELECT contract, status, COUNT(*) AS n FROM {table} WHERE {where} "
                "GROUP BY contract, status",
                params,
            ):
                per = counts.setdefault(str(row["contract"]), {}).setdefault(table, {})
                per[str(row["status"])] = int(row["n"])
        backlog: dict[str, int] = {}
        outcomes: dict[str, int] = {}
        for row in self._rows(
            f"SELECT status, action, outcome, COUNT(*) AS n FROM keeper_intents WHERE {where} "
            "GROUP BY status, action, outcome",
            params,
        ):
            if row["status"] != "done":
                backlog[str(row["action"])] = backlog.get(str(row["action"]), 0) + int(row["n"])
            elif row["outcome"] is not None:
                outcomes[str(row["outcome"])] = outcomes.get(str(row["outcome"]), 0) + int(row["n"])
        return {
            "cursor": cursor,
            "indexed_block_timestamp": indexed_timestamp,
            "counts": counts,
            "keeper_backlog": backlog,
            "keeper_outcomes": outcomes,
        }

    def recent_verdicts(self, limit: int = 10) -> list[dict[str, Any]]:
        """The latest jobs that ended with an evaluator verdict, newest first."""
        where, params = self._chain()
        rows = self._rows(
            "SELECT contract, job_id, status, verdict_event, reason, evaluator, updated_block "
            f"FROM jobs WHERE {where} AND verdict_event IS NOT NULL "
            "ORDER BY updated_block DESC, contract, job_id DESC LIMIT ?",
            [*params, limit],
        )
        return [dict(row) for row in rows]

    def locked(self) -> list[dict[str, str]]:
        """Escrow held by non-terminal jobs and tasks, exact, per (contract, token)."""
        where, params = self._chain()
        totals: dict[tuple[str, str], int] = {}
        for row in self._rows(
            f"SELECT contract, token, funded_amount AS amount FROM jobs WHERE {where} "
            "AND status IN ('funded', 'submitted')",
            params,
        ):
            key = (str(row["contract"]), str(row["token"]))
            totals[key] = totals.get(key, 0) + int(row["amount"])
        for row in self._rows(
            f"SELECT contract, reward AS amount FROM tasks WHERE {where} "
            "AND status NOT IN ('accepted', 'expired', 'cancelled')",
            params,
        ):
            key = (str(row["contract"]), "")
            totals[key] = totals.get(key, 0) + int(row["amount"])
        return [
            {"contract": c, "token": t, "amount": str(v)} for (c, t), v in sorted(totals.items())
        ]


def _subject(kind: str, row: sqlite3.Row) -> dict[str, Any]:
    out = {key: row[key] for key in row.keys()}  # noqa: SIM118 -- sqlite3.Row has no __iter__ of keys
    if kind == "jobs":
        out["legacy"] = bool(out["legacy"])
    elif out.get("verdict_type") is not None:
        out["verdict_type"] = _VERDICT_TYPES[int(out["verdict_type"])]
    return out
