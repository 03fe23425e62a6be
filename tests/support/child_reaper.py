"""No test leaves a process behind: a child started while a test ran and still alive
once its fixtures are torn down is killed, and the test errors naming it.

A leaked daemon keeps polling (a dead node, a dropped database) for the rest of the
session: it costs later tests CPU, ports and log noise, which is how one test's early
failure used to turn into another's timeout far away. Children born while fixtures are
set up (a module's anvil) belong to those fixtures and are left alone, and so do
multiprocessing's processes: its own helpers serve the whole session, and a sandbox's
worker (``keeper.verify.sandbox``) is spawned on a module fixture's first call, idles
on its pipe and ends when its owner closes it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["children", "leaked", "reap"]

_BORN = pytest.StashKey[set[int]]()


def children() -> set[int]:
    """This process's live children (zombies, already exited, left out)."""
    found: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            found.update(int(p) for p in (task / "children").read_text().split())
        except (OSError, ValueError):
            continue
    return {pid for pid in found if _state(pid) not in ("Z", "X", None)}


def _state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:200]


# multiprocessing's helpers (started once, on first use) and its spawned workers
_SESSION_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver",
                    "--multiprocessing-fork")  # fmt: skip


def leaked(born: set[int]) -> set[int]:
    """Which of ``born`` still run (multiprocessing's processes aside)."""
    return {
        pid for pid in born & children()
        if not any(helper in _command(pid) for helper in _SESSION_HELPERS)
    }  # fmt: skip


def reap(pids: set[int]) -> list[str]:
    """SIGKILL each (a stopped one too) and collect it; their command lines, for the error."""
    commands = [f"{pid}: {_command(pid)}" for pid in sorted(pids)]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            continue
    return commands


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    before = children()
    try:
        return (yield)
    finally:
        item.stash[_BORN] = children() - before


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    result = yield
    left = leaked(item.stash.get(_BORN, set()))
    if left:
        raise RuntimeError(f"the test left processes running (killed now): {reap(left)}")
    return result
