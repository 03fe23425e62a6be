"""Where the verifier's scan of the index resumes, and what a rollback undoes of it.

A scan that started from the first event each time looked at every verdict
ever indexed to find the few new ones, and a catch-up verifies in chunks, so
catching up over a long history cost its square. The scan keeps its position
instead, and reads the rollbacks the index records (by whichever daemon
indexes): a rollback to block F drops the verifications of verdicts after F
that the chain no longer has and moves the position back to F, so the events
that replaced them are found. A daemon starts with no position: its first
pass checks every verification and looks at every verdict once.

A verdict that becomes verifiable with no new event of its own and no
rollback (none does today: a task's evidence hash is read with its
``TaskEvaluated``) would wait for the next start.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from keeper.store import verifications as store
from keeper.store.db import Db


@dataclass(slots=True)
class PendingScan:
    """One chain's scan: positions of the job and task verdict scans, the last rollback read.

    ``recheck`` holds subjects whose latest verdict is behind the position and
    may want a verification again: those whose verification a rollback
    dropped (an earlier verdict of theirs may stand), and tasks whose verdict a
    rollback made eligible again (the event that reopened the task is gone).
    """

    chain_id: int
    rollback_seq: int | None = None
    jobs_after: store.EventPosition | None = None
    tasks_after: store.EventPosition | None = None
    recheck: list[store.Orphan] = field(default_factory=list)
    # the last event when the latest scans started, if they came back short
    _jobs_end: store.EventPosition | None = None
    _tasks_end: store.EventPosition | None = None

    def sync(self, conn: Db) -> int:
        """Take in the rollbacks recorded since the last call; returns orphans deleted."""
        seen = self.rollback_seq
        new = store.rollbacks_since(conn, self.chain_id, -1 if seen is None else seen)
        if seen is None or (new is not None and new.first_seq > seen + 1):
            # first pass, or rollback records pruned before we read them: check all
            self.jobs_after = self.tasks_after = None
            self.rollback_seq = new.last_seq if new is not None else 0
            # (the scan from the start finds what is left of each orphan's subject)
            return len(store.delete_orphans(conn, self.chain_id))
        if new is None:
            return 0
        self.rollback_seq = new.last_seq
        fork = new.lowest_fork_point
        self.jobs_after = _rewound(self.jobs_after, fork)
        self.tasks_after = _rewound(self.tasks_after, fork)
        orphans = store.delete_orphans(conn, self.chain_id, above=fork)
        eligible = [
            store.Orphan(t.contract, t.task_id, t.event_name)
            for t in store.unverified_task_verdicts(conn, self.chain_id)
        ]
        self.recheck += [o for o in dict.fromkeys(orphans + eligible) if o not in self.recheck]
        return len(orphans)

    def scanned_block(self) -> int | None:
        """The block of the last event both scans have passed; ``None`` before they pass one."""
        if self.jobs_after is None or self.tasks_after is None:
            return None
        return min(self.jobs_after[0], self.tasks_after[0])

    def pending(
        self, conn: Db, limit: int
    ) -> tuple[list[store.IndexedVerdict], list[store.IndexedTaskVerdict]]:
        """The next unverified job and task verdicts after their positions."""
        end = store.last_event(conn, self.chain_id)
        jobs = store.pending_verdicts(conn, self.chain_id, limit, after=self.jobs_after)
        tasks = store.pending_task_verdicts(conn, self.chain_id, limit, after=self.tasks_after)
        self._jobs_end = end if len(jobs) < limit else None
        self._tasks_end = end if len(tasks) < limit else None
        return jobs, tasks

    def passed(self, row: store.IndexedVerdict | store.IndexedTaskVerdict) -> None:
        """Move past a verdict once it is recorded: one that failed is read again next time."""
        position = (row.block_number, row.block_hash, row.log_index)
        if isinstance(row, store.IndexedVerdict):
            self.jobs_after = position
        else:
            self.tasks_after = position

    def read_through(self) -> None:
        """After every verdict returned is recorded: a scan that came back short read every
        event indexed before it started, verdict or not, so the next one starts after them
        (else a history with few verdicts of a kind is read again at every pass)."""
        self.jobs_after = _later(self.jobs_after, self._jobs_end)
        self.tasks_after = _later(self.tasks_after, self._tasks_end)
        self._jobs_end = self._tasks_end = None


def _later(
    position: store.EventPosition | None, end: store.EventPosition | None
) -> store.EventPosition | None:
    if end is None:
        return position
    return end if position is None else max(position, end)


def _rewound(position: store.EventPosition | None, fork_point: int) -> store.EventPosition | None:
    """The position, moved back to just after block ``fork_point`` if it was past it."""
    if position is None:
        return None
    return min(position, store.block_start(fork_point + 1))
