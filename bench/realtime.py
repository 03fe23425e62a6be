"""Benchmark 2: realtime latency (block mined -> job visible in the API) and RPC calls per block.

The daemon (``keeper run``) follows a fresh anvil through a counting
pass-through proxy. For each sample one JobCreated is mined at a random phase
of the poll cycle and the API is polled every 2 ms until the job answers 200;
latency counts from just before ``anvil_mine`` (conservative by the mining
time). Then, with no events, blocks are mined every second and, after a warm-up
in which the daemon learns that pace, the proxy counts its calls per new
block.
"""

from __future__ import annotations

import http.client
import random
import tempfile
import time
from pathlib import Path

from bench.common import (
    Result,
    Sender,
    calldata,
    free_port,
    percentile,
    spawn_daemon,
    stop_daemon,
    wait_http,
    write_config,
)
from keeper.devnet.anvil import AnvilProcess, ChainControl
from keeper.devnet.deploy import deploy_all
from tests.support.rpc_proxy import RpcProxy

_SIG = "emitJobCreated(uint256,address,address,address,uint256,address)"
_TYPES = ["uint256", "address", "address", "address", "uint256", "address"]
STEADY_BLOCK_TIME = 1  # seconds; anvil takes whole seconds
WARMUP_BLOCKS = 12  # the daemon learns the block pace from the last few blocks it saw


def _visible(conn: http.client.HTTPConnection, path: str) -> bool:
    conn.request("GET", path)
    resp = conn.getresponse()
    resp.read()
    return resp.status == 200


def one_poll_interval(poll: float, samples: int, steady_seconds: float) -> dict[str, float]:
    with AnvilProcess() as node, RpcProxy(node.url) as proxy, \
            tempfile.TemporaryDirectory(prefix="bench-rt-") as tmp:  # fmt: skip
        chain = ChainControl(node.url)
        d = deploy_all(node.url)
        chain.mine(4)
        port = free_port()
        cfg = write_config(Path(tmp), "rt", proxy.url, d, [("emitter", "erc8183", d.emitter)],
                           api_port=port, poll_interval=poll, confirmations=2)  # fmt: skip
        daemon = spawn_daemon(cfg, Path(tmp) / "daemon.log")
        try:
            wait_http(f"http://127.0.0.1:{port}/healthz")
            chain.set_automine(False)
            sender = Sender(node.url)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            rng = random.Random(7)
            latencies: list[float] = []
            for i in range(samples):
                job = 1_000 + i
                sender.send(d.emitter, calldata(_SIG, _TYPES, [
                    job, "0x" + "c1" * 20, "0x" + "b2" * 20, "0x" + "e3" * 20, 2**40,
                    "0x" + "00" * 20]), 200_000)  # fmt: skip
                time.sleep(rng.uniform(0.0, poll))  # a random phase of the poll cycle
                t0 = time.perf_counter()
                chain.mine()
                path = f"/v1/jobs/{d.emitter}/{job}"
                while not _visible(conn, path):
                    if time.perf_counter() - t0 > poll + 30:
                        raise TimeoutError(f"job {job} never became visible")
                    time.sleep(0.002)
                latencies.append(time.perf_counter() - t0)
            conn.close()

            # steady state: empty blocks at a fixed rate, calls counted per new block
            # once the daemon has seen enough of them to learn the pace
            chain.call("evm_setIntervalMining", STEADY_BLOCK_TIME)
            time.sleep(WARMUP_BLOCKS * STEADY_BLOCK_TIME)
            head0 = chain.block_number()
            calls0 = len(proxy.calls)
            time.sleep(steady_seconds)
            head1 = chain.block_number()
            calls1 = len(proxy.calls)
            chain.call("evm_setIntervalMining", 0)
            blocks = head1 - head0
            calls = calls1 - calls0
            methods: dict[str, int] = {}
            for method, _ in proxy.calls[calls0:calls1]:
                methods[method] = methods.get(method, 0) + 1
        finally:
            stop_daemon(daemon)
    return {
        "median_s": percentile(latencies, 50),
        "p99_s": percentile(latencies, 99),
        "max_s": max(latencies),
        "samples": len(latencies),
        "steady_blocks": blocks,
        "steady_calls": calls,
        "calls_per_block": calls / max(1, blocks),
        "steady_methods": methods,  # type: ignore[dict-item]
    }


def bench_realtime(samples_fast: int, samples_slow: int, steady_seconds: float, mode: str
                   ) -> Result:  # fmt: skip
    res = Result("realtime", mode)
    for poll, samples in ((0.25, samples_fast), (2.0, samples_slow)):
        out = one_poll_interval(poll, samples, steady_seconds)
        res.details[f"poll_{poll}"] = out
        res.add(f"median latency, poll {poll} s", out["median_s"] * 1000, "ms",
                (poll + 0.1) * 1000, higher=False)  # fmt: skip
        res.add(f"p99 latency, poll {poll} s", out["p99_s"] * 1000, "ms")
        res.add(f"RPC calls per new block, poll {poll} s, 1 s blocks", out["calls_per_block"],
                "calls", 2, higher=False)  # fmt: skip
    return res
