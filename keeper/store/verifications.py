"""Reads and writes of verification results, report history and verdict documents.

Writes join the caller's open transaction when there is one (so a reorg's
rollback and ``delete_orphans`` can commit together), else run in their own.
SQL for the verify component lives here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any, Final

from keeper.store.db import Db, dialect, write_transaction
from keeper.store.index_rows import description_from_json


@dataclass(frozen=True, slots=True)
class VerificationRow:
    """The latest verification of one verdict (one row of ``verifications``)."""

    chain_id: int
    contract: str
    job_id: str
    status: str
    failures_json: str
    document_digest: str | None
    report_json: str
    report_digest: str
    parent_digest: str | None
    revision_count: int
    event_name: str
    tx_hash: str
    block_hash: str
    block_number: int
    log_index: int
    attempts: int
    first_attempt_at: int
    next_retry_at: int | None


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One revision of a verdict's report chain (``verification_reports``)."""

    revision_count: int
    report_digest: str
    parent_digest: str | None
    status: str
    report_json: str


@dataclass(frozen=True, slots=True)
class IndexedVerdict:
    """A verdict event from ``events`` joined with its job's projection (``jobs``)."""

    chain_id: int
    contract: str
    job_id: str
    event_name: str
    tx_hash: str
    block_hash: str
    block_number: int
    log_index: int
    reason: str
    deliverable: str | None
    evaluator: str
    description: str | None
    block_timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class IndexedTaskVerdict:
    """The latest ``TaskEvaluated`` of a task joined with its projection's evidence hash."""

    chain_id: int
    contract: str
    task_id: str
    event_name: str
    tx_hash: str
    block_hash: str
    block_number: int
    log_index: int
    evidence_hash: str
    deliverable: str | None
    evaluator: str | None


# Where a scan of ``events`` in key order resumes: (block number, block hash, log index)
# of the last event it returned. ``events`` holds one hash per block number, so this
# order is the chain's.
EventPosition = tuple[int, str, int]


def block_start(number: int) -> EventPosition:
    """The position just before block ``number``'s first event."""
    return (number, "", -1)


@dataclass(frozen=True, slots=True)
class Rollbacks:
    """The rollbacks recorded after a reader's last one (``rollbacks``, index migration 10)."""

    first_seq: int
    last_seq: int
    lowest_fork_point: int


_COLUMNS = tuple(f.name for f in fields(VerificationRow))
_TASK_QUERY = (
    "SELECT e.chain_id, e.contract, e.subject, e.name, e.tx_hash, e.block_hash, e.block_number, "
    "e.log_index, t.evidence_hash, t.deliverable, t.evaluator FROM events e JOIN tasks t "
    "ON t.chain_id = e.chain_id AND t.contract = e.contract AND t.task_id = e.subject "
    "WHERE e.chain_id = ? AND e.name = 'TaskEvaluated' AND t.evidence_hash IS NOT NULL "
    "AND NOT EXISTS (SELECT 1 FROM events l WHERE l.chain_id = e.chain_id "
    "AND l.contract = e.contract AND l.subject = e.subject AND l.name = 'TaskEvaluated' "
    "AND (l.block_number > e.block_number "
    "OR (l.block_number = e.block_number AND l.log_index > e.log_index))) "
)
# the verdict's reason: from the event's arguments, else the job's (a legacy shape)
_REASON: Final = {
    "sqlite": "coalesce(json_extract(e.args_json, '$.reason'), j.reason)",
    "postgresql": "coalesce(e.args_json::json ->> 'reason', j.reason)",
}


def _verdicts(conn: Db) -> str:
    return (
        "SELECT e.chain_id, e.contract, e.subject, e.name, e.tx_hash, e.block_hash, "
        f"e.block_number, e.log_index, {_REASON[dialect(conn)]}, j.deliverable, "
        "j.evaluator, j.description, e.block_timestamp FROM events e JOIN jobs j "
        "ON j.chain_id = e.chain_id AND j.contract = e.contract AND j.job_id = e.subject "
        "WHERE e.chain_id = ? AND e.name IN ('JobCompleted', 'JobRejected') "
    )


_KEY = ("chain_id", "contract", "job_id")


@contextmanager
def transaction(conn: Db) -> Iterator[None]:
    """A write transaction, or the caller's open one (joined, left for it to commit)."""
    if conn.in_transaction:
        yield
        return
    with write_transaction(conn):
        yield


def save_verification(conn: Db, row: VerificationRow, *, new_revision: bool) -> bool:
    """Upsert the latest verification; with ``new_revision`` also append its report to history.

    Several daemons sharing one database each verify, so the write is
    conditional on what the verifier read: a revision number another daemon
    has recorded since is not written again (the history's key decides, which
    on PostgreSQL also waits for a concurrent writer of the same revision),
    and the latest row is never moved back to an older revision. ``False``
    says nothing was written: a report chain has one revision per number, and
    the verifier that lost the race has nothing to add.
    """
    updates = ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS if c not in _KEY)
    with transaction(conn):
        if new_revision:
            added = conn.execute(
                "INSERT INTO verification_reports (chain_id, contract, job_id, revision_count, "
                "report_digest, parent_digest, status, report_json) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (
                    row.chain_id,
                    row.contract,
                    row.job_id,
                    row.revision_count,
                    row.report_digest,
                    row.parent_digest,
                    row.status,
                    row.report_json,
                ),
            )
            if added.rowcount == 0:
                return False
        saved = conn.execute(
            f"INSERT INTO verifications ({', '.join(_COLUMNS)}) "
            f"VALUES ({', '.join('?' * len(_COLUMNS))}) "
            f"ON CONFLICT (chain_id, contract, job_id) DO UPDATE SET {updates} "
            "WHERE verifications.revision_count <= excluded.revision_count",
            tuple(getattr(row, c) for c in _COLUMNS),
        )
        return saved.rowcount == 1


def get_verification(conn: Db, chain_id: int, contract: str, job_id: str) -> VerificationRow | None:
    row = conn.execute(
        f"SELECT {', '.join(_COLUMNS)} FROM verifications "
        "WHERE chain_id = ? AND contract = ? AND job_id = ?",
        (chain_id, contract, job_id),
    ).fetchone()
    return VerificationRow(*row) if row is not None else None


def due_for_retry(conn: Db, chain_id: int, now: int, limit: int = 100) -> list[VerificationRow]:
    """Verifications whose retry time has come, earliest first."""
    rows = conn.execute(
        f"SELECT {', '.join(_COLUMNS)} FROM verifications WHERE chain_id = ? "
        "AND next_retry_at IS NOT NULL AND next_retry_at <= ? ORDER BY next_retry_at LIMIT ?",
        (chain_id, now, limit),
    ).fetchall()
    return [VerificationRow(*r) for r in rows]


def resume_retries(conn: Db, chain_id: int, since: int) -> int:
    """Make due at once the ``unavailable`` verifications first tried at or after ``since``
    that were given no retry (their verifier had nothing to ask again); returns how many.

    Run when a verifier that can ask starts: a source configured since then gets the
    verdicts still within their retry horizon. Those that gave up at the horizon's end
    are tried once more and give up again.
    """
    with transaction(conn):
        cursor = conn.execute(
            "UPDATE verifications SET next_retry_at = 0 WHERE chain_id = ? "
            "AND status = 'unavailable' AND next_retry_at IS NULL AND first_attempt_at >= ?",
            (chain_id, since),
        )
    return cursor.rowcount


def history(conn: Db, chain_id: int, contract: str, job_id: str) -> list[HistoryEntry]:
    """Every report revision of one verdict, oldest first."""
    rows = conn.execute(
        "SELECT revision_count, report_digest, parent_digest, status, report_json "
        "FROM verification_reports WHERE chain_id = ? AND contract = ? AND job_id = ? "
        "ORDER BY revision_count",
        (chain_id, contract, job_id),
    ).fetchall()
    return [HistoryEntry(*r) for r in rows]


def save_document(
    conn: Db,
    chain_id: int,
    contract: str,
    job_id: str,
    digest: str,
    body: bytes,
    *,
    origin: str = "source",
) -> None:
    """Keep a document's canonical bytes under its digest (idempotent; posting marks it ``api``)."""
    keep = "verdict_documents.origin" if origin != "api" else "excluded.origin"
    with transaction(conn):
        conn.execute(
            "INSERT INTO verdict_documents (chain_id, contract, job_id, digest, body, origin) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (chain_id, contract, job_id, digest) "
            f"DO UPDATE SET origin = {keep}",
            (chain_id, contract, job_id, digest, body.decode("utf-8"), origin),
        )


def get_submitted_document(conn: Db, digest: str) -> bytes | None:
    """A document posted to the API, by digest."""
    row = conn.execute(
        "SELECT body FROM verdict_documents WHERE digest = ? AND origin = 'api' LIMIT 1", (digest,)
    ).fetchone()
    return str(row[0]).encode("utf-8") if row is not None else None


def save_submission(
    conn: Db,
    chain_id: int,
    jobs: list[tuple[str, str]],
    digest: str,
    body: bytes,
) -> None:
    """Store a posted document for its verdicts and make their verifications due at once.

    A verification that already checked this very document is left alone; any
    other (unavailable, or checked against a wrong document) is re-run by the
    daemon's next verify cycle. Both happen in one transaction.
    """
    with transaction(conn):
        for contract, job_id in jobs:
            save_document(conn, chain_id, contract, job_id, digest, body, origin="api")
            conn.execute(
                "UPDATE verifications SET next_retry_at = 0 WHERE chain_id = ? AND contract = ? "
                "AND job_id = ? AND document_digest IS NOT ?",
                (chain_id, contract, job_id, digest),
            )


def get_document(conn: Db, digest: str) -> bytes | None:
    """A stored document by digest, whichever job it was stored for."""
    row = conn.execute(
        "SELECT body FROM verdict_documents WHERE digest = ? LIMIT 1", (digest,)
    ).fetchone()
    return str(row[0]).encode("utf-8") if row is not None else None


@dataclass(frozen=True, slots=True)
class Orphan:
    """A verification deleted because its verdict event left the chain."""

    contract: str
    job_id: str
    event_name: str


def delete_orphans(conn: Db, chain_id: int | None = None, above: int | None = None) -> list[Orphan]:
    """Drop verifications (and their history) whose verdict event is no longer in ``events``.

    A verdict the chain no longer has must not keep a verification. With
    ``chain_id`` and ``above`` only that chain's verifications of blocks after
    ``above`` are looked at: after a rollback to ``above`` nothing below can
    have gone, and a check of every verification per rollback grows with the
    history. Returns what was dropped: an earlier verdict of the same job may
    still stand and want its verification back.
    """
    where, params = "", []
    if chain_id is not None:
        where = "v.chain_id = ? AND v.block_number > ? AND "
        params = [chain_id, -1 if above is None else above]
    with transaction(conn):
        rows = conn.execute(
            "SELECT v.chain_id, v.contract, v.job_id, v.event_name FROM verifications v "
            f"WHERE {where}NOT EXISTS (SELECT 1 FROM events e WHERE e.chain_id = v.chain_id "
            "AND e.block_number = v.block_number AND e.block_hash = v.block_hash "
            "AND e.log_index = v.log_index)",
            params,
        ).fetchall()
        for table in ("verifications", "verification_reports"):
            conn.executemany(
                f"DELETE FROM {table} WHERE chain_id = ? AND contract = ? AND job_id = ?",
                [tuple(r)[:3] for r in rows],
            )
    return [Orphan(str(r[1]), str(r[2]), str(r[3])) for r in rows]


def rollbacks_since(conn: Db, chain_id: int, seq: int) -> Rollbacks | None:
    """The chain's rollbacks numbered after ``seq``, summed up; ``None`` when there are none."""
    row = conn.execute(
        "SELECT min(seq), max(seq), min(fork_point) FROM rollbacks WHERE chain_id = ? AND seq > ?",
        (chain_id, seq),
    ).fetchone()
    if row is None or row[0] is None:
        return None
    return Rollbacks(int(row[0]), int(row[1]), int(row[2]))


def last_event(conn: Db, chain_id: int) -> EventPosition | None:
    """The position of the chain's last indexed event (``None``: no events)."""
    row = conn.execute(
        "SELECT block_number, block_hash, log_index FROM events WHERE chain_id = ? "
        "ORDER BY block_number DESC, block_hash DESC, log_index DESC LIMIT 1",
        (chain_id,),
    ).fetchone()
    return None if row is None else (int(row[0]), str(row[1]), int(row[2]))


def _after(position: EventPosition | None) -> tuple[str, tuple[object, ...]]:
    if position is None:
        return "", ()
    return "AND (e.block_number, e.block_hash, e.log_index) > (?, ?, ?) ", position


_UNVERIFIED: Final = (
    "AND NOT EXISTS (SELECT 1 FROM verifications v "
    "WHERE v.chain_id = e.chain_id AND v.contract = e.contract AND v.job_id = e.subject "
    "AND v.block_hash = e.block_hash AND v.log_index = e.log_index) "
)
# the key's order: a scan from a position reads on from there and stops at the limit
_IN_CHAIN_ORDER: Final = "ORDER BY e.block_number, e.block_hash, e.log_index LIMIT ?"


def pending_verdicts(
    conn: Db, chain_id: int, limit: int = 100, after: EventPosition | None = None
) -> list[IndexedVerdict]:
    """Indexed verdict events (after ``after``) with no verification of that very event yet.

    Oldest first. Without ``after`` every verdict ever indexed is looked at.
    """
    where, params = _after(after)
    rows = conn.execute(
        _verdicts(conn) + where + _UNVERIFIED + _IN_CHAIN_ORDER, (chain_id, *params, limit)
    ).fetchall()
    return [_indexed_verdict(r) for r in rows]


def _indexed_verdict(row: Sequence[Any]) -> IndexedVerdict:
    """A row of ``_verdicts``, its job's description read back from the JSON it is kept as."""
    (chain_id, contract, job_id, name, tx_hash, block_hash, number, log_index, reason,
     deliverable, evaluator, description, timestamp) = row  # fmt: skip
    return IndexedVerdict(
        chain_id, contract, job_id, name, tx_hash, block_hash, number, log_index, reason,
        deliverable, evaluator, description_from_json(description), timestamp,
    )  # fmt: skip


def indexed_verdict(conn: Db, chain_id: int, contract: str, job_id: str) -> IndexedVerdict | None:
    """The latest indexed verdict event of one job, with its job's facts."""
    row = conn.execute(
        _verdicts(conn) + "AND e.contract = ? AND e.subject = ? "
        "ORDER BY e.block_number DESC, e.log_index DESC LIMIT 1",
        (chain_id, contract, job_id),
    ).fetchone()
    return _indexed_verdict(row) if row is not None else None


def verdicts_with_reason(conn: Db, chain_id: int, reason: str) -> list[IndexedVerdict]:
    """Indexed verdict events whose on-chain reason is ``reason`` (for submitted documents)."""
    rows = conn.execute(
        _verdicts(conn) + f"AND lower({_REASON[dialect(conn)]}) = ? "
        "ORDER BY e.block_number, e.log_index",
        (chain_id, reason.lower()),
    ).fetchall()
    return [_indexed_verdict(r) for r in rows]


def pending_task_verdicts(
    conn: Db, chain_id: int, limit: int = 100, after: EventPosition | None = None
) -> list[IndexedTaskVerdict]:
    """Latest task verdicts (after ``after``) with an evidence hash and no verification yet."""
    where, params = _after(after)
    rows = conn.execute(
        _TASK_QUERY + where + _UNVERIFIED + _IN_CHAIN_ORDER, (chain_id, *params, limit)
    ).fetchall()
    return [IndexedTaskVerdict(*r) for r in rows]


def unverified_task_verdicts(conn: Db, chain_id: int) -> list[IndexedTaskVerdict]:
    """Every task verdict ``pending_task_verdicts`` would find, in no order.

    Read through the index of events by kind, so it costs the task verdicts,
    not the whole history: what a rollback makes eligible again (a task whose
    reopening was rolled back has its evidence hash back) can be anywhere.
    """
    rows = conn.execute(_TASK_QUERY + _UNVERIFIED, (chain_id,)).fetchall()
    return [IndexedTaskVerdict(*r) for r in rows]


def indexed_task_verdict(
    conn: Db, chain_id: int, contract: str, task_id: str
) -> IndexedTaskVerdict | None:
    row = conn.execute(
        _TASK_QUERY + "AND e.contract = ? AND e.subject = ? LIMIT 1",
        (chain_id, contract, task_id),
    ).fetchone()
    return IndexedTaskVerdict(*row) if row is not None else None
