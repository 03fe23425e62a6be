"""The RPC transport's observer hooks, wired to real metrics, against a real anvil node."""

from __future__ import annotations

import socket

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from keeper.devnet.anvil import AnvilProcess
from keeper.obs.metrics import Metrics, MetricsRpcObserver
from keeper.rpc.config import EndpointConfig
from keeper.rpc.observer import RpcObserver
from keeper.rpc.transport import JsonRpcTransport


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rpc_samples(metrics: Metrics) -> dict[tuple[str, ...], float]:
    text = generate_latest(metrics.registry).decode()
    out: dict[tuple[str, ...], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "keeper_rpc_requests_total":
                out[(s.labels["endpoint"], s.labels["method"], s.labels["outcome"])] = s.value
            elif s.name == "keeper_rpc_backoffs_total":
                out[("backoff", s.labels["endpoint"])] = s.value
    return out


class TestRpcMetricsOnAnvil:
    async def test_requests_and_failover_are_counted_by_name(
        self, module_anvil: AnvilProcess
    ) -> None:
        """Successful calls, a dead endpoint's failures and its backoff land in the metrics."""
        metrics = Metrics()
        observer: RpcObserver = MetricsRpcObserver(metrics)
        dead_url = f"http://127.0.0.1:{closed_port()}/v2/secretKEY123456"
        transport = JsonRpcTransport(
            [
                EndpointConfig(name="dead", url=dead_url),
                EndpointConfig(name="anvil", url=module_anvil.url),
            ],
            observer=observer,
            retry_initial=0.01,
            retry_max=0.05,
        )
        try:
            for _ in range(3):
                assert isinstance(await transport.request("eth_blockNumber"), str)
        finally:
            await transport.close()
        samples = rpc_samples(metrics)
        assert samples[("anvil", "eth_blockNumber", "ok")] == 3
        dead = {k: v for k, v in samples.items() if k[0] == "dead"}
        assert dead and all(k[2] != "ok" for k in dead)
        assert samples.get(("backoff", "dead"), 0) >= 1
        text = generate_latest(metrics.registry).decode()
        assert "secretKEY123456" not in text and "127.0.0.1" not in text
