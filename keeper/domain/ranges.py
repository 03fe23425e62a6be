"""How many blocks to ask for in one ``eth_getLogs``: learn it from the provider.

Providers cap log queries by block span, by result count, or by time, and the
cap moves with log density. The policy starts from a guess, takes the
provider's own suggestion when a query is refused (else halves), and creeps
back up after a run of successes. A rate limit says nothing about the range,
so it never shrinks it: shrinking would only multiply the requests that are
being limited.

Pure: no I/O, no clock; the scanner feeds outcomes in and reads sizes out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Grow by a quarter: fast enough to recover from one dense region within a few
# dozen queries, slow enough that a hard cap costs at most one refusal per
# GROW_AFTER successes.
GROW_FACTOR = 1.25
# Successes in a row before growing; a single lucky query proves little.
GROW_AFTER = 5


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
    _streak: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        if not 1 <= self.minimum <= self.maximum:
            raise ValueError("RangePolicy needs 1 <= minimum <= maximum")
        if self.grow_after < 1 or self.grow_factor <= 1:
            raise ValueError("RangePolicy needs grow_after >= 1 and grow_factor > 1")
        self.size = self._clamp(self.size)

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
        return cursor, min(target, cursor + self.size - 1)


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
