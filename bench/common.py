"""What every benchmark shares: a fresh node, fast senders, configs, figures and reporting.

Benchmarks print ratios beside absolute numbers because this machine is shared
and noisy: a ceiling or a baseline measured in the same run moves with the
noise, a fixed number does not.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from eth_abi.abi import encode
from eth_account import Account
from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak

from keeper.devnet.anvil import DEV_KEYS, free_port, rpc_call
from keeper.devnet.deploy import Deployment

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
KEEPER_BIN = ROOT / ".venv" / "bin" / "keeper"
# a local node answers in microseconds: the production throttle (25 req/s) would
# measure the throttle, not the daemon
BENCH_RPS = 100_000.0
# anvil moves the states of older blocks to disk unless told to keep them in
# memory; its eth_call at such a block (the getJob read of every JobCreated)
# then waits on that, which an archive node serving from its database does not:
# 27 s of a 76 s 1,000,000-event backfill were spent waiting for those reads
ARCHIVE_ANVIL = ["--prune-history", "100000"]
# a full node's view: the states of the last 64 blocks only (a getJob at an older block
# fails), for the 1,000,000-event chain, whose every state in memory would not fit
FULL_NODE_ANVIL = ["--prune-history", "64"]


@dataclass
class Figure:
    """One measured number with its target; ``higher`` says which side of the target is good."""

    name: str
    value: float
    unit: str
    target: float | None = None
    higher: bool = True
    note: str = ""

    @property
    def ratio(self) -> float | None:
        """value/target when higher is better, target/value otherwise: >= 1 means met."""
        if self.target is None:
            return None
        if self.higher:
            return self.value / self.target if self.target else None
        return self.target / self.value if self.value else float("inf")

    @property
    def met(self) -> bool | None:
        r = self.ratio
        return None if r is None else r >= 1.0


@dataclass
class Result:
    bench: str
    mode: str
    figures: list[Figure] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def add(self, *args: Any, **kwargs: Any) -> Figure:
        fig = Figure(*args, **kwargs)
        self.figures.append(fig)
        return fig


def machine() -> dict[str, Any]:
    """The machine the figures were taken on (benchmarks are meaningless without it)."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_mb": mem_kb // 1024,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }


def write_result(result: Result) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{result.bench}.json"
    doc = {
        "bench": result.bench,
        "mode": result.mode,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "figures": [{**asdict(f), "ratio": f.ratio, "met": f.met} for f in result.figures],
        "details": result.details,
    }
    path.write_text(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
    return path


def _num(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.4f}"


def table(results: list[Result]) -> str:
    """Figure, value, target and ratio, one line each; ratio >= 1 means the target is met."""
    lines = [f"{'figure':<52} {'value':>14} {'target':>14} {'ratio':>7}  ok"]
    lines.append("-" * len(lines[0]))
    for res in results:
        for f in res.figures:
            tgt = "" if f.target is None else ("≥ " if f.higher else "≤ ") + _num(f.target)
            ratio = "" if f.ratio is None else f"{f.ratio:.2f}"
            ok = {True: "yes", False: "NO", None: ""}[f.met]
            name = f"{res.bench}: {f.name}"
            lines.append(
                f"{name:<52} {_num(f.value) + ' ' + f.unit:>14} {tgt:>14} {ratio:>7}  {ok}"
            )
    return "\n".join(lines)


# ---- chain -----------------------------------------------------------------------


def address_of(key: str) -> str:
    return str(Account.from_key(key).address).lower()


def calldata(signature: str, types: list[str], args: list[Any]) -> str:
    return "0x" + (keccak(text=signature)[:4] + encode(types, args)).hex()


class Sender:
    """Signs locally with a tracked nonce and fixed gas: thousands of setup txs a second."""

    def __init__(self, url: str, key: str = DEV_KEYS[0]) -> None:
        self.url = url
        self.key = key
        self.address = address_of(key)
        self.nonce = int(rpc_call(url, "eth_getTransactionCount", [self.address, "pending"]), 16)

    def send(self, to: str, data: str, gas: int) -> str:
        tx = {
            "type": 2,
            "chainId": 31337,
            "nonce": self.nonce,
            "to": to_checksum_address(to),
            "data": data,
            "value": 0,
            "gas": gas,
            "maxFeePerGas": 100 * 10**9,
            "maxPriorityFeePerGas": 10**9,
        }
        signed = Account.sign_transaction(tx, self.key)
        self.nonce += 1
        return str(
            rpc_call(self.url, "eth_sendRawTransaction", ["0x" + signed.raw_transaction.hex()])
        )


def wait_receipts(url: str, hashes: list[str], timeout: float = 60.0) -> list[dict[str, Any]]:
    """Every receipt, requiring success: a benchmark on a failed workload measures nothing."""
    out = []
    deadline = time.monotonic() + timeout
    for h in hashes:
        while True:
            r = rpc_call(url, "eth_getTransactionReceipt", [h])
            if r is not None:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"no receipt for {h}")
            time.sleep(0.01)
        if r["status"] != "0x1":
            raise RuntimeError(f"workload transaction reverted: {h}")
        out.append(r)
    return out


# ---- daemon --------------------------------------------------------------------


def write_config(
    workdir: Path,
    name: str,
    rpc_url: str,
    deployment: Deployment,
    contracts: list[tuple[str, str, str]],
    *,
    api_port: int | None = None,
    poll_interval: float = 2.0,
    max_range: int = 2000,
    confirmations: int = 0,
    extra: str = "",
) -> Path:
    """A daemon config over ``contracts`` (name, protocol, address), everything final at once."""
    blocks = "".join(
        f'[[contracts]]\nname = "{n}"\nprotocol = "{p}"\naddress = "{a}"\n'
        f"start_block = {deployment.start_block}\n\n"
        for n, p, a in contracts
    )
    api = (
        f'[api]\nenabled = true\nlisten = "127.0.0.1:{api_port}"\n'
        if api_port
        else "[api]\nenabled = false\n"
    )
    text = (
        f"[chain]\nchain_id = {deployment.chain_id}\nrpc_urls = {json.dumps([rpc_url])}\n"
        f'finality = "confirmations"\nconfirmations = {confirmations}\n'
        f"poll_interval = {poll_interval}\n"
        f"requests_per_second = {BENCH_RPS}\nmax_range = {max_range}\n\n"
        f"[database]\npath = {json.dumps(str(workdir / (name + '.db')))}\n\n"
        f'{api}\n[log]\nformat = "json"\nlevel = "warning"\n\n{extra}\n{blocks}'
    )
    path = workdir / f"{name}.toml"
    path.write_text(text)
    return path


def keeper_cmd(*args: str) -> list[str]:
    return [str(KEEPER_BIN), *args]


def spawn_daemon(
    config: Path, log_path: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """``keeper run`` in its own process group, logs to a file (a full pipe would stall it)."""
    with log_path.open("ab") as out:
        return subprocess.Popen(
            keeper_cmd("run", "-c", str(config)),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
            cwd=cwd,
        )


def stop_daemon(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def http_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def wait_http(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            http_json(url, timeout=1.0)
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


def rss_kb(pid: int) -> tuple[int, int]:
    """(current RSS, peak RSS) of a live process in KiB, from /proc."""
    cur = peak = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            cur = int(line.split()[1])
        elif line.startswith("VmHWM:"):
            peak = int(line.split()[1])
    return cur, peak


@dataclass
class TreePeak:
    """Peak RSS of a process and its children (the fetch processes), sampled by the caller.

    Not ``wait4``'s ``ru_maxrss``: that counts the pages a child shared with
    this (large) process between fork and exec, and reported 1.5 GB for a
    daemon whose own peak was a fifth of that.
    """

    pid: int
    own_kb: int = 0  # the process's own VmHWM
    total_kb: int = 0  # the largest sum of current RSS over the process and its children
    children_kb: dict[int, int] = field(default_factory=dict)  # each child's VmHWM

    def sample(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            now_kb, hwm_kb = rss_kb(self.pid)
            self.own_kb = max(self.own_kb, hwm_kb)
            for child in children(self.pid):
                with contextlib.suppress(OSError, ValueError):
                    child_now, child_hwm = rss_kb(child)
                    self.children_kb[child] = max(self.children_kb.get(child, 0), child_hwm)
                    now_kb += child_now
            self.total_kb = max(self.total_kb, now_kb)

    @property
    def peak_kb(self) -> int:
        return max(self.own_kb, self.total_kb)


def stat_cpu(stat: Path) -> float:
    """User plus system CPU seconds from a /proc ``stat`` file (a process or a thread)."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The live child processes of ``pid``, found by scanning /proc for their parent."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("PPid:"):
                    if int(line.split()[1]) == pid:
                        found.append(int(entry.name))
                    break
    return found


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (no interpolation: with 50 samples p99 is the maximum)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = max(0, min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1))
    return ordered[k]


__all__ = [
    "BENCH_RPS",
    "DEV_KEYS",
    "Figure",
    "Result",
    "Sender",
    "free_port",
]
