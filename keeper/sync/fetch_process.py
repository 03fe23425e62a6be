"""Long historical ranges fetched by a second process while this one commits.

A backfill spends about half its CPU fetching (JSON, validation, decoding,
view reads) and half writing SQLite, one after the other on one core. For a
range of at least ``fetch_process_blocks`` blocks whose rest looks like
holding ``fetch_process_events`` events, fetched so far by a process busy on
the CPU at least ``fetch_process_busy`` of the time (``Indexer._ranges``: one
that mostly waits on its node gains nothing from a second), the indexer
hands the fetching of that rest to ``keeper.sync.fetch_child`` in a child (the
same RangeFetcher, on a client built from this one's settings) and only
commits here: both halves run at once, on two cores. Batches arrive in range
order and are committed one at a time as before, so crash safety and reorg
handling do not change; the child never writes anything. The child is started
(``launch``) before it is told its range: it says when its interpreter and
imports are ready (an empty frame), and until then the indexer goes on fetching
here, so the start costs the range no stall.

The child is this process's: started per range, killed when the range is
closed (done, failed, cancelled, or finished here before the child was ready),
and its RPC calls are reported to this process's observer as they arrive: with
each batch, and every second while a batch is being fetched (a range held up by
a failing endpoint shows in the metrics and the endpoints' health while it
waits, not after). A child that dies mid-range is a
RetryableError: the step is retried from the cursor, as after any fault.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import os
import sys
from collections.abc import AsyncGenerator, Sequence

from keeper.domain.model import Protocol
from keeper.domain.ranges import RangePolicy
from keeper.errors import RetryableError
from keeper.obs.logging import configured, get_logger, registered_secrets
from keeper.rpc.client import RpcClient
from keeper.sync.fetch_wire import (
    FetchSpec,
    encode,
    from_wire,
    read_message,
    read_ready,
    replay,
)
from keeper.sync.history import Fetched
from keeper.sync.log_stamps import StampTrust

__all__ = ["ProcessFetcher"]

log = get_logger(__name__)

# The child's first line: this process's import path, then the child's module. Started
# with -P, it never looks in its working directory: a keeper/ there is not this code.
_BOOT = (
    "import sys; sys.path[:] = sys.argv[1:]; "
    "from keeper.sync.fetch_child import main; sys.exit(main())"
)


def _working_directory() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # removed under this process: its relative entries find nothing
        return None


# where a '' or relative entry of sys.path pointed when this process imported its code
_STARTED_IN = _working_directory()
# a frame is one batch (bounded by batch_bytes) as pickled tuples: well under this
_READ_LIMIT = 1 << 20


async def _stopped(proc: asyncio.subprocess.Process) -> None:
    """Kill the child unless it has exited, and reap it."""
    if proc.returncode is None:
        proc.kill()
    await proc.wait()


def child_path(path: Sequence[str], cwd: str | None) -> list[str]:
    """This process's import path for the child, its relative entries made absolute
    (left out without a working directory, where they could find nothing).

    The child must run this process's code (the wire between them is this version's),
    wherever it was started: ``-m`` would look in the working directory first, and
    an older checkout there would answer with another wire. The same entries in the
    same order find the same modules, the standard library's included, which a
    package root put first would not (an installed wheel's root is site-packages).
    """
    if cwd is None:
        return [entry for entry in path if os.path.isabs(entry)]
    return [os.path.join(cwd, entry) if entry else cwd for entry in path]


class ProcessFetcher:
    """``RangeFetcher.prefetched`` with the fetching done by a child process."""

    def __init__(
        self,
        rpc: RpcClient,
        addresses: Sequence[str],
        policy: RangePolicy,
        protocols: dict[str, Protocol],
        multicall: str | None,
        stamps: StampTrust,
    ) -> None:
        self.rpc = rpc
        self.addresses = list(addresses)
        self.policy = policy
        self.protocols = dict(protocols)
        self.multicall = multicall
        self.stamps = stamps  # the indexer's, learned by the children too
        # children started, and the one running now (status and tests)
        self.started = 0
        self.pid: int | None = None
        # why a child could not start (an interpreter or install that fails before its
        # first frame fails the same way each time): the indexer then fetches here
        self.broken: str | None = None
        # a child started ahead of its range (launch), until prefetched or discard takes it
        self._launched: asyncio.Future[asyncio.subprocess.Process] | None = None

    def spec(self, start: int, end: int, finalized: int, head: int | None) -> FetchSpec:
        fmt, level = configured()
        return FetchSpec(
            client=self.rpc.settings(),
            addresses=self.addresses,
            protocols=self.protocols,
            policy=self.policy,  # pickled: the child learns on its copy
            multicall=self.multicall,
            health=self.rpc.health(),
            finalized=finalized,
            head=head,
            start=start,
            end=end,
            stamps_trusted=self.stamps.trusted,
            log_format=fmt,
            log_level=level,
            secrets=registered_secrets(),
            gc_threshold=gc.get_threshold(),
        )

    def launch(self) -> None:
        """Start a child now, to be given its range later (``prefetched``).

        Its interpreter and imports (about a third of a second) then overlap the
        batches still fetched here, instead of holding up the range at the handover.
        """
        if self._launched is None:
            self._launched = asyncio.ensure_future(self._start())

    @property
    def launched(self) -> bool:
        return self._launched is not None

    @property
    def ready(self) -> bool:
        """Whether the launched child has started (or failed to: ``prefetched`` says)."""
        return self._launched is not None and self._launched.done()

    async def discard(self) -> None:
        """Stop a launched child that was never given a range (its range ended here)."""
        launched, self._launched = self._launched, None
        if launched is None:
            return
        launched.cancel()
        await asyncio.wait([launched])  # its cancellation or failure is not this caller's
        if not launched.cancelled() and launched.exception() is None:
            await _stopped(launched.result())

    async def _start(self) -> asyncio.subprocess.Process:
        """A child that has imported its code and waits for its range, or the
        RetryableError of one that exited first (then never started again)."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-P",
            "-c",
            _BOOT,
            *child_path(sys.path, _STARTED_IN),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=_READ_LIMIT,
        )
        assert proc.stdout is not None
        self.started += 1
        log.info("fetch_process_started", pid=proc.pid)
        try:
            await read_ready(proc.stdout)
        except asyncio.IncompleteReadError:
            code = await proc.wait()
            failed = f"the fetch process exited ({code})"
            if code > 0:  # not killed: it could not start
                self.broken = f"{failed} before its first message"
                log.error("fetch_process_unavailable", reason=self.broken,
                          hint="fetching in this process from now on")  # fmt: skip
            raise RetryableError(f"{failed} before it was given its range") from None
        except BaseException:  # cancelled (discarded) or a wrong first frame
            await _stopped(proc)
            raise
        return proc

    async def prefetched(
        self, start: int, end: int, *, finalized: int, head: int | None
    ) -> AsyncGenerator[Fetched, None]:
        """Blocks ``start``..``end`` as ready batches, fetched by the child meanwhile
        (the launched one, else one started now)."""
        launched, self._launched = self._launched, None
        proc = await (launched if launched is not None else self._start())
        assert proc.stdin is not None and proc.stdout is not None
        self.pid = proc.pid
        try:
            try:
                proc.stdin.write(encode(self.spec(start, end, finalized, head)))
                await proc.stdin.drain()
            except ConnectionError:
                pass  # a child already gone: its end of stdout says so, read below
            while True:
                try:
                    kind, body, calls, policy, health, trusted = await read_message(proc.stdout)
                except asyncio.IncompleteReadError:
                    code = await proc.wait()
                    raise RetryableError(
                        f"the fetch process exited ({code}) before blocks {start}..{end} "
                        "were fetched"
                    ) from None
                replay(calls, self.rpc.observer)
                self._learn(policy)
                self.rpc.adopt_health(health)
                self.stamps.trusted = self.stamps.trusted and trusted
                if kind == "batch":
                    yield from_wire(body)
                elif kind == "error":
                    raise body
                elif kind == "done":
                    return
        finally:
            await _stopped(proc)
            self.pid = None

    def _learn(self, policy: RangePolicy) -> None:
        """Take the range policy as the child has it now: the next range (or a retry)
        starts where its density left off, as it would in process."""
        for f in dataclasses.fields(self.policy):
            setattr(self.policy, f.name, getattr(policy, f.name))
