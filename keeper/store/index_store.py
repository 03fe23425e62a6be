"""The index store: events, block window, reads, projections and cursor, committed together.

Every public write is ONE SQLite transaction. The cursor moves in the same
transaction as the events and blocks it covers, so a crash at any instant
leaves either the whole batch or none of it; events are keyed by
``(chain_id, block_number, block_hash, log_index)`` (a block hash names its
number, so that is one log, and a backfill appends to the key) and inserted
with ``ON CONFLICT DO NOTHING``, so a replayed batch duplicates nothing.

The same statements run on SQLite and PostgreSQL (:mod:`keeper.store.db`). On
PostgreSQL a batch or rollback that meets a lost server is rolled back with
it and applied again once the connection is back (:func:`_retrying`): a
batch is idempotent, so running it twice is exact.

Projections (``jobs``, ``tasks``) are recomputed from the stored events and
reads of each touched subject, read back inside the same transaction
(:mod:`keeper.store.projections`); rows are mapped in
:mod:`keeper.store.index_rows`. Throughput figures are in bench/README.md.

The sync reads this store through its read-only ``IndexView`` protocol
(``cursor``, ``window``, ``reads_from``); only the composition root writes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeVar

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_fixed

from keeper.domain.model import BlockHeader, ChainRead, Event
from keeper.errors import DatabaseUnavailableError, DeepReorgError, StateCorruptedError
from keeper.store.db import Db, dialect, session, table_columns, write_transaction
from keeper.store.index_rows import (
    EVENT_COLS,
    LOAD_COLS,
    TOKEN_JOIN,
    decode_result,
    decoded_args_json,
    encode_args,
    event_row,
    load_event,
    read_from_row,
    upsert,
)
from keeper.store.projections import Projections
from keeper.store.queries import PAUSE_EVENTS

T = TypeVar("T")

__all__ = [
    "DEFAULT_DECODED_CACHE",
    "DEFAULT_KEEP_MARGIN",
    "INDEX_TABLES",
    "ApplyResult",
    "Batch",
    "Cursor",
    "IndexStore",
    "StampChecks",
    "decode_result",
    "encode_args",
]

# Window blocks kept below the finalized block: a node's "finalized" can lag
# a little between endpoints, and a few spare hashes make the startup
# re-check of the window cheap. Costs a few rows.
DEFAULT_KEEP_MARGIN: Final = 16
# Decoded events kept in memory: a few batches' worth of busy subjects'
# histories, so their rebuilds skip most re-decoding. Larger caches were the
# biggest item of a backfill's peak memory for little speed (bench/README.md).
DEFAULT_DECODED_CACHE: Final = 5_000
ZERO_HASH: Final = "0x" + "00" * 32
WRITER_CACHE_KIB: Final = 8_192
# Rollback records kept per chain (``rollbacks``): a verifier that has not read the
# ones before them re-checks everything once (keeper.verify.scan)
ROLLBACKS_KEPT: Final = 1_000
# A write meeting a lost PostgreSQL session is tried this many times in all (a
# terminated backend or a pooler's reset: the next session takes it at once); a
# server still down past them is the caller's loop's to wait out (keeper.store.pg).
WRITE_ATTEMPTS: Final = 3

# table -> columns excluded from dump() because they depend on when the index was built
# (the wall clock; which block a node could serve a read at), not on the chain
INDEX_TABLES: Final[dict[str, tuple[str, ...]]] = {
    "events": (),
    "blocks": (),
    "cursor": ("updated_at",),
    "chain_reads": ("source",),
    "jobs": (),
    "tasks": (),
}


@dataclass(frozen=True, slots=True)
class Cursor:
    """How far the index is complete, and which block hash that point has."""

    indexed_block: int
    indexed_hash: str
    finalized_block: int


@dataclass(frozen=True, slots=True)
class StampChecks:
    """A check of event times owed (``log_stamp_checks``): from which block, and whether
    the node's log timestamps were found wrong (the check is then due)."""

    unchecked_from: int
    found_wrong: bool


@dataclass(slots=True)
class Batch:
    """Everything one sync step commits at once.

    ``log_stamped``: its events' times are the node's log timestamps, not yet checked
    against their headers; ``stamps_wrong``: those timestamps were found wrong by now.
    Both are recorded (``log_stamp_checks``) for the check they make owed.
    """

    events: list[Event]
    blocks: list[BlockHeader]
    reads: list[ChainRead]
    indexed_block: int
    indexed_hash: str
    finalized_block: int
    log_stamped: bool = False
    stamps_wrong: bool = False


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """What a batch changed: counts for metrics and logs."""

    new_events: int
    unknown_events: int
    touched: frozenset[tuple[str, str]] = field(default_factory=frozenset)

    @property
    def touched_subjects(self) -> int:
        return len(self.touched)


_READ_UPSERT: Final = upsert(
    "chain_reads",
    ("chain_id", "contract", "subject", "kind", "block_hash", "block_number", "result_json",
     "source"),
    5,
)  # fmt: skip


def _read_rows(chain_id: int, reads: Sequence[ChainRead]) -> list[tuple[Any, ...]]:
    """``_READ_UPSERT``'s parameters for each read."""
    return [
        (chain_id, r.contract, r.subject, r.kind, r.block_hash, r.block_number,
         encode_args(r.result), r.source)
        for r in reads
    ]  # fmt: skip


class Fence(Protocol):
    """Run first inside every write transaction; raises to refuse it (keeper.store.leases)."""

    def check(self) -> None: ...


class IndexStore:
    """Writes of the index component for one chain; callers own the connection.

    ``fence``, when set, is checked inside each write's own transaction before
    anything is written: the daemon sets it to its indexer lease, so a writer
    that lost the lease (a stalled old leader) commits nothing.
    """

    def __init__(
        self,
        conn: Db,
        chain_id: int,
        *,
        keep_margin: int = DEFAULT_KEEP_MARGIN,
        decoded_cache: int = DEFAULT_DECODED_CACHE,
    ) -> None:
        self.conn = conn
        self.chain_id = chain_id
        self.keep_margin = keep_margin
        self.fence: Fence | None = None
        self.projections = Projections(conn, chain_id, decoded_cache)
        # The events' secondary indexes and the jobs' are inserted into at many
        # places: with SQLite's default 2 MiB page cache, inserts into a large
        # index miss on most pages. A writer cache keeps the hot index pages in
        # memory; with 16 KiB pages (keeper.store.db) a smaller one than the 32 MiB
        # 4 KiB pages wanted serves as well, and its memory is what lets the fetch
        # process run beside this one within the memory target (bench/README.md
        # has both measured).
        if dialect(conn) == "sqlite":
            conn.execute(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
            session(
                conn,
                "CREATE TEMP TABLE IF NOT EXISTS touched (contract TEXT NOT NULL, "
                "subject TEXT NOT NULL, PRIMARY KEY (contract, subject)) WITHOUT ROWID",
            )
        else:
            session(
                conn,
                'CREATE TEMP TABLE IF NOT EXISTS touched (contract TEXT COLLATE "C" NOT NULL, '
                'subject TEXT COLLATE "C" NOT NULL, PRIMARY KEY (contract, subject))',
            )

    # --- reads ------------------------------------------------------------------------

    def cursor(self) -> Cursor | None:
        row = self.conn.execute(
            "SELECT indexed_block, indexed_hash, finalized_block FROM cursor WHERE chain_id = ?",
            (self.chain_id,),
        ).fetchone()
        return None if row is None else Cursor(int(row[0]), str(row[1]), int(row[2]))

    def window(self) -> list[BlockHeader]:
        rows = self.conn.execute(
            "SELECT number, hash, parent_hash, timestamp FROM blocks WHERE chain_id = ? "
            "ORDER BY number",
            (self.chain_id,),
        ).fetchall()
        return [BlockHeader(int(r[0]), str(r[1]), str(r[2]), int(r[3])) for r in rows]

    def reads_from(self, block_number: int) -> list[ChainRead]:
        """Every read at or above a block, with what it recorded.

        The indexer asks for the reads at its cursor block after a restart: they
        may have been made while that block was the node's head, which some
        nodes answer from state already holding the next block's changes. A
        read made again records the same fields (``keeper.domain.reads``).
        """
        rows = self.conn.execute(
            "SELECT contract, subject, kind, block_number, block_hash, result_json "
            "FROM chain_reads WHERE chain_id = ? AND block_number >= ? ORDER BY block_number",
            (self.chain_id, block_number),
        ).fetchall()
        return [read_from_row(r) for r in rows]

    def event_blocks(self, first: int, last: int) -> list[tuple[int, str, int]]:
        """``(number, hash, timestamp)`` of each stored block with events in the range (a
        block stored with two times, twice)."""
        rows = self.conn.execute(
            "SELECT DISTINCT block_number, block_hash, block_timestamp FROM events "
            "WHERE chain_id = ? AND block_number BETWEEN ? AND ? ORDER BY block_number",
            (self.chain_id, first, last),
        ).fetchall()
        return [(int(r[0]), str(r[1]), int(r[2])) for r in rows]

    def stamp_checks(self) -> StampChecks | None:
        """The check of event times owed, if any (see ``Batch``)."""
        row = self.conn.execute(
            "SELECT unchecked_from, found_wrong FROM log_stamp_checks WHERE chain_id = ?",
            (self.chain_id,),
        ).fetchone()
        return None if row is None else StampChecks(int(row[0]), bool(row[1]))

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every index table of this chain, fully sorted, volatile columns left out."""
        out: dict[str, list[tuple[Any, ...]]] = {}
        nulls = " NULLS FIRST" if dialect(self.conn) == "postgresql" else ""  # SQLite's order
        for table, volatile in INDEX_TABLES.items():
            cols = [c for c in table_columns(self.conn, table) if c not in volatile]
            order = ", ".join(f"{i + 1}{nulls}" for i in range(len(cols)))
            rows = self.conn.execute(
                f"SELECT {', '.join(cols)} FROM {table} WHERE chain_id = ? ORDER BY {order}",
                (self.chain_id,),
            ).fetchall()
            out[table] = [tuple(r) for r in rows]
        return out

    # --- writes -----------------------------------------------------------------------

    def apply_batch(self, batch: Batch, *, keep_from: int | None = None) -> ApplyResult:
        """Commit a batch atomically and idempotently; see the module docstring.

        Window blocks below ``keep_from`` are pruned; by default below
        ``finalized_block - keep_margin``.
        """
        return self._retrying(lambda: self._apply(batch, keep_from))

    def rollback_to(self, fork_point: int) -> set[tuple[str, str]]:
        """Forget everything above ``fork_point`` and rebuild what it touched; one transaction.

        The fork point must be a window block (or the cursor block, or -1 for
        "before genesis"); anything else is a reorg deeper than the window and
        raises DeepReorgError without changing anything.
        """
        return self._retrying(lambda: self._rollback(fork_point))

    def retime(
        self, blocks: Sequence[tuple[int, str, int]], *, settled: bool = False
    ) -> set[tuple[str, str]]:
        """Give the stored events of each ``(number, hash, timestamp)`` block that time, and
        rebuild their subjects' projections; the subjects touched. ``settled``: the owed
        check of event times (``stamp_checks``) is done with these."""
        return self._retrying(lambda: self._retime(blocks, settled))

    def _retime(
        self, blocks: Sequence[tuple[int, str, int]], settled: bool
    ) -> set[tuple[str, str]]:
        c, cid = self.conn, self.chain_id
        if settled:
            c.execute("DELETE FROM log_stamp_checks WHERE chain_id = ?", (cid,))
        touched: set[tuple[str, str]] = set()
        for number, block_hash, _ in blocks:  # a repair's few blocks, once in a process
            touched.update(
                (str(r[0]), str(r[1]))
                for r in c.execute(
                    "SELECT DISTINCT contract, subject FROM events WHERE chain_id = ? "
                    "AND block_number = ? AND block_hash = ? AND subject IS NOT NULL",
                    (cid, number, block_hash),
                )
            )
        c.executemany(
            "UPDATE events SET block_timestamp = ? "
            "WHERE chain_id = ? AND block_number = ? AND block_hash = ?",
            [(timestamp, cid, number, block_hash) for number, block_hash, timestamp in blocks],
        )
        self.projections.forget_blocks({block_hash for _, block_hash, _ in blocks})
        self.projections.rebuild_subjects(touched)
        return touched

    def record_observations(self, reads: Sequence[ChainRead]) -> set[tuple[str, str]]:
        """Store reads that no event called for and rebuild their subjects; the subjects.

        Only a read at a block this index holds (a window block, or the cursor's, by
        hash) is kept: a rollback past that block then drops it with the block's events,
        which a read at a block the index never saw would outlive (``keeper.domain.reads``,
        the observation kinds).
        """
        return self._retrying(lambda: self._record_observations(reads))

    def _record_observations(self, reads: Sequence[ChainRead]) -> set[tuple[str, str]]:
        c, cid = self.conn, self.chain_id
        held = {(b.number, b.hash) for b in self.window()}
        cursor = self.cursor()
        if cursor is not None:
            held.add((cursor.indexed_block, cursor.indexed_hash))
        kept = [r for r in reads if r.subject and (r.block_number, r.block_hash) in held]
        if not kept:
            return set()
        c.executemany(_READ_UPSERT, _read_rows(cid, kept))
        touched = {(r.contract, r.subject) for r in kept}
        self.projections.rebuild_subjects(touched, (), kept)
        return touched

    def rebuild_all(self) -> None:
        """Recompute every projection of this chain from stored events and reads.

        Logs stored as unknown are decoded again first: a release that learns a
        new event shape (a dialect) turns them into events, so ``keeper db
        rebuild`` after an upgrade catches up without a resync.

        One transaction, however long. On PostgreSQL its fence runs just before
        COMMIT: the fence locks the lease row until then, so at the start it would
        hold off the lease's renewals for the whole rebuild, and a daemon would take
        the lapsed lease (and end the session holding it). On SQLite it runs first,
        as for a batch: the write lock taken then holds every other writer off.
        """
        self._retrying(self._rebuild_all, fence_at_commit=dialect(self.conn) == "postgresql")

    def _rebuild_all(self) -> None:
        c, cid = self.conn, self.chain_id
        self._redecode_unknown()
        self.projections.raise_versions(every=True)
        c.execute("DELETE FROM jobs WHERE chain_id = ?", (cid,))
        c.execute("DELETE FROM tasks WHERE chain_id = ?", (cid,))
        rows = c.execute(
            f"SELECT {LOAD_COLS} FROM events e {TOKEN_JOIN} WHERE e.chain_id = ? "
            "AND e.subject IS NOT NULL ORDER BY e.contract, e.subject, e.block_number, "
            "e.log_index",
            (cid,),
        )
        reads: dict[tuple[str, str], list[ChainRead]] = {}
        for row in c.execute(
            "SELECT contract, subject, kind, block_number, block_hash, result_json "
            "FROM chain_reads WHERE chain_id = ? AND subject != ''",
            (cid,),
        ):
            read = read_from_row(row)
            reads.setdefault((read.contract, read.subject), []).append(read)
        # no cache: a full rebuild decodes every stored log afresh
        self.projections.write(self.projections.groups(rows, reads, {}, use_cache=False))

    # --- internals --------------------------------------------------------------------

    def _redecode_unknown(self) -> int:
        """Give stored unknown logs that this release can decode their name and subject."""
        c, cid = self.conn, self.chain_id
        rows = c.execute(
            f"SELECT {LOAD_COLS} FROM events e {TOKEN_JOIN} WHERE e.chain_id = ? "
            "AND e.name IS NULL",
            (cid,),
        ).fetchall()
        updates = []
        for row in rows:
            event = load_event(row)
            if event.name is not None:
                log = event.log
                updates.append(
                    (event.name, event.variant, event.subject, decoded_args_json(event.args),
                     cid, log.block_number, log.block_hash, log.log_index)
                )  # fmt: skip
        c.executemany(
            "UPDATE events SET name = ?, variant = ?, subject = ?, args_json = ? "
            "WHERE chain_id = ? AND block_number = ? AND block_hash = ? AND log_index = ?",
            updates,
        )
        return len(updates)

    def _retrying(self, write: Callable[[], T], *, fence_at_commit: bool = False) -> T:
        """One write transaction, run again if the PostgreSQL server was lost under it."""
        for attempt in Retrying(
            retry=retry_if_exception_type(DatabaseUnavailableError),
            stop=stop_after_attempt(WRITE_ATTEMPTS),
            wait=wait_fixed(0.1),
            reraise=True,
        ):
            with attempt, self._transaction(fence_at_commit=fence_at_commit):
                return write()
        raise AssertionError("unreachable")  # pragma: no cover

    @contextmanager
    def _transaction(self, *, fence_at_commit: bool = False) -> Iterator[None]:
        """A write transaction, fenced: refused inside one already open, whose writes this
        store's commit would take for its own."""
        if self.conn.in_transaction:
            raise StateCorruptedError("IndexStore write inside a foreign open transaction")
        with write_transaction(self.conn):
            if self.fence is not None and not fence_at_commit:
                self.fence.check()
            yield
            if self.fence is not None and fence_at_commit:
                self.fence.check()

    def _apply(self, batch: Batch, keep_from: int | None) -> ApplyResult:
        c, cid = self.conn, self.chain_id
        current = self.cursor()
        if current is not None and batch.indexed_block < current.indexed_block:
            # going back is rollback_to's job: a batch doing it would leave
            # events above the cursor that the next sync step never revisits
            raise StateCorruptedError(
                f"batch would move the cursor back from {current.indexed_block} to "
                f"{batch.indexed_block}; roll back first"
            )
        known: list[tuple[Any, ...]] = []
        unknown: list[tuple[Any, ...]] = []
        for e in batch.events:
            (known if e.name is not None else unknown).append(event_row(cid, e))
        insert = f"INSERT INTO events ({'chain_id, ' + EVENT_COLS}) VALUES "
        insert += f"({','.join('?' * 15)}) ON CONFLICT DO NOTHING"
        new_known = c.executemany(insert, known).rowcount if known else 0
        new_unknown = c.executemany(insert, unknown).rowcount if unknown else 0

        c.executemany(
            "INSERT INTO blocks (chain_id, number, hash, parent_hash, timestamp) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (chain_id, number) DO UPDATE SET "
            "hash = excluded.hash, parent_hash = excluded.parent_hash, "
            "timestamp = excluded.timestamp",
            [(cid, b.number, b.hash, b.parent_hash, b.timestamp) for b in batch.blocks],
        )
        c.executemany(_READ_UPSERT, _read_rows(cid, batch.reads))

        touched = {(e.contract, e.subject) for e in batch.events if e.subject is not None}
        touched.update((r.contract, r.subject) for r in batch.reads if r.subject)
        late = [r for r in batch.reads if not r.subject]
        # the blocks of this batch's events, only needed for contract-level reads
        in_batch = {(e.contract, e.log.block_hash) for e in batch.events} if late else set()
        for r in late:
            if (r.contract, r.block_hash) not in in_batch:
                # a contract-level read arriving late: touch the subjects at its block
                in_batch.add((r.contract, r.block_hash))
                touched.update(
                    (str(row[0]), str(row[1]))
                    for row in c.execute(
                        "SELECT contract, subject FROM events WHERE chain_id = ? AND "
                        "block_number = ? AND block_hash = ? AND contract = ? "
                        "AND subject IS NOT NULL",
                        (cid, r.block_number, r.block_hash, r.contract),
                    )
                )
        self.projections.rebuild_subjects(touched, batch.events, batch.reads)
        self.projections.raise_contract_versions(
            e.contract for e in batch.events if e.subject is None and e.name in PAUSE_EVENTS
        )
        self._set_cursor(batch.indexed_block, batch.indexed_hash, batch.finalized_block)
        self._owe_stamp_checks(batch)
        c.execute(
            "DELETE FROM blocks WHERE chain_id = ? AND number < ?",
            (cid, batch.finalized_block - self.keep_margin if keep_from is None else keep_from),
        )
        return ApplyResult(new_known + new_unknown, new_unknown, frozenset(touched))

    def _owe_stamp_checks(self, batch: Batch) -> None:
        """Record the check of event times a batch makes owed (see ``Batch``)."""
        if batch.log_stamped and batch.events:
            self.conn.execute(
                "INSERT INTO log_stamp_checks (chain_id, unchecked_from, found_wrong) "
                "VALUES (?, ?, ?) ON CONFLICT (chain_id) DO UPDATE SET unchecked_from = "
                "CASE WHEN excluded.unchecked_from < log_stamp_checks.unchecked_from "
                "THEN excluded.unchecked_from ELSE log_stamp_checks.unchecked_from END, "
                "found_wrong = CASE WHEN excluded.found_wrong = 1 THEN 1 "
                "ELSE log_stamp_checks.found_wrong END",
                (self.chain_id, batch.events[0].log.block_number, int(batch.stamps_wrong)),
            )
        elif batch.stamps_wrong:
            self.conn.execute(
                "UPDATE log_stamp_checks SET found_wrong = 1 "
                "WHERE chain_id = ? AND found_wrong = 0",
                (self.chain_id,),
            )

    def _rollback(self, fork_point: int) -> set[tuple[str, str]]:
        c, cid = self.conn, self.chain_id
        current = self.cursor()
        row = c.execute(
            "SELECT hash FROM blocks WHERE chain_id = ? AND number = ?", (cid, fork_point)
        ).fetchone()
        if row is not None:
            fork_hash = str(row[0])
        elif fork_point < 0:  # before genesis: forget everything (a chain replaced from 0)
            fork_hash = ZERO_HASH
        elif current is not None and current.indexed_block == fork_point:
            fork_hash = current.indexed_hash
        else:
            depth = (current.indexed_block if current else fork_point) - fork_point
            raise DeepReorgError(
                f"fork point {fork_point} is not in the stored block window",
                depth_at_least=max(depth, 0),
            )
        touched = {
            (str(r[0]), str(r[1]))
            for r in c.execute(
                "SELECT DISTINCT contract, subject FROM events WHERE chain_id = ? "
                "AND block_number > ? AND subject IS NOT NULL "
                "UNION SELECT DISTINCT contract, subject FROM chain_reads WHERE chain_id = ? "
                "AND block_number > ? AND subject != ''",
                (cid, fork_point, cid, fork_point),
            )
        }
        pause_changed = [
            str(r[0])
            for r in c.execute(
                "SELECT DISTINCT contract FROM events WHERE chain_id = ? AND block_number > ? "
                f"AND subject IS NULL AND name IN {PAUSE_EVENTS!r}",
                (cid, fork_point),
            )
        ]
        for table, col in (("events", "block_number"), ("chain_reads", "block_number"),
                           ("blocks", "number")):  # fmt: skip
            c.execute(f"DELETE FROM {table} WHERE chain_id = ? AND {col} > ?", (cid, fork_point))
        self.projections.rebuild_subjects(touched)
        self.projections.raise_contract_versions(pause_changed)
        self._record_rollback(fork_point)
        finalized = min(current.finalized_block, fork_point) if current else fork_point
        self._set_cursor(fork_point, fork_hash, finalized)
        return touched

    def _record_rollback(self, fork_point: int) -> None:
        c, cid = self.conn, self.chain_id
        c.execute(
            "INSERT INTO rollbacks (chain_id, seq, fork_point, rolled_back_at) "
            "SELECT ?, coalesce(max(seq), 0) + 1, ?, ? FROM rollbacks WHERE chain_id = ?",
            (cid, fork_point, time.time(), cid),
        )
        c.execute(
            "DELETE FROM rollbacks WHERE chain_id = ? AND seq <= "
            "(SELECT max(seq) FROM rollbacks WHERE chain_id = ?) - ?",
            (cid, cid, ROLLBACKS_KEPT),
        )

    def _set_cursor(self, indexed_block: int, indexed_hash: str, finalized_block: int) -> None:
        self.conn.execute(
            "INSERT INTO cursor (chain_id, indexed_block, indexed_hash, finalized_block, "
            "updated_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (chain_id) DO UPDATE SET "
            "indexed_block = excluded.indexed_block, indexed_hash = excluded.indexed_hash, "
            "finalized_block = excluded.finalized_block, updated_at = excluded.updated_at",
            (self.chain_id, indexed_block, indexed_hash, finalized_block, time.time()),
        )
