"""Composition root, shared part: config, RPC, database and indexing wired together.

``build`` assembles the components every long-running command shares: the
daemon (:mod:`keeper.daemon`) adds the verifier, the keeper and the API on
top, ``keeper backfill`` (:mod:`keeper.app`) a progress line. Both import
this module; neither imports the other.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from keeper import __version__
from keeper.config import Config, load_config
from keeper.domain.model import BlockHeader, Event
from keeper.errors import ConfigError
from keeper.indexing import IndexPipeline, build_indexing
from keeper.obs.logging import (
    configure_logging,
    get_logger,
    register_database_url,
    register_rpc_url,
)
from keeper.obs.metrics import Metrics, MetricsRpcObserver
from keeper.rpc.client import RpcClient
from keeper.rpc.config import EndpointConfig
from keeper.store import db as dbmod
from keeper.store.db import Db
from keeper.store.index_store import ApplyResult, IndexStore
from keeper.store.migrations import migrate
from keeper.sync.indexer import Indexer

log = get_logger(__name__)


def build_rpc(cfg: Config, metrics: Metrics | None) -> RpcClient:
    endpoints = [
        EndpointConfig(name=name, url=url, rate=cfg.chain.requests_per_second)
        for name, url in zip(cfg.chain.rpc_names, cfg.chain.rpc_urls, strict=True)
    ]
    return RpcClient(
        endpoints,
        timeout=cfg.chain.request_timeout,
        observer=MetricsRpcObserver(metrics) if metrics is not None else None,
    )


def open_database(cfg: Config) -> Db:
    conn = dbmod.connect(cfg.database.target)
    migrate(conn)
    dbmod.refresh_statistics(conn)
    return conn


def load(config_path: str) -> Config:
    """Load the config and register its secrets with the log redactor before anything logs."""
    cfg = load_config(config_path)
    for url in cfg.chain.rpc_urls:
        register_rpc_url(url)
    for url in (cfg.database.url, *cfg.database.read_urls):
        if url:
            register_database_url(url)
    configure_logging(cfg.log.format, cfg.log.level, stream=sys.stderr)
    return cfg


async def check_chain_id(rpc: RpcClient, cfg: Config) -> None:
    actual = await rpc.chain_id()
    if actual != cfg.chain.chain_id:
        raise ConfigError(
            f"chain.chain_id: configured {cfg.chain.chain_id} but the RPC endpoint "
            f"serves chain {actual}"
        )


class MetricsListener:
    """Indexer progress into metrics and logs."""

    def __init__(self, metrics: Metrics, cfg: Config, wake: asyncio.Event) -> None:
        self.metrics = metrics
        self.chain = str(cfg.chain.chain_id)
        self.wake = wake
        self.last_progress = time.monotonic()
        self.indexed = -1

    def on_heads(self, head: BlockHeader, finalized: int, indexed: int) -> None:
        m = self.metrics
        m.head_block.labels(chain_id=self.chain).set(head.number)
        m.finalized_block.labels(chain_id=self.chain).set(finalized)
        m.indexed_block.labels(chain_id=self.chain).set(indexed)
        m.head_lag_seconds.labels(chain_id=self.chain).set(max(0.0, time.time() - head.timestamp))

    def on_batch(self, result: ApplyResult, events: Sequence[Event]) -> None:
        # counted per (contract, event) first: a label lookup per event is slow in a backfill
        counts = Counter((e.contract, e.name) for e in events)
        for (contract, event_name), n in counts.items():
            name = self.metrics.contract_label(contract)
            if event_name is None:
                self.metrics.unknown_events.labels(contract=name).inc(n)
            else:
                self.metrics.events.labels(contract=name, event=event_name).inc(n)
        if events:
            log.info(
                "batch_indexed",
                events=len(events),
                new=result.new_events,
                unknown=result.unknown_events,
                subjects=result.touched_subjects,
                block=events[-1].log.block_number,
            )
        self.last_progress = time.monotonic()
        self.wake.set()

    def on_reorg(self, depth: int, fork: int) -> None:
        self.metrics.observe_reorg(depth)
        self.wake.set()

    def on_halt(self, reason: str) -> None:
        self.metrics.indexing_halted.set(1)


@dataclass
class Components:
    cfg: Config
    conn: Db
    rpc: RpcClient
    indexing: IndexPipeline
    metrics: Metrics
    listener: MetricsListener

    @property
    def indexer(self) -> Indexer:
        return self.indexing.indexer

    @property
    def store(self) -> IndexStore:
        return self.indexing.store


def build(cfg: Config, wake: asyncio.Event) -> Components:
    metrics = Metrics(
        version=__version__, contract_names={c.address: c.name for c in cfg.contracts}
    )
    conn = open_database(cfg)
    rpc = build_rpc(cfg, metrics)
    listener = MetricsListener(metrics, cfg, wake)
    indexing = build_indexing(cfg, rpc, conn, listener)
    # read at scrape time from the fetcher itself, so it cannot drift from what the indexer does
    fetcher = indexing.indexer.remote
    metrics.fetch_process_unavailable.set_function(lambda: float(fetcher.broken is not None))
    return Components(cfg, conn, rpc, indexing, metrics, listener)
