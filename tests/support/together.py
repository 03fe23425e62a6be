"""Calls released at the same instant on their own threads, for races between connections."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["at_once"]

T = TypeVar("T")


def at_once(
    calls: Sequence[Callable[[], T]], rounds: int = 1, within: float = 60
) -> tuple[list[T], list[BaseException]]:
    """Run every call ``rounds`` times, each round started together by a barrier.

    The results and the exceptions, collected rather than raised: the race's loser
    failing is what such a test looks for.
    """
    gate = threading.Barrier(len(calls))
    results: list[T] = []
    errors: list[BaseException] = []

    def run(call: Callable[[], T]) -> None:
        for _ in range(rounds):
            gate.wait()
            try:
                results.append(call())
            except BaseException as exc:  # collected for the caller's assert
                errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(within)
    return results, errors
