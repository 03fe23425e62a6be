"""GitHubEval jobs on a real anvil deployment, and ``python -m keeper run`` verifying them.

The chain side plays client, provider and evaluator: a job with a GitHubEval
description is created, funded, delivered (the PR link's keccak256 as the
deliverable) and judged with the keccak256 of a verdict document as reason.
The daemon is started the way an operator starts it (a child process with a
TOML file and the token in an environment variable) and read back through
its own API.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from web3 import Web3

from keeper.devnet.anvil import DEV_KEYS, ChainControl, free_port
from keeper.devnet.contracts import load_abi
from keeper.devnet.deploy import Deployment, connect, send_call
from keeper.devnet.traffic import ZERO_ADDRESS, Roles, address_of
from keeper.verify.canonical import canonical_bytes, keccak_hex

TOKEN_ENV = "KEEPER_TEST_GITHUB_TOKEN"
BUDGET = 10 * 10**6


@dataclass(frozen=True)
class Judged:
    job_id: int
    document: dict[str, Any]
    block_time: int


class GitHubJobs:
    """Client, provider and evaluator of GitHubEval jobs on one AgenticCommerce."""

    def __init__(self, rpc_url: str, deployment: Deployment, workdir: Path) -> None:
        self.w3 = connect(rpc_url)
        self.control = ChainControl(rpc_url)
        self.d = deployment
        self.roles = Roles()
        self.contents = workdir / "contents"
        self.documents = workdir / "documents"
        self.contents.mkdir(parents=True, exist_ok=True)
        self.documents.mkdir(parents=True, exist_ok=True)
        self.commerce = self.w3.eth.contract(
            address=Web3.to_checksum_address(deployment.commerce), abi=load_abi("AgenticCommerce")
        )
        usdc = self.w3.eth.contract(
            address=Web3.to_checksum_address(deployment.usdc), abi=load_abi("MockUSDC")
        )
        self.usdc = usdc.address
        send_call(self.w3, DEV_KEYS[0], usdc.functions.mint(address_of(self.roles.client), 10**12))
        send_call(self.w3, self.roles.client, usdc.functions.approve(self.commerce.address, 2**255))

    def now(self) -> int:
        return self.control.timestamp()

    def judge(
        self, github: dict[str, Any], pr_url: str, esito: str, *, publish: bool = True
    ) -> Judged:
        """A job judged ``esito``; its document goes in the directory source when ``publish``."""
        r, c = self.roles, self.commerce
        description = json.dumps({"brief": "bounty", "github": github})
        created = send_call(
            self.w3,
            r.client,
            c.functions.createJob(
                address_of(r.provider),
                address_of(r.evaluator),
                self.now() + 86_400,
                description,
                ZERO_ADDRESS,
                0,
            ),
        )
        (event,) = c.events.JobCreated().process_receipt(created)
        job = int(event["args"]["jobId"])
        send_call(self.w3, r.client, c.functions.setBudget(job, self.usdc, BUDGET, b""))
        send_call(self.w3, r.client, c.functions.fund(job, BUDGET, b""))
        content = pr_url.encode()
        deliverable = keccak_hex(content)
        (self.contents / deliverable).write_bytes(content)
        send_call(self.w3, r.provider, c.functions.submit(job, bytes.fromhex(deliverable[2:]), b""))
        document = {
            "evaluator": "GitHubEval",
            "version": 1,
            "jobId": str(job),
            "deliverable": deliverable,
            "esito": esito,
            "motivi": [],
        }
        reason = keccak_hex(canonical_bytes(document))
        if publish:
            (self.documents / f"{reason}.json").write_bytes(canonical_bytes(document))
        action = c.functions.complete if esito == "complete" else c.functions.reject
        receipt = send_call(self.w3, r.evaluator, action(job, bytes.fromhex(reason[2:]), b""))
        block = self.w3.eth.get_block(receipt["blockNumber"])
        return Judged(job, document, int(block["timestamp"]))


def write_config(
    path: Path, rpc_url: str, deployment: Deployment, jobs: GitHubJobs, github_url: str, db: Path
) -> Path:
    path.write_text(
        f"""
[chain]
chain_id = {deployment.chain_id}
rpc_urls = ["{rpc_url}"]
finality = "confirmations"
confirmations = 0
poll_interval = 0.2

[database]
path = "{db}"

[[contracts]]
name = "commerce"
protocol = "erc8183"
address = "{deployment.commerce}"
start_block = {deployment.start_block}

[verdicts]
sources = [{{ kind = "directory", path = "{jobs.documents}" }}]
content_sources = [{{ kind = "directory", path = "{jobs.contents}" }}]

[verdicts.github]
api_url = "{github_url}"
token_env = "{TOKEN_ENV}"
timeout = 5.0

[api]
listen = "127.0.0.1:{free_port()}"

[log]
format = "json"
"""
    )
    return path


class KeeperRun:
    """``python -m keeper run --config`` as a child process, output to one log file."""

    def __init__(self, config: Path, log: Path, token: str) -> None:
        text = config.read_text()
        self.port = int(text.split('listen = "127.0.0.1:')[1].split('"')[0])
        self.log = log
        env = {**os.environ, TOKEN_ENV: token}
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "keeper", "run", "--config", str(config)],
                stdout=out,
                stderr=out,
                env=env,
            )

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        except (OSError, http.client.HTTPException):
            return 0, b""
        finally:
            conn.close()

    async def verdict(self, contract: str, job: int) -> dict[str, Any] | None:
        status, body = await asyncio.to_thread(
            self.request, "GET", f"/v1/verdicts/{contract}/{job}"
        )
        return json.loads(body) if status == 200 else None

    async def metric(self, name: str, **labels: str) -> float:
        """One sample of the daemon's /metrics (0 when absent)."""
        from prometheus_client.parser import text_string_to_metric_families

        status, body = await asyncio.to_thread(self.request, "GET", "/metrics")
        assert status == 200
        for family in text_string_to_metric_families(body.decode()):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    return float(sample.value)
        return 0.0

    async def wait_status(
        self, contract: str, job: int, wanted: set[str], within: float = 60
    ) -> dict[str, Any]:
        """The verdict as the API serves it once its status is one of ``wanted``."""
        deadline = time.monotonic() + within
        seen: dict[str, Any] | None = None
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            seen = await self.verdict(contract, job)
            if seen is not None and seen["status"] in wanted:
                return seen
            await asyncio.sleep(0.1)
        raise AssertionError(f"job {job}: still {seen and seen['status']}: {seen}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)
