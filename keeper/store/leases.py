"""The lease rows: one holder per (role, chain), by the database clock, and the fence.

The decisions are :mod:`keeper.domain.lease`; this module is the SQL. Each
statement exists in two texts that differ only in the clock expression
(:data:`DB_NOW`), side by side in :data:`STATEMENTS`, so the PostgreSQL
backend runs the same protocol: the upsert of the
Chainlink shape (``ON CONFLICT … DO UPDATE … WHERE holder = excluded.holder
OR expires_at < now``) takes or renews the lease and bumps the epoch when the
holder changes; :meth:`LeaseStore.holds` is the fence, run inside a writer's
own transaction, which fails unless that writer's epoch still holds an
unexpired lease.

Why the fence is sound on both: on SQLite the writer's ``BEGIN IMMEDIATE``
holds the only write lock from the check to its COMMIT, so no takeover can
land in between; on PostgreSQL the check is an UPDATE of the lease row,
whose row lock a takeover's upsert waits on until the writer commits, and
READ COMMITTED re-evaluates the takeover's WHERE on the committed row.

A writer stopped between its fence and its COMMIT (SIGSTOP, a frozen VM) keeps
that row lock. The server ends its session by itself once it idles a lease in
its transaction, but not one stopped in the middle of a pipelined statement:
the server counts that session active. So a takeover waits on the lock for at
most ``wait_seconds``, and then, if the lease has expired by the database
clock and a session holding the lease table's lock has not moved for a whole
lease, ends that session (:meth:`LeaseStore.end_stuck_holders`): its
transaction rolls back, exactly as if the server had timed it out.
"""

from __future__ import annotations

from typing import Any, Final

from keeper.domain.lease import Attempt, LeaseRow
from keeper.errors import KeeperError
from keeper.store.db import Db, Dialect, dialect, is_lock_timeout, write_transaction

__all__ = [
    "DB_NOW",
    "STATEMENTS",
    "LeaseFence",
    "LeaseLostError",
    "LeaseRowBusyError",
    "LeaseStore",
]

# seconds since the epoch, by the database's clock (subsecond precision)
DB_NOW: Final[dict[Dialect, str]] = {
    # SQLite 3.40 has no unixepoch('subsec'); 'now' is fixed within one statement
    "sqlite": "((julianday('now') - 2440587.5) * 86400.0)",
    # clock_timestamp(), not now(): now() is the transaction's start, and the fence
    # must judge expiry at the moment it runs
    "postgresql": "EXTRACT(EPOCH FROM clock_timestamp())::double precision",
}


def _texts(kind: Dialect) -> dict[str, str]:
    now = DB_NOW[kind]

    def p(name: str) -> str:
        return f":{name}"  # the PostgreSQL connection translates named placeholders

    return {
        "read": (
            "SELECT holder, node, epoch, expires_at, renewed_at FROM keeper_leases "
            f"WHERE role = {p('role')} AND chain_id = {p('chain_id')}"
        ),
        "now": f"SELECT {now}",
        # takes the lease when it is ours, expired, or (at start-up only) held by an
        # earlier incarnation of this node, which a restart means is dead
        "acquire": (
            "INSERT INTO keeper_leases (role, chain_id, holder, node, epoch, expires_at, "
            f"renewed_at) VALUES ({p('role')}, {p('chain_id')}, {p('holder')}, {p('node')}, 1, "
            f"{now} + {p('lease')}, {now}) "
            "ON CONFLICT (role, chain_id) DO UPDATE SET "
            "epoch = CASE WHEN keeper_leases.holder = excluded.holder "
            "THEN keeper_leases.epoch ELSE keeper_leases.epoch + 1 END, "
            # the clock read again here, not excluded.*: on PostgreSQL the inserted row's
            # values are computed before the upsert waits on a holder's row lock, and a
            # lease dated from the start of that wait could be over when it is taken
            "holder = excluded.holder, node = excluded.node, "
            f"expires_at = {now} + {p('lease')}, renewed_at = {now} "
            f"WHERE keeper_leases.holder = excluded.holder OR keeper_leases.expires_at < {now} "
            f"OR ({p('startup')} = 1 AND keeper_leases.node = excluded.node)"
        ),
        # the fence: one row when this epoch still holds an unexpired lease
        "hold": (
            "UPDATE keeper_leases SET epoch = epoch "
            f"WHERE role = {p('role')} AND chain_id = {p('chain_id')} "
            f"AND holder = {p('holder')} AND epoch = {p('epoch')} AND expires_at > {now}"
        ),
        # a clean shutdown hands over at once instead of after the lease: dated a second
        # back, so a standby's try within the same tick of the clock (SQLite's moves in
        # milliseconds) already finds it expired ("expires_at < now")
        "release": (
            f"UPDATE keeper_leases SET expires_at = {now} - 1 "
            f"WHERE role = {p('role')} AND chain_id = {p('chain_id')} "
            f"AND holder = {p('holder')} AND epoch = {p('epoch')}"
        ),
    }


# every statement in both dialects; the store runs the one its connection speaks
STATEMENTS: Final[dict[Dialect, dict[str, str]]] = {
    "sqlite": _texts("sqlite"),
    "postgresql": _texts("postgresql"),
}


class LeaseLostError(KeeperError):
    """A write was refused: its writer's epoch no longer holds the lease."""


class LeaseRowBusyError(KeeperError):
    """A try waited out its bound on the lease row's lock (PostgreSQL); ``ended`` lists
    the stuck sessions it ended, so the next try can get the row."""

    def __init__(self, ended: list[int]) -> None:
        super().__init__(f"the lease row stayed locked; stuck sessions ended: {ended or 'none'}")
        self.ended = ended


# the sessions a takeover may end: each holds the lease table's row lock, has not
# changed state for a whole lease (a live writer's statements move it on), is not
# itself waiting on a lock (another standby's try holds the table's lock while it
# waits for the row), and the lease it is waiting for has expired by the database clock
_STUCK_HOLDERS: Final = (
    "SELECT a.pid, pg_terminate_backend(a.pid) FROM pg_stat_activity a "
    "WHERE a.pid <> pg_backend_pid() AND a.datname = current_database() "
    "AND a.state IN ('active', 'idle in transaction') "
    "AND a.wait_event_type IS DISTINCT FROM 'Lock' "
    "AND a.state_change < clock_timestamp() - make_interval(secs => :lease) "
    "AND a.pid IN (SELECT l.pid FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
    "WHERE c.relname = 'keeper_leases' AND l.granted AND l.mode = 'RowExclusiveLock') "
    "AND EXISTS (SELECT 1 FROM keeper_leases WHERE role = :role AND chain_id = :chain_id "
    f"AND expires_at < {DB_NOW['postgresql']})"
)


class LeaseStore:
    """The lease of one role on one chain; callers own the connection."""

    def __init__(self, conn: Db, role: str, chain_id: int) -> None:
        self.conn = conn
        self.role = role
        self.chain_id = chain_id
        self.kind = dialect(conn)
        self.sql = STATEMENTS[self.kind]

    def _key(self, **extra: Any) -> dict[str, Any]:
        return {"role": self.role, "chain_id": self.chain_id, **extra}

    def current(self) -> LeaseRow | None:
        row = self.conn.execute(self.sql["read"], self._key()).fetchone()
        return None if row is None else _row(row)

    def now(self) -> float:
        """The database clock, in seconds."""
        return float(self.conn.execute(self.sql["now"]).fetchone()[0])

    def try_acquire(
        self,
        holder: str,
        node: str,
        lease_seconds: float,
        *,
        startup: bool,
        wait_seconds: float | None = None,
    ) -> Attempt:
        """One try at the lease, in one transaction: the row before, the upsert, the row after.

        ``wait_seconds`` bounds the wait on a PostgreSQL row lock; past it the try
        ends stuck holders and raises :class:`LeaseRowBusyError`.
        """
        c = self.conn
        try:
            with write_transaction(c):
                if wait_seconds is not None and self.kind == "postgresql":
                    c.execute(f"SET LOCAL lock_timeout = {max(1, round(wait_seconds * 1000))}")
                before = self.current()
                c.execute(
                    self.sql["acquire"],
                    self._key(holder=holder, node=node, lease=lease_seconds, startup=int(startup)),
                )
                after = self.current()
                now = self.now()
        except BaseException as exc:
            if is_lock_timeout(exc):
                raise LeaseRowBusyError(self.end_stuck_holders(lease_seconds)) from None
            raise
        return Attempt(before, after, now)

    def end_stuck_holders(self, lease_seconds: float) -> list[int]:
        """End the sessions stuck holding the lease row past an expired lease (PostgreSQL);
        their process ids."""
        rows = self.conn.execute(_STUCK_HOLDERS, self._key(lease=lease_seconds)).fetchall()
        return sorted(int(r[0]) for r in rows if r[1])

    def holds(self, holder: str, epoch: int) -> bool:
        """The fence: run inside the writer's open transaction, before its writes."""
        cur = self.conn.execute(self.sql["hold"], self._key(holder=holder, epoch=epoch))
        return cur.rowcount == 1

    def release(self, holder: str, epoch: int) -> None:
        self.conn.execute(self.sql["release"], self._key(holder=holder, epoch=epoch))


def _row(row: Any) -> LeaseRow:
    return LeaseRow(str(row[0]), str(row[1]), int(row[2]), float(row[3]), float(row[4]))


class LeaseFence:
    """What an index writer checks in each transaction: that ``epoch`` still leads.

    ``epoch`` is None while this process is not the leader: every write is
    refused then, so a standby that was handed a stale step writes nothing.
    """

    def __init__(self, leases: LeaseStore, holder: str) -> None:
        self.leases = leases
        self.holder = holder
        self.epoch: int | None = None
        self.refused = 0

    def check(self) -> None:
        """Raise LeaseLostError unless this writer's epoch holds the lease now."""
        if self.epoch is None or not self.leases.holds(self.holder, self.epoch):
            self.refused += 1
            raise LeaseLostError(
                f"{self.leases.role} lease of chain {self.leases.chain_id} is no longer held "
                f"by {self.holder} at epoch {self.epoch}: write refused"
            )
