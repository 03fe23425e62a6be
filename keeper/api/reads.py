"""The API's read model: store reads over per-thread read-only connections, JSON-ready.

Each thread that reads holds its own read-only connection (WAL lets it read
while the indexer writes); which thread runs which read is the handlers'
choice (see :mod:`keeper.api.app`). The SQL is the store's: jobs and tasks
as served come from :mod:`keeper.store.subjects` (their one row mapping, list
pages), aggregates from :mod:`keeper.store.queries`, verifications from
:mod:`keeper.store.verifications`. Amounts stay the exact decimal strings
stored in the database; only the escrow sums, computed as ints, are written
out here as decimal strings.

Tables of components that have not been migrated yet simply read as empty,
so the API comes up on a fresh database.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from keeper.api.detailcache import DetailCache, Kept, digest, entity_tag
from keeper.api.pagecache import PageCache
from keeper.api.params import ListQuery
from keeper.store import queries, subjects, versions
from keeper.store import verifications as vstore
from keeper.store.commitwatch import CommitWatch
from keeper.store.db import Db, connect, data_version, dialect, is_missing_table, is_url
from keeper.store.dialects import load_dialects
from keeper.store.subjects import Kind, Page

__all__ = ["ApiReads"]

T = TypeVar("T")
_EVERY_PART = subjects.DetailParts()


class ApiReads:
    """Read queries for one chain's database (``chain_id`` None: every chain in the file).

    ``names`` maps contract addresses to their configured names, which list
    items carry as ``contract_name`` (None for any other contract).
    """

    def __init__(
        self,
        path: str | Path,
        chain_id: int | None = None,
        names: Mapping[str, str] | None = None,
        *,
        open_read: Callable[[], Db] | None = None,
    ) -> None:
        self.path = path
        # each thread's read connection: read-only on ``path``, or a read replica's
        self._open_read = open_read or (lambda: connect(self.path, readonly=True))
        self.chain_id = chain_id
        self._list_wire: dict[Kind, tuple[str, list[str]]] = {
            kind: subjects.wire_object(
                kind, names or {}, "postgresql" if is_url(path) else "sqlite"
            )
            for kind in subjects.SUBJECTS
        }
        self._local = threading.local()
        self._all: list[Db] = []
        self._watches: list[CommitWatch] = []
        self._lock = threading.Lock()

    # --- connection -------------------------------------------------------------------

    def _conn(self) -> Db:
        conn: Db | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._open_read()
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def _page_cache(self) -> PageCache:
        cache: PageCache | None = getattr(self._local, "pages", None)
        if cache is None:
            cache = self._local.pages = PageCache()
        return cache

    def _commit_version(self, conn: Db) -> Hashable:
        """What changes with every commit: the WAL-index header when it can tell, without
        a statement (SQLite), else the connection's data version."""
        if dialect(conn) == "sqlite":
            header = self._commit_watch().header()
            if header is not None:
                return header
        return data_version(conn)

    def _commit_watch(self) -> CommitWatch:
        watch: CommitWatch | None = getattr(self._local, "watch", None)
        if watch is None:
            # a read first: this thread's connection then holds the -shm open (and its
            # lock) until it closes, so the file the watch maps is neither truncated by
            # a first opener nor replaced (keeper.store.commitwatch)
            self._conn().execute("SELECT count(*) FROM sqlite_master").fetchone()
            watch = self._local.watch = CommitWatch(self.path)
            with self._lock:
                self._watches.append(watch)
        return watch

    def _detail_cache(self) -> DetailCache:
        cache: DetailCache | None = getattr(self._local, "details", None)
        if cache is None:
            cache = self._local.details = DetailCache()
        return cache

    def close(self) -> None:
        with self._lock:
            for watch in self._watches:  # before the connections that keep their files
                watch.close()
            self._watches.clear()
            for conn in self._all:
                conn.close()
            self._all.clear()

    def _snapshot(self, read: Callable[[], T]) -> T:
        """Run several queries against one consistent snapshot of the database."""
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            return read()
        finally:
            conn.execute("COMMIT")

    def snapshot(self, read: Callable[[Db], T], empty: T) -> T:
        """``read(conn)`` in one read transaction; ``empty`` on a database not migrated yet."""
        return self._snapshot(lambda: self._tolerant(lambda: read(self._conn()), empty))

    def _tolerant(self, read: Callable[[], T], empty: T) -> T:
        """``read()``, or ``empty`` when its table is not there yet (a fresh database)."""
        try:
            return read()
        except Exception as exc:
            if is_missing_table(exc):
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
        version = self._commit_version(conn)
        key = (query.kind, query.contract, query.statuses, tuple(sorted(query.parties.items())),
               query.limit, query.after)  # fmt: skip
        kept = cache.get(version, key)
        if kept is not None:
            return kept
        page = self._tolerant(
            lambda: subjects.list_page(
                conn, query.kind, self._list_wire[query.kind], contract=query.contract,
                statuses=query.statuses, parties=query.parties, limit=query.limit,
                after=query.after, chain_id=self.chain_id,
            ),
            Page("", 0, None),
        )  # fmt: skip
        cache.put(version, key, page)
        return page

    # --- one subject ------------------------------------------------------------------

    def detail(
        self, kind: Kind, contract: str, subject_id: str, contract_name: str | None = None
    ) -> str | None:
        """A job's or task's detail as JSON text; None if not indexed."""
        found = self.tagged_detail(kind, contract, subject_id, contract_name)
        return None if found is None else found[0]

    def tagged_detail(
        self, kind: Kind, contract: str, subject_id: str, contract_name: str | None = None
    ) -> tuple[str, str] | None:
        """(JSON text, entity tag) of a job's or task's detail; None if not indexed.

        With a chain, what the subject's version stamps is kept under it
        (:mod:`keeper.api.detailcache`): on SQLite the whole detail, served
        again until the subject's version rises (:meth:`_catch_up`); on
        PostgreSQL the head, and a later lookup reads the version and the tail.
        The statement reads the keeper's and the verifier's tables too; on a
        database where one of them (or the versions) is not migrated yet it is
        rebuilt without it.
        """
        conn = self._conn()
        try:
            return self._tagged(conn, kind, contract, subject_id, contract_name, _EVERY_PART)
        except Exception as exc:
            if not is_missing_table(exc):
                raise
        parts = subjects.present_parts(conn)
        return self._tolerant(
            lambda: self._tagged(conn, kind, contract, subject_id, contract_name, parts), None
        )

    def _tagged(
        self,
        conn: Db,
        kind: Kind,
        contract: str,
        subject_id: str,
        contract_name: str | None,
        parts: subjects.DetailParts,
    ) -> tuple[str, str] | None:
        chain_id = self.chain_id
        if chain_id is None or not parts.versions:
            text = subjects.detail(
                conn, kind, contract, subject_id, chain_id=chain_id,
                contract_name=contract_name, parts=parts,
            )  # fmt: skip
            return None if text is None else (text, entity_tag(digest(text), ""))
        cache = self._detail_cache()
        key = (kind, contract, subject_id, contract_name)
        # on SQLite the version stamps the whole detail (the keeper's and the verifier's
        # writes raise it too) and versions rise in commit order; elsewhere only the head
        whole = dialect(conn) == "sqlite"
        if whole:
            self._catch_up(conn, cache, chain_id)
        kept = cache.get(key)
        if kept is not None:
            if whole:
                return kept.head, entity_tag(kept.digest, "")
            now = subjects.detail_halves(
                conn, kind, contract, subject_id, chain_id=chain_id,
                contract_name=contract_name, parts=parts, tail_only=True,
            )  # fmt: skip
            if now is not None and now.version == kept.version:
                return kept.head + now.tail, entity_tag(kept.digest, now.tail)
            cache.drop(key)
        found = subjects.detail_halves(
            conn, kind, contract, subject_id, chain_id=chain_id,
            contract_name=contract_name, parts=parts,
        )  # fmt: skip
        if found is None or found.head is None:
            return None
        head, tail = (found.head + found.tail, "") if whole else (found.head, found.tail)
        head_digest = digest(head)
        if found.version is not None:
            # as the versions name it (the statements compare lowercased: subjects._params)
            subject = (contract.lower(), subject_id.lower())
            cache.put(key, subject, Kept(found.version, head, head_digest))
        return head + tail, entity_tag(head_digest, tail)

    def _catch_up(self, conn: Db, cache: DetailCache, chain_id: int) -> None:
        """Forget the kept details of subjects whose version rose since the last look.

        Nothing committed since (the WAL-index header is the one seen last:
        :mod:`keeper.store.commitwatch`): nothing to do, no statement. Else the
        versions above the highest seen name what changed (SQLite commits in
        version order: :mod:`keeper.store.versions`). The header is read before
        the versions, so a commit between the two is asked about again next time.
        """
        header = self._commit_watch().header()
        if header is not None and header == cache.header:
            return
        if cache.seen is None:
            cache.clear()
            cache.seen = versions.top_version(conn, chain_id)
        else:
            changed, cache.seen = versions.changed_since(conn, chain_id, cache.seen)
            cache.drop_subjects(changed)
        cache.header = header

    def job(self, contract: str, job_id: str) -> dict[str, Any] | None:
        return self._decoded(self.detail("jobs", contract, job_id))

    def task(self, contract: str, task_id: str) -> dict[str, Any] | None:
        return self._decoded(self.detail("tasks", contract, task_id))

    @staticmethod
    def _decoded(text: str | None) -> dict[str, Any] | None:
        return None if text is None else dict(json.loads(text))

    # --- verification -----------------------------------------------------------------

    def verification(self, contract: str, job_id: str) -> dict[str, Any] | None:
        """The latest verification of a job's verdict: status, failures, report digest."""
        chain_id = self.chain_id
        if chain_id is None:
            return None  # verifications are per chain; without one there is nothing to pick
        return self._tolerant(
            lambda: subjects.verification_of(self._conn(), chain_id, contract, job_id), None
        )

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
        chain_id = self.chain_id
        cursor = None
        indexed_timestamp = None
        if chain_id is not None:
            summary = self._tolerant(lambda: queries.status_summary(conn, chain_id), None)
            if summary is not None and summary["cursor"] is not None:
                cursor = {"chain_id": chain_id, **summary["cursor"]}
                indexed_timestamp = queries.block_timestamp(conn, chain_id, cursor["indexed_block"])
        by_table: dict[str, dict[str, dict[str, int]]] = self._tolerant(
            lambda: queries.counts_by_status(conn, chain_id=chain_id),
            {"jobs": {}, "tasks": {}},
        )
        counts: dict[str, dict[str, dict[str, int]]] = {}
        for table, per_contract in by_table.items():
            for contract, statuses in per_contract.items():
                counts.setdefault(contract, {})[table] = dict(statuses)
        no_intents: tuple[dict[str, int], dict[str, int]] = ({}, {})
        backlog, outcomes = self._tolerant(
            lambda: queries.intent_counts(conn, chain_id=chain_id), no_intents
        )
        dialects = [] if chain_id is None else load_dialects(conn, chain_id)
        paused: dict[str, int] = {}
        for d in dialects:
            contract = str(d["contract"])
            state = queries.pause_state(conn, contract, chain_id=chain_id)
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
        return self._tolerant(
            lambda: queries.recent_verdicts(self._conn(), chain_id=self.chain_id, limit=limit), []
        )

    def locked(self) -> list[dict[str, Any]]:
        """Escrow held per (contract, token, kind), exact, with Open jobs' unfunded budgets.

        The sums are ints (summed in Python, exact); the wire has them as decimal strings.
        """
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
