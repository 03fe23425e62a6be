"""Helpers for indexer tests: configs, traffic, indexing to head, table comparison."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from support.rpc_proxy import ProxyRules, RpcProxy
from web3 import Web3

from keeper.compose import build, build_rpc
from keeper.config import Config, load_config
from keeper.devnet.anvil import DEV_KEYS
from keeper.devnet.contracts import load_abi
from keeper.devnet.deploy import Deployment, send_call
from keeper.devnet.evaluator_service import VerdictBook, load_fixtures
from keeper.devnet.traffic import Timing, TrafficGenerator
from keeper.errors import RetryableError
from keeper.indexing import IndexListener, IndexPipeline, build_indexing
from keeper.obs.metrics import Metrics
from keeper.rpc.client import RpcClient
from keeper.store.db import Db, connect
from keeper.store.migrations import migrate

# Tables that must be identical between any two indexings of the same chain.
# ``blocks`` (the reorg window) and ``cursor`` depend on how far and how the
# index got there, not on what the chain says.
CONTENT_TABLES = ("events", "chain_reads", "jobs", "tasks")


def write_config(
    tmp: Path,
    name: str,
    rpc_urls: Sequence[str],
    deployment: Deployment,
    *,
    database: str = "",
    multicall: str | None = None,
    **chain: Any,
) -> Config:
    """A daemon config indexing the four devnet escrows (and the emitter as an ERC-8183 source).

    ``database``: a PostgreSQL URL or a SQLite path; by default ``tmp/<name>.db``.
    Its reads go through the devnet's Multicall3, as the devnet's own config has them,
    unless ``multicall`` names another (``""``: none configured, so the canonical
    address, which has no code on a devnet).
    """
    if database.startswith("postgresql://"):
        db_line = f"url = {json.dumps(database)}"
    else:
        db_line = f"path = {json.dumps(database or str(tmp / (name + '.db')))}"
    multicall = deployment.multicall if multicall is None else multicall
    chain_lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in chain.items())
    contracts = [
        *((n, p.value, a) for n, p, a in deployment.escrows()),
        ("emitter", "erc8183", deployment.emitter),
    ]
    blocks = "\n".join(
        f'[[contracts]]\nname = "{n}"\nprotocol = "{p}"\naddress = "{a}"\n'
        f"start_block = {deployment.start_block}\n"
        for n, p, a in contracts
    )
    text = (
        f"[chain]\nchain_id = {deployment.chain_id}\nrpc_urls = {json.dumps(list(rpc_urls))}\n"
        f"{chain_lines}\n\n[database]\n{db_line}\n\n"
        f"[api]\nenabled = false\n\n[keeper]\nmulticall = {json.dumps(multicall)}\n\n{blocks}"
    )
    path = tmp / f"{name}.toml"
    path.write_text(text)
    return load_config(path)


def emit_job_flows(rpc_url: str, deployment: Deployment, jobs_per_block: Sequence[int]) -> None:
    """The emitter's job flows (6 events a job), one transaction a block: dense history
    without the traffic generator's pacing."""
    w3 = Web3(Web3.HTTPProvider(rpc_url))
    emitter = w3.eth.contract(
        address=Web3.to_checksum_address(deployment.emitter), abi=load_abi("EventEmitter")
    )
    party = Web3.to_checksum_address("0x" + "22" * 20)
    first = 1
    for jobs in jobs_per_block:
        fn = emitter.functions.emitJobFlowBatch(
            first, jobs, party, party, party, party, 7, 2**40, 3
        )
        send_call(w3, DEV_KEYS[0], fn, gas=200_000 + 15_000 * jobs)
        first += jobs


def traffic(rpc_url: str, deployment: Deployment) -> TrafficGenerator:
    """The devnet's traffic, playing the keeper too, so every state of both protocols appears."""
    return TrafficGenerator(
        rpc_url,
        deployment,
        VerdictBook(deployment.commerce),
        load_fixtures(),
        self_keep=True,
        timing=Timing(interval=0.0),
    )


class Harness:
    """One indexer over one database, driven step by step from a test.

    Wired by the daemon's own ``build_indexing``: every change the indexer
    yields is committed and reported by the same consumer the daemon runs.
    """

    def __init__(
        self, cfg: Config, rpc: RpcClient | None = None, listener: IndexListener | None = None
    ) -> None:
        conn = connect(cfg.database.target)
        migrate(conn)
        rpc = rpc or build_rpc(cfg, None)
        self._adopt(cfg, conn, rpc, build_indexing(cfg, rpc, conn, listener))

    @classmethod
    def composed(cls, cfg: Config) -> tuple[Harness, Metrics]:
        """Wired whole by ``compose.build``, as ``keeper run`` is, with its metrics."""
        c = build(cfg, asyncio.Event())
        h = cls.__new__(cls)
        h._adopt(cfg, c.conn, c.rpc, c.indexing)
        return h, c.metrics

    def _adopt(self, cfg: Config, conn: Db, rpc: RpcClient, indexing: IndexPipeline) -> None:
        self.cfg = cfg
        self.conn = conn
        self.rpc = rpc
        self.indexing = indexing
        self.store = self.indexing.store
        self.indexer = self.indexing.indexer
        self.retries = 0

    async def step(self) -> bool:
        """One indexer step, committed as the daemon commits it."""
        return await self.indexing.step()

    async def to_head(self, max_steps: int = 10_000) -> int:
        """Step until the cursor reaches the node's head; returns the cursor.

        Like the daemon's loop, a retryable failure waits for the next poll.
        """
        for _ in range(max_steps):
            try:
                await self.step()
            except RetryableError:
                self.retries += 1
                await asyncio.sleep(0.05)
                continue
            head = self.indexer.state.head
            if head is not None and self.indexer.start_cursor() >= head.number:
                return self.indexer.start_cursor()
        raise AssertionError("indexer did not reach the head")

    def dump(self) -> dict[str, list[tuple[Any, ...]]]:
        full = self.store.dump()
        return {t: full[t] for t in CONTENT_TABLES}

    async def close(self) -> None:
        await self.rpc.close()
        self.conn.close()


async def fresh_index(tmp: Path, name: str, rpc_url: str, deployment: Deployment) -> Harness:
    """Index the whole chain into an empty database by range scans alone (no realtime zone)."""
    cfg = write_config(tmp, name, [rpc_url], deployment, finality="confirmations", confirmations=0)
    h = Harness(cfg)
    await h.to_head()
    return h


@contextlib.asynccontextmanager
async def proxied_index(
    tmp: Path,
    name: str,
    rpc_url: str,
    deployment: Deployment,
    rules: ProxyRules | None = None,
    **chain: Any,
) -> AsyncIterator[tuple[Harness, RpcProxy]]:
    """``fresh_index`` through a recording proxy (with ``rules``' faults): the harness and
    the proxy, open until the block ends."""
    with RpcProxy(rpc_url, rules=rules) as proxy:
        cfg = write_config(
            tmp, name, [proxy.url], deployment, finality="confirmations", confirmations=0,
            **chain,
        )  # fmt: skip
        h = Harness(cfg)
        try:
            await h.to_head()
            yield h, proxy
        finally:
            await h.close()


def table_diff(a: dict[str, list[Any]], b: dict[str, list[Any]]) -> str:
    """A short description of the first differences, for assertion messages."""
    out = []
    for table in CONTENT_TABLES:
        x, y = set(a.get(table, [])), set(b.get(table, []))
        if x != y:
            out.append(
                f"{table}: {len(x - y)} only left, {len(y - x)} only right; "
                f"e.g. left {sorted(x - y, key=str)[:2]} right {sorted(y - x, key=str)[:2]}"
            )
    return "\n".join(out)


def statuses(conn: Db, table: str) -> set[str]:
    return {r[0] for r in conn.execute(f"SELECT DISTINCT status FROM {table}")}


async def run_traffic(gen: TrafficGenerator, steps: int) -> None:
    for _ in range(steps):
        await asyncio.to_thread(gen.step)
