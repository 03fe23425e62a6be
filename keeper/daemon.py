"""The long-running daemon: index, verify, keep and serve until told to stop.

It owns the task group, the signal handlers and the shutdown order: stop
taking new work, let in-flight writes and sends finish (each is a short
synchronous transaction or a persisted intent), close the database, exit 0.
The components come from :func:`keeper.compose.build`; each indexer step is
committed by the consumer in :mod:`keeper.indexing`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from keeper.act.dialect_watch import DialectWatch
from keeper.api.replicas import ReadTargets
from keeper.api.serve import ApiThread
from keeper.compose import build, check_chain_id, load
from keeper.config import Config
from keeper.domain.model import Protocol as EscrowProtocol
from keeper.domain.pacing import BlockPace
from keeper.errors import (
    DeepReorgError,
    KeeperError,
    RetryableError,
    StateCorruptedError,
)
from keeper.leadership import Leadership
from keeper.obs.logging import get_logger, log_context
from keeper.process_tuning import tune_process
from keeper.rpc.logs_reply import NATIVE as NATIVE_LOG_SCAN
from keeper.store import db as dbmod
from keeper.store.leases import LeaseLostError
from keeper.waiting import wait_event

log = get_logger(__name__)

# Shutdown must finish within a container's grace period (docker: 10 s).
SHUTDOWN_GRACE_SECONDS = 8.0


# Start-up retries of transient RPC failures: quick at first, then no more
# often than every 30 s while the node stays away.
STARTUP_RETRY_INITIAL = 0.5
STARTUP_RETRY_MAX = 30.0

# How often the daemon refreshes the query planner's statistics as tables grow.
STATISTICS_INTERVAL_SECONDS = 600.0

# How often the daemon looks for job tokens whose decimals() and symbol() it has
# not read yet (one scan of the jobs' tokens; each token is read once).
TOKEN_READ_INTERVAL_SECONDS = 10.0


def passing() -> tuple[type[Exception], ...]:
    """What a loop logs and meets again on its next pass.

    Any error of ours (a node's odd answer, a PostgreSQL server away) and a
    SQLite database locked past its busy timeout (``keeper db rebuild`` run
    beside the daemon) or out of disk: the operator can end each, and the
    daemon must then go on by itself. Corruption is none of these
    (``sqlite3.DatabaseError``, ``StateCorruptedError`` halts the index).
    """
    return (KeeperError, *dbmod.transient_errors())


# ---- the daemon -----------------------------------------------------------------


class Daemon:
    """The long-running process: index, verify, keep and serve until told to stop."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.stop = asyncio.Event()
        self.wake = asyncio.Event()
        self.c = build(cfg, self.wake)
        # one daemon per chain indexes (several may share the database); the fence
        # makes every index commit check, in its own transaction, that it still leads
        self.lead = Leadership(self.c.conn, cfg.chain.chain_id, cfg.cluster, metrics=self.c.metrics)
        self.c.store.fence = self.lead.fence
        self.keeper: Any = None
        self.verifier: Any = None
        self.api: ApiThread | None = None
        self.rpc_ok = False
        # set at start-up: the keeper's own watch, or one of the daemon's (dialect_loop)
        self.dialect_watch: DialectWatch | None = None
        # the API's read replicas (an API-only daemon's pages); never handed to the
        # keeper or the verifier, which read and write the primary only (self.c.conn)
        self.read_targets: ReadTargets | None = None
        if cfg.database.read_urls:
            self.read_targets = ReadTargets(
                cfg.database.url,
                cfg.database.read_urls,
                max_lag_seconds=cfg.database.max_replica_lag_seconds,
            )

    # status for the API
    def status(self) -> Mapping[str, Any]:
        st = self.c.indexer.state
        head = st.head
        out: dict[str, Any] = {
            "chain_id": self.cfg.chain.chain_id,
            "head_block": head.number if head else None,
            "finalized_block": st.finalized if st.finalized >= 0 else None,
            "indexed_block": st.indexed if st.indexed >= 0 else None,
            "lag_seconds": max(0, int(time.time()) - head.timestamp) if head else None,
            "halt_reason": st.halted,
            "reorgs": st.reorgs,
            "indexer": {"enabled": self.cfg.indexer.enabled},
        }
        if self.read_targets is not None:
            out["database"] = self.read_targets.status()
        if self.keeper is not None:
            last = self.keeper.last
            out["keeper"] = {
                "enabled": True,
                "dry_run": self.cfg.keeper.dry_run,
                "address": self.keeper.address,
                "ready": self.keeper.ready,
                "last_tick": None if last is None else _summary_dict(last),
            }
        else:
            out["keeper"] = {"enabled": False}
        return out

    def readiness(self) -> Mapping[str, Any]:
        from keeper.api.health import ReadinessInputs, readiness_checks

        st = self.c.indexer.state
        # the keeper compares its balance with the minimum on every tick; readiness
        # only needs the verdict, expressed in the inputs' terms
        balance = None
        if self.keeper is not None:
            balance = self.cfg.keeper.min_balance_wei if self.keeper.balance_ok else 0
        inputs = ReadinessInputs(
            rpc_reachable=self.rpc_ok,
            halted_reason=st.halted,
            head_block=st.head.number if st.head else None,
            indexed_block=st.indexed if st.indexed >= 0 else None,
            cursor_idle_seconds=time.monotonic() - self.c.listener.last_progress,
            max_idle_seconds=max(30.0, 10 * self.cfg.chain.poll_interval),
            head_tolerance_blocks=max(2, self.cfg.chain.window),
            keeper_enabled=self.keeper is not None and not self.cfg.keeper.dry_run,
            signer_balance_wei=balance,
            min_balance_wei=self.cfg.keeper.min_balance_wei,
            indexing_here=self.cfg.indexer.enabled,
        )
        return readiness_checks(inputs)

    def start_api(self) -> None:
        if not self.cfg.api.enabled:
            return
        from keeper.api.app import make_app
        from keeper.api.serve import ApiThread
        from keeper.api.submit import submission_handler

        def build_app() -> web.Application:
            return make_app(
                self.cfg.database.target,
                self.c.metrics.registry,
                self.status,
                readiness=self.readiness,
                contracts={c.name: c.address for c in self.cfg.contracts},
                protocols={c.address: EscrowProtocol(c.protocol) for c in self.cfg.contracts},
                chain_id=self.cfg.chain.chain_id,
                submit_verdict=submission_handler(
                    self.cfg.database.target, self.cfg.chain.chain_id
                ),
                inline_lookups=True,  # ApiThread: the app's loop is its own
                read_targets=self.read_targets,
            )

        host, _, port = self.cfg.api.listen.rpartition(":")
        self.api = ApiThread(build_app, host.strip("[]") or "127.0.0.1", int(port))
        self.api.start()
        log.info("api_listening", listen=self.cfg.api.listen)

    def build_keeper(self) -> None:
        if not self.cfg.keeper.enabled:
            return
        from keeper.act.manager import Keeper

        self.keeper = Keeper.from_config(
            self.cfg.keeper,
            chain_id=self.cfg.chain.chain_id,
            rpc=self.c.rpc,
            db=self.c.conn,
            multicall=self.cfg.keeper.multicall,
            metrics=self.c.metrics,
            reorg_watch_blocks=self.cfg.chain.window,
            contracts=self.cfg.contracts,
            index=self.c.store,
        )

    async def detect_dialects(self) -> None:
        """Which dialect each configured contract speaks; the keeper encodes with it."""
        if self.keeper is not None:  # which also detects again after an upgrade
            self.dialect_watch = self.keeper.dialect_watch
        else:
            self.dialect_watch = DialectWatch(
                self.c.rpc, self.c.conn, self.cfg.chain.chain_id, self.cfg.contracts,
                self.c.metrics,
            )  # fmt: skip
        await self.dialect_watch.detect()

    async def dialect_loop(self, watch: DialectWatch) -> None:
        """Without the keeper, whose every tick refreshes the dialects, status and the
        metric would keep an upgraded contract's old dialect until a restart.

        Like the keeper's tick, a refresh waits for the index to reach the head (when
        this daemon indexes): the upgrade it names is then the one the contract answers
        for, not an older one indexed late."""
        while not self.stop.is_set():
            await wait_event(self.stop, self.cfg.chain.poll_interval)
            state = self.c.indexer.state
            behind = state.head is None or state.indexed < state.head.number
            if self.stop.is_set() or (self.lead.leading() and behind):
                continue
            try:
                await watch.refresh()
            except passing() as exc:  # the database away, say: the next pass tries again
                log.warning("dialect_refresh_failed", error=str(exc), kind=type(exc).__name__)

    def build_verifier(self) -> None:
        # documents posted to the API are a source of their own: with the API on,
        # the verifier runs even when no source is configured
        if not (self.cfg.verdicts.sources or self.cfg.api.enabled):
            return
        from keeper.verify.configured import build_verifier

        self.verifier = build_verifier(self.cfg.verdicts, conn=self.c.conn, metrics=self.c.metrics)

    async def index_loop(self) -> None:
        indexing, indexer = self.c.indexing, self.c.indexer
        clock = asyncio.get_running_loop().time
        pace = BlockPace()
        failures = 0
        led_epoch: int | None = None  # the epoch this loop last indexed under
        followed = -math.inf  # when a standby last polled the heads
        while not self.stop.is_set():
            if not self.lead.leading():
                led_epoch = None
                # heads at the poll interval; the lease looked at every renewal, so a
                # takeover starts indexing at once
                if clock() - followed >= self.cfg.chain.poll_interval:
                    followed = clock()
                    await self.standby_step()
                await wait_event(self.stop, self.lead.timings.renew_seconds)
                continue
            if led_epoch != self.lead.epoch:
                # (again) the indexer: another daemon may have written meanwhile
                indexer.forget()
                led_epoch = self.lead.epoch
            try:
                progressed = await indexing.step()
                self.rpc_ok = True
                failures = 0
                if indexer.state.head is not None:
                    pace.observe(indexer.state.head.number, clock())
            except LeaseLostError as exc:
                # a stalled step's commit after a takeover: nothing was written
                log.warning("indexing_fenced_out", reason=str(exc))
                self.lead.step_down()
                continue
            except (DeepReorgError, StateCorruptedError) as exc:
                # only our own state (or a reorg we must not repair silently) halts
                indexer.state.halted = str(exc)
                self.c.listener.on_halt(str(exc))
                log.critical("indexing_halted", reason=str(exc))
                return
            except passing() as exc:
                # anything the node says, however odd, is retried: a provider's unknown
                # error today is often gone on the next poll
                self.rpc_ok = False
                failures += 1
                log.warning(
                    "sync_step_failed", error=str(exc), kind=type(exc).__name__, failures=failures
                )
                progressed = False
            if not progressed:
                poll = self.cfg.chain.poll_interval
                # a failing node is asked less often, up to the start-up retry ceiling
                if failures:
                    wait = min(STARTUP_RETRY_MAX, poll * 2 ** min(failures, 6))
                else:
                    wait = pace.delay(poll, clock())
                await wait_event(self.stop, wait)

    async def standby_step(self) -> None:
        """While another daemon indexes: follow the heads and its cursor, for the keeper."""
        indexer, st = self.c.indexer, self.c.indexer.state
        try:
            head, finalized = await indexer.heads()
            self.rpc_ok = True
        except passing() as exc:
            self.rpc_ok = False
            log.warning("standby_heads_failed", error=str(exc), kind=type(exc).__name__)
            return
        try:
            cursor = self.c.store.cursor()
        except dbmod.transient_errors() as exc:  # a server restart: the next read reconnects
            log.warning("standby_cursor_failed", error=str(exc), kind=type(exc).__name__)
            return
        indexed = -1 if cursor is None else cursor.indexed_block
        if indexed != st.indexed or indexed >= head.number:
            self.c.listener.last_progress = time.monotonic()
            self.wake.set()
        st.indexed = indexed
        self.c.listener.on_heads(head, finalized, indexed)

    async def verify_loop(self) -> None:
        from keeper.verify import pass_size
        from keeper.verify.scan import PendingScan
        from keeper.verify.verifier import verify_pending

        # every daemon on a shared database verifies (a standby's head follows the chain);
        # a revision recorded by another daemon first is not written twice (the store's
        # conditional save)
        scan = PendingScan(self.cfg.chain.chain_id)
        size = pass_size.SMALLEST
        while not self.stop.is_set():
            try:
                head = self.c.indexer.state.head
                now = head.timestamp if head else int(time.time())
                started = time.monotonic()
                ran = await verify_pending(self.c.conn, scan, self.verifier, now, size)
                size = pass_size.next_size(size, ran, time.monotonic() - started)
                scanned = scan.scanned_block()
                if scanned is not None:
                    self.c.metrics.verifier_block.labels(chain_id=scan.chain_id).set(scanned)
                if ran:
                    # a verification with no document to fetch never waits on I/O: without
                    # this a catch-up's verifying would hold the indexer until it is done
                    await asyncio.sleep(0)
                    continue
            except passing() as exc:
                log.warning("verify_step_failed", error=str(exc))
            await wait_event(self.stop, self.cfg.chain.poll_interval)

    async def keep_loop(self) -> None:
        from keeper.store.states import due_jobs, due_tasks

        last_head = -1
        while not self.stop.is_set():
            head = self.c.indexer.state.head
            indexed = self.c.indexer.state.indexed
            if head is not None and indexed >= head.number and head.number != last_head:
                try:
                    chain_id, now = self.cfg.chain.chain_id, head.timestamp
                    await self.keeper.tick(
                        head,
                        due_jobs(self.c.conn, chain_id, now),
                        due_tasks(self.c.conn, chain_id, now),
                    )
                    last_head = head.number
                except passing() as exc:
                    log.warning("keeper_tick_failed", error=str(exc), kind=type(exc).__name__)
            self.wake.clear()
            await wait_event(self.wake, self.cfg.chain.poll_interval)

    async def maintain_loop(self) -> None:
        while not self.stop.is_set():
            await wait_event(self.stop, STATISTICS_INTERVAL_SECONDS)
            if not self.stop.is_set():
                try:
                    dbmod.refresh_statistics(self.c.conn)
                except passing() as exc:
                    log.warning("statistics_refresh_failed", error=str(exc))

    async def token_loop(self) -> None:
        """Label amounts with each token's units, off the indexing path (see keeper.sync.tokens)."""
        from keeper.indexing import read_new_tokens

        reader = dbmod.connect(self.cfg.database.target, readonly=True)
        try:
            while not self.stop.is_set():
                indexed = self.c.indexer.state.indexed
                if indexed > 0 and self.lead.leading():  # token metadata is index work
                    try:
                        await read_new_tokens(
                            self.c.conn, self.c.rpc, self.cfg.chain.chain_id, indexed, reader
                        )
                    except passing() as exc:
                        log.warning("token_read_failed", error=str(exc), kind=type(exc).__name__)
                await wait_event(self.stop, TOKEN_READ_INTERVAL_SECONDS)
        finally:
            reader.close()

    async def run(self) -> int:
        """Run every loop until stopped; each line any of them logs names the chain."""
        # tasks copy the context they are created in, so the binding reaches every loop
        with log_context(chain_id=self.cfg.chain.chain_id):
            return await self._run()

    async def _run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.request_stop)
        tasks: list[asyncio.Task[None]] = []
        try:
            self.build_keeper()
            self.build_verifier()
            # serve /healthz and /readyz (not ready) while the node is still unreachable
            self.start_api()
            if not await self.until_done("check_chain_id", check_chain_id, self.c.rpc, self.cfg):
                return 0
            self.rpc_ok = True
            if not await self.until_done("detect_dialects", self.detect_dialects):
                return 0
            if self.keeper is not None and not await self.until_done(
                "keeper_recover", self.keeper.recover
            ):
                return 0
            if self.cfg.indexer.enabled:  # alone on the database, this daemon leads from here on
                self.lead.attempt()
            log.info(
                "daemon_started",
                chain_id=self.cfg.chain.chain_id,
                contracts=len(self.cfg.contracts),
                keeper=self.keeper is not None,
                indexing_enabled=self.cfg.indexer.enabled,
                read_replicas=len(self.cfg.database.read_urls),
                verifier=self.verifier is not None,
                indexer=self.lead.leading(),
                node=self.lead.node,
                native_log_scan=NATIVE_LOG_SCAN,
            )
            if self.cfg.indexer.enabled:
                tasks.append(asyncio.create_task(self.lead.run(self.stop), name="lease"))
                tasks.append(asyncio.create_task(self.index_loop(), name="index"))
                tasks.append(asyncio.create_task(self.maintain_loop(), name="maintain"))
                tasks.append(asyncio.create_task(self.token_loop(), name="tokens"))
            if self.verifier is not None and self.cfg.indexer.enabled:
                tasks.append(asyncio.create_task(self.verify_loop(), name="verify"))
            if self.keeper is not None:
                tasks.append(asyncio.create_task(self.keep_loop(), name="keep"))
            elif self.dialect_watch is not None:
                watching = self.dialect_loop(self.dialect_watch)
                tasks.append(asyncio.create_task(watching, name="dialects"))
            stopper = asyncio.create_task(self.stop.wait(), name="stop")
            done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if t is not stopper and t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
            if not self.stop.is_set() and self.c.indexer.state.halted:
                # indexing halted: keep serving (readiness false) until stopped
                await self.stop.wait()
            await stop_loops(tasks)
            return 0
        finally:
            # cancelled from outside (``keeper devnet --duration``) or a loop crashed:
            # the other loops must end before the connections they use are closed
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.close()

    async def until_done(self, step: str, fn: Any, *args: Any) -> bool:
        """Run a start-up step, retrying transient failures until it succeeds or we stop.

        A node that is briefly unreachable at start-up (a restart of both, a
        rolling deploy) must not kill the daemon; a configuration error still
        does. Returns False when a stop was requested first.
        """
        delay = STARTUP_RETRY_INITIAL
        # a configuration error still ends the daemon: only what passes by itself is waited out
        retried: tuple[type[Exception], ...] = (RetryableError, *dbmod.transient_errors())
        while not self.stop.is_set():
            try:
                await fn(*args)
                return True
            except retried as exc:
                self.rpc_ok = False
                log.warning("startup_step_failed", step=step, error=str(exc), retry_in=delay)
            await wait_event(self.stop, delay)
            delay = min(delay * 2, STARTUP_RETRY_MAX)
        return False

    def request_stop(self) -> None:
        log.info("shutdown_requested")
        self.stop.set()

    async def close(self) -> None:
        sandbox = getattr(self.verifier, "sandbox", None)
        if sandbox is not None:
            sandbox.close()
        if self.api is not None:
            await asyncio.to_thread(self.api.stop)
        if self.read_targets is not None:
            self.read_targets.close()
        await self.c.rpc.close()
        self.lead.release()
        self.c.conn.close()
        log.info("daemon_stopped")


def _summary_dict(summary: Any) -> dict[str, Any]:
    from dataclasses import asdict, is_dataclass

    if is_dataclass(summary) and not isinstance(summary, type):
        return {k: v for k, v in asdict(summary).items() if isinstance(v, int | str | None)}
    return {}


async def run_daemon(config_path: str) -> int:
    cfg = load(config_path)
    tune_process()
    return await Daemon(cfg).run()


async def stop_loops(
    tasks: list[asyncio.Task[None]], grace: float = SHUTDOWN_GRACE_SECONDS
) -> None:
    """Let loops notice the stop flag and finish their current step, then cancel."""
    if not tasks:  # an API-only daemon runs no loop of its own
        return
    _, pending = await asyncio.wait(tasks, timeout=grace)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for t in tasks:
        # a loop that failed while stopping is still a failure: say which, and why
        if not t.cancelled() and (exc := t.exception()) is not None:
            log.error("loop_failed_during_shutdown", loop=t.get_name(), error=repr(exc))
