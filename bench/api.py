"""Benchmark 4: API throughput and tail latency under ``wrk`` while the daemon is indexing.

The daemon serves a database of indexed jobs while a background thread keeps
mining blocks full of new events, so every request competes with the
indexer's write transactions, as in production. ``wrk`` runs on the same
loopback with one thread (this is a 2-core machine shared by anvil, the
daemon and the load generator).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from bench.common import (
    Result,
    free_port,
    http_json,
    spawn_daemon,
    stop_daemon,
    wait_http,
    write_config,
)
from bench.workload import PROVIDER, job_flows
from keeper.devnet.anvil import AnvilProcess, ChainControl
from keeper.devnet.deploy import deploy_all

WRK_THREADS = 1
WRK_CONNECTIONS = 16


def wait_indexed(port: int, head: int, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = http_json(f"http://127.0.0.1:{port}/v1/status")
        if (status.get("indexed_block") or -1) >= head:
            return
        time.sleep(0.2)
    raise TimeoutError("the daemon did not index the workload in time")


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if m is None:
        raise ValueError(f"unparsable wrk latency {text!r}")
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]
    return float(m.group(1)) * scale


def wrk(url: str, seconds: float, script: Path | None) -> dict[str, float]:
    """Requests/s, p99 and non-2xx count from one wrk run."""
    cmd = ["wrk", f"-t{WRK_THREADS}", f"-c{WRK_CONNECTIONS}", f"-d{seconds}s", "--latency"]
    if script is not None:
        cmd += ["-s", str(script)]
    out = subprocess.run([*cmd, url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"\s99%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    p50 = _ms(re.search(r"\s50%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return {"rps": rps, "p50_ms": p50, "p99_ms": p99, "non_2xx": int(bad.group(1)) if bad else 0}


def bench_api(events: int, seconds: float, mode: str) -> Result:
    res = Result("api", mode)
    with AnvilProcess() as node, tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
        work = Path(tmp)
        d = deploy_all(node.url)
        wl = job_flows(node.url, d.emitter, events)
        port = free_port()
        cfg = write_config(work, "api", node.url, d, [("emitter", "erc8183", d.emitter)],
                           api_port=port, poll_interval=0.5, max_range=8)  # fmt: skip
        daemon = spawn_daemon(cfg, work / "daemon.log")
        stop = threading.Event()
        background = {"blocks": 0}

        def keep_indexing() -> None:
            """Two blocks a second of 50 new jobs (300 events) each, while wrk runs."""
            next_id = wl.jobs + 1
            while not stop.is_set():
                job_flows(node.url, d.emitter, 300, jobs_per_block=50, first_id=next_id)
                next_id += 50
                background["blocks"] += 1
                stop.wait(0.5)

        try:
            wait_http(f"http://127.0.0.1:{port}/healthz")
            wait_indexed(port, ChainControl(node.url).block_number())
            script = work / "random-job.lua"
            script.write_text(
                "math.randomseed(7)\n"
                "request = function()\n"
                f"  local id = math.random(1, {wl.jobs})\n"
                f'  return wrk.format("GET", "/v1/jobs/{d.emitter}/" .. id)\n'
                "end\n"
            )
            base = f"http://127.0.0.1:{port}"
            indexer = threading.Thread(target=keep_indexing, daemon=True)
            indexer.start()
            one = wrk(base + "/", seconds, script)
            lst = wrk(
                f"{base}/v1/jobs?contract=emitter&status=completed&provider={PROVIDER}&limit=20",
                seconds, None,
            )  # fmt: skip
            stop.set()
            indexer.join(30)
        finally:
            stop.set()
            stop_daemon(daemon)
    res.details = {"jobs_indexed": wl.jobs, "events_indexed": wl.events,
                   "blocks_mined_during": background["blocks"], "wrk_threads": WRK_THREADS,
                   "wrk_connections": WRK_CONNECTIONS, "seconds": seconds,
                   "get_job": one, "filtered_list": lst}  # fmt: skip
    for label, r in (("GET /v1/jobs/{c}/{id}", one), ("GET /v1/jobs?status&provider", lst)):
        if r["non_2xx"]:
            raise RuntimeError(f"{label}: {r['non_2xx']} non-2xx responses")
        res.add(f"{label} req/s", r["rps"], "req/s", 2000)
        res.add(f"{label} p99", r["p99_ms"], "ms", 25, higher=False)
    return res
