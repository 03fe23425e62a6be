"""Time-bucketed reads for the status page's pictures, on chain time.

Every read is bounded by a :class:`Window` (a fixed number of buckets ending
at the indexed block's timestamp) and walks an index on block time
(``events_kind_time``) or on deadlines (``jobs_due``), so its cost follows
the events inside the window, not the table. Buckets are computed in SQL
(``GROUP BY`` the bucket number) so a week of a busy chain comes back as a
few hundred rows.

Amounts are uint256 decimal text: SQLite's SUM would round them through a
float, so :func:`escrow_flows` sums them in SQL as seven 12-digit integer
limbs (each limb sum stays far below 2**63 for any count of events SQLite
could hold in one bucket) and joins the limbs in Python, exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from keeper.domain.planner import Action, PlannerConfig, plan_job, plan_task
from keeper.store.db import Db, dialect
from keeper.store.states import due_jobs, due_tasks

__all__ = [
    "Flow",
    "VerdictFailure",
    "Window",
    "chain_now",
    "deadlines_ahead",
    "escrow_flows",
    "keeper_outcomes",
    "locked_points",
    "unfinished_intents",
    "verdict_failures",
    "verification_series",
]

_LIMB: Final = 12
_LIMBS: Final = 7  # 84 digits >= the 78 of 2**256
_PAD: Final = "0" * (_LIMB * _LIMBS)
_LIMB_SUMS: Final = ", ".join(
    f"SUM(CAST(substr(p, {1 + _LIMB * i}, {_LIMB}) AS BIGINT))" for i in range(_LIMBS)
)
_JOB_EXITS: Final = ("JobCompleted", "JobRejected", "JobExpired")
# TaskCompleted comes once per award: a task leaves escrow at its first terminal event
_TASK_EXITS: Final = ("TaskCompleted", "TaskAccepted", "TaskExpired", "TaskCancelled")
_VERDICTS: Final = ("JobCompleted", "JobRejected")
# the keeper outcomes the page tells apart; every other outcome is a failure
_OUTCOME_GROUPS: Final = {"confirmed": "confirmed", "preempted": "preempted"}


@dataclass(frozen=True, slots=True)
class Window:
    """``buckets`` buckets of ``width`` s; bucket i is (start + i*width, start + (i+1)*width]."""

    start: int
    width: int
    buckets: int

    def __post_init__(self) -> None:
        if self.width < 1 or self.buckets < 1:
            raise ValueError(f"a window needs width >= 1 and buckets >= 1, not {self}")

    @property
    def end(self) -> int:
        return self.start + self.width * self.buckets

    @classmethod
    def ending(cls, end: int, width: int, buckets: int) -> Window:
        return cls(end - width * buckets, width, buckets)

    def bucket_of(self, timestamp: int) -> int:
        """The bucket holding ``timestamp`` (may fall outside 0..buckets-1)."""
        return (timestamp - self.start - 1) // self.width


@dataclass(frozen=True, slots=True)
class Flow:
    """Escrow entering and leaving one (contract, token, kind) in one bucket, exact."""

    contract: str
    token: str
    kind: str
    bucket: int
    incoming: int
    outgoing: int


@dataclass(frozen=True, slots=True)
class VerdictFailure:
    contract: str
    job_id: str
    status: str
    block_timestamp: int


def _bucket(column: str) -> str:
    # SQLite's integer division truncates toward zero; the window's start is below
    # every timestamp selected, so the operand is never negative
    return f"(({column} - :start) - 1) / :width"


def _padded(column: str, postgres: bool) -> str:
    """A decimal amount left-padded to the limbs' width (SQLite: a negative substr start)."""
    if postgres:
        return f"right('{_PAD}' || {column}, {len(_PAD)})"
    return f"substr('{_PAD}' || {column}, -{len(_PAD)})"


def _limbs(row: Iterable[object]) -> int:
    total = 0
    for value in row:
        total = total * 10**_LIMB + int(value or 0)  # type: ignore[call-overload]
    return total


def escrow_flows(conn: Db, chain_id: int, window: Window) -> list[Flow]:
    """Funding in and release out per bucket, from the window's start to the newest event.

    Buckets at or past ``window.buckets`` hold events after the window's end (none
    when the window ends at the indexed block), so a caller walking back from the
    current total never misses one.
    """
    jobs_in = ", ".join(f"'{n}'" for n in ("JobFunded", *_JOB_EXITS))
    task_exits = ", ".join(f"'{n}'" for n in _TASK_EXITS)
    pg = dialect(conn) == "postgresql"
    # SQLite's planner is told which index serves the exits; PostgreSQL's picks it
    by_kind_time = "" if pg else "INDEXED BY events_kind_time"
    sql = f"""
    WITH flow AS (
        SELECT e.contract AS contract, j.token AS token, 'jobs' AS kind,
               {_bucket("e.block_timestamp")} AS b,
               CASE WHEN e.name = 'JobFunded' THEN 1 ELSE 0 END AS incoming,
               {_padded("j.funded_amount", pg)} AS p
        FROM events e JOIN jobs j ON j.chain_id = e.chain_id AND j.contract = e.contract
             AND j.job_id = e.subject
        WHERE e.chain_id = :chain AND e.name IN ({jobs_in}) AND e.block_timestamp > :start
        UNION ALL
        SELECT e.contract, '', 'tasks', {_bucket("e.block_timestamp")}, 1,
               {_padded("t.reward", pg)}
        FROM events e JOIN tasks t ON t.chain_id = e.chain_id AND t.contract = e.contract
             AND t.task_id = e.subject
        WHERE e.chain_id = :chain AND e.name = 'TaskCreated' AND e.block_timestamp > :start
        UNION ALL
        SELECT x.contract, '', 'tasks', {_bucket("x.ts")}, 0, {_padded("t.reward", pg)}
        FROM (SELECT contract, subject, MIN(block_timestamp) AS ts
              FROM events {by_kind_time}
              WHERE chain_id = :chain AND name IN ({task_exits}) AND block_timestamp > :start
              GROUP BY contract, subject) x
        JOIN tasks t ON t.chain_id = :chain AND t.contract = x.contract AND t.task_id = x.subject
    )
    SELECT contract, token, kind, b, incoming, {_LIMB_SUMS} FROM flow
    GROUP BY contract, token, kind, b, incoming
    """
    params = {"chain": chain_id, "start": window.start, "width": window.width}
    acc: dict[tuple[str, str, str, int], list[int]] = {}
    for row in conn.execute(sql, params):
        slot = acc.setdefault((str(row[0]), str(row[1]), str(row[2]), int(row[3])), [0, 0])
        slot[0 if row[4] else 1] += _limbs(tuple(row)[5:])
    return [Flow(c, t, k, b, v[0], v[1]) for (c, t, k, b), v in sorted(acc.items())]


def locked_points(current: int, net_by_bucket: Mapping[int, int], buckets: int) -> list[int]:
    """Escrow held at each of the ``buckets + 1`` bucket edges, walking back from now.

    ``net_by_bucket`` maps bucket number to incoming minus outgoing; buckets past
    the last edge are events after it and are taken off ``current`` first.
    """
    level = current - sum(v for b, v in net_by_bucket.items() if b >= buckets)
    points = [level]
    for b in range(buckets - 1, -1, -1):
        level -= net_by_bucket.get(b, 0)
        points.append(level)
    points.reverse()
    return points


def keeper_outcomes(conn: Db, chain_id: int, window: Window) -> dict[tuple[int, str], int]:
    """Finished keeper intents per (bucket, confirmed|preempted|failed).

    An intent is placed at its receipt block's time when the index holds that
    block's events, else at its due time: both are chain time, like the other
    pictures. Reads every finished intent of the chain (one row per action
    ever taken, not per event).
    """
    sql = f"""
    WITH done AS MATERIALIZED (
        SELECT COALESCE((SELECT e.block_timestamp FROM events e
                         WHERE e.chain_id = k.chain_id AND e.block_number = k.receipt_block
                         LIMIT 1), k.due_at) AS t, k.outcome AS outcome
        FROM keeper_intents k WHERE k.chain_id = :chain AND k.status = 'done'
    )
    SELECT {_bucket("t")} AS b, outcome, COUNT(*) FROM done
    WHERE t > :start AND t <= :end GROUP BY b, outcome
    """
    params = {"chain": chain_id, "start": window.start, "width": window.width, "end": window.end}
    out: dict[tuple[int, str], int] = {}
    for row in conn.execute(sql, params):
        key = (int(row[0]), _OUTCOME_GROUPS.get(str(row[1]), "failed"))
        out[key] = out.get(key, 0) + int(row[2])
    return out


_VERDICT_JOIN: Final = f"""
    FROM events e
    JOIN jobs j ON j.chain_id = e.chain_id AND j.contract = e.contract AND j.job_id = e.subject
         AND j.verdict_event = e.name
    LEFT JOIN verifications v ON v.chain_id = e.chain_id AND v.contract = e.contract
         AND v.job_id = e.subject
    WHERE e.chain_id = :chain AND e.name IN ({", ".join(f"'{n}'" for n in _VERDICTS)})
      AND e.block_timestamp > :start AND e.block_timestamp <= :end
"""


def verification_series(conn: Db, chain_id: int, window: Window) -> dict[tuple[int, str], int]:
    """Evaluator verdicts per (bucket, verification status); ``pending``: not verified yet."""
    sql = (
        f"SELECT {_bucket('e.block_timestamp')} AS b, COALESCE(v.status, 'pending') AS s, "
        f"COUNT(*) {_VERDICT_JOIN} GROUP BY b, s"
    )
    params = {"chain": chain_id, "start": window.start, "width": window.width, "end": window.end}
    return {(int(r[0]), str(r[1])): int(r[2]) for r in conn.execute(sql, params)}


def verdict_failures(
    conn: Db, chain_id: int, window: Window, limit: int = 20
) -> list[VerdictFailure]:
    """The newest verdicts in the window whose verification did not come out verified."""
    sql = (
        f"SELECT e.contract, e.subject, v.status, e.block_timestamp {_VERDICT_JOIN} "
        "AND v.status != 'verified' ORDER BY e.block_timestamp DESC, e.contract, e.subject "
        "LIMIT :limit"
    )
    params = {
        "chain": chain_id, "start": window.start, "end": window.end, "limit": limit,
    }  # fmt: skip
    rows = conn.execute(sql, params)
    return [VerdictFailure(str(r[0]), str(r[1]), str(r[2]), int(r[3])) for r in rows]


def deadlines_ahead(conn: Db, chain_id: int, until: int, config: PlannerConfig) -> list[Action]:
    """Every keeper call due by ``until``, by the planner's own rules (overdue ones too).

    Read as the keeper reads its subjects (``keeper.store.states``): jobs off
    ``jobs_due``, only those whose deadline falls by ``until``; live tasks off
    ``tasks_status_page``.
    """
    out: list[Action] = []
    for job in due_jobs(conn, chain_id, until):
        decided = plan_job(job, until, config)
        if isinstance(decided, Action):
            out.append(decided)
    for task in due_tasks(conn, chain_id, until):
        decided = plan_task(task, until)
        if isinstance(decided, Action):
            out.append(decided)
    out.sort(key=lambda a: (a.due_at, a.contract, a.subject))
    return out


def chain_now(conn: Db, chain_id: int) -> tuple[int, int] | None:
    """(block, timestamp) of the indexed block, or of the newest event when it was pruned."""
    row = conn.execute(
        "SELECT b.number, b.timestamp FROM cursor c JOIN blocks b ON b.chain_id = c.chain_id "
        "AND b.number = c.indexed_block WHERE c.chain_id = ?",
        (chain_id,),
    ).fetchone()
    if row is None:
        row = conn.execute(
            "SELECT block_number, block_timestamp FROM events WHERE chain_id = ? "
            "ORDER BY block_number DESC LIMIT 1",
            (chain_id,),
        ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def unfinished_intents(conn: Db, chain_id: int) -> dict[str, int]:
    """Keeper intents decided but not finished (open or in flight), by action."""
    rows = conn.execute(
        "SELECT action, COUNT(*) FROM keeper_intents WHERE chain_id = ? "
        "AND status IN ('open', 'inflight') GROUP BY action",
        (chain_id,),
    )
    return {str(r[0]): int(r[1]) for r in rows}
