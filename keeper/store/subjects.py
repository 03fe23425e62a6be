"""Jobs and tasks as the API serves them: one declaration per table, list pages, one subject.

Each projection table is declared once (:data:`SUBJECTS`): its served
fields, its parties and its status labels. A row's wire
object is one SQL ``json_object`` generated from that declaration
(:func:`wire_object`) and evaluated by SQLite, for a list page and for a
single subject alike, so there is one row mapping per table. Amounts are
stored as exact decimal text and are served as that text, never through a
number (JSON numbers lose precision past 2**53); only the refund of a partly
settled job is a subtraction, exact on Python ints.

Lists use keyset pagination on ``(created_block, contract, id)`` newest
first. A page returns the key of its last row (:data:`PageKey`) when
another page follows, and takes the previous one's as ``after``: the key
travels as a tuple; only the API turns it into its opaque cursor
(:mod:`keeper.api.params`). Pages stay stable while the indexer writes.

Inputs are trusted: the API validates statuses and addresses before it
calls here. Party columns are checked against the declaration because they
are written into the SQL.

On PostgreSQL the same statements are built from its JSON functions
(:data:`_PG`: ``json_build_object`` for ``json_object``, a cast for
``json()``, ``string_agg`` for ``group_concat``); the texts differ only in
whitespace, and every part is still JSON text spliced once.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from keeper.domain.model import JobStatus, TaskStatus, VerdictType
from keeper.store.db import dialect as dialect_of
from keeper.store.db import table_names
from keeper.store.queries import latest_pause

if TYPE_CHECKING:
    from keeper.store.db import Db, Dialect

__all__ = [
    "MAX_LIMIT",
    "SUBJECTS",
    "DetailParts",
    "Halves",
    "Kind",
    "Page",
    "PageKey",
    "Subjects",
    "detail",
    "detail_halves",
    "detail_statement",
    "list_page",
    "present_parts",
    "verification_of",
    "versioned_statements",
    "wire_object",
]

Kind = Literal["jobs", "tasks"]
# (created_block, contract, subject id) of a page's last row
PageKey = tuple[int, str, str]
# Pages are served from one read transaction; 500 rows keep a response small
# enough for a status page and a scrape-like client to parse quickly.
MAX_LIMIT: Final = 500


@dataclass(frozen=True, slots=True)
class Subjects:
    """The read side of one projection table.

    ``fields`` are the served keys in wire order, ``booleans`` the 0/1 ones
    among them, ``derived`` those computed from other columns (SQL
    expressions). Amount columns need no entry: they are served as stored.
    """

    kind: Kind
    id_col: str
    parties: tuple[str, ...]
    statuses: tuple[str, ...]
    fields: tuple[str, ...]
    booleans: tuple[str, ...] = ()
    derived: Mapping[str, str] | None = None


_VERDICT_NAMES: Final = " ".join(f"WHEN {v.value} THEN '{v.name.lower()}'" for v in VerdictType)
# The refund claimRefund would pay now. Only a partly settled escrow needs the exact
# subtraction of the SQLite function keeper.store.db registers: a call into Python per
# row, which takes the GIL back from the indexer each time.
_REFUNDABLE: Final = (
    "CASE WHEN status NOT IN ('funded', 'submitted') THEN '0' WHEN settled_amount = '0' "
    "THEN budget ELSE refundable(status, budget, settled_amount) END"
)
# PostgreSQL subtracts uint256 text exactly in numeric
_PG_REFUNDABLE: Final = (
    "CASE WHEN status NOT IN ('funded', 'submitted') THEN '0' WHEN settled_amount = '0' "
    "THEN budget ELSE greatest(budget::numeric - settled_amount::numeric, 0)::text END"
)
_JOB_FIELDS: Final = (
    "contract", "job_id", "status", "client", "provider", "evaluator", "hook", "token",
    "budget", "funded_amount", "paid_amount", "refunded_amount", "expired_at", "submitted_at",
    "deliverable", "reason", "description", "legacy", "verdict_event", "created_block",
    "updated_block", "dialect", "settled_amount", "refundable_amount", "pending_claim_amount",
    "payout_receiver",
)  # fmt: skip
_TASK_FIELDS: Final = (
    "contract", "task_id", "status", "requester", "worker", "reward", "mode", "expiry_time",
    "deliverable", "evaluator", "evaluator_stake", "evaluator_fee_bps", "evaluation_window",
    "appeal_window", "dispute_resolver", "submitted_at", "evaluation_deadline", "evaluated_at",
    "appeal_deadline", "verdict_type", "score", "evidence_hash", "paid_amount",
    "refunded_amount", "created_block", "updated_block", "extra",
)  # fmt: skip

SUBJECTS: Final[Mapping[Kind, Subjects]] = {
    "jobs": Subjects(
        kind="jobs",
        id_col="job_id",
        parties=("client", "provider", "evaluator"),
        statuses=tuple(s.label for s in JobStatus),
        fields=_JOB_FIELDS,
        booleans=("legacy",),
        # kept as the JSON string it is (index_rows.description_json)
        derived={"refundable_amount": _REFUNDABLE, "description": "json(description)"},
    ),
    "tasks": Subjects(
        kind="tasks",
        id_col="task_id",
        parties=("requester", "worker", "evaluator"),
        statuses=tuple(s.label for s in TaskStatus),
        fields=_TASK_FIELDS,
        derived={
            "verdict_type": f"CASE verdict_type {_VERDICT_NAMES} END",
            # stored as the string map it is served as
            "extra": "json(extra_json)",
        },
    ),
}


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list: its items' JSON texts joined by commas, their count, and the
    key to pass as ``after`` for the next page (None on the last)."""

    items: str
    count: int
    next_key: PageKey | None


def wire_object(
    kind: Kind, names: Mapping[str, str] | None = None, dialect: Dialect = "sqlite"
) -> tuple[str, list[str]]:
    """The SQL expression of a row's wire object (JSON text), and the parameters of its ``?``.

    Amounts are the stored decimal text as it is (their columns have TEXT
    affinity, so SQLite keeps even a number written there as text), booleans
    JSON booleans. With ``names`` (address -> configured name) the object ends with
    ``contract_name``, None for an unnamed contract.
    """
    spec = SUBJECTS[kind]
    pg = dialect == "postgresql"
    derived = {**(spec.derived or {}), **(_PG_DERIVED if pg else {})}
    parts = []
    for name in spec.fields:
        expr = derived.get(name, name)
        if name in spec.booleans:
            expr = (
                f"({name} <> 0)" if pg else f"json(CASE WHEN {name} THEN 'true' ELSE 'false' END)"
            )
        parts.append(f"'{name}', {expr}")
    params: list[str] = []
    if names is not None:
        contract_name = "NULL"
        if names:
            then = " WHEN ? THEN CAST(? AS TEXT)" if pg else " WHEN ? THEN ?"
            contract_name = "CASE contract" + then * len(names) + " END"
            params = [v for address, name in names.items() for v in (address, name)]
        parts.append(f"'contract_name', {contract_name}")
    if pg:
        return f"json_build_object({', '.join(parts)})::text", params
    return f"json_object({', '.join(parts)})", params


# the derived fields whose PostgreSQL expression differs
_PG_DERIVED: Final = {
    "refundable_amount": _PG_REFUNDABLE,
    "extra": "extra_json::json",
    "description": "description::json",
}


def _where(
    spec: Subjects,
    contract: str | None,
    statuses: Sequence[str],
    parties: Mapping[str, str],
    after: PageKey | None,
    chain_id: int | None,
) -> tuple[str, list[Any]]:
    """The WHERE clause (with its parameters) of a list page."""
    clauses: list[str] = []
    params: list[Any] = []
    if chain_id is not None:
        clauses.append("chain_id = ?")
        params.append(chain_id)
    if contract is not None:
        clauses.append("contract = ?")
        params.append(contract.lower())
    for column, value in parties.items():
        if column not in spec.parties:
            raise ValueError(f"unknown party {column!r}; expected one of {spec.parties}")
        clauses.append(f"{column} = ?")
        params.append(value.lower())
    if statuses:
        clauses.append(f"status IN ({','.join('?' * len(statuses))})")
        params.extend(statuses)
    if after is not None:
        clause, values = _below(spec, contract.lower() if contract is not None else None, after)
        clauses.append(clause)
        params.extend(values)
    return (f"WHERE {' AND '.join(clauses)}" if clauses else ""), params


def _below(spec: Subjects, contract: str | None, after: PageKey) -> tuple[str, list[Any]]:
    """Rows strictly after ``after`` in page order: ``(created_block, contract, id) < after``.

    With the contract fixed by the filter, the same condition is written
    without it, so that SQLite seeks the ``(contract, status, created_block,
    id)`` index straight to the cursor; given the whole triple it seeks only
    to the cursor's block and reads (and looks up in the table) every row of
    that block it then rejects.
    """
    block, after_contract, after_id = after
    if contract is None:
        return f"(created_block, contract, {spec.id_col}) < (?, ?, ?)", [*after]
    if contract == after_contract:
        return f"(created_block, {spec.id_col}) < (?, ?)", [block, after_id]
    # SQLite compares TEXT bytewise, as Python compares the code points of UTF-8 text
    return ("created_block <= ?" if contract < after_contract else "created_block < ?"), [block]


def list_page(
    conn: Db,
    kind: Kind,
    wire: tuple[str, Sequence[Any]],
    *,
    contract: str | None = None,
    statuses: Sequence[str] = (),
    parties: Mapping[str, str] | None = None,
    limit: int = 50,
    after: PageKey | None = None,
    chain_id: int | None = None,
) -> Page:
    """Jobs or tasks newest first, filtered, each item the JSON text of ``wire``.

    ``wire`` is :func:`wire_object`'s expression and parameters (or any
    expression over the table's columns). The whole page and whether another
    follows come back from one statement in one step: one consistent
    snapshot, and one GIL release and reacquisition instead of one per row
    (under the indexer's load each of those may wait for the GIL).
    """
    spec = SUBJECTS[kind]
    expr, wire_params = wire
    where, params = _where(spec, contract, statuses, parties or {}, after, chain_id)
    limit = max(1, min(limit, MAX_LIMIT))
    # one pass over the page's rows feeds both aggregates, so they see the rows in the
    # same (page) order: the texts, and each row's key with the length of its text
    aggregates = (
        "string_agg(w, ',' ORDER BY b DESC, c DESC, i DESC), "
        "json_agg(json_build_array(b, c, i, length(w)) ORDER BY b DESC, c DESC, i DESC)::text"
        if dialect_of(conn) == "postgresql"
        else "group_concat(w, ','), json_group_array(json_array(b, c, i, length(w)))"
    )
    row = conn.execute(
        f"SELECT {aggregates} FROM "
        f"(SELECT created_block AS b, contract AS c, {spec.id_col} AS i, {expr} AS w "
        f"FROM {kind} {where} "
        f"ORDER BY created_block DESC, contract DESC, {spec.id_col} DESC LIMIT ?) AS subquery_page",
        (*wire_params, *params, limit + 1),
    ).fetchone()
    items: str = row[0] or ""
    keys: list[list[Any]] = json.loads(row[1] or "[]")
    next_key = None
    if len(keys) > limit:  # the row past the page only says there is a next one
        items = items[: len(items) - int(keys[limit][3]) - 1]
        block, last_contract, last_id, _ = keys[limit - 1]
        next_key = (int(block), str(last_contract), str(last_id))
        keys = keys[:limit]
    return Page(items, len(keys), next_key)


# An event's arguments are spliced as stored: ``args_json`` is compact JSON written by
# the index store (keeper.store.index_rows), which ``json()`` would only parse and print
# again, byte for byte the same (PostgreSQL's ``::json`` keeps the text as it is, too).
# The object around them is closed by its last value, an integer, so ``rtrim`` takes
# off exactly its one closing brace.
_EVENT: Final = (
    "rtrim(json_object('name', name, 'variant', variant, 'block_number', block_number, "
    "'block_hash', block_hash, 'block_timestamp', block_timestamp, 'tx_hash', tx_hash, "
    "'log_index', log_index), '}') || ',\"args\":' || args_json || '}'"
)
# where each of a subject's view reads came from; a missing one says why (keeper.domain.reads)
_READ: Final = (
    "json_object('kind', kind, 'block_number', block_number, 'source', source, 'missing', "
    "CASE WHEN source = 'missing' THEN json_extract(result_json, '$.reason') END)"
)
_INTENT: Final = (
    "json_object('action', action, 'status', status, 'outcome', outcome, 'detail', detail, "
    "'due_at', due_at, 'tx_hash', tx_hash, 'receipt_block', receipt_block, "
    "'attempts', attempts)"
)
_VERIFICATION: Final = (
    "json_object('status', status, 'failures', json(failures_json), "
    "'report_digest', report_digest, 'document_digest', document_digest, "
    "'revision_count', revision_count, 'event', json_object('name', event_name, "
    "'tx_hash', tx_hash, 'block_number', block_number, 'log_index', log_index), "
    "'attempts', attempts, 'next_retry_at', next_retry_at)"
)
# the same objects in PostgreSQL's functions, each as JSON text
_PG: Final = {
    "event": (
        "json_build_object('name', name, 'variant', variant, 'block_number', block_number, "
        "'block_hash', block_hash, 'block_timestamp', block_timestamp, 'tx_hash', tx_hash, "
        "'log_index', log_index, 'args', args_json::json)::text"
    ),
    "read": (
        "json_build_object('kind', kind, 'block_number', block_number, 'source', source, "
        "'missing', CASE WHEN source = 'missing' THEN result_json::json ->> 'reason' END)::text"
    ),
    "intent": (
        "json_build_object('action', action, 'status', status, 'outcome', outcome, "
        "'detail', detail, 'due_at', due_at, 'tx_hash', tx_hash, "
        "'receipt_block', receipt_block, 'attempts', attempts)::text"
    ),
    "verification": (
        "json_build_object('status', status, 'failures', failures_json::json, "
        "'report_digest', report_digest, 'document_digest', document_digest, "
        "'revision_count', revision_count, 'event', json_build_object('name', event_name, "
        "'tx_hash', tx_hash, 'block_number', block_number, 'log_index', log_index), "
        "'attempts', attempts, 'next_retry_at', next_retry_at)::text"
    ),
    "concat": "string_agg(o, ',')",
    "quote": "coalesce(to_json(CAST(:name AS TEXT))::text, 'null')",
}
_SQLITE: Final = {
    "event": _EVENT,
    "read": _READ,
    "intent": _INTENT,
    "verification": _VERIFICATION,
    "concat": "group_concat(o, ',')",
    "quote": "json_quote(:name)",
}


@dataclass(frozen=True, slots=True)
class DetailParts:
    """Which optional tables a detail reads: a component not migrated yet reads as empty."""

    intents: bool = True
    verification: bool = True
    # subject_versions (read by keeper.api.reads, not by these statements)
    versions: bool = True


def _array(element: str, rows: str, concat: str = _SQLITE["concat"]) -> str:
    """The JSON array text of ``element`` (JSON text) over ``rows`` (a FROM clause), in order.

    Spliced as text: SQLite keeps a JSON value's subtype only within one
    expression, so ``json_group_array`` over a subquery's objects, and a
    ``json_object`` around that, would each parse the text again.
    """
    return (
        f"coalesce((SELECT '[' || {concat} || ']' FROM (SELECT {element} AS o "
        f"{rows}) AS subquery_part), '[]')"
    )


def _detail_exprs(
    kind: Kind, by_chain: bool, parts: DetailParts, dialect: Dialect
) -> tuple[str, str, str]:
    """(FROM clause of the row, head, tail): the detail's two halves as SQL text expressions.

    The head (the row's object opened up, its ``events`` and ``reads``) is
    written by the index store alone, which raises the subject's version in
    the same transaction (:mod:`keeper.store.projections`); the tail
    (``intents``, ``contract_paused``, ``contract_name``, a job's
    ``verification``) also by the keeper and the verifier, and by
    contract-level events, so it is always read afresh.
    """
    spec = SUBJECTS[kind]
    sql = _PG if dialect == "postgresql" else _SQLITE
    chain = " AND chain_id = :chain" if by_chain else ""
    row, _ = wire_object(kind, dialect=dialect)
    subject = f"WHERE contract = :contract AND subject = :id{chain}"
    concat = sql["concat"]
    events = f"FROM events {subject} ORDER BY chain_id, block_number, log_index"
    reads = f"FROM chain_reads {subject} ORDER BY chain_id, +block_number, kind"
    head = [
        ("events", _array(sql["event"], events, concat)),
        ("reads", _array(sql["read"], reads, concat)),
    ]
    intents = (
        _array(sql["intent"], f"FROM keeper_intents {subject} ORDER BY id", concat)
        if parts.intents
        else "'[]'"
    )
    paused = f"(SELECT name FROM ({latest_pause(by_chain)}) AS subquery_pause) = 'Paused'"
    tail = [
        ("intents", intents),
        ("contract_paused", f"CASE WHEN {paused} THEN 'true' ELSE 'false' END"),
        ("contract_name", sql["quote"]),
    ]
    if kind == "jobs":
        found = (
            f"coalesce((SELECT {sql['verification']} FROM verifications WHERE chain_id = :chain "
            "AND contract = :contract AND job_id = :id), 'null')"
        )
        tail.append(("verification", found if by_chain and parts.verification else "'null'"))

    def joined(pairs: list[tuple[str, str]]) -> str:
        return " || ".join(f"',\"{key}\":' || {value}" for key, value in pairs)

    source = (
        f"FROM (SELECT {row} AS w FROM {kind} WHERE contract = :contract AND "
        f"{spec.id_col} = :id{chain} ORDER BY chain_id LIMIT 1) AS subquery_row"
    )
    # the row's object is opened up so that the detail's keys follow its own
    return source, f"substr(w, 1, length(w) - 1) || {joined(head)}", f"{joined(tail)} || '}}'"


# a subject's version (raised by every index store write of its head and, on SQLite, by
# every write of its intents and verification: keeper.store.migrations.version_triggers),
# by primary key
_VERSION: Final = (
    "FROM subject_versions WHERE chain_id = :chain AND contract = :contract AND subject = :id"
)


@functools.cache
def detail_statement(
    kind: Kind, by_chain: bool, parts: DetailParts, dialect: Dialect = "sqlite"
) -> str:
    """The one statement building a subject's whole detail as JSON text.

    Its named parameters are ``:contract``, ``:id``, ``:name`` (the configured
    contract name, or NULL) and, ``by_chain``, ``:chain``. The object is the
    row's :func:`wire_object` followed by ``events`` (chain order), ``reads`` (where
    each view read came from, chain order), ``intents``
    (oldest first), ``contract_paused``, then ``contract_name`` and,
    for jobs, ``verification`` (the latest, or null; null without a chain:
    verifications are per chain). The parts are JSON texts joined as text
    (:func:`_array`): each is built once and never parsed again.
    """
    source, head, tail = _detail_exprs(kind, by_chain, parts, dialect)
    return f"SELECT {head} || {tail} {source}"


@functools.cache
def versioned_statements(kind: Kind, parts: DetailParts, dialect: Dialect) -> tuple[str, str]:
    """(whole, tail): :func:`detail_statement` of one chain in its two halves.

    ``whole`` selects the subject's version, the head and the tail (no row
    if the subject is not indexed); ``tail`` selects the version and the tail
    alone (no row if the subject has no version), for a head kept from an
    earlier read at that version. The version is read in the same statement
    as what it stamps: one snapshot.
    """
    source, head, tail = _detail_exprs(kind, True, parts, dialect)
    return (
        f"SELECT (SELECT version {_VERSION}) AS version, {head}, {tail} {source}",
        f"SELECT version, {tail} {_VERSION}",
    )


def detail(
    conn: Db,
    kind: Kind,
    contract: str,
    subject_id: str,
    *,
    chain_id: int | None = None,
    contract_name: str | None = None,
    parts: DetailParts = DetailParts(),
) -> str | None:
    """One job or task with its events, intents (and a job's verification), as JSON text.

    None if it is not indexed. Without ``chain_id`` the lowest chain holding it answers.
    """
    sql = detail_statement(kind, chain_id is not None, parts, dialect_of(conn))
    row = conn.execute(sql, _params(contract, subject_id, contract_name, chain_id)).fetchone()
    return None if row is None else str(row[0])


@dataclass(frozen=True, slots=True)
class Halves:
    """A detail read in its halves: the subject's version (None if it has none yet), the
    head it stamps (None when only the tail was read) and the tail."""

    version: int | None
    head: str | None
    tail: str


def detail_halves(
    conn: Db,
    kind: Kind,
    contract: str,
    subject_id: str,
    *,
    chain_id: int,
    contract_name: str | None = None,
    parts: DetailParts = DetailParts(),
    tail_only: bool = False,
) -> Halves | None:
    """:func:`detail` of one chain as :class:`Halves`: ``head + tail`` is its text.

    ``tail_only`` reads the version and the tail without the head (None if
    the subject has no version); otherwise None if it is not indexed.
    """
    whole, tail = versioned_statements(kind, parts, dialect_of(conn))
    params = _params(contract, subject_id, contract_name, chain_id)
    row = conn.execute(tail if tail_only else whole, params).fetchone()
    if row is None:
        return None
    version = None if row[0] is None else int(row[0])
    if tail_only:
        return Halves(version, None, str(row[1]))
    return Halves(version, str(row[1]), str(row[2]))


def _params(
    contract: str, subject_id: str, contract_name: str | None, chain_id: int | None
) -> dict[str, Any]:
    return {"contract": contract.lower(), "id": subject_id.lower(), "name": contract_name,
            "chain": chain_id}  # fmt: skip


def present_parts(conn: Db) -> DetailParts:
    """The optional tables of a detail that this database has."""
    names = table_names(conn)
    return DetailParts(
        intents="keeper_intents" in names,
        verification="verifications" in names,
        versions="subject_versions" in names,
    )


def verification_of(conn: Db, chain_id: int, contract: str, job_id: str) -> dict[str, Any] | None:
    """The latest verification of a job's verdict as the detail shows it; None if none."""
    verification = _PG["verification"] if dialect_of(conn) == "postgresql" else _VERIFICATION
    row = conn.execute(
        f"SELECT {verification} FROM verifications "
        "WHERE chain_id = ? AND contract = ? AND job_id = ?",
        (chain_id, contract, job_id),
    ).fetchone()
    if row is None:
        return None
    found: dict[str, Any] = json.loads(row[0])
    return found
