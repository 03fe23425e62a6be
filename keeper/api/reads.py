"""The API's read model: SQL over read-only connections, returning JSON-ready dicts.

Each thread that reads holds its own read-only connection (WAL lets it read
while the indexer writes); which thread runs which read is the handlers'
choice (see :mod:`keeper.api.app`).
Amounts stay the exact decimal strings stored in the database; nothing here
converts them to numbers.

Lists, lookups, events, counts and escrow sums come from
:mod:`keeper.store.queries` and verifications from
:mod:`keeper.store.verifications`; the few reads those modules do not offer
yet (a subject's keeper intents, the backlog by action, recent verdicts) are
kept here, small and aggregate. This module shapes rows for the wire: exact
amounts become decimal strings (JSON numbers lose precision past 2**53) and
only documented fields are served.

Tables of components that have not been migrated yet simply read as empty,
so the API comes up on a fresh database.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from keeper.api.pagecache import PageCache
from keeper.api.params import ListQuery, encode_cursor
from keeper.domain.model import VerdictType
from keeper.store import queries
from keeper.store import verifications as vstore
from keeper.store.db import connect
from keeper.store.dialects import load_dialects

__all__ = ["JOB_FIELDS", "TASK_FIELDS", "ApiReads", "Page"]

T = TypeVar("T")

JOB_FIELDS: tuple[str, ...] = (
    "contract", "job_id", "status", "client", "provider", "evaluator", "hook", "token",
    "budget", "funded_amount", "paid_amount", "refunded_amount", "expired_at", "submitted_at",
    "deliverable", "reason", "description", "legacy", "verdict_event", "created_block",
    "updated_block", "dialect", "settled_amount", "refundable_amount", "pending_claim_amount",
    "payout_receiver",
)  # fmt: skip
TASK_FIELDS: tuple[str, ...] = (
    "contract", "task_id", "status", "requester", "worker", "reward", "mode", "expiry_time",
    "deliverable", "evaluator", "evaluator_stake", "evaluator_fee_bps", "evaluation_window",
    "appeal_window", "dispute_resolver", "submitted_at", "evaluation_deadline", "evaluated_at",
    "appeal_deadline", "verdict_type", "score", "evidence_hash", "paid_amount",
    "refunded_amount", "created_block", "updated_block",
)  # fmt: skip
_AMOUNTS: dict[str, tuple[str, ...]] = {
    "jobs": (
        "budget",
        "funded_amount",
        "paid_amount",
        "refunded_amount",
        "settled_amount",
        "refundable_amount",
    ),
    "tasks": ("reward", "evaluator_stake", "paid_amount", "refunded_amount"),
}
_DATA_VERSION = "PRAGMA data_version"
_BOOLEANS: dict[str, tuple[str, ...]] = {"jobs": ("legacy",), "tasks": ()}
_INTENT_FIELDS = (
    "action", "status", "outcome", "detail", "due_at", "tx_hash", "receipt_block", "attempts",
)  # fmt: skip
_EVENT_FIELDS = (
    "name", "variant", "block_number", "block_hash", "block_timestamp", "tx_hash", "log_index",
    "args_json",
)  # fmt: skip


class Page:
    """One page of a list: its items' JSON texts joined by commas, and the next cursor.

    Each item is :func:`_wire`'s object plus ``contract_name``, built by
    SQLite (:func:`_wire_sql`); the cursor is None on the last page.
    """

    def __init__(self, items: str, next_cursor: str | None) -> None:
        self.items = items
        self.next_cursor = next_cursor


class ApiReads:
    """Read queries for one chain's database (``chain_id`` None: every chain in the file).

    ``names`` maps contract addresses to their configured names, which list
    items carry as ``contract_name`` (None for any other contract).
    """

    def __init__(
        self, path: str | Path, chain_id: int | None = None, names: Mapping[str, str] | None = None
    ) -> None:
        self.path = path
        self.chain_id = chain_id
        self._list_wire = {kind: _wire_sql(kind, names or {}) for kind in ("jobs", "tasks")}
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

    def _page_cache(self) -> PageCache:
        cache: PageCache | None = getattr(self._local, "pages", None)
        if cache is None:
            cache = self._local.pages = PageCache()
        return cache

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

    def snapshot(self, read: Callable[[sqlite3.Connection], T], empty: T) -> T:
        """``read(conn)`` in one read transaction; ``empty`` on a database not migrated yet."""
        return self._snapshot(lambda: self._tolerant(lambda: read(self._conn()), empty))

    def _chain(self) -> tuple[str, list[Any]]:
        if self.chain_id is None:
            return "1=1", []
        return "chain_id = ?", [self.chain_id]

    def _tolerant(self, read: Callable[[], T], empty: T) -> T:
        """``read()``, or ``empty`` when its table is not there yet (a fresh database)."""
        try:
            return read()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return empty
            raise

    # --- lists ------------------------------------------------------------------------

    def list_subjects(self, query: ListQuery) -> Page:
        """A page of jobs or tasks, its items already the JSON text of their wire objects.

        A page asked for again before anything was committed is served as it
        was built (:mod:`keeper.api.pagecache`).
        """
        conn = self._conn()
        cache = self._page_cache()
        version = int(conn.execute(_DATA_VERSION).fetchone()[0])
        key = (query.kind, query.contract, query.statuses, tuple(sorted(query.parties.items())),
               query.limit, query.after)  # fmt: skip
        kept = cache.get(version, key)
        if kept is not None:
            return Page(*kept)
        after = queries.encode_after(*query.after) if query.after is not None else None
        found = self._tolerant(
            lambda: queries.list_json(
                conn, query.kind, *self._list_wire[query.kind], contract=query.contract,
                status=list(query.statuses) or None, parties=query.parties, limit=query.limit,
                after=after, chain_id=self.chain_id,
            ),
            queries.JsonPage("", 0, None),
        )  # fmt: skip
        next_cursor = None
        if found.next_after is not None:
            next_cursor = encode_cursor(query.kind, queries.decode_after(found.next_after))
        cache.put(version, key, (found.items, next_cursor))
        return Page(found.items, next_cursor)

    # --- one subject ------------------------------------------------------------------

    def job(self, contract: str, job_id: str) -> dict[str, Any] | None:
        return self._snapshot(lambda: self._one("jobs", contract, job_id))

    def task(self, contract: str, task_id: str) -> dict[str, Any] | None:
        return self._snapshot(lambda: self._one("tasks", contract, task_id))

    def _one(self, kind: str, contract: str, subject: str) -> dict[str, Any] | None:
        conn = self._conn()
        get = queries.get_job if kind == "jobs" else queries.get_task
        item = self._tolerant(lambda: get(conn, contract, subject, chain_id=self.chain_id), None)
        if item is None:
            return None
        out = _wire(kind, item)
        events: list[dict[str, Any]] = self._tolerant(
            lambda: queries.events_for(conn, contract, subject, chain_id=self.chain_id), []
        )
        out["events"] = [
            {k: e[k] for k in _EVENT_FIELDS if k != "args_json"} | {"args": e["args"]}
            for e in events
        ]
        out["intents"] = self._intents(contract, subject)
        if kind == "jobs":
            paused = self._tolerant(
                lambda: queries.pause_state(conn, contract, chain_id=self.chain_id), None
            )
            out["contract_paused"] = bool(paused and paused[0])
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
        chain_id = self.chain_id
        if chain_id is None:
            return None  # verifications are per chain; without one there is nothing to pick
        return self._tolerant(
            lambda: vstore.get_verification(self._conn(), chain_id, contract, job_id), None
        )

    # --- status -----------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """What the database knows: cursor, counts by contract and status, keeper backlog."""
        return self._snapshot(self._status)

    def _status(self) -> dict[str, Any]:
        conn = self._conn()
        where, params = self._chain()
        cursor = None
        if self.chain_id is not None:
            chain_id = self.chain_id
            summary = self._tolerant(lambda: queries.status_summary(conn, chain_id), None)
            cursor = summary["cursor"] if summary is not None else None
            if cursor is not None:
                cursor = {"chain_id": self.chain_id, **cursor}
        indexed_timestamp = None
        if cursor is not None:
            ts = self._rows(
                "SELECT timestamp FROM blocks WHERE chain_id = ? AND number = ?",
                [cursor["chain_id"], cursor["indexed_block"]],
            )
            indexed_timestamp = int(ts[0][0]) if ts else None
        by_table: dict[str, dict[str, dict[str, int]]] = self._tolerant(
            lambda: queries.counts_by_status(conn, chain_id=self.chain_id),
            {"jobs": {}, "tasks": {}},
        )
        counts: dict[str, dict[str, dict[str, int]]] = {}
        for table, per_contract in by_table.items():
            for contract, statuses in per_contract.items():
                counts.setdefault(contract, {})[table] = dict(statuses)
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
        dialects = [] if self.chain_id is None else load_dialects(conn, self.chain_id)
        paused: dict[str, int] = {}
        for d in dialects:
            contract = str(d["contract"])
            state = queries.pause_state(conn, contract, chain_id=self.chain_id)
            if state is not None and state[0]:
                paused[contract] = state[1]
        return {
            "cursor": cursor,
            "dialects": {d["contract"]: d for d in dialects},
            "paused": paused,
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

    def locked(self) -> list[dict[str, Any]]:
        """Escrow held per (contract, token, kind), exact, with Open jobs' unfunded budgets."""
        rows: list[dict[str, Any]] = self._tolerant(
            lambda: queries.escrow_locked(self._conn(), chain_id=self.chain_id), []
        )
        return [
            {
                "contract": r["contract"],
                "token": r["token"],
                "kind": r["kind"],
                "amount": str(r["amount"]),
                "count": r["count"],
                "open_budget": str(r["open_budget"]),
            }
            for r in rows
        ]


def _wire(kind: str, item: dict[str, Any]) -> dict[str, Any]:
    """The documented fields of a job or task, amounts as exact decimal strings."""
    fields = JOB_FIELDS if kind == "jobs" else TASK_FIELDS
    out = {k: item[k] for k in fields}
    for key in _AMOUNTS[kind]:
        out[key] = str(out[key])
    if kind == "jobs" and out["pending_claim_amount"] is not None:
        out["pending_claim_amount"] = str(out["pending_claim_amount"])
    if kind == "tasks":
        out["extra"] = {str(k): str(v) for k, v in item.get("extra", {}).items()}
    return out


def _wire_sql(kind: str, names: Mapping[str, str]) -> tuple[str, list[str]]:
    """:func:`_wire` plus ``contract_name`` as one SQL ``json_object`` (and its parameters).

    Same keys in the same order and the same values: amounts as decimal
    strings, booleans as JSON booleans, a task's verdict type by name and its
    ``extra`` as the string map it is stored as. SQLite builds and encodes
    them in C: the Python dictionaries and their encoding were most of a list
    request's cost. The route tests compare the two for every indexed subject.
    """
    fields = JOB_FIELDS if kind == "jobs" else TASK_FIELDS
    parts = []
    for name in fields:
        if kind == "jobs" and name == "refundable_amount":
            expr = "refundable(status, budget, settled_amount)"
        elif kind == "jobs" and name == "pending_claim_amount":
            expr = "CAST(pending_claim_amount AS TEXT)"
        elif name in _AMOUNTS[kind]:
            expr = f"CAST({name} AS TEXT)"
        elif name in _BOOLEANS[kind]:
            expr = f"json(CASE WHEN {name} THEN 'true' ELSE 'false' END)"
        elif kind == "tasks" and name == "verdict_type":
            cases = " ".join(f"WHEN {v.value} THEN '{v.name.lower()}'" for v in VerdictType)
            expr = f"CASE {name} {cases} END"
        else:
            expr = name
        parts.append(f"'{name}', {expr}")
    if kind == "tasks":
        parts.append("'extra', json(extra_json)")
    params: list[str] = []
    contract_name = "NULL"
    if names:
        contract_name = "CASE contract" + " WHEN ? THEN ?" * len(names) + " END"
        params = [v for address, name in names.items() for v in (address, name)]
    parts.append(f"'contract_name', {contract_name}")
    return f"json_object({', '.join(parts)})", params
