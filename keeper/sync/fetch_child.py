"""The fetch process, started by the indexer (keeper.sync.fetch_process) on its import path.

Reads a :class:`~keeper.sync.fetch_wire.FetchSpec` on stdin, runs the same
:class:`~keeper.sync.history.RangeFetcher` the indexer runs in process (scan,
cut, check, decode, read) and writes each batch, then ``done`` or the
exception that ended the range, as frames on stdout. Its RPC calls travel
with the frames, so the parent's metrics count them. It logs to stderr like
the parent, masking the same secrets, and exits when the parent closes its
stdin or stops reading (a parent killed without a word).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import pickle
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import BinaryIO

from keeper.domain.events import decode_logs
from keeper.domain.model import ChainRead, Event, Log
from keeper.errors import RetryableError
from keeper.obs.logging import configure_logging, get_logger, register_secret
from keeper.process_tuning import tune_allocator
from keeper.rpc.client import RpcClient
from keeper.sync.fetch_wire import (
    FetchSpec,
    Kind,
    Message,
    RecordingObserver,
    read_spec,
    to_wire,
    write_frame,
    write_ready,
)
from keeper.sync.history import CHILD_FETCHING_AHEAD, RangeFetcher
from keeper.sync.log_stamps import StampTrust
from keeper.sync.view_calls import ViewReader
from keeper.waiting import wait_event

log = get_logger(__name__)

# how often calls made since the last frame are reported when no batch carried them
REPORT_SECONDS = 1.0


def portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling as itself, else a RetryableError naming it.

    An exception whose constructor takes other arguments than its ``args``
    cannot be rebuilt by the parent; the range is then retried like any
    transient failure, with the original type and message in the text.
    """
    try:
        back = pickle.loads(pickle.dumps(exc))
    except Exception:  # any failure to rebuild it
        back = None
    if type(back) is type(exc) and str(back) == str(exc):
        return exc
    return RetryableError(f"fetch process: {type(exc).__name__}: {exc}")


async def produce(spec: FetchSpec, out: BinaryIO) -> None:
    recorder = RecordingObserver()
    rpc = RpcClient(**spec.client, observer=recorder)
    rpc.adopt_health(spec.health)
    views = ViewReader(rpc, spec.multicall)

    def decode(logs: Iterable[Log], timestamps: Mapping[int, int]) -> list[Event]:
        return decode_logs(logs, spec.protocols, timestamps)

    async def reads(events: Sequence[Event]) -> list[ChainRead]:
        return await views.execute(events, finalized=spec.finalized, head=spec.head)

    stamps = StampTrust(spec.stamps_trusted)
    fetcher = RangeFetcher(
        rpc, spec.addresses, spec.policy, decode, reads, ahead=CHILD_FETCHING_AHEAD, stamps=stamps
    )

    writing = asyncio.Lock()  # one frame at a time: the report and the batches share out

    async def send(kind: Kind, body: object) -> None:
        async with writing:
            message: Message = (
                kind,
                body,
                recorder.drain(),
                spec.policy,
                rpc.health(),
                stamps.trusted,
            )
            await asyncio.to_thread(write_frame, out, message)

    async def report(stop: asyncio.Event) -> None:
        """The calls made since the last frame, every REPORT_SECONDS while there are any:
        a batch held up by retries still shows in the parent's metrics and health.
        Stopped by ``stop``, never cancelled: a frame it has begun is always written whole."""
        while not stop.is_set():
            await wait_event(stop, REPORT_SECONDS)
            if recorder.calls and not stop.is_set():
                await send("calls", None)

    stop = asyncio.Event()
    reporting = asyncio.create_task(report(stop))
    try:
        async with rpc, contextlib.aclosing(fetcher.prefetched(spec.start, spec.end)) as ranges:
            async for item in ranges:
                await send("batch", to_wire(item))
    except Exception as exc:  # the parent raises it
        log.debug("fetch_process_failed", error=type(exc).__name__)
        await send("error", portable(exc))
        return
    finally:
        stop.set()
        await reporting
    await send("done", None)


async def run(spec: FetchSpec, out: BinaryIO) -> None:
    """``produce``, cancelled when the parent closes stdin."""
    task = asyncio.ensure_future(produce(spec, out))
    loop = asyncio.get_running_loop()

    def on_stdin() -> None:
        if not os.read(0, 4096):
            loop.remove_reader(0)
            task.cancel()

    loop.add_reader(0, on_stdin)
    with contextlib.suppress(asyncio.CancelledError):
        await task


def main() -> int:
    # frames on a copy of stdout; fd 1 itself now goes to stderr, so nothing
    # printed by accident can break a frame
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    try:
        write_ready(out)
    except BrokenPipeError:  # a parent that no longer wants this child
        return 1
    spec = read_spec(sys.stdin.buffer)
    if spec is None:  # never given a range
        return 0
    for secret in spec.secrets:
        register_secret(secret)
    configure_logging(spec.log_format, spec.log_level, stream=sys.stderr)
    if spec.gc_threshold:
        gc.set_threshold(*spec.gc_threshold)
    tune_allocator()
    try:
        asyncio.run(run(spec, out))
    except BrokenPipeError:  # the parent stopped reading: it is gone
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
