"""What the reducers fold: a subject's events in chain order, its pinned reads, and
lenient reading of argument and read values.

A read is used only when it was taken at the block of one of the subject's own
events (``Reads.at``; the description, which never changes, may come from any
earlier read), and a read recorded as failed (result key ``error``) is ignored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from keeper.domain.model import (
    ArgValue,
    ChainRead,
    Event,
    Protocol,
)

__all__ = ["ZERO_ADDRESS", "Reads", "addr_or_none", "as_int", "as_str", "chain_order"]


ZERO_ADDRESS = "0x" + "0" * 40


def as_int(value: ArgValue | None, default: int = 0) -> int:
    """Read results may come back from JSON as decimal strings; events give ints."""
    if value is None:
        return default
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value, 0) if value.startswith("0x") else int(value)
        except ValueError:
            return default
    return default


def as_str(value: ArgValue | None) -> str:
    return value.lower() if isinstance(value, str) else ""


def addr_or_none(value: ArgValue | None) -> str | None:
    s = as_str(value)
    return s if s and s != ZERO_ADDRESS else None


def chain_order(events: Sequence[Event], contract: str, subject: str, p: Protocol) -> list[Event]:
    mine = [
        e
        for e in events
        if e.subject == subject and e.contract == contract and e.protocol is p and e.name
    ]
    mine.sort(key=lambda e: (e.log.block_number, e.log.log_index))
    return mine


@dataclass(slots=True)
class Reads:
    """A subject's reads by kind, ordered by block, with the pinning rule above."""

    by_kind: dict[str, list[ChainRead]] = field(default_factory=dict)

    @classmethod
    def of(cls, reads: Sequence[ChainRead], contract: str, subject: str) -> Reads:
        out = cls()
        for r in reads:
            if r.contract == contract and r.subject == subject:
                out.by_kind.setdefault(r.kind, []).append(r)
        for lst in out.by_kind.values():
            lst.sort(key=lambda r: (r.block_number, r.block_hash))
        return out

    def at(self, kind: str, event: Event, *, exact: bool = False) -> Mapping[str, ArgValue] | None:
        """The read taken at the event's block, else (unless exact) the latest before it."""
        best: ChainRead | None = None
        for r in self.by_kind.get(kind, ()):
            if "error" in r.result:  # a reverted/undecodable call is no information
                continue
            if r.block_hash == event.log.block_hash:
                return r.result
            if not exact and r.block_number < event.log.block_number:
                best = r
        return best.result if best is not None else None
