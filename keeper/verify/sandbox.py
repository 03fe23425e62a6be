"""Run CPU-bound checks on untrusted input in a worker process that can be killed.

A job's schema and its deliverable come from parties we do not trust, and
Python's ``re`` (used by JSON Schema ``pattern``) backtracks exponentially on
patterns like ``^(a+)+$``; it holds the GIL, so neither a thread nor an
asyncio timeout can stop it. The re-run therefore happens in one spawned
worker process with an address-space limit; when a call overruns its
timeout the worker is terminated and a fresh one is started for the next call.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import multiprocessing.pool
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_TIMEOUT = 10.0  # seconds; validating a 1 MiB document against a 4 KB schema takes < 1 s
DEFAULT_MEMORY = 1 << 30  # bytes of address space for the worker: a 1 MiB document needs far less


class SandboxTimeout(Exception):
    """The call did not finish in time; its worker was killed."""


def _limit_memory(max_bytes: int) -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))
    except (ImportError, ValueError, OSError):  # not on this platform: time limit only
        pass


class Sandbox:
    """One reusable worker process; ``call`` runs a picklable function in it with a timeout."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, memory: int = DEFAULT_MEMORY) -> None:
        self.timeout = timeout
        self.memory = memory
        self._pool: multiprocessing.pool.Pool | None = None
        self._lock = threading.Lock()

    def _worker(self) -> multiprocessing.pool.Pool:
        with self._lock:
            if self._pool is None:
                # spawn, not fork: the parent runs an event loop and threads
                context = multiprocessing.get_context("spawn")
                self._pool = context.Pool(1, initializer=_limit_memory, initargs=(self.memory,))
            return self._pool

    def _kill(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.terminate()
            pool.join()

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Blocking call; raises ``SandboxTimeout`` (and replaces the worker) on overrun."""
        pending = self._worker().apply_async(fn, args)
        try:
            result: T = pending.get(self.timeout)
        except multiprocessing.TimeoutError:
            self._kill()
            raise SandboxTimeout(f"no result within {self.timeout}s") from None
        return result

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``run`` without blocking the event loop."""
        return await asyncio.to_thread(self.run, fn, *args)

    def close(self) -> None:
        self._kill()
