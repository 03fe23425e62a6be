"""Benchmarks 1 and 5: backfill throughput against its ceiling and a naive baseline; memory.

On the honest workload (``bench/escrow_workload.py``: job lifecycles through
the devnet's ERC8183-shaped escrow, so every ``getJob`` answers), once dense
and once sparse, each on its own fresh chain. Three measurements each:

* **end to end**: ``keeper backfill`` as a subprocess into a fresh database
  (process start, imports and the chain-id check included), with the default
  config (a long dense range's rest fetched by a second process) and again
  with every fetch in process; peak RSS of the command and its fetch process
  together; afterwards every job's stored description is checked against the
  one the workload created, so dropped or failed reads fail the benchmark;
* **ceiling**: the same ``eth_getLogs`` ranges fetched and JSON-parsed,
  nothing decoded, read or stored: no indexer on this node can beat it;
* **naive**: web3.py ``get_logs`` + ``process_log`` per event, the
  ``getJob`` call of every ``JobCreated`` through web3 at the event's block,
  and one INSERT per row, on a prefix of the chain (it is too slow for all).

Memory then follows the daemon (``keeper run``) in steady state on the
indexed dense database.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import aiohttp
from web3 import Web3

from bench.catchup import daemon_catchup
from bench.common import (
    ARCHIVE_ANVIL,
    FULL_NODE_ANVIL,
    Result,
    TreePeak,
    free_port,
    http_json,
    keeper_cmd,
    rss_kb,
    spawn_daemon,
    stat_cpu,
    stop_daemon,
    wait_http,
    write_config,
)
from bench.escrow_workload import (
    ANVIL_ARGS,
    DENSE,
    SPARSE_WIDE,
    Density,
    Workload,
    canonical_multicall,
    deploy_driver,
    description,
    indexed_events,
    job_flows,
    sparse,
)
from bench.hardhat_node import HardhatProcess
from keeper.devnet.anvil import AnvilProcess
from keeper.devnet.contracts import load_artifact
from keeper.devnet.deploy import Deployment, deploy_all
from keeper.domain.multicall import MULTICALL3_ADDRESS, encode_aggregate3
from keeper.store.index_rows import description_from_json
from keeper.sync.view_calls import AGGREGATE_SIZE, AGGREGATES_AT_ONCE
from tests.support.rpc_proxy import RpcProxy

CONTRACT_NAME = "erc8183"


_JOB_CREATED = "0x" + Web3.keccak(
    text="JobCreated(uint256,address,address,address,uint48,address)"
).hex().removeprefix("0x")
_GET_JOB = "0xbf22c457"  # getJob(uint256)
# how the daemon sends the reads (keeper/sync/view_calls.py): alone, JSON-RPC batches of 100,
# four at once; grouped, aggregate3 calls of 200 at the finalized block, four in flight
_READ_BATCH, _READS_AT_ONCE = 100, 4
_AGGREGATE, _AGGREGATES_AT_ONCE = AGGREGATE_SIZE, AGGREGATES_AT_ONCE


async def ceiling(
    url: str, address: str, first: int, last: int, span: int, *, reads: str = ""
) -> tuple[float, int]:
    """Seconds to fetch and parse every range's logs with one keep-alive session, and the count.

    With ``reads``, also the ``getJob`` of every JobCreated, answers JSON-parsed only:
    what the node itself spends on the reads the indexer must make. ``"alone"``: one raw
    eth_call each at the event's block, in batches of 100, four batches at once (how the
    daemon sent them before grouping, and still does without Multicall3); ``"grouped"``:
    aggregate3 eth_calls of 200 at the finalized block (the head here), four in flight,
    as the daemon sends them now.
    """
    count = 0
    start = time.perf_counter()
    async with aiohttp.ClientSession() as session:

        async def post(body: Any) -> Any:
            async with session.post(url, json=body) as resp:
                return json.loads(await resp.read())

        head = hex(int((await post({"jsonrpc": "2.0", "id": 1, "method": "eth_blockNumber",
                                    "params": []}))["result"], 16))  # fmt: skip
        for lo in range(first, last + 1, span):
            hi = min(last, lo + span - 1)
            flt = {"address": [address], "fromBlock": hex(lo), "toBlock": hex(hi)}
            logs = (await post({"jsonrpc": "2.0", "id": 1, "method": "eth_getLogs",
                                "params": [flt]}))["result"]  # fmt: skip
            count += len(logs)
            created = [x for x in logs if x["topics"][0] == _JOB_CREATED]
            if reads == "alone":
                calls = [
                    {"jsonrpc": "2.0", "id": i, "method": "eth_call",
                     "params": [{"to": address, "data": _GET_JOB + lg["topics"][1][2:]},
                                lg["blockNumber"]]}
                    for i, lg in enumerate(created)
                ]  # fmt: skip
                step = _READ_BATCH * _READS_AT_ONCE
                for i in range(0, len(calls), step):
                    chunk = calls[i : i + step]
                    batches = [chunk[j : j + _READ_BATCH]
                               for j in range(0, len(chunk), _READ_BATCH)]  # fmt: skip
                    for answers in await asyncio.gather(*(post(b) for b in batches)):
                        if any("result" not in a for a in answers):
                            raise RuntimeError(f"a getJob read failed: {answers[0]}")
            elif reads == "grouped":
                payloads = [
                    encode_aggregate3([(address, bytes.fromhex(_GET_JOB[2:] + lg["topics"][1][2:]))
                                       for lg in created[i : i + _AGGREGATE]])
                    for i in range(0, len(created), _AGGREGATE)
                ]  # fmt: skip
                for i in range(0, len(payloads), _AGGREGATES_AT_ONCE):
                    wave = [
                        {"jsonrpc": "2.0", "id": 1, "method": "eth_call",
                         "params": [{"to": MULTICALL3_ADDRESS, "data": "0x" + p.hex()}, head]}
                        for p in payloads[i : i + _AGGREGATES_AT_ONCE]
                    ]  # fmt: skip
                    for answer in await asyncio.gather(*(post(b) for b in wave)):
                        if "result" not in answer or len(answer["result"]) < 130:
                            raise RuntimeError(f"an aggregate3 read failed: {answer}")
    return time.perf_counter() - start, count


def naive(
    url: str, address: str, first: int, last: int, span: int, db: Path, *, at_event: bool = True
) -> tuple[float, int]:
    """web3.py ``get_logs`` + ``process_log`` per event + ``getJob`` per JobCreated at its
    block (``at_event``; else at the head, all a node without history answers) + one
    INSERT per row, one commit per range (per-row commits would measure fsync)."""
    w3 = Web3(Web3.HTTPProvider(url, request_kwargs={"timeout": 120}))
    abi, _ = load_artifact("ERC8183")
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
    conn.execute("CREATE TABLE jobs (job_id TEXT PRIMARY KEY, description TEXT, job TEXT)")
    count = 0
    start = time.perf_counter()
    for lo in range(first, last + 1, span):
        hi = min(last, lo + span - 1)
        logs = w3.eth.get_logs({"address": contract.address, "fromBlock": lo, "toBlock": hi})
        for lg in logs:
            event = by_topic["0x" + lg["topics"][0].hex().removeprefix("0x")]
            decoded = event.process_log(lg)
            args = dict(decoded["args"])
            conn.execute(
                "INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                (decoded["blockHash"].to_0x_hex(), decoded["logIndex"], decoded["blockNumber"],
                 decoded["event"], json.dumps(args, default=str)),
            )  # fmt: skip
            if decoded["event"] == "JobCreated":
                job = contract.functions.getJob(args["jobId"]).call(
                    block_identifier=decoded["blockNumber"] if at_event else "latest"
                )
                conn.execute(
                    "INSERT INTO jobs VALUES (?, ?, ?)",
                    (str(args["jobId"]), job[10], json.dumps(job, default=str)),
                )
            count += 1
        conn.commit()
    elapsed = time.perf_counter() - start
    stored = conn.execute("SELECT count(*) FROM jobs WHERE description != ''").fetchone()[0]
    jobs = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
    conn.close()
    if not jobs or stored != jobs:
        raise RuntimeError(f"naive baseline read {stored} descriptions for {jobs} jobs")
    return elapsed, count


def check_descriptions(db: Path, wl: Workload) -> int:
    """How many jobs the backfill stored with the description the workload created.

    Raises unless every job has it: a dropped, reverted or failed read (the reason
    the benchmark had to change) must fail the benchmark, not make it faster.
    """
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT job_id, description FROM jobs").fetchall()
    conn.close()
    stored = {int(job_id): description_from_json(text) for job_id, text in rows}
    wrong = [
        j for j in range(wl.first_job, wl.first_job + wl.jobs)
        if stored.get(j) != description(j)
    ]  # fmt: skip
    if wrong:
        got = stored.get(wrong[0])
        raise RuntimeError(
            f"backfill stored {wl.jobs - len(wrong)} of {wl.jobs} job descriptions; "
            f"job {wrong[0]} has {got!r}, expected {description(wrong[0])!r}"
        )
    return wl.jobs


# ``run_backfill``'s ``env`` for a backfill with every fetch in the command's own process
IN_PROCESS: Final = {"KEEPER_CHAIN__FETCH_PROCESS_BLOCKS": "0"}


def run_backfill(
    config: Path, *, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> tuple[float, int, dict[str, Any]]:
    """(wall seconds, peak RSS KiB, the command's JSON summary) of ``keeper backfill``.

    The summary gains ``cpu_seconds``: the CPU the command and its fetch processes used.

    The peak is the largest total RSS of the command and its fetch processes
    (keeper.sync.fetch_process), sampled every 20 ms until it exits, and at
    least the command's own ``VmHWM`` (``TreePeak``); the summary's
    ``fetch_process_kb`` is the fetch processes' own largest peak (0: none
    started). The command runs with this environment plus
    ``env`` (``IN_PROCESS``; another tree's ``PYTHONPATH``), so by default with
    the config's own ``[chain] fetch_process_blocks`` (32 unless it sets one:
    the child takes the rest of a range once it looks like holding
    ``fetch_process_events``). ``cwd``: another tree's root, where its own fetch process
    looks for its code (trees before that process's start ignored the working
    directory imported ``keeper`` from there).
    """
    out_path, err_path = config.with_suffix(".out"), config.with_suffix(".err")
    start = time.perf_counter()
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(
            keeper_cmd("backfill", "-c", str(config), "--no-progress"), stdout=out, stderr=err,
            env={**os.environ, **(env or {})}, cwd=cwd,
        )  # fmt: skip
        peak = TreePeak(proc.pid)
        while True:
            peak.sample()
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
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
    summary["fetch_process_kb"] = max(peak.children_kb.values(), default=0)
    # the command's CPU with its fetch processes' (wait4 counts the children it reaped)
    summary["cpu_seconds"] = usage.ru_utime + usage.ru_stime
    return elapsed, peak.peak_kb, summary


def steady_memory(
    config_dir: Path, url: str, d: Deployment, seconds: float, max_range: int
) -> dict[str, Any]:
    """RSS of ``keeper run`` (API on) on the indexed database, sampled after it settles."""
    port = free_port()
    cfg = write_config(config_dir, "backfill", url, d, [(CONTRACT_NAME, "erc8183", d.erc8183)],
                       api_port=port, poll_interval=1.0, max_range=max_range)  # fmt: skip
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


def node_cpu_seconds(node: AnvilProcess) -> float:
    """The node's CPU so far (user and system): what it spends answering a backfill."""
    assert node.proc is not None
    return stat_cpu(Path(f"/proc/{node.proc.pid}/stat"))


def _run_on(
    node: AnvilProcess, config: Path, env: Mapping[str, str] | None = None
) -> tuple[float, int, dict[str, Any], float]:
    """``run_backfill``'s figures, and the CPU seconds the node spent meanwhile."""
    before = node_cpu_seconds(node)
    secs, peak_kb, summary = run_backfill(config, env=env)
    return secs, peak_kb, summary, node_cpu_seconds(node) - before


def cpu_figures(
    res: Result,
    prefix: str,
    keeper_cpu: float,
    node_cpu: float,
    events: int,
    ceiling_eps: float,
    cores: int | None = None,
) -> None:
    """What the run's CPU says about its share of the ceiling, whatever the overlap.

    The command, its fetch process and the node share this machine's cores: no
    arrangement of them goes faster than the cores divided by their CPU an event,
    so that limit's share of the ceiling bounds the share this code can reach here,
    and the command's CPU an event that half the ceiling leaves is the budget the
    share target sets (bench/README.md): negative when the node alone takes more of the
    cores than half the ceiling leaves, as Hardhat Network does on the wide sparse chain.
    """
    cores = cores or len(os.sched_getaffinity(0))
    keeper_us, node_us = keeper_cpu / events * 1e6, node_cpu / events * 1e6
    limit = cores / ((keeper_us + node_us) / 1e6)
    res.add(f"{prefix}CPU an event, the command (its fetch process included)", keeper_us, "us")
    res.add(f"{prefix}CPU an event, the node", node_us, "us")
    res.add(f"{prefix}limit of {cores} cores at that CPU", limit, "ev/s")
    res.add(f"{prefix}share of the ceiling that limit allows", limit / ceiling_eps, "x")
    budget = cores / (0.5 * ceiling_eps) * 1e6 - node_us
    res.add(f"{prefix}command's CPU an event that a 0.5 share allows", budget, "us")


def _measure(
    res: Result,
    node: AnvilProcess,
    work: Path,
    density: Density,
    events: int,
    naive_events: int,
    *,
    history: bool = True,
) -> tuple[Deployment, int]:
    """One density on a fresh chain: generate, ceiling, ``keeper backfill``, naive.

    ``history``: the node serves state at every block (an archive node); without
    it the ceiling of reads at each event's block is not measured and the naive
    baseline reads at the head. Returns the deployment and the backfill's peak RSS
    in KiB.
    """
    d = deploy_all(node.url)
    canonical_multicall(node.url, d)
    driver = deploy_driver(node.url, d)
    wl = job_flows(node.url, d, driver, events, density)
    span = density.max_range
    first, last = d.start_block, wl.last_block
    blocks = last - first + 1
    print(f"[backfill] {density.name}: {wl.events:,} events, {wl.jobs:,} jobs in {wl.blocks:,} "
          f"blocks ({wl.transactions:,} transactions, {wl.gas_used / wl.transactions / 1e6:.1f}M "
          f"gas each) generated in {wl.seconds:.0f} s", flush=True)  # fmt: skip
    res.details["workload"] = {
        "density": density.name, "events": wl.events, "jobs": wl.jobs, "blocks": wl.blocks,
        "events_per_block": density.events_per_block, "jobs_per_tx": density.jobs_per_tx,
        "txs_per_block": density.txs_per_block, "transactions": wl.transactions,
        "gas_per_tx": round(wl.gas_used / wl.transactions),
        "generate_seconds": round(wl.seconds, 1), "max_range": span, "last_block": last,
    }  # fmt: skip

    # One unmeasured backfill first: whatever reads the chain first pays the node's cold
    # start (anvil serves its blocks' headers, logs and states slower the first time: a
    # sparse backfill measured 30% slower as the first reader than as the second), and
    # the ceilings and both measured backfills should all find it warm. It goes through
    # the recording proxy, which counts the JSON-RPC calls (a batch's each) a backfill
    # makes: what a public endpoint bills, and what its rate limit is spent on.
    with RpcProxy(node.url) as counting:
        run_backfill(write_config(work, "backfill-warm", counting.url, d,
                                  [(CONTRACT_NAME, "erc8183", d.erc8183)], max_range=span),
                     env=IN_PROCESS)  # fmt: skip
        calls = Counter(method for method, _ in counting.calls)
    expected = indexed_events(node.url, d, wl)
    c_secs, c_count = asyncio.run(ceiling(node.url, d.erc8183, first, last, span))
    if c_count != expected:
        raise RuntimeError(f"getLogs returned {c_count} escrow logs of {expected}")
    r_secs = (
        asyncio.run(ceiling(node.url, d.erc8183, first, last, span, reads="alone"))[0]
        if history
        else None
    )
    g_secs, _ = asyncio.run(ceiling(node.url, d.erc8183, first, last, span, reads="grouped"))

    cfg = write_config(work, "backfill", node.url, d, [(CONTRACT_NAME, "erc8183", d.erc8183)],
                       max_range=span)  # fmt: skip
    e_secs, peak_kb, summary, node_cpu = _run_on(node, cfg)
    if summary["events"] != expected:
        raise RuntimeError(f"backfill indexed {summary['events']} of {expected} events")
    conn = sqlite3.connect(work / "backfill.db")
    stored = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    jobs = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
    reads = conn.execute("SELECT count(*) FROM chain_reads").fetchone()[0]
    conn.close()
    if stored != expected or jobs != wl.jobs:
        raise RuntimeError(f"stored {stored} events / {jobs} jobs of {expected}/{wl.jobs}")
    described = check_descriptions(work / "backfill.db", wl)

    n_blocks = max(1, -(-naive_events // density.events_per_block))
    n_last = min(last, wl.first_block + n_blocks - 1)
    n_secs, n_count = naive(node.url, d.erc8183, wl.first_block, n_last, span,
                            work / "naive.db", at_event=history)  # fmt: skip

    eps = expected / e_secs
    ceiling_eps = c_count / c_secs
    naive_eps = n_count / n_secs
    res.add("events/s end to end", eps, "ev/s", 30_000)
    res.add("blocks/s end to end", blocks / e_secs, "blk/s")
    res.add("share of the getLogs ceiling", eps / ceiling_eps, "x", 0.5)
    res.add("speed-up over naive web3.py", eps / naive_eps, "x", 10)
    res.add("ceiling (getLogs + JSON parse)", ceiling_eps, "ev/s")
    res.add("share of the ceiling with grouped getJob reads", eps / (c_count / g_secs), "x")
    res.add("ceiling with the getJob reads grouped (aggregate3)", c_count / g_secs, "ev/s")
    if r_secs is not None:
        res.add("ceiling with the getJob reads alone (raw eth_call)", c_count / r_secs, "ev/s")
    res.add("naive (web3 process_log + getJob + INSERT)", naive_eps, "ev/s")
    res.add("JSON-RPC calls per 1,000 events", 1000 * calls.total() / expected, "calls")
    res.add("events/s inside the command", summary["events_per_second"], "ev/s")
    cpu_figures(res, "", summary["cpu_seconds"], node_cpu, expected, ceiling_eps)
    res.add("peak RSS, the command and its fetch process", peak_kb / 1024, "MB")
    res.add("the fetch process's own peak RSS (0: none started)",
            summary["fetch_process_kb"] / 1024, "MB")  # fmt: skip
    # the same backfill with every fetch in the command's process ([chain]
    # fetch_process_blocks = 0): one core, what the default's second process buys
    ip_cfg = write_config(work, "backfill-ip", node.url, d,
                          [(CONTRACT_NAME, "erc8183", d.erc8183)], max_range=span)  # fmt: skip
    ip_secs, ip_peak_kb, ip_summary, ip_node_cpu = _run_on(node, ip_cfg, IN_PROCESS)
    if ip_summary["events"] != expected:
        raise RuntimeError(f"in-process backfill indexed {ip_summary['events']} events")
    res.add("in process: events/s end to end", expected / ip_secs, "ev/s")
    res.add("in process: share of the getLogs ceiling", expected / ip_secs / ceiling_eps, "x")
    res.add("in process: peak RSS", ip_peak_kb / 1024, "MB")
    cpu_figures(res, "in process: ", ip_summary["cpu_seconds"], ip_node_cpu, expected,
                ceiling_eps)  # fmt: skip
    res.details.update({
        "end_to_end_seconds": round(e_secs, 2),
        "inside_command_seconds": summary["seconds"],
        "inside_command_events_per_second": summary["events_per_second"],
        "in_process_end_to_end_seconds": round(ip_secs, 2),
        "ceiling_seconds": round(c_secs, 2),
        "ceiling_with_reads_seconds": None if r_secs is None else round(r_secs, 2),
        "node_history": history,
        "ceiling_with_grouped_reads_seconds": round(g_secs, 2),
        "naive_events": n_count,
        "naive_seconds": round(n_secs, 2),
        "stored_events": stored, "jobs": jobs, "chain_reads": reads,
        "descriptions_checked": described,
        "rpc_calls": dict(sorted(calls.items())),
        "backfill_peak_kb": peak_kb,
    })  # fmt: skip
    return d, peak_kb


def bench_backfill(events: int, *, sparse_events: int, naive_events: int, steady_seconds: float,
                   mode: str) -> list[Result]:  # fmt: skip
    """backfill-dense of ``events``, backfill-sparse of ``sparse_events`` (each on its own
    chain) and memory."""
    out: list[Result] = []
    mem = Result("memory", mode)
    for density, size in ((DENSE, events), (sparse(sparse_events), sparse_events)):
        res = Result(f"backfill-{density.name}", mode)
        with AnvilProcess(extra_args=ARCHIVE_ANVIL + ANVIL_ARGS) as node, \
                tempfile.TemporaryDirectory(prefix="bench-bf-") as tmp:  # fmt: skip
            work = Path(tmp)
            d, peak_kb = _measure(res, node, work, density, size, min(naive_events, size // 2))
            mem.add(f"peak RSS, {density.name} backfill of {res.details['stored_events']:,} "
                    "events (both processes)", peak_kb / 1024, "MB", 150, higher=False)  # fmt: skip
            mem.details[f"{density.name}_backfill_peak_kb"] = peak_kb
            if density is DENSE:
                steady = steady_memory(work, node.url, d, steady_seconds, density.max_range)
                mem.add("RSS steady state after (daemon + API)", steady["rss_kb_max"] / 1024,
                        "MB", 150, higher=False)  # fmt: skip
                mem.details.update({"events": res.details["stored_events"], **steady})
                out.append(catchup_result(res, work, node.url, d, mode))
        out.append(res)
    out.append(mem)
    return out


def catchup_result(backfill: Result, work: Path, url: str, d: Deployment, mode: str) -> Result:
    """``keeper run`` from empty on the chain ``backfill`` measured, beside that backfill."""
    wl = backfill.details["workload"]
    got = daemon_catchup(work, url, d, (CONTRACT_NAME, "erc8183", d.erc8183), wl["last_block"],
                         wl["max_range"])  # fmt: skip
    base = backfill.details["end_to_end_seconds"]
    res = Result(f"catchup-{wl['density']}", mode, details={**got, "backfill_seconds": base})
    res.add("daemon from empty: events/s until all indexed", wl["events"] / got["indexed_seconds"],
            "ev/s")  # fmt: skip
    res.add("indexed: time over keeper backfill's in the same run",
            got["indexed_seconds"] / base, "x")  # fmt: skip
    res.add(f"all {got['verdicts']:,} verdicts verified: time over keeper backfill's",
            got["verified_seconds"] / base, "x")  # fmt: skip
    res.add("peak RSS, the daemon and its fetch process", got["peak_kb"] / 1024, "MB", 150,
            higher=False)  # fmt: skip
    res.add("the daemon's own peak RSS", got["daemon_peak_kb"] / 1024, "MB")
    res.add("the fetch process's own peak RSS (0: none started)",
            got["fetch_process_peak_kb"] / 1024, "MB")  # fmt: skip
    return res


def bench_backfill_million(events: int, *, naive_events: int, mode: str) -> list[Result]:
    """backfill-dense of ``events`` (1,000,000) on a node that keeps the last 64 states:
    every state in memory, as the other backfills run, would not fit this machine."""
    res = Result(f"backfill-dense-{events // 1_000_000}m", mode)
    with AnvilProcess(extra_args=FULL_NODE_ANVIL + ANVIL_ARGS) as node, \
            tempfile.TemporaryDirectory(prefix="bench-bf-") as tmp:  # fmt: skip
        _, peak_kb = _measure(res, node, Path(tmp), DENSE, events, naive_events, history=False)
    res.add(f"peak RSS, dense backfill of {res.details['stored_events']:,} events "
            "(both processes)", peak_kb / 1024, "MB", 150, higher=False)  # fmt: skip
    return [res]


def size_label(events: int) -> str:
    """200000 -> "200k", 1000000 -> "1m": a result's name."""
    return f"{events // 1_000_000}m" if events % 1_000_000 == 0 else f"{events // 1_000}k"


def bench_backfill_sparse_wide(events: int, *, naive_events: int, mode: str) -> list[Result]:
    """backfill-sparse of ``events`` at 16 events a block (12,500 blocks for 200,000) on a
    Hardhat Network node: anvil builds such chains too slowly (bench/hardhat_node.py)."""
    res = Result(f"backfill-sparse-{size_label(events)}-hardhat", mode)
    with HardhatProcess() as node, tempfile.TemporaryDirectory(prefix="bench-bf-") as tmp:
        _, peak_kb = _measure(res, node, Path(tmp), SPARSE_WIDE, events,
                              min(naive_events, events // 2))  # fmt: skip
        assert node.proc is not None
        res.details["node_rss_kb"] = rss_kb(node.proc.pid)[0]
    res.details["node"] = "hardhat"
    res.add(f"peak RSS, sparse backfill of {res.details['stored_events']:,} events "
            "(both processes)", peak_kb / 1024, "MB", 150, higher=False)  # fmt: skip
    return [res]
