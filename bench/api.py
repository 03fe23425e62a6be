"""Benchmark 4: API throughput and tail latency under ``wrk`` while the daemon is indexing.

The daemon serves a database of indexed jobs while a background thread keeps
mining blocks full of new events, so every request competes with the
indexer's write transactions, as in production. ``wrk`` runs on the same
loopback with one thread (this is a 2-core machine shared by anvil, the
daemon and the load generator).

Absolute req/s on a shared machine move twice apart from day to day, so each
route is measured against this machine's limit taken in the same run, just
before it, with the same ``wrk`` settings, script and path, while the same
indexing goes on: a bare aiohttp handler on its own thread and loop in the
daemon's process (``bench.bare_api``), answering a pre-serialised body the
size of the route's.
The targets are shares of that limit; the absolute figures stay beside them.

Each route is first served for one slice that is not counted, with the
same script: the API keeps details' heads (``keeper.api.detailcache``) and
repeated pages (``keeper.api.pagecache``), and a daemon that has served for a
while has them. The lookup asks for a random job of all those indexed, and
the list for a random page cursor over all their blocks, so what is kept is
bounded by the caches, not by the script.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.common import (
    ROOT,
    Result,
    free_port,
    http_json,
    rss_kb,
    stat_cpu,
    stop_daemon,
    wait_http,
    write_config,
)
from bench.workload import PROVIDER, job_flows
from keeper.api.params import encode_cursor
from keeper.devnet.anvil import AnvilProcess, ChainControl
from keeper.devnet.deploy import deploy_all

WRK_THREADS = 1
WRK_CONNECTIONS = 16
LOOKUP = "GET /v1/jobs/{c}/{id}"
LIST = "GET /v1/jobs?status&provider"
LIST_PAGES = "GET /v1/jobs?status&provider&cursor"
# targets, as shares of the bare handler measured in the same run under the same load
RPS_SHARE = 0.5
P99_FACTOR = 2.0
# each route and its limit are measured in this many alternating slices of the run's time
ROUNDS = 3


def combined(runs: list[dict[str, float]]) -> dict[str, float]:
    """Equal-length wrk runs as one: mean req/s, median p50 and p99, summed non-2xx."""
    return {
        "rps": statistics.fmean(r["rps"] for r in runs),
        "p50_ms": statistics.median(r["p50_ms"] for r in runs),
        "p99_ms": statistics.median(r["p99_ms"] for r in runs),
        "non_2xx": sum(r["non_2xx"] for r in runs),
        "cpu_us": statistics.fmean(r["cpu_us"] for r in runs),
    }


def cursor_script(path: str, low_block: int, high_block: int, contract: str, jobs: int) -> str:
    """wrk Lua: ``path`` with a new random page cursor each request, so no two pages repeat.

    The cursor is :func:`keeper.api.params.encode_cursor`'s: base64url of
    ``["j",block,contract,id]``, without padding.
    """
    return (
        "math.randomseed(11)\n"
        'local abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"\n'
        "local function b64(s)\n"
        "  local out = {}\n"
        "  for i = 1, #s, 3 do\n"
        "    local a, b, c = s:byte(i, i + 2)\n"
        "    local n = a * 65536 + (b or 0) * 256 + (c or 0)\n"
        "    for j = 1, 2 + (b and 1 or 0) + (c and 1 or 0) do\n"
        "      local k = math.floor(n / 2 ^ (18 - 6 * (j - 1))) % 64\n"
        "      out[#out + 1] = abc:sub(k + 1, k + 1)\n"
        "    end\n"
        "  end\n"
        "  return table.concat(out)\n"
        "end\n"
        "request = function()\n"
        f"  local block = math.random({low_block}, {high_block})\n"
        f"  local id = math.random(1, {jobs})\n"
        f"  local key = '[\"j\",' .. block .. ',\"{contract}\",\"' .. id .. '\"]'\n"
        f'  return wrk.format("GET", "{path}&cursor=" .. b64(key))\n'
        "end\n"
    )


def http_bytes(url: str, data: bytes | None = None, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, data=data, timeout=timeout) as resp:
        body: bytes = resp.read()
    return body


def spawn_with_limit(config: Path, log_path: Path, bare_port: int) -> subprocess.Popen[bytes]:
    """``keeper run`` as :func:`bench.common.spawn_daemon` starts it, with the bare handler."""
    with log_path.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "bench.bare_api", str(bare_port), "run", "-c", str(config)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT,
        )  # fmt: skip


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


def cpu_seconds(pid: int) -> float:
    """CPU time the daemon's threads other than its main one (the indexer's loop) used so far."""
    return stat_cpu(Path(f"/proc/{pid}/stat")) - stat_cpu(Path(f"/proc/{pid}/task/{pid}/stat"))


def wrk(url: str, seconds: float, script: Path | None, server: int) -> dict[str, float]:
    """Requests/s, p50/p99, non-2xx count and the server's CPU µs a request from one wrk run.

    CPU per request (the serving threads', not the indexer's) moves far less
    with the machine's load than req/s does: it is the cost of a request,
    where req/s is also the share of the cores the server got.
    """
    before = cpu_seconds(server)
    duration = f"-d{max(1, round(seconds))}s"
    cmd = ["wrk", f"-t{WRK_THREADS}", f"-c{WRK_CONNECTIONS}", duration, "--latency"]
    if script is not None:
        cmd += ["-s", str(script)]
    out = subprocess.run([*cmd, url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"\s99%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    p50 = _ms(re.search(r"\s50%\s+(\S+)", out).group(1))  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    cpu_us = (cpu_seconds(server) - before) * 1e6 / max(1, requests)
    return {"rps": rps, "p50_ms": p50, "p99_ms": p99, "non_2xx": int(bad.group(1)) if bad else 0,
            "cpu_us": cpu_us}  # fmt: skip


def bench_api(events: int, seconds: float, mode: str) -> Result:
    res = Result("api", mode)
    with AnvilProcess() as node, tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
        work = Path(tmp)
        d = deploy_all(node.url)
        wl = job_flows(node.url, d.emitter, events)
        port = free_port()
        cfg = write_config(work, "api", node.url, d, [("emitter", "erc8183", d.emitter)],
                           api_port=port, poll_interval=0.5, max_range=8)  # fmt: skip
        bare_port = free_port()
        daemon = spawn_with_limit(cfg, work / "daemon.log", bare_port)
        stop = threading.Event()
        background = {"blocks": 0}
        measured: dict[str, dict[str, Any]] = {}

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
            list_path = f"/v1/jobs?contract=emitter&status=completed&provider={PROVIDER}&limit=20"
            pages = work / "random-page.lua"
            contract = d.emitter.lower()
            pages.write_text(cursor_script(list_path, wl.first_block + 1, wl.last_block,
                                           contract, wl.jobs))  # fmt: skip
            middle = ((wl.first_block + wl.last_block) // 2, contract, str(wl.jobs // 2))
            routes = [
                (LOOKUP, "/", script, f"/v1/jobs/{d.emitter}/{(wl.jobs + 1) // 2}"),
                (LIST, list_path, None, list_path),
                (LIST_PAGES, "/", pages, f"{list_path}&cursor={encode_cursor('jobs', middle)}"),
            ]
            indexer = threading.Thread(target=keep_indexing, daemon=True)
            indexer.start()
            bare = f"http://127.0.0.1:{bare_port}"
            for label, path, lua, sample in routes:
                size = len(http_bytes(base + sample))
                http_bytes(f"{bare}/_bare/size/{size}", data=b"")
                # unmeasured: the route's caches (SQLite's, the API's kept heads and
                # pages) fill as in a daemon that has been serving for a while
                warm = wrk(base + path, seconds / ROUNDS, lua, daemon.pid)
                rounds: dict[str, list[dict[str, float]]] = {"bare": [], "route": []}
                for _ in range(ROUNDS):  # alternating, so both see the same moments of load
                    rounds["bare"].append(wrk(bare + path, seconds / ROUNDS, lua, daemon.pid))
                    rounds["route"].append(wrk(base + path, seconds / ROUNDS, lua, daemon.pid))
                measured[label] = {"body_bytes": size, "rounds": rounds, "warm_up": warm,
                                   **{k: combined(v) for k, v in rounds.items()}}  # fmt: skip
            stop.set()
            indexer.join(30)
            rss_mb = rss_kb(daemon.pid)[0] / 1024  # with what the API keeps
        finally:
            stop.set()
            stop_daemon(daemon)
    res.add("daemon RSS after the routes", rss_mb, "MB")
    res.details = {"jobs_indexed": wl.jobs, "events_indexed": wl.events,
                   "blocks_mined_during": background["blocks"], "wrk_threads": WRK_THREADS,
                   "wrk_connections": WRK_CONNECTIONS, "seconds": seconds, "rounds": ROUNDS,
                   "routes": measured}  # fmt: skip
    for label, m in measured.items():
        route, bare = m["route"], m["bare"]
        for name, r in ((label, route), (f"{label} bare limit", bare)):
            if r["non_2xx"]:
                raise RuntimeError(f"{name}: {r['non_2xx']} non-2xx responses")
        res.add(f"{label} req/s / limit", route["rps"] / bare["rps"], "x", RPS_SHARE)
        res.add(f"{label} p99 / limit", route["p99_ms"] / bare["p99_ms"], "x", P99_FACTOR,
                higher=False)  # fmt: skip
        res.add(f"{label} req/s", route["rps"], "req/s")
        res.add(f"{label} p99", route["p99_ms"], "ms")
        res.add(f"{label} limit req/s", bare["rps"], "req/s")
        res.add(f"{label} limit p99", bare["p99_ms"], "ms")
        res.add(f"{label} CPU / request", route["cpu_us"], "us")
        res.add(f"{label} limit CPU / request", bare["cpu_us"], "us")
    return res
