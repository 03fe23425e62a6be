"""This daemon's standing for one role on one chain: the lease tried, renewed and reported.

Part of the composition root. The decisions are :mod:`keeper.domain.lease`,
the SQL :mod:`keeper.store.leases`; this object runs one try per renewal
interval, keeps the fence's epoch in step with the standing (None while not
leading, so every fenced write is refused), and turns each change into
metrics and a log line. A single daemon holds the lease from its first try
on: nothing else asks for it, and a restart takes its own node's lease back
at once (the epoch moves, fencing out anything the dead process left).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
from collections.abc import Callable

from keeper.config import ClusterConfig
from keeper.domain.lease import (
    LeaseState,
    LeaseTimings,
    Outcome,
    Standing,
    after_attempt,
    after_failure,
    fenced_out,
    holder_id,
    is_leader,
)
from keeper.obs.logging import get_logger
from keeper.obs.metrics import Metrics
from keeper.store.db import Db, dialect, session, transient_errors
from keeper.store.leases import LeaseFence, LeaseRowBusyError, LeaseStore
from keeper.waiting import wait_event

__all__ = ["INDEXER", "Leadership"]

log = get_logger(__name__)

INDEXER = "indexer"


class Leadership:
    """One role's lease as this process holds it (or waits for it)."""

    def __init__(
        self,
        conn: Db,
        chain_id: int,
        cluster: ClusterConfig,
        *,
        role: str = INDEXER,
        metrics: Metrics | None = None,
        reclaim: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.role = role
        self.node = cluster.node or socket.gethostname()
        self.holder = holder_id(self.node, os.getpid(), secrets.token_hex(4))
        self.timings = LeaseTimings(cluster.lease_seconds, cluster.renew_seconds)
        self.leases = LeaseStore(conn, role, chain_id)
        self.fence = LeaseFence(self.leases, self.holder)
        self.metrics = metrics
        self.state = LeaseState()
        # the first successful try may take back this node's own lease (a restart)
        self._reclaim = reclaim
        self._clock = clock
        if metrics is not None:
            metrics.lease_leader.labels(role=role).set(0)
        if dialect(conn) == "postgresql":
            # a writer stalled inside a transaction (SIGSTOP, a frozen VM) holds the lease
            # row's lock from its fence on, and a takeover waits on that lock: the server
            # ends such a session once it has idled in its transaction for a lease, which
            # rolls its batch back and frees the row for a standby
            ms = max(1, round(cluster.lease_seconds * 1000))
            session(conn, f"SET idle_in_transaction_session_timeout = {ms}")

    def leading(self) -> bool:
        return is_leader(self.state, self._clock())

    @property
    def epoch(self) -> int:
        return self.state.epoch

    def attempt(self) -> Outcome:
        """One try at the lease (acquire or renew); a database that is busy counts as a miss."""
        sent = self._clock()
        t = self.timings
        # a miss: locked past the busy timeout or the row's wait, a server gone
        misses: tuple[type[Exception], ...] = (LeaseRowBusyError, *transient_errors())
        try:
            tried = self.leases.try_acquire(
                self.holder, self.node, t.lease_seconds, startup=self._reclaim,
                # past the idle-in-transaction bound, so that one frees an idle stalled
                # writer first; a writer stalled mid-statement is ended after this wait
                wait_seconds=t.lease_seconds + t.renew_seconds,
            )  # fmt: skip
        except misses as exc:
            ended = exc.ended if isinstance(exc, LeaseRowBusyError) else []
            if ended:
                log.warning("lease_holder_session_ended", role=self.role, sessions=ended)
            else:
                log.warning("lease_try_failed", role=self.role, error=str(exc))
            out = after_failure(self.state, self._clock())
        else:
            self._reclaim = False
            out = after_attempt(self.state, tried, self.holder, sent, self.timings)
        self._apply(out, "taken over" if out.change == "lost" else out.change)
        return out

    def step_down(self) -> None:
        """A commit was fenced out: stop leading now, before the next renewal says so."""
        if self.metrics is not None:
            self.metrics.lease_fenced_writes.labels(role=self.role).inc()
        self._apply(fenced_out(self.state), "fenced")

    def release(self) -> None:
        """On a clean stop: end the lease now so a standby need not wait for it to expire."""
        if self.state.standing is Standing.LEADER:
            with contextlib.suppress(*transient_errors()):
                self.leases.release(self.holder, self.state.epoch)
            self._apply(fenced_out(self.state), "released")

    async def run(self, stop: asyncio.Event) -> None:
        """Try every renewal interval until stopped."""
        while not stop.is_set():
            await wait_event(stop, self.timings.renew_seconds)
            if not stop.is_set():
                self.attempt()

    def _apply(self, out: Outcome, reason: str) -> None:
        self.state = out.state
        leading = out.state.standing is Standing.LEADER
        self.fence.epoch = out.state.epoch if leading else None
        m, role = self.metrics, self.role
        if m is not None:
            m.lease_leader.labels(role=role).set(1 if leading else 0)
            m.lease_epoch.labels(role=role).set(out.state.epoch)
        if out.change == "acquired":
            if m is not None:
                m.lease_acquired.labels(role=role).inc()
                if out.leaderless_seconds is not None:
                    m.lease_failovers.labels(role=role).inc()
                    m.lease_failover_seconds.labels(role=role).observe(out.leaderless_seconds)
            log.info(
                "lease_acquired",
                role=role,
                holder=self.holder,
                epoch=out.state.epoch,
                leaderless_seconds=out.leaderless_seconds,
            )
        elif reason == "released":
            log.info("lease_released", role=role, holder=self.holder, epoch=out.state.epoch)
        elif out.change in ("lost", "expired"):
            if m is not None:
                m.lease_lost.labels(role=role, reason=reason).inc()
            log.warning(
                "lease_lost",
                role=role,
                holder=self.holder,
                epoch=out.state.epoch,
                reason=reason,
                new_holder=out.state.holder_seen,
            )
