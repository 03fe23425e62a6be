"""A live monitoring stack for the ops tests: anvil, `keeper devnet`, and a real Prometheus.

The devnet is run as the operator would (``python -m keeper devnet``) against
an anvil started here, with three additions through ``KEEPER_*`` overrides so
that every series a dashboard or alert reads exists:

- a second RPC endpoint, ``offline``, on a port nothing listens on: endpoint
  errors and backoffs (RPC error panels, RpcErrorRateHigh);
- a fifth watched contract, an ``EventEmitter`` that emitted one log with an
  unknown topic0 before the daemon started (unknown-events panel and alert).

Each process runs in its own process group and is killed as a group on exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ops_assets import ALERTS, ROOT, dump_yaml

from keeper.devnet.anvil import DEV_KEYS, AnvilProcess, free_port
from keeper.devnet.contracts import load_abi
from keeper.devnet.deploy import connect, deploy_contract, send_call

SCRAPE_INTERVAL = "1s"
# Dev key no devnet role uses (roles take 0-7 and 9), so its nonces are ours alone.
EMITTER_KEY = DEV_KEYS[8]
STOP_GRACE_SECONDS = 10.0
# The readiness predicate runs dozens of queries: once a second is plenty.
READY_POLL_SECONDS = 1.0


@dataclass
class Stack:
    """Where the running parts answer, and what the test must not find in the output."""

    workdir: Path
    metrics_url: str
    prometheus_url: str
    scrape_started: float
    secrets: tuple[str, ...]
    process_groups: dict[str, int]

    def prom(self, path: str, **params: str) -> Any:
        """GET a Prometheus HTTP API path; return the decoded ``data`` (raises on error)."""
        query = urllib.parse.urlencode(params)
        url = f"{self.prometheus_url}{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as exc:
            body = json.load(exc)
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query_range(self, expr: str) -> list[dict[str, Any]]:
        """``expr`` over everything scraped so far, one point per second."""
        data = self.prom(
            "/api/v1/query_range",
            query=expr,
            start=f"{self.scrape_started:.3f}",
            end=f"{time.time():.3f}",
            step="1",
        )
        result: list[dict[str, Any]] = data["result"]
        return result

    def metric_names(self) -> set[str]:
        return set(self.prom("/api/v1/label/__name__/values"))


def get(url: str, timeout: float = 2.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        body: bytes = resp.read()
        return body


def _wait_for(
    what: str, check: Callable[[], bool], timeout: float, alive: Callable[[], None]
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive()
        with contextlib.suppress(OSError, ValueError):
            if check():
                return
        time.sleep(0.25)
    raise TimeoutError(f"{what} not ready within {timeout}s")


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the group leader, as `docker stop` would, then SIGKILL what is left of its group.

    Not SIGTERM to the whole group: the daemon's multiprocessing worker dies of it
    first, and the daemon then hangs at exit joining that pool.
    """
    if proc.poll() is None:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=STOP_GRACE_SECONDS)
    # the leader may be gone while children of its group linger
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def group_members(pgid: int) -> list[int]:
    """Pids of live (non-zombie) processes in process group ``pgid``, from /proc."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            # fields after the parenthesised command: state, ppid, pgrp, ...
            state, _ppid, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
            if int(pgrp) == pgid and state not in {"Z", "X"}:
                members.append(int(stat.parent.name))
    return members


def leftover_groups(groups: dict[str, int], timeout: float = 5.0) -> dict[str, list[int]]:
    """Groups that still have live members after ``timeout`` (exiting children get time)."""
    deadline = time.monotonic() + timeout
    while True:
        left = {name: pids for name, g in groups.items() if (pids := group_members(g))}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def anvil_group(anvil: AnvilProcess) -> int:
    assert anvil.proc is not None
    return anvil.proc.pid  # started with start_new_session: its pid is its group id


def _deploy_emitter(rpc_url: str) -> tuple[str, int]:
    """Deploy an EventEmitter and emit one unknown-topic log; return (address, deploy block)."""
    w3 = connect(rpc_url)
    address = deploy_contract(w3, EMITTER_KEY, "EventEmitter")
    block = w3.eth.block_number
    contract = w3.eth.contract(
        address=w3.to_checksum_address(address), abi=load_abi("EventEmitter")
    )
    send_call(w3, EMITTER_KEY, contract.functions.emitMystery(1, b"\x01"))
    return address, block


def _prometheus_config(path: Path, target: str) -> None:
    config = {
        "global": {
            "scrape_interval": SCRAPE_INTERVAL,
            "scrape_timeout": SCRAPE_INTERVAL,
            "evaluation_interval": SCRAPE_INTERVAL,
        },
        "rule_files": [str(ALERTS)],
        # job name as in deploy/prometheus/prometheus.yml (the KeeperDown alert matches it)
        "scrape_configs": [{"job_name": "keeper", "static_configs": [{"targets": [target]}]}],
    }
    path.write_text(dump_yaml(config))


@contextlib.contextmanager
def running_stack(
    workdir: Path,
    prometheus: str,
    *,
    ready: Callable[[Stack], bool],
    min_seconds: float,
    max_seconds: float,
) -> Iterator[Stack]:
    """Start everything, wait until ``ready(stack)`` holds, yield, stop.

    Waits at least ``min_seconds`` of scraping (so rates have points) and at
    most ``max_seconds`` for ``ready``; past that the stack is yielded anyway
    and the tests report what is missing.
    """
    procs: list[subprocess.Popen[bytes]] = []
    with contextlib.ExitStack() as cleanup:
        anvil = cleanup.enter_context(AnvilProcess())

        @cleanup.callback
        def stop_all() -> None:
            for proc in reversed(procs):
                _stop_group(proc)

        emitter, emitter_block = _deploy_emitter(anvil.url)
        api_port, offline_port, prom_port = free_port(), free_port(), free_port()
        offline_url = f"http://127.0.0.1:{offline_port}"
        env = {
            **os.environ,
            "KEEPER_API__LISTEN": f"127.0.0.1:{api_port}",
            "KEEPER_CHAIN__RPC_URLS": json.dumps([anvil.url, offline_url]),
            "KEEPER_CHAIN__RPC_NAMES": "anvil,offline",
            "KEEPER_CONTRACTS__4__NAME": "emitter",
            "KEEPER_CONTRACTS__4__PROTOCOL": "erc8183",
            "KEEPER_CONTRACTS__4__ADDRESS": emitter,
            "KEEPER_CONTRACTS__4__START_BLOCK": str(emitter_block),
        }
        log = cleanup.enter_context((workdir / "devnet.log").open("wb"))
        devnet = subprocess.Popen(
            [
                *(sys.executable, "-m", "keeper", "devnet", "--rpc", anvil.url),
                *("--workdir", str(workdir / "devnet"), "--duration", str(3 * max_seconds)),
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        procs.append(devnet)

        def devnet_alive() -> None:
            if devnet.poll() is not None:
                tail = (workdir / "devnet.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"keeper devnet exited with {devnet.returncode}:\n{tail}")

        metrics_url = f"http://127.0.0.1:{api_port}/metrics"
        _wait_for("daemon /metrics", lambda: bool(get(metrics_url)), 60, devnet_alive)

        config = workdir / "prometheus.yml"
        _prometheus_config(config, f"127.0.0.1:{api_port}")
        prom_log = cleanup.enter_context((workdir / "prometheus.log").open("wb"))
        prom = subprocess.Popen(
            [
                prometheus,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
                "--log.level=warn",
            ],
            stdout=prom_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        procs.append(prom)

        def both_alive() -> None:
            devnet_alive()
            if prom.poll() is not None:
                tail = (workdir / "prometheus.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"prometheus exited with {prom.returncode}:\n{tail}")

        prometheus_url = f"http://127.0.0.1:{prom_port}"
        _wait_for("prometheus", lambda: bool(get(f"{prometheus_url}/-/ready")), 30, both_alive)
        stack = Stack(
            workdir=workdir,
            metrics_url=metrics_url,
            prometheus_url=prometheus_url,
            scrape_started=time.time(),
            secrets=(anvil.url, offline_url, DEV_KEYS[4], DEV_KEYS[4].removeprefix("0x")),
            process_groups={
                "anvil": anvil_group(anvil),
                "devnet": devnet.pid,
                "prometheus": prom.pid,
            },
        )
        started = time.monotonic()

        last_check = 0.0

        def enough() -> bool:
            nonlocal last_check
            now = time.monotonic()
            if now - started >= max_seconds:
                return True
            if now - started < min_seconds or now - last_check < READY_POLL_SECONDS:
                return False
            last_check = now
            return ready(stack)

        _wait_for("scraped series", enough, max_seconds + 5, both_alive)
        yield stack
