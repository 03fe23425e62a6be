"""Which keeper owns which subject when several keepers share the work.

Sharding only spreads gas and load: correctness never depends on it, because
every send is gated by a simulation (a keeper that loses a race records
``preempted``). A stable hash keeps a subject on the same shard across
restarts and across machines, whatever Python's per-process hash seed is.
"""

from __future__ import annotations

import hashlib

__all__ = ["is_mine", "shard_of"]


def shard_of(subject: str, shards: int) -> int:
    """Stable shard index in ``[0, shards)`` for a subject id.

    The subject is lowercased first so ``0xAB..`` and ``0xab..`` (the same task
    id) can never land on two shards.
    """
    if shards < 1:
        raise ValueError("shards must be >= 1")
    if shards == 1:
        return 0
    digest = hashlib.sha256(subject.lower().encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


def is_mine(
    subject: str,
    *,
    shard: int,
    shards: int,
    due_at: int,
    now: int,
    fallback_seconds: int,
) -> bool:
    """Whether this keeper should act on a due subject at chain time ``now``.

    Its own shard is taken as soon as due; another shard's work only once it
    has stayed undone for ``fallback_seconds`` of chain time, so one dead
    keeper delays the escrows it owns but never blocks them.
    """
    if shard_of(subject, shards) == shard:
        return True
    return now >= due_at + fallback_seconds
