"""``keeper verify`` on jobs of the real devnet (AgenticCommerce, traffic, evaluator stand-in)."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
from support.devnet_timing import FAST
from web3 import Web3

from keeper.config import load_config
from keeper.devnet.anvil import DEV_KEYS
from keeper.devnet.runner import KEEPER_KEY_ENV, run_devnet
from keeper.verify.command import JOB_COMPLETED, JOB_REJECTED, main


def _judged_jobs(rpc_url: str, commerce: str, start_block: int) -> list[int]:
    w3 = Web3(Web3.HTTPProvider(rpc_url))
    logs = w3.eth.get_logs(
        {
            "address": Web3.to_checksum_address(commerce),
            "fromBlock": start_block,
            "toBlock": "latest",
            "topics": [[JOB_COMPLETED, JOB_REJECTED]],
        }
    )
    return sorted({int.from_bytes(bytes(x["topics"][1]), "big") for x in logs})


def _verify(config: Path, contract: str, job: int) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["--config", str(config), "--contract", contract, "--id", str(job), "--json"], out)
    return code, out.getvalue()


async def test_devnet_verdicts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Honest devnet verdicts verify, tampered ones fail, every report reprints byte for byte."""
    monkeypatch.setenv(KEEPER_KEY_ENV, DEV_KEYS[4])
    results: dict[int, tuple[int, str]] = {}
    again: dict[int, tuple[int, str]] = {}

    async def daemon(config_path: Path) -> None:
        cfg = load_config(config_path)
        deployment: dict[str, Any] = json.loads(
            (config_path.parent / "deployment.json").read_text()
        )
        rpc, commerce = cfg.chain.rpc_urls[0], deployment["commerce"]
        jobs: list[int] = []
        for _ in range(300):
            jobs = await asyncio.to_thread(_judged_jobs, rpc, commerce, deployment["start_block"])
            if len(jobs) >= 6:
                break
            await asyncio.sleep(0.1)
        for job in jobs:
            results[job] = await asyncio.to_thread(_verify, config_path, commerce, job)
            again[job] = await asyncio.to_thread(_verify, config_path, commerce, job)

    await asyncio.wait_for(
        run_devnet(rpc_url=None, workdir=tmp_path, with_daemon=daemon, self_keep=True, timing=FAST),
        timeout=120,
    )
    assert len(results) >= 6
    assert results == again
    codes = [code for code, _ in results.values()]
    statuses = {json.loads(text)["status"] for _, text in results.values()}
    assert 0 in codes and 1 in codes  # the devnet serves one tampered verdict per cycle
    assert statuses == {"verified", "mismatch"}, statuses
