"""Projections (``jobs``, ``tasks``): each touched subject reduced again from its events.

Called by the index store inside its write transaction, so a batch, a
rollback and a full rebuild share one code path (which is why a rebuild gives
byte-identical tables). Stored events are re-decoded from their raw topics
and data; a batch's own events and a bounded cache of recently decoded ones
are reused instead, which is exact because ``(block_hash, log_index)`` names
one immutable log.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from itertools import groupby
from typing import Any

from keeper.domain.model import ChainRead, Event, Protocol
from keeper.domain.reads import PAYMENT_TOKEN
from keeper.domain.reducers import reduce_job, reduce_task
from keeper.store.db import Db, dialect
from keeper.store.index_rows import (
    JOB_COLS,
    LOAD_COLS,
    TASK_COLS,
    TOKEN_JOIN,
    decode_result,
    job_row,
    load_event,
    read_from_row,
    row_writes,
    task_row,
)
from keeper.store.versions import next_version, raised

__all__ = ["Projections"]


class Projections:
    """Rebuilds subjects' projection rows on the store's connection; owns the decode cache."""

    def __init__(self, conn: Db, chain_id: int, decoded_cache: int) -> None:
        self.conn = conn
        self.chain_id = chain_id
        # the session's table of touched subjects (created by IndexStore), and the join
        # that reads it first: SQLite's CROSS JOIN fixes the order, PostgreSQL plans it
        sqlite = dialect(conn) == "sqlite"
        self.touched = "temp.touched" if sqlite else "pg_temp.touched"
        self.join = "CROSS JOIN" if sqlite else "JOIN"
        self._raised = raised(dialect(conn), "?")
        # Decoded stored events by (block hash, log index). That key names one
        # immutable log, so an entry can never be stale: it is only looked up
        # for rows the database returns. Saves re-decoding a busy subject's
        # history on every batch; insertion-ordered, oldest evicted first.
        self.decoded: OrderedDict[tuple[str, int], Event] = OrderedDict()
        self.decoded_max = decoded_cache

    def raise_versions(self, every: bool = False) -> None:
        """Raise the version of each subject in the touched table (``every``: of the chain).

        In the transaction that rewrites their rows, events or reads, so that
        a reader (a standby's too) that sees a version sees what it stamps:
        the API keeps details under it (keeper.api.detailcache).
        """
        if every:
            self.conn.execute(
                f"UPDATE subject_versions SET version = {self._raised} WHERE chain_id = ?",
                (self.chain_id, self.chain_id),
            )
            return
        self.conn.execute(
            "INSERT INTO subject_versions (chain_id, contract, subject, version) "
            f"SELECT ?, contract, subject, {next_version('?')} FROM {self.touched} WHERE true "
            f"ON CONFLICT (chain_id, contract, subject) DO UPDATE SET version = {self._raised}",
            (self.chain_id, self.chain_id, self.chain_id),
        )

    def raise_contract_versions(self, contracts: Iterable[str]) -> None:
        """Raise the version of every subject of these contracts: an event their details
        all show (a pause) came or went."""
        self.conn.executemany(
            f"UPDATE subject_versions SET version = {self._raised} "
            "WHERE chain_id = ? AND contract = ?",
            [(self.chain_id, self.chain_id, c) for c in sorted(set(contracts))],
        )

    def rebuild_subjects(
        self,
        touched: Iterable[tuple[str, str]],
        fresh: Sequence[Event] = (),
        fresh_reads: Sequence[ChainRead] = (),
    ) -> None:
        """Replace the projections of the given subjects with fresh reductions.

        ``fresh`` and ``fresh_reads`` were just written by this transaction.
        When the stored events of their block range are exactly them (checked
        by count, all of them having just been inserted or found), only events
        outside that range are read back and decoded; otherwise every event of
        the touched subjects is read back. Both paths give the same reduction.
        """
        c, cid, tt, join = self.conn, self.chain_id, self.touched, self.join
        c.execute(f"DELETE FROM {tt}")
        c.executemany(f"INSERT INTO {tt} VALUES (?, ?) ON CONFLICT DO NOTHING", touched)
        self.raise_versions()
        replace = not fresh and not fresh_reads  # a rollback: some subjects may vanish
        current: dict[str, dict[tuple[Any, ...], tuple[Any, ...]]] = {"jobs": {}, "tasks": {}}
        for table, col, cols in (("jobs", "job_id", JOB_COLS), ("tasks", "task_id", TASK_COLS)):
            if replace:
                c.execute(
                    f"DELETE FROM {table} WHERE chain_id = ? AND (contract, {col}) IN "
                    f"(SELECT contract, subject FROM {tt})",
                    (cid,),
                )
                continue
            # the rows as they are, so that only what changed is written (row_writes)
            current[table] = {
                tuple(r[:3]): tuple(r)
                for r in c.execute(
                    f"SELECT {', '.join('p.' + name for name in cols)} FROM {tt} t {join} "
                    f"{table} p ON p.chain_id = ? AND p.contract = t.contract "
                    f"AND p.{col} = t.subject",
                    (cid,),
                )
            }
        known_reads = {(r.contract, r.subject, r.kind, r.block_hash): r for r in fresh_reads}
        reads: dict[tuple[str, str], list[ChainRead]] = {}
        for row in c.execute(
            "SELECT r.contract, r.subject, r.kind, r.block_number, r.block_hash, r.result_json "
            f"FROM {tt} t {join} chain_reads r ON r.chain_id = ? AND "
            "r.contract = t.contract AND r.subject = t.subject",
            (cid,),
        ):
            read = known_reads.get((row[0], row[1], row[2], row[4])) or read_from_row(row)
            reads.setdefault((read.contract, read.subject), []).append(read)

        pairs = [((e.log.block_hash, e.log.log_index), e) for e in fresh]
        known = dict(pairs)
        # the cache keeps the newest entries: a batch larger than it would only
        # evict its own first events, so only its tail is remembered
        self.remember_all([p for p in pairs[-self.decoded_max :] if p[1].subject is not None])
        numbers = [e.log.block_number for e in fresh]
        lo, hi = (min(numbers), max(numbers)) if numbers else (1, 0)
        stored = c.execute(
            "SELECT count(*) FROM events WHERE chain_id = ? AND block_number BETWEEN ? AND ?",
            (cid, lo, hi),
        ).fetchone()[0]
        if not fresh or stored != len(known):
            rows = c.execute(
                f"SELECT {LOAD_COLS} FROM {tt} t {join} events e ON "
                f"e.chain_id = ? AND e.contract = t.contract AND e.subject = t.subject "
                f"{TOKEN_JOIN}",
                (cid,),
            ).fetchall()
            rows.sort(key=lambda r: (r[0], r[1], r[5], r[9]))
            self.write(self.groups(rows, reads, known), current)
            return
        rows = c.execute(
            f"SELECT {LOAD_COLS} FROM {tt} t {join} events e ON "
            f"e.chain_id = ? AND e.contract = t.contract AND e.subject = t.subject "
            f"AND (e.block_number < ? OR e.block_number > ?) {TOKEN_JOIN}",
            (cid, lo, hi),
        ).fetchall()
        # grouped by subject below; SQLite's join order already gives it (so the sort is
        # a linear pass), PostgreSQL's plan may not
        rows.sort(key=lambda r: (r[0], r[1]))
        tokens = {
            (str(r[0]), str(r[1])): r
            for r in c.execute(
                "SELECT contract, block_hash, block_number, result_json FROM chain_reads "
                "WHERE chain_id = ? AND subject = '' AND kind = ? AND block_number BETWEEN ? AND ?",
                (cid, PAYMENT_TOKEN, lo, hi),
            )
        }
        groups: dict[tuple[str, str], tuple[list[Event], list[ChainRead]]] = {}
        for (contract, subject), events, subject_reads in self.groups(rows, reads, {}):
            groups[(contract, subject)] = (events, subject_reads)
        for e in fresh:
            if e.subject is None:
                continue
            key = (e.contract, e.subject)
            entry = groups.get(key)
            if entry is None:
                entry = groups[key] = ([], list(reads.get(key, ())))
            entry[0].append(e)
            if e.name == "BudgetSet":
                token = tokens.get((e.contract, e.log.block_hash))
                if token is not None:
                    entry[1].append(
                        ChainRead(e.contract, "", PAYMENT_TOKEN, token[2], token[1],
                                  decode_result(token[3]))
                    )  # fmt: skip
        self.write(((k, ev, rd) for k, (ev, rd) in groups.items()), current)

    def groups(
        self,
        rows: Iterable[Sequence[Any]],
        reads: Mapping[tuple[str, str], list[ChainRead]],
        known: Mapping[tuple[str, int], Event],
        *,
        use_cache: bool = True,
    ) -> Iterator[tuple[tuple[str, str], list[Event], list[ChainRead]]]:
        """Group event rows sorted by (contract, subject) into (key, events, reads), lazily."""
        cache: Mapping[tuple[str, int], Event] = self.decoded if use_cache else {}
        for (contract, subject), group in groupby(rows, key=lambda r: (r[0], r[1])):
            events: list[Event] = []
            mine = list(reads.get((contract, subject), ()))
            for row in group:
                key = (row[6], row[9])
                event = known.get(key) or cache.get(key)
                # a StrEnum equals its value
                if event is None or event.protocol != row[2] or event.contract != contract:
                    event = load_event(row)
                    if use_cache:
                        self.remember_all([(key, event)])
                events.append(event)
                if row[11] is not None:
                    mine.append(
                        ChainRead(contract, "", PAYMENT_TOKEN, row[5], row[6],
                                  decode_result(row[11]))
                    )  # fmt: skip
            yield (contract, subject), events, mine

    def forget_blocks(self, block_hashes: Set[str]) -> None:
        """Drop the decoded events of these blocks: their stored rows were rewritten."""
        for key in [k for k in self.decoded if k[0] in block_hashes]:
            del self.decoded[key]

    def remember_all(self, items: list[tuple[tuple[str, int], Event]]) -> None:
        decoded = self.decoded
        decoded.update(items)
        # OrderedDict: popping the oldest is O(1) (a plain dict rescans the
        # deleted slots at its front on every next(iter(...)): quadratic)
        for _ in range(len(decoded) - self.decoded_max):
            decoded.popitem(last=False)

    def write(
        self,
        groups: Iterable[tuple[tuple[str, str], list[Event], list[ChainRead]]],
        stored: Mapping[str, Mapping[tuple[Any, ...], tuple[Any, ...]]] | None = None,
    ) -> None:
        """Reduce each subject and write its projection row, in chunks.

        ``stored`` holds the current rows of the subjects (by table, then key):
        those are written only where they change. Without it every row is new.
        """
        stored = stored or {}
        jobs: list[tuple[Any, ...]] = []
        tasks: list[tuple[Any, ...]] = []
        for (contract, subject), events, reads in groups:
            if not events:
                continue
            if events[0].protocol is Protocol.ERC8183:
                jobs.append(job_row(self.chain_id, reduce_job(contract, subject, events, reads)))
            else:
                tasks.append(task_row(self.chain_id, reduce_task(contract, subject, events, reads)))
            if len(jobs) + len(tasks) >= 5000:
                self._flush(jobs, tasks, stored)
        self._flush(jobs, tasks, stored)

    def _flush(
        self,
        jobs: list[tuple[Any, ...]],
        tasks: list[tuple[Any, ...]],
        stored: Mapping[str, Mapping[tuple[Any, ...], tuple[Any, ...]]],
    ) -> None:
        for table, cols, rows in (("jobs", JOB_COLS, jobs), ("tasks", TASK_COLS, tasks)):
            for sql, params in row_writes(table, cols, rows, stored.get(table, {})).items():
                self.conn.executemany(sql, params)
            rows.clear()
