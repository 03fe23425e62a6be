"""How many blocks to ask for in one ``eth_getLogs``: learn it from the provider.

Providers cap log queries by block span, by result count, or by time, and the
cap moves with log density. The policy starts from a guess, takes the
provider's own suggestion when a query is refused (else halves), and creeps
back up after a run of successes. A rate limit says nothing about the range,
so it never shrinks it: shrinking would only multiply the requests that are
being limited.

A block span alone does not bound what comes back: 2,000 blocks of a quiet
contract are a few logs, 2,000 blocks at 3,000 logs each are six million, and
the daemon holds a whole answer in memory until it is committed. So the
policy also learns the density of what it is served (logs and wire bytes per
block, from each answer) and sizes the next range to stay under a target
number of events and bytes (``max_events``, ``max_bytes``). It starts small
and at most doubles per answer, so a sparse stretch reaches the provider's
span within a dozen queries while a dense one is never asked for blindly.
The bound is per block at its finest: a cursor is per block, so one block
holding more than the bound is fetched, and committed, alone. An answer far
over the bound (density jumped within one range) is cut into several
commits at block boundaries by :func:`split_by_block`.

Pure: no I/O, no clock; the scanner feeds outcomes in and reads sizes out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

# Grow by a quarter: fast enough to recover from one dense region within a few
# dozen queries, slow enough that a hard cap costs at most one refusal per
# GROW_AFTER successes.
GROW_FACTOR = 1.25
# Successes in a row before growing; a single lucky query proves little.
GROW_AFTER = 5
# Learned density may at most double the span per answer: the density of the
# next blocks is only guessed from the last ones, and doubling bounds how far
# a wrong guess can overshoot while still covering a sparse chain quickly.
DENSITY_GROWTH = 2
# Blocks in the first query when answers are bounded: nothing is known yet.
DENSITY_START = 4
# An answer past this many times ``max_bytes`` is dropped unread and its range
# halved: slack for a density estimate a little off, a hard stop for a jump.
ANSWER_CAP_FACTOR = 2


@dataclass(slots=True)
class RangePolicy:
    """The current block span per query, kept within ``[minimum, maximum]``.

    ``ceiling`` is a hard per-query cap the provider announced ("limited to a
    10,000 range"); growth never passes it. A cap learned from a result-count
    refusal is not remembered, since density changes along the chain.
    """

    size: int = 2_000
    minimum: int = 1
    maximum: int = 100_000
    grow_after: int = GROW_AFTER
    grow_factor: float = GROW_FACTOR
    ceiling: int | None = None
    # targets per answer; None leaves the answer bounded by blocks alone
    max_events: int | None = None
    max_bytes: int | None = None
    _streak: int = field(default=0, repr=False)
    # the span the learned density allows (None: answers are not bounded)
    _fit: int | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not 1 <= self.minimum <= self.maximum:
            raise ValueError("RangePolicy needs 1 <= minimum <= maximum")
        if self.grow_after < 1 or self.grow_factor <= 1:
            raise ValueError("RangePolicy needs grow_after >= 1 and grow_factor > 1")
        if (self.max_events is not None and self.max_events < 1) or (
            self.max_bytes is not None and self.max_bytes < 1
        ):
            raise ValueError("RangePolicy needs max_events and max_bytes >= 1 when set")
        self.size = self._clamp(self.size)
        if self.bounded:
            self._fit = DENSITY_START

    @property
    def bounded(self) -> bool:
        """True when answers are bounded by events or bytes, not only by blocks."""
        return self.max_events is not None or self.max_bytes is not None

    @property
    def span(self) -> int:
        """The span of the next query: the provider's size, within what density allows."""
        return self.size if self._fit is None else max(1, min(self.size, self._fit))

    @property
    def at_minimum(self) -> bool:
        """True when a refusal can no longer be answered by shrinking."""
        return self.size <= self.minimum

    def _upper(self) -> int:
        return self.maximum if self.ceiling is None else max(self.minimum, self.ceiling)

    def _clamp(self, size: int) -> int:
        return max(self.minimum, min(self._upper(), size))

    def on_success(self) -> int:
        """Count a served query; every ``grow_after`` in a row grows the size."""
        self._streak += 1
        if self._streak >= self.grow_after:
            self._streak = 0
            grown = max(self.size + 1, int(self.size * self.grow_factor))
            self.size = self._clamp(grown)
        return self.size

    def on_answer(self, span: int, events: int, nbytes: int) -> int:
        """Count a served query of ``span`` blocks holding ``events`` logs of ``nbytes``.

        Learns the density for the next range (when answers are bounded) and
        counts the success toward the provider size's growth, unless density
        kept the query below that size: a size never asked for proves nothing.
        """
        if self._fit is None or span >= self.size:
            self.on_success()
        if self._fit is not None:
            self._fit = fit_span(
                self._fit,
                span,
                events,
                nbytes,
                max_events=self.max_events,
                max_bytes=self.max_bytes,
            )
        return self.span

    def answer_cap(self, span: int) -> int | None:
        """The most bytes an answer of ``span`` blocks may have before it is dropped.

        None (no cap) for a single block, which must be read whatever its
        size, and for a policy without a byte bound.
        """
        if self.max_bytes is None or span <= 1:
            return None
        return ANSWER_CAP_FACTOR * self.max_bytes

    def on_answer_too_large(self, span: int) -> int:
        """An answer of ``span`` blocks passed ``answer_cap``: halve what density allows.

        The provider's size is untouched (it served the answer), so a quiet
        stretch later grows back at the density pace.
        """
        self._fit = max(1, span // 2)
        return self.span

    def on_too_large(
        self,
        suggested: int | None = None,
        *,
        hard_cap: int | None = None,
        tried: int | None = None,
    ) -> int:
        """Shrink after a refusal.

        ``tried`` is the span of the refused query when it was shorter than the
        size (clipped at the target); shrinking starts from it so the same
        query is never repeated. ``suggested`` is a span the provider said
        would work (from a suggested range); it is taken only if it is actually
        smaller, else the size halves. ``hard_cap`` is an announced
        blocks-per-query limit and is remembered as the ceiling.
        """
        self._streak = 0
        base = self.size if tried is None else max(1, min(self.size, tried))
        if hard_cap is not None and hard_cap >= 1:
            self.ceiling = hard_cap if self.ceiling is None else min(self.ceiling, hard_cap)
        candidates = [base // 2]
        if suggested is not None and 1 <= suggested < base:
            candidates = [suggested]
        if hard_cap is not None and 1 <= hard_cap < base:
            candidates.append(hard_cap)
        self.size = self._clamp(min(candidates))
        return self.size

    def on_rate_limited(self) -> int:
        """A 429 is about request rate, not range: the size stays as it is."""
        return self.size

    def next_range(self, cursor: int, target: int) -> tuple[int, int] | None:
        """The inclusive range to ask for next, starting at ``cursor``; None when done."""
        if cursor > target:
            return None
        return cursor, min(target, cursor + self.span - 1)


def fit_span(
    current: int,
    span: int,
    events: int,
    nbytes: int,
    *,
    max_events: int | None,
    max_bytes: int | None,
    growth: int = DENSITY_GROWTH,
) -> int:
    """The span the next query may have after ``span`` blocks answered ``events`` logs of
    ``nbytes``, to stay under ``max_events`` and ``max_bytes``.

    The density of the answer decides when it had anything; growth is at most
    ``growth`` times the larger of the span just served and the span already
    allowed, so a short query (clipped at the end of a range) does not lose
    what longer ones learned. Never below one block.
    """
    limit = max(current, span * growth)
    if max_events is not None and events > 0:
        limit = min(limit, span * max_events // events)
    if max_bytes is not None and nbytes > 0:
        limit = min(limit, span * max_bytes // nbytes)
    return max(1, limit)


def split_by_block(
    items: Sequence[T],
    block_of: Callable[[T], int],
    size_of: Callable[[T], int],
    *,
    max_items: int | None,
    max_bytes: int | None,
) -> list[tuple[int, int]]:
    """Cut chain-ordered ``items`` into ``(start, end)`` slices, each within the bounds.

    A cut falls only between blocks, since a commit's cursor is a block: a
    block holding more than the bound is one slice on its own. Empty input
    gives no slice.
    """
    cuts: list[tuple[int, int]] = []
    start = 0
    count = 0
    size = 0
    block_start = 0
    for i, item in enumerate(items):
        if i and block_of(item) != block_of(items[i - 1]):
            block_start = i
        count += 1
        size += size_of(item)
        over = (max_items is not None and count > max_items) or (
            max_bytes is not None and size > max_bytes
        )
        if over and block_start > start:
            # close the slice before this item's block; the block starts the next one
            cuts.append((start, block_start))
            start = block_start
            count = i - block_start + 1
            size = sum(size_of(x) for x in items[block_start : i + 1])
    if start < len(items):
        cuts.append((start, len(items)))
    return cuts


def span_hint(
    suggested_range: tuple[int, int] | None, max_span: int | None
) -> tuple[int | None, int | None]:
    """Turn a refusal's hints into ``(suggested span, hard cap)`` for ``on_too_large``.

    Providers suggest a range starting at our ``fromBlock`` (Alchemy, Infura)
    or inside our range (reth); either way its width is the span that works.
    """
    suggested: int | None = None
    if suggested_range is not None:
        lo, hi = suggested_range
        if hi >= lo:
            suggested = hi - lo + 1
    return suggested, max_span


def rest_is_large(seen_events: int, seen_blocks: int, left_blocks: int, least_events: int) -> bool:
    """Whether the rest of a range, as dense as its part seen so far, holds ``least_events``.

    A second process for the fetching costs an interpreter start and its own
    memory; it pays only for a rest that takes seconds to index, and the
    density of a range's first batches is the best guess of the rest's.
    """
    if seen_blocks <= 0 or left_blocks <= 0:
        return False
    return seen_events * left_blocks >= least_events * seen_blocks


def busy_enough(cpu_seconds: float, wall_seconds: float, least_share: float) -> bool:
    """Whether this process spent at least ``least_share`` of the wall time on the CPU.

    A second process for the fetching helps when this one is what a range waits
    on (a dense chain on a fast node: decoding and SQLite keep it busy); when it
    mostly waits for the node (a slow or far node, a node-bound chain) the child
    only takes the node's answers one batch at a time, fewer in flight than the
    fetching here keeps (bench/README.md, seventh session), and adds its memory.
    """
    if wall_seconds <= 0:
        return least_share <= 0
    return cpu_seconds >= least_share * wall_seconds
