"""Timed waits and reaped tasks that never lose a cancellation (keeper/waiting.py)."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from keeper.waiting import cancel_and_wait, wait_event

PACKAGE = Path(__file__).resolve().parents[1] / "keeper"


async def test_wait_event_says_whether_the_event_was_set_in_time() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.05) is False
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_event(event, 5) is True


async def test_a_waiter_cancelled_in_the_turn_its_event_is_set_ends_cancelled() -> None:
    """The order a daemon's shutdown meets: a commit sets the wake event, and in the same
    turn the loop waiting on it is cancelled. ``asyncio.wait_for`` (Python 3.11) returned
    normally here, and a loop that checks only its stop flag then ran on forever."""
    event = asyncio.Event()
    after: list[str] = []

    async def loop() -> None:
        await wait_event(event, 10)
        after.append("went on")

    waiter = asyncio.create_task(loop())
    await asyncio.sleep(0.01)  # waiting now
    event.set()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert after == []


async def test_cancel_and_wait_ends_the_task_and_keeps_the_callers_cancellation() -> None:
    cleaned: list[str] = []

    async def slow_to_stop() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0.1)  # its own cleanup, during which the caller is cancelled
            cleaned.append("done")

    task = asyncio.create_task(slow_to_stop())
    await asyncio.sleep(0.01)
    await cancel_and_wait(task)  # its own cancellation is the expected end: not raised
    assert task.cancelled() and cleaned == ["done"]

    inner = asyncio.create_task(slow_to_stop())
    await asyncio.sleep(0.01)
    reached: list[str] = []

    async def owner() -> None:
        await cancel_and_wait(inner)
        reached.append("after the reap")

    outer = asyncio.create_task(owner())
    await asyncio.sleep(0.02)  # inside the reap, inner still cleaning up
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert reached == []
    await asyncio.wait({inner}, timeout=5)
    assert inner.cancelled()  # the caller's cancellation reached it too, mid-cleanup


def test_the_package_waits_with_a_time_limit_only_through_keeper_waiting() -> None:
    """``asyncio.wait_for`` loses a cancellation that meets the awaited result in one turn;
    every timed wait goes through ``wait_event`` or ``asyncio.timeout`` instead."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "wait_for":
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert found == []
