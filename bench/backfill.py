"""Benchmarks 1 and 5: backfill throughput against its ceiling and a naive baseline; memory.

Three measurements over the same chain in one run:

* **end to end**: ``keeper backfill`` as a subprocess into a fresh database
  (process start, imports and the chain-id check included), peak RSS from
  ``wait4``;
* **ceiling**: the same ``eth_getLogs`` ranges fetched and JSON-parsed,
  nothing decoded or stored: no indexer on this node can beat it;
* **naive**: web3.py ``get_logs`` + ``process_log`` per event + one INSERT
  per row, on a prefix of the chain (it is too slow for all of it).

Memory then follows the daemon (``keeper run``) in steady state on the
indexed database.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from web3 import Web3

from bench.common import (
    ARCHIVE_ANVIL,
    Result,
    free_port,
    http_json,
    keeper_cmd,
    rss_kb,
    spawn_daemon,
    stop_daemon,
    wait_http,
    write_config,
)
from bench.workload import job_flows
from keeper.devnet.anvil import AnvilProcess
from keeper.devnet.contracts import load_artifact
from keeper.devnet.deploy import Deployment, deploy_all

JOBS_PER_BLOCK = 250  # 1,500 events a block
# blocks per eth_getLogs: ~12,000 logs a response, under the 10,000-20,000-log
# caps hosted providers put on one answer
MAX_RANGE = 8


async def ceiling(url: str, address: str, first: int, last: int, span: int) -> tuple[float, int]:
    """Seconds to fetch and parse every range's logs with one keep-alive session, and the count."""
    count = 0
    start = time.perf_counter()
    async with aiohttp.ClientSession() as session:
        for lo in range(first, last + 1, span):
            hi = min(last, lo + span - 1)
            flt = {"address": [address], "fromBlock": hex(lo), "toBlock": hex(hi)}
            body = {"jsonrpc": "2.0", "id": 1, "method": "eth_getLogs", "params": [flt]}
            async with session.post(url, json=body) as resp:
                raw = await resp.read()
            count += len(json.loads(raw)["result"])
    return time.perf_counter() - start, count


def naive(url: str, address: str, first: int, last: int, span: int, db: Path) -> tuple[float, int]:
    """web3.py ``get_logs`` + ``process_log`` per event + one INSERT per row, commit per range."""
    w3 = Web3(Web3.HTTPProvider(url, request_kwargs={"timeout": 120}))
    abi, _ = load_artifact("EventEmitter")
    contract = w3.eth.contract(address=Web3.to_checksum_address(address), abi=abi)
    by_topic: dict[str, Any] = {}
    for item in abi:
        if item.get("type") == "event":
            signature = f"{item['name']}({','.join(i['type'] for i in item['inputs'])})"
            topic = "0x" + Web3.keccak(text=signature).hex().removeprefix("0x")
            by_topic[topic] = contract.get_event_by_signature(signature)
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE TABLE events (block_hash TEXT, log_index INTEGER, block_number INTEGER, "
        "name TEXT, args TEXT, PRIMARY KEY (block_hash, log_index))"
    )
    count = 0
    start = time.perf_counter()
    for lo in range(first, last + 1, span):
        hi = min(last, lo + span - 1)
        logs = w3.eth.get_logs({"address": contract.address, "fromBlock": lo, "toBlock": hi})
        for lg in logs:
            event = by_topic["0x" + lg["topics"][0].hex().removeprefix("0x")]
            decoded = event.process_log(lg)
            conn.execute(
                "INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                (decoded["blockHash"].to_0x_hex(), decoded["logIndex"], decoded["blockNumber"],
                 decoded["event"], json.dumps(dict(decoded["args"]), default=str)),
            )  # fmt: skip
            count += 1
        conn.commit()  # one transaction per range: per-row commits would measure fsync
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed, count


def run_backfill(config: Path) -> tuple[float, int, dict[str, Any]]:
    """(wall seconds, peak RSS KiB, the command's JSON summary) of ``keeper backfill``.

    The peak is the child's own ``VmHWM``, read every 20 ms until it exits. Not
    ``wait4``'s ``ru_maxrss``: that counts the pages the child shared with this
    (large) process between fork and exec, and reported 1.5 GB for a daemon
    whose own peak was a fifth of that.
    """
    out_path, err_path = config.with_suffix(".out"), config.with_suffix(".err")
    start = time.perf_counter()
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(
            keeper_cmd("backfill", "-c", str(config), "--no-progress"), stdout=out, stderr=err
        )
        peak_kb = 0
        while True:
            with contextlib.suppress(OSError, ValueError):
                peak_kb = max(peak_kb, rss_kb(proc.pid)[1])
            pid, status, _ = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                break
            time.sleep(0.02)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(
            f"keeper backfill exited {proc.returncode}: {err_path.read_text()[-2000:]}"
        )
    summary = json.loads(out_path.read_text().strip().splitlines()[-1])
    return elapsed, peak_kb, summary


def steady_memory(config_dir: Path, url: str, d: Deployment, seconds: float) -> dict[str, Any]:
    """RSS of ``keeper run`` (API on) on the indexed database, sampled after it settles."""
    port = free_port()
    cfg = write_config(config_dir, "backfill", url, d, [("emitter", "erc8183", d.emitter)],
                       api_port=port, poll_interval=1.0, max_range=MAX_RANGE)  # fmt: skip
    proc = spawn_daemon(cfg, config_dir / "daemon.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        samples = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            http_json(f"http://127.0.0.1:{port}/v1/status")
            samples.append(rss_kb(proc.pid)[0])
            time.sleep(0.5)
        cur, peak = rss_kb(proc.pid)
        return {"rss_kb_max": max(samples), "rss_kb_last": cur, "hwm_kb": peak}
    finally:
        stop_daemon(proc)


def bench_backfill(events: int, *, naive_events: int, steady_seconds: float, mode: str
                   ) -> tuple[Result, Result]:  # fmt: skip
    res = Result("backfill", mode)
    mem = Result("memory", mode)
    with AnvilProcess(extra_args=ARCHIVE_ANVIL) as node, \
            tempfile.TemporaryDirectory(prefix="bench-bf-") as tmp:  # fmt: skip
        work = Path(tmp)
        d = deploy_all(node.url)
        wl = job_flows(node.url, d.emitter, events, jobs_per_block=JOBS_PER_BLOCK)
        first, last = d.start_block, wl.last_block
        blocks = last - first + 1
        res.details["workload"] = {"events": wl.events, "jobs": wl.jobs, "blocks": blocks,
                                   "generate_seconds": round(wl.seconds, 1),
                                   "max_range": MAX_RANGE}  # fmt: skip

        c_secs, c_count = asyncio.run(ceiling(node.url, d.emitter, first, last, MAX_RANGE))
        assert c_count == wl.events, (c_count, wl.events)

        cfg = write_config(work, "backfill", node.url, d, [("emitter", "erc8183", d.emitter)],
                           max_range=MAX_RANGE)  # fmt: skip
        e_secs, peak_kb, summary = run_backfill(cfg)
        if summary["events"] != wl.events:
            raise RuntimeError(f"backfill indexed {summary['events']} of {wl.events} events")
        conn = sqlite3.connect(work / "backfill.db")
        stored = conn.execute("SELECT count(*) FROM events").fetchone()[0]
        jobs = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
        reads = conn.execute("SELECT count(*) FROM chain_reads").fetchone()[0]
        conn.close()
        if stored != wl.events or jobs != wl.jobs:
            raise RuntimeError(f"stored {stored} events / {jobs} jobs of {wl.events}/{wl.jobs}")

        n_span = max(1, naive_events // (JOBS_PER_BLOCK * 6)) if naive_events else 0
        n_last = min(last, wl.first_block + n_span - 1)
        n_secs, n_count = naive(node.url, d.emitter, wl.first_block, n_last, MAX_RANGE,
                                work / "naive.db")  # fmt: skip

        eps = wl.events / e_secs
        ceiling_eps = c_count / c_secs
        naive_eps = n_count / n_secs
        res.add("events/s end to end", eps, "ev/s", 30_000)
        res.add("blocks/s end to end", blocks / e_secs, "blk/s")
        res.add("share of the getLogs ceiling", eps / ceiling_eps, "x", 0.5)
        res.add("speed-up over naive web3.py", eps / naive_eps, "x", 10)
        res.add("ceiling (getLogs + JSON parse)", ceiling_eps, "ev/s")
        res.add("naive (web3 process_log + INSERT)", naive_eps, "ev/s")
        res.details.update({
            "end_to_end_seconds": round(e_secs, 2),
            "in_process_seconds": summary["seconds"],
            "in_process_events_per_second": summary["events_per_second"],
            "ceiling_seconds": round(c_secs, 2),
            "naive_events": n_count,
            "naive_seconds": round(n_secs, 2),
            "stored_events": stored, "jobs": jobs, "chain_reads": reads,
        })  # fmt: skip
        res.add("events/s inside the process", summary["events_per_second"], "ev/s")

        steady = steady_memory(work, node.url, d, steady_seconds)
        mem.add(f"peak RSS, backfill of {wl.events:,} events", peak_kb / 1024, "MB", 150,
                higher=False)  # fmt: skip
        mem.add("RSS steady state after (daemon + API)", steady["rss_kb_max"] / 1024, "MB", 150,
                higher=False)  # fmt: skip
        mem.details.update({"events": wl.events, **steady, "backfill_peak_kb": peak_kb})
    return res, mem
