"""Waiting on an event, or on a task's end, without losing a cancellation.

Every long-running loop sleeps by waiting on its stop (or wake) event with a
time limit, and is ended by a cancellation when its owner shuts down. On
Python 3.11 ``asyncio.wait_for`` returns normally when the waiting task is
cancelled in the same turn of the loop as the event is set: the cancellation
is lost, a loop that only checks its stop flag goes on, and the shutdown that
cancelled it waits for it forever (a daemon cancelled right after a batch set
its wake event never stopped). ``asyncio.timeout`` counts cancellations and
lets the caller's own through, so every timed wait goes through it, here.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["cancel_and_wait", "wait_event"]


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Whether ``event`` was set within ``seconds``; a cancellation of the caller propagates."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended.

    Its own cancellation is the expected end and is not raised; a cancellation of
    the caller that arrives meanwhile is (``contextlib.suppress(CancelledError)``
    around the ``await`` would swallow both alike).
    """
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
