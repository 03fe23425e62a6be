"""The index store: events, block window, reads, projections and cursor, committed together.

Every public write is ONE SQLite transaction. The cursor moves in the same
transaction as the events and blocks it covers, so a crash at any instant
leaves either the whole batch or none of it; events are keyed by
``(chain_id, block_hash, log_index)`` and inserted with ``OR IGNORE``, so a
replayed batch duplicates nothing.

Projections (``jobs``, ``tasks``) are recomputed from the stored events and
reads of each touched subject, read back inside the same transaction: the
same code path serves a batch, a rollback and a full rebuild, which is why a
rebuild gives byte-identical tables. Stored events are re-decoded from their
raw topics and data, so a decoder fix applies on the next rebuild; a batch's
own events and a bounded cache of recently decoded ones are reused instead,
which is exact because ``(block_hash, log_index)`` names one immutable log.

Throughput (synthetic logs, 2 shared cores): decoding ~150k logs/s; one
50k-event batch ~20-26k events/s of CPU including decode. The biggest single
cost left is SQLite itself (the events insert alone is ~0.5 s per 50k rows).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any, Final

from keeper.domain.events import decode_log
from keeper.domain.model import (
    ArgValue,
    BlockHeader,
    ChainRead,
    Event,
    JobState,
    Log,
    Protocol,
    TaskState,
)
from keeper.domain.reads import PAYMENT_TOKEN
from keeper.domain.reducers import reduce_job, reduce_task
from keeper.errors import DeepReorgError, StateCorruptedError

__all__ = [
    "DEFAULT_DECODED_CACHE",
    "DEFAULT_KEEP_MARGIN",
    "INDEX_TABLES",
    "ApplyResult",
    "Batch",
    "Cursor",
    "IndexStore",
    "decode_result",
    "encode_args",
]

# Window blocks kept below the finalized block: a node's "finalized" can lag
# a little between endpoints, and a few spare hashes make the startup
# re-check of the window cheap. Costs a few rows.
DEFAULT_KEEP_MARGIN: Final = 16
INT64_MAX: Final = 2**63 - 1
# Decoded events kept in memory (about 1.6 KB each): a few batches' worth of
# busy subjects' histories, so their rebuilds skip most re-decoding. 5,000 keeps
# it near 8 MB; at 50,000 it was the largest single item of the daemon's
# backfill peak RSS (about 79 MB) for little speed on this workload.
DEFAULT_DECODED_CACHE: Final = 5_000
ZERO_HASH: Final = "0x" + "00" * 32
WRITER_CACHE_KIB: Final = 16_384

# table -> columns excluded from dump() because they are wall-clock volatile
INDEX_TABLES: Final[dict[str, tuple[str, ...]]] = {
    "events": (),
    "blocks": (),
    "cursor": ("updated_at",),
    "chain_reads": (),
    "jobs": (),
    "tasks": (),
}

_EVENT_COLS: Final = (
    "block_hash, log_index, block_number, block_timestamp, tx_hash, tx_index, "
    "contract, protocol, name, variant, subject, args_json, topics_json, data_hex"
)
_LOAD_COLS: Final = (
    "e.contract, e.subject, e.protocol, e.topics_json, e.data_hex, e.block_number, "
    "e.block_hash, e.tx_hash, e.tx_index, e.log_index, e.block_timestamp, tr.result_json"
)
# The paymentToken read pinned at an event's block comes along with the event
# row (a primary-key lookup), so loading a subject never scans a contract's
# whole read history.
_TOKEN_JOIN: Final = (
    "LEFT JOIN chain_reads tr ON tr.chain_id = e.chain_id AND tr.contract = e.contract "
    "AND tr.subject = '' AND tr.kind = 'paymentToken' AND tr.block_hash = e.block_hash "
    "AND e.name = 'BudgetSet'"
)


@dataclass(frozen=True, slots=True)
class Cursor:
    """How far the index is complete, and which block hash that point has."""

    indexed_block: int
    indexed_hash: str
    finalized_block: int


@dataclass(slots=True)
class Batch:
    """Everything one sync step commits at once."""

    events: list[Event]
    blocks: list[BlockHeader]
    reads: list[ChainRead]
    indexed_block: int
    indexed_hash: str
    finalized_block: int


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """What a batch changed: counts for metrics and logs."""

    new_events: int
    unknown_events: int
    touched: frozenset[tuple[str, str]] = field(default_factory=frozenset)

    @property
    def touched_subjects(self) -> int:
        return len(self.touched)


# --- value codecs -------------------------------------------------------------------


def _jsonable(value: object) -> Any:
    """ints as decimal strings (uint256 must survive any JSON reader), tuples as lists.

    Read results come from the sync layer's ABI decoding; anything outside
    ArgValue (None, bytes) is stored as its string form rather than failing
    the whole batch.
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return str(value)


def encode_args(args: Any) -> str:
    """Compact JSON of an args/result mapping, keys in their given order."""
    return json.dumps({k: _jsonable(v) for k, v in args.items()}, separators=(",", ":"))


def _decoded_args_json(args: Mapping[str, ArgValue]) -> str:
    """encode_args for decode_log output, without json.dumps (hot path, ~4x faster).

    Safe only because decode_log emits identifier keys and hex/int/bool values,
    none of which needs escaping; it gives the same bytes as encode_args.
    """
    return (
        "{"
        + ",".join(
            [
                f'"{k}":{"true" if v else "false"}' if v is True or v is False else f'"{k}":"{v}"'
                for k, v in args.items()
            ]
        )
        + "}"
    )


def _from_json(value: Any) -> ArgValue:
    if isinstance(value, list):
        return tuple(_from_json(v) for v in value)
    if isinstance(value, bool | int | str):
        return value
    return "" if value is None else str(value)


def decode_result(result_json: str) -> dict[str, ArgValue]:
    """A stored read result; ints stay decimal strings (reducers accept both)."""
    return {k: _from_json(v) for k, v in json.loads(result_json).items()}


def _sat(value: int | None) -> int | None:
    """Saturate a uint256 time into SQLite's int64: that far out means never."""
    return None if value is None else min(value, INT64_MAX)


def _job_row(chain_id: int, s: JobState) -> tuple[Any, ...]:
    return (
        chain_id, s.contract, s.job_id, s.client, s.provider, s.evaluator, s.hook, s.token,
        str(s.budget), str(s.funded_amount), _sat(s.expired_at), _sat(s.submitted_at),
        s.status.label, int(s.status), s.deliverable, s.reason, s.description, int(s.legacy),
        s.created_block, s.updated_block, s.verdict_event, str(s.refunded_amount),
        str(s.paid_amount), str(s.settled_amount), s.payout_receiver,
        None if s.pending_claim_amount is None else str(s.pending_claim_amount), s.dialect,
    )  # fmt: skip


def _task_row(chain_id: int, s: TaskState) -> tuple[Any, ...]:
    return (
        chain_id, s.contract, s.task_id, s.requester, s.worker, str(s.reward), s.mode,
        _sat(s.expiry_time), s.status.label, int(s.status), s.deliverable, s.evaluator,
        str(s.evaluator_stake), _sat(s.evaluator_fee_bps), _sat(s.evaluation_window),
        _sat(s.appeal_window), s.dispute_resolver, _sat(s.submitted_at),
        _sat(s.evaluation_deadline), _sat(s.evaluated_at), _sat(s.appeal_deadline),
        None if s.verdict_type is None else int(s.verdict_type), _sat(s.score), s.evidence_hash,
        str(s.paid_amount), str(s.refunded_amount), s.created_block, s.updated_block,
        json.dumps(s.extra, sort_keys=True, separators=(",", ":")),
    )  # fmt: skip


_JOB_INSERT: Final = f"INSERT OR REPLACE INTO jobs VALUES ({','.join('?' * 27)})"
_TASK_INSERT: Final = f"INSERT OR REPLACE INTO tasks VALUES ({','.join('?' * 29)})"


def _topics_json(topics: tuple[str, ...]) -> str:
    return json.dumps(list(topics), separators=(",", ":"))


def _event_row(chain_id: int, e: Event) -> tuple[Any, ...]:
    log = e.log
    return (
        chain_id, log.block_hash, log.log_index, log.block_number, e.block_timestamp,
        log.tx_hash, log.tx_index, e.contract, e.protocol.value, e.name, e.variant, e.subject,
        _decoded_args_json(e.args) if e.name is not None else "{}",
        '["' + '","'.join(log.topics) + '"]' if e.name is not None else _topics_json(log.topics),
        "0x" + log.data.hex(),
    )  # fmt: skip


def _load_event(row: Sequence[Any]) -> Event:
    """Re-decode a stored raw log (the row holds everything decode_log needs)."""
    contract, _subject, protocol, topics_json, data_hex = row[0], row[1], row[2], row[3], row[4]
    log = Log(
        address=contract,
        topics=tuple(json.loads(topics_json)),
        data=bytes.fromhex(data_hex[2:]),
        block_number=row[5],
        block_hash=row[6],
        tx_hash=row[7],
        tx_index=row[8],
        log_index=row[9],
    )
    return decode_log(log, Protocol(protocol), row[10])


def _read_from_row(row: Sequence[Any]) -> ChainRead:
    return ChainRead(row[0], row[1], row[2], row[3], row[4], decode_result(row[5]))


class IndexStore:
    """Writes of the index component for one chain; callers own the connection."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        chain_id: int,
        *,
        keep_margin: int = DEFAULT_KEEP_MARGIN,
        decoded_cache: int = DEFAULT_DECODED_CACHE,
    ) -> None:
        self.conn = conn
        self.chain_id = chain_id
        self.keep_margin = keep_margin
        # Decoded stored events by (block hash, log index). That key names one
        # immutable log, so an entry can never be stale: it is only looked up
        # for rows the database returns. Saves re-decoding a busy subject's
        # history on every batch; insertion-ordered, oldest evicted first.
        self._decoded: OrderedDict[tuple[str, int], Event] = OrderedDict()
        self._decoded_max = decoded_cache
        # The events primary key is keyed by block hash, i.e. random: with
        # SQLite's default 2 MiB page cache, inserts into a large index miss on
        # nearly every page. A bigger writer cache keeps the hot index pages in
        # memory; past WRITER_CACHE_KIB a larger cache bought no backfill speed,
        # only resident memory (bench/README.md has the figures).
        conn.execute(f"PRAGMA cache_size = -{WRITER_CACHE_KIB}")
        conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS touched (contract TEXT NOT NULL, "
            "subject TEXT NOT NULL, PRIMARY KEY (contract, subject)) WITHOUT ROWID"
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

    def reads_from(self, block_number: int) -> list[tuple[str, str, str, int, str]]:
        """(contract, subject, kind, block number, block hash) of every read at or above a block.

        The indexer asks for the reads at its cursor block after a restart: they
        may have been made while that block was the node's head, which some
        nodes answer from state already holding the next block's changes.
        """
        rows = self.conn.execute(
            "SELECT contract, subject, kind, block_number, block_hash FROM chain_reads "
            "WHERE chain_id = ? AND block_number >= ? ORDER BY block_number",
            (self.chain_id, block_number),
        ).fetchall()
        return [(str(r[0]), str(r[1]), str(r[2]), int(r[3]), str(r[4])) for r in rows]

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        """Every index table of this chain, fully sorted, volatile columns left out."""
        out: dict[str, list[tuple[Any, ...]]] = {}
        for table, volatile in INDEX_TABLES.items():
            cols = [
                str(r[1])
                for r in self.conn.execute(f"PRAGMA table_info({table})").fetchall()
                if r[1] not in volatile
            ]
            order = ", ".join(str(i + 1) for i in range(len(cols)))
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
        with self._transaction():
            return self._apply(batch, keep_from)

    def rollback_to(self, fork_point: int) -> set[tuple[str, str]]:
        """Forget everything above ``fork_point`` and rebuild what it touched; one transaction.

        The fork point must be a window block (or the cursor block, or -1 for
        "before genesis"); anything else is a reorg deeper than the window and
        raises DeepReorgError without changing anything.
        """
        with self._transaction():
            return self._rollback(fork_point)

    def rebuild_all(self) -> None:
        """Recompute every projection of this chain from stored events and reads.

        Logs stored as unknown are decoded again first: a release that learns a
        new event shape (a dialect) turns them into events, so ``keeper db
        rebuild`` after an upgrade catches up without a resync.
        """
        with self._transaction():
            c, cid = self.conn, self.chain_id
            self._redecode_unknown()
            c.execute("DELETE FROM jobs WHERE chain_id = ?", (cid,))
            c.execute("DELETE FROM tasks WHERE chain_id = ?", (cid,))
            rows = c.execute(
                f"SELECT {_LOAD_COLS} FROM events e {_TOKEN_JOIN} WHERE e.chain_id = ? "
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
                read = _read_from_row(row)
                reads.setdefault((read.contract, read.subject), []).append(read)
            # no cache: a full rebuild decodes every stored log afresh
            self._write_projections(self._groups(rows, reads, {}, use_cache=False))

    # --- internals --------------------------------------------------------------------

    def _redecode_unknown(self) -> int:
        """Give stored unknown logs that this release can decode their name and subject."""
        c, cid = self.conn, self.chain_id
        rows = c.execute(
            f"SELECT {_LOAD_COLS} FROM events e {_TOKEN_JOIN} WHERE e.chain_id = ? "
            "AND e.name IS NULL",
            (cid,),
        ).fetchall()
        updates = []
        for row in rows:
            event = _load_event(row)
            if event.name is not None:
                log = event.log
                updates.append(
                    (event.name, event.variant, event.subject, _decoded_args_json(event.args),
                     cid, log.block_hash, log.log_index)
                )  # fmt: skip
        c.executemany(
            "UPDATE events SET name = ?, variant = ?, subject = ?, args_json = ? "
            "WHERE chain_id = ? AND block_hash = ? AND log_index = ?",
            updates,
        )
        return len(updates)

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception (KeyboardInterrupt too)."""
        if self.conn.in_transaction:
            raise StateCorruptedError("IndexStore write inside a foreign open transaction")
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

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
        known = [_event_row(cid, e) for e in batch.events if e.name is not None]
        unknown = [_event_row(cid, e) for e in batch.events if e.name is None]
        insert = f"INSERT OR IGNORE INTO events ({'chain_id, ' + _EVENT_COLS}) VALUES "
        insert += f"({','.join('?' * 15)})"
        before = c.total_changes
        c.executemany(insert, known)
        new_known = c.total_changes - before
        before = c.total_changes
        c.executemany(insert, unknown)
        new_unknown = c.total_changes - before

        c.executemany(
            "INSERT INTO blocks (chain_id, number, hash, parent_hash, timestamp) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (chain_id, number) DO UPDATE SET "
            "hash = excluded.hash, parent_hash = excluded.parent_hash, "
            "timestamp = excluded.timestamp",
            [(cid, b.number, b.hash, b.parent_hash, b.timestamp) for b in batch.blocks],
        )
        c.executemany(
            "INSERT OR REPLACE INTO chain_reads (chain_id, contract, subject, kind, "
            "block_number, block_hash, result_json) VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                (cid, r.contract, r.subject, r.kind, r.block_number, r.block_hash,
                 encode_args(r.result))
                for r in batch.reads
            ],
        )  # fmt: skip

        touched = {(e.contract, e.subject) for e in batch.events if e.subject is not None}
        touched.update((r.contract, r.subject) for r in batch.reads if r.subject)
        in_batch = {(e.contract, e.log.block_hash) for e in batch.events}
        for r in batch.reads:
            if not r.subject and (r.contract, r.block_hash) not in in_batch:
                # a contract-level read arriving late: touch the subjects at its block
                in_batch.add((r.contract, r.block_hash))
                touched.update(
                    (str(row[0]), str(row[1]))
                    for row in c.execute(
                        "SELECT contract, subject FROM events WHERE chain_id = ? AND "
                        "block_hash = ? AND contract = ? AND subject IS NOT NULL",
                        (cid, r.block_hash, r.contract),
                    )
                )
        self._rebuild_subjects(touched, batch.events, batch.reads)
        self._set_cursor(batch.indexed_block, batch.indexed_hash, batch.finalized_block)
        c.execute(
            "DELETE FROM blocks WHERE chain_id = ? AND number < ?",
            (cid, batch.finalized_block - self.keep_margin if keep_from is None else keep_from),
        )
        return ApplyResult(new_known + new_unknown, new_unknown, frozenset(touched))

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
        for table, col in (("events", "block_number"), ("chain_reads", "block_number"),
                           ("blocks", "number")):  # fmt: skip
            c.execute(f"DELETE FROM {table} WHERE chain_id = ? AND {col} > ?", (cid, fork_point))
        self._rebuild_subjects(touched)
        finalized = min(current.finalized_block, fork_point) if current else fork_point
        self._set_cursor(fork_point, fork_hash, finalized)
        return touched

    def _set_cursor(self, indexed_block: int, indexed_hash: str, finalized_block: int) -> None:
        self.conn.execute(
            "INSERT INTO cursor (chain_id, indexed_block, indexed_hash, finalized_block, "
            "updated_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (chain_id) DO UPDATE SET "
            "indexed_block = excluded.indexed_block, indexed_hash = excluded.indexed_hash, "
            "finalized_block = excluded.finalized_block, updated_at = excluded.updated_at",
            (self.chain_id, indexed_block, indexed_hash, finalized_block, time.time()),
        )

    def _rebuild_subjects(
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
        c, cid = self.conn, self.chain_id
        c.execute("DELETE FROM temp.touched")
        c.executemany("INSERT OR IGNORE INTO temp.touched VALUES (?, ?)", touched)
        replace = not fresh and not fresh_reads  # a rollback: some subjects may vanish
        if replace:
            for table, col in (("jobs", "job_id"), ("tasks", "task_id")):
                c.execute(
                    f"DELETE FROM {table} WHERE chain_id = ? AND (contract, {col}) IN "
                    "(SELECT contract, subject FROM temp.touched)",
                    (cid,),
                )
        known_reads = {(r.contract, r.subject, r.kind, r.block_hash): r for r in fresh_reads}
        reads: dict[tuple[str, str], list[ChainRead]] = {}
        for row in c.execute(
            "SELECT r.contract, r.subject, r.kind, r.block_number, r.block_hash, r.result_json "
            "FROM temp.touched t CROSS JOIN chain_reads r ON r.chain_id = ? AND "
            "r.contract = t.contract AND r.subject = t.subject",
            (cid,),
        ):
            read = known_reads.get((row[0], row[1], row[2], row[4])) or _read_from_row(row)
            reads.setdefault((read.contract, read.subject), []).append(read)

        for e in fresh:
            if e.subject is not None:
                self._remember((e.log.block_hash, e.log.log_index), e)
        keys = {(e.log.block_hash, e.log.log_index) for e in fresh}
        lo = min((e.log.block_number for e in fresh), default=1)
        hi = max((e.log.block_number for e in fresh), default=0)
        stored = c.execute(
            "SELECT count(*) FROM events WHERE chain_id = ? AND block_number BETWEEN ? AND ?",
            (cid, lo, hi),
        ).fetchone()[0]
        if not fresh or stored != len(keys):
            rows = c.execute(
                f"SELECT {_LOAD_COLS} FROM temp.touched t CROSS JOIN events e ON "
                f"e.chain_id = ? AND e.contract = t.contract AND e.subject = t.subject "
                f"{_TOKEN_JOIN}",
                (cid,),
            ).fetchall()
            known = {(e.log.block_hash, e.log.log_index): e for e in fresh}
            rows.sort(key=lambda r: (r[0], r[1], r[5], r[9]))
            self._write_projections(self._groups(rows, reads, known))
            return
        rows = c.execute(
            f"SELECT {_LOAD_COLS} FROM temp.touched t CROSS JOIN events e ON "
            f"e.chain_id = ? AND e.contract = t.contract AND e.subject = t.subject "
            f"AND (e.block_number < ? OR e.block_number > ?) {_TOKEN_JOIN}",
            (cid, lo, hi),
        ).fetchall()
        tokens = {
            (str(r[0]), str(r[1])): r
            for r in c.execute(
                "SELECT contract, block_hash, block_number, result_json FROM chain_reads "
                "WHERE chain_id = ? AND subject = '' AND kind = ? AND block_number BETWEEN ? AND ?",
                (cid, PAYMENT_TOKEN, lo, hi),
            )
        }
        groups: dict[tuple[str, str], tuple[list[Event], list[ChainRead]]] = {}
        for (contract, subject), events, subject_reads in self._groups(rows, reads, {}):
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
        self._write_projections((k, ev, rd) for k, (ev, rd) in groups.items())

    def _groups(
        self,
        rows: Iterable[Sequence[Any]],
        reads: Mapping[tuple[str, str], list[ChainRead]],
        known: Mapping[tuple[str, int], Event],
        *,
        use_cache: bool = True,
    ) -> Iterator[tuple[tuple[str, str], list[Event], list[ChainRead]]]:
        """Group event rows sorted by (contract, subject) into (key, events, reads), lazily."""
        cache: Mapping[tuple[str, int], Event] = self._decoded if use_cache else {}
        for (contract, subject), group in groupby(rows, key=lambda r: (r[0], r[1])):
            events: list[Event] = []
            mine = list(reads.get((contract, subject), ()))
            for row in group:
                key = (row[6], row[9])
                event = known.get(key) or cache.get(key)
                if event is None or event.protocol.value != row[2] or event.contract != contract:
                    event = _load_event(row)
                    if use_cache:
                        self._remember(key, event)
                events.append(event)
                if row[11] is not None:
                    mine.append(
                        ChainRead(contract, "", PAYMENT_TOKEN, row[5], row[6],
                                  decode_result(row[11]))
                    )  # fmt: skip
            yield (contract, subject), events, mine

    def _remember(self, key: tuple[str, int], event: Event) -> None:
        decoded = self._decoded
        decoded[key] = event
        # OrderedDict: popping the oldest is O(1) (a plain dict rescans the
        # deleted slots at its front on every next(iter(...)): quadratic)
        while len(decoded) > self._decoded_max:
            decoded.popitem(last=False)

    def _write_projections(
        self, groups: Iterable[tuple[tuple[str, str], list[Event], list[ChainRead]]]
    ) -> None:
        """Reduce each subject and upsert its projection row, in chunks."""
        jobs: list[tuple[Any, ...]] = []
        tasks: list[tuple[Any, ...]] = []
        for (contract, subject), events, reads in groups:
            if not events:
                continue
            if events[0].protocol is Protocol.ERC8183:
                jobs.append(_job_row(self.chain_id, reduce_job(contract, subject, events, reads)))
            else:
                tasks.append(
                    _task_row(self.chain_id, reduce_task(contract, subject, events, reads))
                )
            if len(jobs) + len(tasks) >= 5000:
                self._flush(jobs, tasks)
        self._flush(jobs, tasks)

    def _flush(self, jobs: list[tuple[Any, ...]], tasks: list[tuple[Any, ...]]) -> None:
        self.conn.executemany(_JOB_INSERT, jobs)
        self.conn.executemany(_TASK_INSERT, tasks)
        jobs.clear()
        tasks.clear()
