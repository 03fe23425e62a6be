"""How index rows are written and read back: value codecs and row mappers, one place.

Events keep their raw topics and data beside the decoded arguments, so a
stored event can always be decoded again (a decoder fix applies on the next
rebuild); uint256 values are decimal strings in JSON, and times past SQLite's
int64 saturate (that far out means never).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from keeper.domain.events import decode_log
from keeper.domain.model import ArgValue, ChainRead, Event, JobState, Log, Protocol, TaskState

__all__ = [
    "EVENT_COLS",
    "JOB_COLS",
    "LOAD_COLS",
    "TASK_COLS",
    "TOKEN_JOIN",
    "decode_result",
    "decoded_args_json",
    "description_from_json",
    "description_json",
    "encode_args",
    "event_row",
    "job_row",
    "load_event",
    "read_from_row",
    "row_writes",
    "task_row",
    "upsert",
]

INT64_MAX: Final = 2**63 - 1

EVENT_COLS: Final = (
    "block_hash, log_index, block_number, block_timestamp, tx_hash, tx_index, "
    "contract, protocol, name, variant, subject, args_json, topics_json, data_hex"
)
LOAD_COLS: Final = (
    "e.contract, e.subject, e.protocol, e.topics_json, e.data_hex, e.block_number, "
    "e.block_hash, e.tx_hash, e.tx_index, e.log_index, e.block_timestamp, tr.result_json"
)
# The paymentToken read pinned at an event's block comes along with the event
# row (a primary-key lookup), so loading a subject never scans a contract's
# whole read history.
TOKEN_JOIN: Final = (
    "LEFT JOIN chain_reads tr ON tr.chain_id = e.chain_id AND tr.contract = e.contract "
    "AND tr.subject = '' AND tr.kind = 'paymentToken' AND tr.block_hash = e.block_hash "
    "AND e.name = 'BudgetSet'"
)


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


def decoded_args_json(args: Mapping[str, ArgValue]) -> str:
    """encode_args for decode_log output, without json.dumps (hot path, ~4x faster).

    Safe only because decode_log emits identifier keys and hex/int/bool values,
    none of which needs escaping; it gives the same bytes as encode_args.
    """
    parts = []
    for k, v in args.items():
        if v is True or v is False:
            parts.append(f'"{k}":{"true" if v else "false"}')
        else:
            parts.append(f'"{k}":"{v}"')
    return "{" + ",".join(parts) + "}"


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


def job_row(chain_id: int, s: JobState) -> tuple[Any, ...]:
    return (
        chain_id, s.contract, s.job_id, s.client, s.provider, s.evaluator, s.hook, s.token,
        str(s.budget), str(s.funded_amount), _sat(s.expired_at), _sat(s.submitted_at),
        s.status.label, int(s.status), s.deliverable, s.reason, description_json(s.description),
        int(s.legacy),
        s.created_block, s.updated_block, s.verdict_event, str(s.refunded_amount),
        str(s.paid_amount), str(s.settled_amount), s.payout_receiver,
        None if s.pending_claim_amount is None else str(s.pending_claim_amount), s.dialect,
    )  # fmt: skip


def description_json(description: str | None) -> str | None:
    """A job's description as the column keeps it: the JSON string it is (migration 12).

    Anyone may put U+0000 in a description and PostgreSQL's text refuses that character;
    JSON escapes it (and every other control character), the same on both backends, and
    the API serves the column as the JSON it already is.
    """
    return None if description is None else json.dumps(description, ensure_ascii=False)


def description_from_json(text: str | None) -> str | None:
    """The description a ``jobs.description`` column holds (``description_json``'s inverse)."""
    if text is None:
        return None
    value = json.loads(text)
    if not isinstance(value, str):
        raise ValueError(f"jobs.description holds {type(value).__name__}, not a JSON string")
    return value


def task_row(chain_id: int, s: TaskState) -> tuple[Any, ...]:
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


JOB_COLS: Final = (
    "chain_id", "contract", "job_id", "client", "provider", "evaluator", "hook", "token",
    "budget", "funded_amount", "expired_at", "submitted_at", "status", "status_code",
    "deliverable", "reason", "description", "legacy", "created_block", "updated_block",
    "verdict_event", "refunded_amount", "paid_amount", "settled_amount", "payout_receiver",
    "pending_claim_amount", "dialect",
)  # fmt: skip
TASK_COLS: Final = (
    "chain_id", "contract", "task_id", "requester", "worker", "reward", "mode", "expiry_time",
    "status", "status_code", "deliverable", "evaluator", "evaluator_stake",
    "evaluator_fee_bps", "evaluation_window", "appeal_window", "dispute_resolver",
    "submitted_at", "evaluation_deadline", "evaluated_at", "appeal_deadline", "verdict_type",
    "score", "evidence_hash", "paid_amount", "refunded_amount", "created_block",
    "updated_block", "extra_json",
)  # fmt: skip


@functools.cache
def upsert(table: str, cols: tuple[str, ...], key: int) -> str:
    """INSERT replacing the row with the same first ``key`` columns (SQLite and PostgreSQL)."""
    sets = ", ".join(f"{c} = excluded.{c}" for c in cols[key:])
    return (
        f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
        f"ON CONFLICT ({', '.join(cols[:key])}) DO UPDATE SET {sets}"
    )


def row_writes(
    table: str,
    cols: tuple[str, ...],
    rows: Iterable[tuple[Any, ...]],
    stored: Mapping[tuple[Any, ...], tuple[Any, ...]],
) -> dict[str, list[tuple[Any, ...]]]:
    """Statements (with their parameters) that make ``rows`` the table's rows.

    ``stored`` holds the table's current rows by their key (the first three
    columns). A new row is upserted; a stored one is updated in the columns
    that differ, and left alone when none does. SQLite maintains an index on
    an UPDATE only when the statement sets one of its columns, and a
    projection row has many indexes of which a new event changes few.
    """
    insert = upsert(table, cols, 3)
    out: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        old = stored.get(row[:3])
        if old is None:
            out.setdefault(insert, []).append(row)
            continue
        changed = tuple(i for i in range(3, len(cols)) if row[i] != old[i])
        if changed:
            sql = _update(table, cols, changed)
            out.setdefault(sql, []).append((*(row[i] for i in changed), *row[:3]))
    return out


@functools.cache
def _update(table: str, cols: tuple[str, ...], changed: tuple[int, ...]) -> str:
    """The UPDATE of the ``changed`` columns of the row keyed by the first three (a batch
    repeats a few such shapes over thousands of rows: each text is built once)."""
    sets = ", ".join(f"{cols[i]} = ?" for i in changed)
    return f"UPDATE {table} SET {sets} WHERE " + " AND ".join(f"{c} = ?" for c in cols[:3])


def _topics_json(topics: tuple[str, ...]) -> str:
    return json.dumps(list(topics), separators=(",", ":"))


def event_row(chain_id: int, e: Event) -> tuple[Any, ...]:
    log = e.log
    if e.name is None:
        args, topics = "{}", _topics_json(log.topics)
    else:  # decoded: the topics are checked hashes and the args need no escaping
        args, topics = decoded_args_json(e.args), '["' + '","'.join(log.topics) + '"]'
    return (
        chain_id, log.block_hash, log.log_index, log.block_number, e.block_timestamp,
        log.tx_hash, log.tx_index, e.contract, str(e.protocol), e.name, e.variant, e.subject,
        args, topics, "0x" + log.data.hex(),
    )  # fmt: skip


def load_event(row: Sequence[Any]) -> Event:
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


def read_from_row(row: Sequence[Any]) -> ChainRead:
    return ChainRead(row[0], row[1], row[2], row[3], row[4], decode_result(row[5]))
