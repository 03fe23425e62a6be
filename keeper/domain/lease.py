"""Leader election by a lease row in the shared database: the pure decisions.

One row per (role, chain) names its holder, an epoch and an expiry, all by
the DATABASE clock (one clock for every daemon, whatever their hosts say).
A try at the lease is one conditional upsert (``keeper.store.leases``): it
takes the row when it is ours, expired, or (at start-up) held by an earlier
incarnation of this same node; the epoch goes up whenever the holder
changes. That epoch is the fence: every index commit checks, inside its own
transaction, that its epoch still holds the lease, so a leader that stalled
past its lease commits nothing after a standby took over.

What is decided here, from what a try returned and the local monotonic
clock: whether this process leads, until when it may believe so without a
renewal (the time the try was SENT plus the lease: the database granted at
least that), what changed (acquired, renewed, lost) and how long the role
had no leader when it was taken over. The same answers on SQLite and
PostgreSQL: only the statement text differs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Literal

__all__ = [
    "Attempt",
    "LeaseRow",
    "LeaseState",
    "LeaseTimings",
    "Outcome",
    "Standing",
    "after_attempt",
    "after_failure",
    "fenced_out",
    "holder_id",
    "is_leader",
]

Change = Literal["acquired", "renewed", "lost", "standby", "expired"]


@dataclass(frozen=True, slots=True)
class LeaseTimings:
    """How long a lease lasts and how often it is renewed (and a standby asks for it).

    A standby takes over at most ``lease + renew`` seconds after the leader's
    last renewal, then needs one batch to index; the leader renews
    ``lease / renew`` times per lease, so one slow renewal does not lose it.
    """

    lease_seconds: float = 10.0
    renew_seconds: float = 1.0

    def __post_init__(self) -> None:
        if not (self.renew_seconds > 0 and self.lease_seconds > 0):
            raise ValueError("lease and renewal intervals must be positive")
        if self.renew_seconds * 2 > self.lease_seconds:
            raise ValueError(
                f"renewal every {self.renew_seconds} s must be at most half the lease "
                f"({self.lease_seconds} s), or one late renewal loses it"
            )


@dataclass(frozen=True, slots=True)
class LeaseRow:
    """The lease row as the database holds it (times by the database clock, seconds)."""

    holder: str
    node: str
    epoch: int
    expires_at: float
    renewed_at: float


@dataclass(frozen=True, slots=True)
class Attempt:
    """What one try at the lease saw: the row before and after, and the database time."""

    before: LeaseRow | None
    after: LeaseRow | None
    now: float


class Standing(Enum):
    LEADER = "leader"
    STANDBY = "standby"


@dataclass(frozen=True, slots=True)
class LeaseState:
    """This process's standing; ``valid_until`` is on the local monotonic clock."""

    standing: Standing = Standing.STANDBY
    epoch: int = 0
    valid_until: float = -math.inf
    holder_seen: str | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    state: LeaseState
    change: Change
    # seconds (database clock) the role had no live leader before this takeover:
    # from the previous holder's last renewal to this acquisition
    leaderless_seconds: float | None = None


def holder_id(node: str, pid: int, token: str) -> str:
    """A holder name unique to one process incarnation (a restart is a new holder)."""
    return f"{node}:{pid}:{token}"


def is_leader(state: LeaseState, now: float) -> bool:
    """Whether to act as leader at local monotonic time ``now`` (the fence still guards)."""
    return state.standing is Standing.LEADER and now < state.valid_until


def after_attempt(
    state: LeaseState, attempt: Attempt, holder: str, sent_at: float, timings: LeaseTimings
) -> Outcome:
    """The standing after a try at the lease that reached the database.

    ``sent_at`` is the local monotonic time the try was sent: the database
    stamped its expiry at or after that instant, so leading until
    ``sent_at + lease`` never outlives the lease the database granted.
    """
    row = attempt.after
    if row is not None and row.holder == holder and row.expires_at > attempt.now:
        was_ours = state.standing is Standing.LEADER and state.epoch == row.epoch
        new = LeaseState(Standing.LEADER, row.epoch, sent_at + timings.lease_seconds, holder)
        if was_ours:
            return Outcome(new, "renewed")
        before = attempt.before
        gap = None
        if before is not None and before.holder != holder:
            gap = max(0.0, attempt.now - before.renewed_at)
        return Outcome(new, "acquired", gap)
    # a standby remembers the epoch it saw held, for the operator (its fence refuses all)
    seen, epoch = (None, state.epoch) if row is None else (row.holder, row.epoch)
    new = LeaseState(Standing.STANDBY, epoch, -math.inf, seen)
    return Outcome(new, "lost" if state.standing is Standing.LEADER else "standby")


def after_failure(state: LeaseState, now: float) -> Outcome:
    """The standing after a try that could not reach the database (locked, down).

    A leader keeps leading while its last grant lasts (the fence stops any
    commit past it anyway); then it steps down without a word from anyone.
    """
    if state.standing is Standing.LEADER and now >= state.valid_until:
        return Outcome(LeaseState(Standing.STANDBY, state.epoch), "expired")
    change: Change = "renewed" if state.standing is Standing.LEADER else "standby"
    return Outcome(state, change)


def fenced_out(state: LeaseState) -> Outcome:
    """A commit found the lease gone (taken over, or expired): stop leading at once."""
    change: Change = "lost" if state.standing is Standing.LEADER else "standby"
    return Outcome(LeaseState(Standing.STANDBY, state.epoch, -math.inf, state.holder_seen), change)
