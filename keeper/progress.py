"""Backfill progress: blocks/s, events/s and ETA on one redrawn terminal line."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, TextIO

from keeper.domain.model import BlockHeader, Event
from keeper.store.index_store import ApplyResult


class ProgressReporter:
    """An IndexListener that draws progress (when enabled) and always keeps the totals."""

    def __init__(self, *, enabled: bool, stream: TextIO, min_interval: float = 0.25) -> None:
        self.enabled = enabled
        self.stream = stream
        self.min_interval = min_interval
        self.start_block = 0
        self.target = 0
        self.indexed = 0
        self.events = 0
        self.started = time.monotonic()
        self._drawn = 0.0

    def begin(self, start_block: int, target: int) -> None:
        self.start_block = start_block
        self.indexed = start_block
        self.target = target
        self.started = time.monotonic()

    def on_heads(self, head: BlockHeader, finalized: int, indexed: int) -> None:
        self.indexed = max(self.indexed, indexed)

    def on_batch(self, result: ApplyResult, events: Sequence[Event]) -> None:
        self.events += result.new_events
        if events:
            self.indexed = max(self.indexed, events[-1].log.block_number)
        self._draw()

    def on_reorg(self, depth: int, fork: int) -> None:
        self.indexed = min(self.indexed, fork)

    def on_halt(self, reason: str) -> None:
        pass

    def rates(self) -> tuple[float, float, float | None]:
        """(blocks/s, events/s, ETA seconds or None) since begin()."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        blocks = max(0, self.indexed - self.start_block)
        bps = blocks / elapsed
        remaining = max(0, self.target - self.indexed)
        eta = remaining / bps if bps > 0 else None
        return bps, self.events / elapsed, eta

    def _draw(self, *, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._drawn < self.min_interval:
            return
        self._drawn = now
        bps, eps, eta = self.rates()
        span = max(1, self.target - self.start_block)
        pct = 100.0 * max(0, self.indexed - self.start_block) / span
        eta_text = "--" if eta is None else f"{eta:,.0f}s"
        self.stream.write(
            f"\rblock {self.indexed:,}/{self.target:,} {pct:5.1f}%  "
            f"{bps:,.0f} blocks/s  {eps:,.0f} events/s  ETA {eta_text}   "
        )
        self.stream.flush()

    def finish(self, final_block: int) -> dict[str, Any]:
        self.indexed = max(self.indexed, final_block)
        self._draw(force=True)
        if self.enabled:
            self.stream.write("\n")
        elapsed = time.monotonic() - self.started
        bps, eps, _ = self.rates()
        return {
            "indexed_block": final_block,
            "from_block": self.start_block,
            "events": self.events,
            "seconds": round(elapsed, 3),
            "blocks_per_second": round(bps, 1),
            "events_per_second": round(eps, 1),
        }
