"""What the status page's pictures show, read in one snapshot of the database.

The SQL is in :mod:`keeper.store.timeline`; this module picks the window for
the requested range, ends it at the indexed block's timestamp (chain time, so
a devnet that warps its clock draws the same as a live chain) and turns the
bucketed rows into series the chart functions take. Everything comes from
one read transaction, so the locked line, the table beside it and the totals
agree even while the indexer commits between two queries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from keeper.api.params import BadParam
from keeper.domain.planner import Action, PlannerConfig
from keeper.domain.text import shown
from keeper.store import queries, timeline
from keeper.store.db import Db
from keeper.store.tokens import TokenMeta, token_meta

__all__ = ["DEFAULT_RANGE", "RANGES", "LockedSeries", "Overview", "parse_range", "read_overview"]

# range name -> (bucket width in seconds, buckets)
RANGES: Final[dict[str, tuple[int, int]]] = {
    "hour": (60, 60),
    "day": (1800, 48),
    "week": (3 * 3600, 56),
}
DEFAULT_RANGE: Final = "day"
MAX_LOCKED_SERIES: Final = 8
OUTCOMES: Final = ("confirmed", "preempted", "failed")
VERIFICATION_STATUSES: Final = (
    "verified", "mismatch", "invalid_document", "evaluator_disagrees", "unavailable",
    "not_reproducible", "pending",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class LockedSeries:
    """Escrow held by one (contract, token, kind) at each bucket edge."""

    contract: str
    token: str
    kind: str
    values: list[int]


@dataclass(slots=True)
class Overview:
    range_name: str
    window: timeline.Window
    now: int
    block: int  # the indexed block every picture was read at
    locked: list[LockedSeries] = field(default_factory=list)
    locked_hidden: int = 0
    keeper: dict[str, list[int]] = field(default_factory=dict)
    verification: dict[str, list[int]] = field(default_factory=dict)
    failures: list[timeline.VerdictFailure] = field(default_factory=list)
    deadlines: list[Action] = field(default_factory=list)
    intents_backlog: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, TokenMeta] = field(default_factory=dict)

    @property
    def edges(self) -> list[int]:
        w = self.window
        return [w.start + i * w.width for i in range(w.buckets + 1)]


def parse_range(values: list[str]) -> str:
    """The ``range`` query parameter: one of RANGES' names (default: a day)."""
    if not values:
        return DEFAULT_RANGE
    if len(values) > 1 or values[0] not in RANGES:
        given = shown(", ".join(values))
        raise BadParam("range", f"must be one of {', '.join(RANGES)}, not {given}")
    return values[0]


def _per_bucket(
    counts: dict[tuple[int, str], int], names: tuple[str, ...], buckets: int
) -> dict[str, list[int]]:
    out = {name: [0] * buckets for name in names}
    for (b, name), n in counts.items():
        if 0 <= b < buckets:
            out.setdefault(name, [0] * buckets)[b] += n
    return out


def read_overview(
    conn: Db, chain_id: int, range_name: str, config: PlannerConfig
) -> Overview | None:
    """Every picture's data for ``range_name`` (a key of RANGES); None before any block."""
    indexed = timeline.chain_now(conn, chain_id)
    if indexed is None:
        return None
    block, now = indexed
    width, buckets = RANGES[range_name]
    window = timeline.Window.ending(now, width, buckets)
    view = Overview(range_name, window, now, block)
    current = {
        (r["contract"], r["token"], r["kind"]): int(r["amount"])
        for r in queries.escrow_locked(conn, chain_id=chain_id)
    }
    nets: dict[tuple[str, str, str], dict[int, int]] = {}
    for flow in timeline.escrow_flows(conn, chain_id, window):
        per = nets.setdefault((flow.contract, flow.token, flow.kind), {})
        per[flow.bucket] = per.get(flow.bucket, 0) + flow.incoming - flow.outgoing
    series = [
        LockedSeries(c, t, k, timeline.locked_points(current.get((c, t, k), 0), net, buckets))
        for (c, t, k) in set(current) | set(nets)
        for net in [nets.get((c, t, k), {})]
    ]
    series.sort(key=lambda s: (-s.values[-1], s.contract, s.token, s.kind))
    view.locked = series[:MAX_LOCKED_SERIES]
    view.locked_hidden = len(series) - len(view.locked)
    view.keeper = _per_bucket(timeline.keeper_outcomes(conn, chain_id, window), OUTCOMES, buckets)
    view.verification = _per_bucket(
        timeline.verification_series(conn, chain_id, window), VERIFICATION_STATUSES, buckets
    )
    view.failures = timeline.verdict_failures(conn, chain_id, window)
    view.deadlines = timeline.deadlines_ahead(conn, chain_id, now + width * buckets, config)
    view.intents_backlog = timeline.unfinished_intents(conn, chain_id)
    view.tokens = token_meta(conn, chain_id)
    return view
