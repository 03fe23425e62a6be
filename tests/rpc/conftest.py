"""RPC test fixtures: a real anvil with log-emitting contracts, a proxy, an observer."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from rpc_fixtures import EMITTER, EMITTER_B, LogChain, RecordingObserver, emit, install_contracts
from support.rpc_proxy import RpcProxy

from keeper.devnet.anvil import AnvilProcess, ChainControl
from keeper.rpc import EndpointConfig, RpcClient


@pytest.fixture(scope="module")
def log_chain(module_anvil: AnvilProcess) -> LogChain:
    """Blocks 1..120 with logs from two emitters in 20 scattered blocks."""
    ctl = ChainControl(module_anvil.url)
    install_contracts(ctl)
    blocks: list[int] = []
    for i in range(20):
        ctl.mine(5)
        blocks.append(emit(ctl, EMITTER if i % 3 else EMITTER_B, i.to_bytes(32, "big")))
    ctl.mine(120 - ctl.block_number())
    return LogChain(module_anvil, ctl, blocks)


@pytest.fixture
def proxy(log_chain: LogChain) -> Iterator[RpcProxy]:
    with RpcProxy(log_chain.url) as p:
        yield p


@pytest.fixture
def observer() -> RecordingObserver:
    return RecordingObserver()


@pytest.fixture
async def client(proxy: RpcProxy, observer: RecordingObserver) -> AsyncIterator[RpcClient]:
    """A client with one endpoint behind the fault proxy, fast retries, 1 s timeout."""
    c = RpcClient(
        [EndpointConfig("rpc0", proxy.url)],
        timeout=1.0,
        max_attempts=4,
        retry_initial=0.01,
        retry_max=0.5,
        backoff_base=0.01,
        backoff_cap=0.5,
        observer=observer,
    )
    yield c
    await c.close()
