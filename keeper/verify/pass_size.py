"""How many verdicts one verifier pass takes: as many as fit in a tenth of a second.

A pass's results are stored in one transaction, and each commit waits for the disk
(``synchronous=FULL``). At a fixed 50 a pass, a catch-up that records tens of thousands of
verifications spends about a tenth of its time in those commits (bench/README.md). A pass
that fetches nothing never yields the event loop, so its length is what the indexer and
the API wait: passes double while a full one stays under half of ``TARGET_SECONDS`` and
halve when one goes over it, between ``SMALLEST`` and ``LARGEST``. A pass that waits on
fetches goes over and comes back to the smallest, where a slow source keeps it.
"""

from __future__ import annotations

from typing import Final

__all__ = ["LARGEST", "SMALLEST", "TARGET_SECONDS", "next_size"]

SMALLEST: Final = 50
LARGEST: Final = 1000
TARGET_SECONDS: Final = 0.1


def next_size(size: int, ran: int, seconds: float) -> int:
    """The next pass's size after one of ``size`` verified ``ran`` in ``seconds``.

    A pass that ran fewer than ``size`` found no more to do: it says nothing about a
    larger one, so the size stays.
    """
    if seconds > TARGET_SECONDS:
        return max(SMALLEST, size // 2)
    if ran >= size and seconds < TARGET_SECONDS / 2:
        return min(LARGEST, size * 2)
    return size
