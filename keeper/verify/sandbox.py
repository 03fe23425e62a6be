"""Run CPU-bound checks on untrusted input in a worker process that can be killed.

A job's schema and its deliverable come from parties we do not trust, and
Python's ``re`` (used by JSON Schema ``pattern``) backtracks exponentially on
patterns like ``^(a+)+$``; it holds the GIL, so neither a thread nor an
asyncio timeout can stop it. The re-run therefore happens in one spawned
worker process with an address-space limit; when a call overruns its
timeout the worker is killed and a fresh one is started for the next call.

One plain process on a pipe rather than a ``multiprocessing.Pool``: a pool
silently replaces a worker that died (say, from a SIGTERM sent to the whole
process group at shutdown) and leaves the caller waiting out its full
timeout. Here a dead worker is noticed within a poll interval and reported
as ``SandboxCrashed``, a retryable error, so nothing is recorded for a
verdict whose re-run was interrupted.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

from keeper.errors import RetryableError

T = TypeVar("T")

DEFAULT_TIMEOUT = 10.0  # seconds; far beyond what validating any legitimate document takes
DEFAULT_MEMORY = 1 << 30  # bytes of address space for the worker: a 1 MiB document needs far less
# How often a waiting caller checks that the worker is still alive.
POLL_SECONDS = 0.05
# The stack each call runs on. Validation recurses through $ref chains in
# generators and in the resolver's native code; on the usual 8 MiB the C stack
# can overflow (SIGSEGV) before Python's recursion limit raises. With room to
# spare the limit is reached first and the call ends in a RecursionError.
CALL_STACK_BYTES = 64 << 20
# Signals a process gets from its own fault: the input crashed it, and would again.
_FAULT_SIGNALS = frozenset(
    {signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL, signal.SIGFPE}
)


class SandboxTimeout(Exception):
    """The call did not finish in time; its worker was killed."""


class SandboxCrashed(RetryableError):
    """The worker died or the sandbox was closed before answering; try again later."""


class SandboxFault(Exception):
    """The worker died of a fault of its own (SIGSEGV, SIGABRT...) while running the call.

    Not retryable: the same input would crash a fresh worker the same way, so a
    verdict whose re-run does this is reported, not retried forever.
    """


def _limit_memory(max_bytes: int) -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (max_bytes, max_bytes))
    except (ImportError, ValueError, OSError):  # not on this platform: time limit only
        pass


def _serve(conn: Connection, max_bytes: int) -> None:
    """The worker's loop: run each (fn, args) received, send back (ok, value)."""
    # Ctrl-C in a terminal reaches the whole group; the parent decides when we stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _limit_memory(max_bytes)
    threading.stack_size(CALL_STACK_BYTES)
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):
            return
        reply = _on_big_stack(fn, args)
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return


def _on_big_stack(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[bool, Any]:
    """Run one call on a thread with ``CALL_STACK_BYTES`` of stack; (ok, value or exception)."""
    out: list[tuple[bool, Any]] = []

    def target() -> None:
        try:
            out.append((True, fn(*args)))
        except BaseException as exc:  # sent back to the caller, who re-raises it
            out.append((False, exc))

    thread = threading.Thread(target=target, name="sandbox-call")
    thread.start()
    thread.join()
    return out[0]


class Sandbox:
    """One reusable worker process; ``call`` runs a picklable function in it with a timeout."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, memory: int = DEFAULT_MEMORY) -> None:
        self.timeout = timeout
        self.memory = memory
        self._proc: BaseProcess | None = None
        self._conn: Connection | None = None
        self._lock = threading.Lock()  # one call at a time: the worker runs one thing
        self._closed = False

    def _worker(self) -> tuple[BaseProcess, Connection]:
        if self._proc is None or self._conn is None or not self._proc.is_alive():
            self._kill()
            # spawn, not fork: the parent runs an event loop and threads
            context = multiprocessing.get_context("spawn")
            parent, child = context.Pipe()
            proc = context.Process(target=_serve, args=(child, self.memory), daemon=True)
            proc.start()
            child.close()
            self._proc, self._conn = proc, parent
        return self._proc, self._conn

    def _kill(self) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if conn is not None:
            conn.close()
        if proc is not None:
            if proc.is_alive():
                proc.kill()
            proc.join(timeout=5)

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Blocking call; raises ``SandboxTimeout`` (and replaces the worker) on overrun."""
        with self._lock:
            if self._closed:
                raise SandboxCrashed("the sandbox is closed")
            proc, conn = self._worker()
            conn.send((fn, args))
            deadline = time.monotonic() + self.timeout
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._kill()
                    raise SandboxTimeout(f"no result within {self.timeout}s")
                try:
                    ready = conn.poll(min(POLL_SECONDS, remaining))
                    reply = conn.recv() if ready else None
                except (EOFError, OSError):
                    ready, reply = False, None
                if reply is not None:
                    ok, value = reply
                    if not ok:
                        raise value
                    result: T = value
                    return result
                if not proc.is_alive() or self._closed:
                    code = proc.exitcode
                    self._kill()
                    if not self._closed and code is not None and -code in _FAULT_SIGNALS:
                        name = signal.Signals(-code).name
                        raise SandboxFault(f"the re-run worker crashed ({name})")
                    raise SandboxCrashed("the re-run worker stopped before answering")

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``run`` without blocking the event loop."""
        return await asyncio.to_thread(self.run, fn, *args)

    def close(self) -> None:
        """Stop the worker; a call waiting on it ends with ``SandboxCrashed`` at once."""
        self._closed = True
        with self._lock:
            self._kill()
