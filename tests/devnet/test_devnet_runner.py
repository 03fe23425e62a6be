"""run_devnet end to end on a real anvil: the written config loads, traffic drives jobs and
tasks through every outcome, served verdicts match on-chain reasons (or are caught when
tampered), and stopping leaves no anvil behind."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from eth_utils.crypto import keccak
from support.devnet_timing import FAST
from web3 import Web3

from keeper.config import load_config
from keeper.devnet.anvil import DEV_KEYS
from keeper.devnet.contracts import load_abi, taskmarket_abi
from keeper.devnet.deploy import Deployment
from keeper.devnet.evaluator_service import verdict_digest
from keeper.devnet.runner import KEEPER_KEY_ENV, render_config, run_devnet

JOB_COMPLETED = "0x" + keccak(text="JobCompleted(uint256,address,bytes32)").hex()
JOB_REJECTED = "0x" + keccak(text="JobRejected(uint256,address,bytes32)").hex()
COMPLETED, REJECTED, EXPIRED = 3, 4, 5
TASK_ACCEPTED, TASK_EXPIRED, TASK_CANCELLED = 4, 5, 6


def port_open(url: str) -> bool:
    parts = urlsplit(url)
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((parts.hostname or "", parts.port or 0)) == 0


def chain_state(rpc_url: str, d: Deployment) -> dict[str, Any]:
    """Status counts per escrow and the verdict reasons recorded on the commerce contract."""
    w3 = Web3(Web3.HTTPProvider(rpc_url))

    def contract(name: str, address: str) -> Any:
        return w3.eth.contract(address=Web3.to_checksum_address(address), abi=load_abi(name))

    out: dict[str, Any] = {}
    for key, name, address in (
        ("commerce", "AgenticCommerce", d.commerce),
        ("legacy", "LegacyAgenticCommerce", d.legacy_commerce),
    ):
        c = contract(name, address)
        n = c.functions.jobCounter().call()
        out[key] = Counter(c.functions.getJob(j).call()[7] for j in range(1, n + 1))
    logs = w3.eth.get_logs(
        {
            "address": Web3.to_checksum_address(d.commerce),
            "fromBlock": d.start_block,
            "toBlock": "latest",
            "topics": [[JOB_COMPLETED, JOB_REJECTED]],
        }
    )
    out["reasons"] = {
        int.from_bytes(bytes(x["topics"][1]), "big"): "0x" + bytes(x["data"]).hex() for x in logs
    }
    tm = w3.eth.contract(address=Web3.to_checksum_address(d.taskmarket), abi=taskmarket_abi())
    sig = "TaskCreated(bytes32,address,uint256,bytes4,uint256,bool,uint16)"
    topics = ["0x" + keccak(text=sig).hex()]
    created = w3.eth.get_logs(
        {"address": tm.address, "fromBlock": d.start_block, "toBlock": "latest", "topics": topics}
    )
    # status is the 4th of the 14 revision-21 fields
    out["tasks"] = Counter(tm.functions.getTask(bytes(x["topics"][1])).call()[3] for x in created)
    new = contract("ERC8183", d.erc8183)
    jobs = [new.functions.getJob(j).call() for j in range(1, new.functions.jobCounter().call() + 1)]
    out["erc8183"] = Counter(job[1] for job in jobs)  # status is the 2nd of 13 fields
    out["erc8183_partly_settled_expired"] = sum(1 for j in jobs if j[1] == EXPIRED and j[11] > 0)
    for name, signature in (
        ("paused", "Paused(address)"),
        ("detached", "HookDetached(uint256,address)"),
    ):
        out[name] = len(
            w3.eth.get_logs(
                {"address": new.address, "fromBlock": d.start_block, "toBlock": "latest",
                 "topics": ["0x" + keccak(text=signature).hex()]}
            )
        )  # fmt: skip
    return out


def done(state: dict[str, Any]) -> bool:
    return (
        all(state["commerce"][s] > 0 for s in (COMPLETED, REJECTED, EXPIRED))
        and state["legacy"][EXPIRED] > 0
        and all(state["tasks"][s] > 0 for s in (TASK_ACCEPTED, TASK_EXPIRED))
        and state["erc8183"][COMPLETED] > 0
        and state["erc8183"][EXPIRED] >= 3
        and state["erc8183_partly_settled_expired"] > 0
        and state["paused"] > 0
        and state["detached"] > 0
    )


class TestRenderConfig:
    def test_config_loads_with_the_daemon_loader(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The written TOML passes the daemon's own config validation with our addresses."""
        monkeypatch.setenv(KEEPER_KEY_ENV, DEV_KEYS[4])
        d = Deployment(
            31337, *(f"0x{i:040x}" for i in range(1, 10)), start_block=3, erc8183=f"0x{10:040x}"
        )
        path = tmp_path / "keeper.toml"
        path.write_text(
            render_config(
                rpc_url="http://127.0.0.1:8545",
                deployment=d,
                evaluator_url="http://127.0.0.1:9999",
                workdir=tmp_path,
                evaluator_address="0x" + "AB" * 20,
                api_listen="127.0.0.1:9555",
            )
        )
        cfg = load_config(path, env={KEEPER_KEY_ENV: DEV_KEYS[4]})
        assert cfg.chain.chain_id == 31337
        assert [(c.name, c.protocol, c.address, c.start_block) for c in cfg.contracts] == [
            ("commerce", "erc8183", d.commerce, 3),
            ("legacy_commerce", "erc8183", d.legacy_commerce, 3),
            ("erc8183", "erc8183", d.erc8183, 3),
            ("taskmarket", "taskmarket", d.taskmarket, 3),
            ("taskmarket_legacy", "taskmarket", d.taskmarket_legacy, 3),
        ]
        (source,) = cfg.verdicts.sources
        assert source.kind == "http" and source.pointer == "/verdict"
        assert source.url == "http://127.0.0.1:9999/v1/contracts/{contract}/jobs/{jobId}"
        assert cfg.database.path == str(tmp_path / "keeper.db")
        assert cfg.keeper.enabled and cfg.api.port == 9555
        assert cfg.verdicts.evaluators == {"SchemaEval": "0x" + "ab" * 20}


class TestRunDevnet:
    async def test_traffic_outcomes_and_verdict_digests(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Jobs get completed, rejected and expired on chain; served verdicts hash to the
        on-chain reason except the tampered ones; anvil is gone afterwards."""
        monkeypatch.setenv(KEEPER_KEY_ENV, DEV_KEYS[4])
        seen: dict[str, Any] = {}

        async def daemon(config_path: Path) -> None:
            cfg = load_config(config_path)
            rpc = cfg.chain.rpc_urls[0]
            d = Deployment(**json.loads((config_path.parent / "deployment.json").read_text()))
            state: dict[str, Any] = {}
            for _ in range(300):
                state = await asyncio.to_thread(chain_state, rpc, d)
                if done(state):
                    break
                await asyncio.sleep(0.1)
            template = cfg.verdicts.sources[0].url  # type: ignore[union-attr]
            digests: dict[int, str | None] = {}
            async with aiohttp.ClientSession() as http:
                for job in state["reasons"]:
                    url = template.format(contract=d.commerce, jobId=job)
                    async with http.get(url) as r:
                        body = await r.json()
                    digests[job] = verdict_digest(body["verdict"])
            seen.update(rpc=rpc, state=state, digests=digests)

        await asyncio.wait_for(
            run_devnet(
                rpc_url=None,
                workdir=tmp_path,
                with_daemon=daemon,
                self_keep=True,
                timing=FAST,
                api_listen="127.0.0.1:9555",
            ),
            timeout=90,
        )
        state = seen["state"]
        assert done(state), state
        reasons, digests = state["reasons"], seen["digests"]
        matching = [j for j in reasons if digests[j] == reasons[j]]
        tampered = [j for j in reasons if digests[j] != reasons[j]]
        assert len(matching) >= 4
        assert tampered  # the tampered scenario ran, and the digest exposes it
        assert len(tampered) < len(matching)
        assert not port_open(seen["rpc"])

    async def test_cancel_stops_everything(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Cancelling a daemon-less devnet mid-traffic stops anvil and the evaluator service."""
        monkeypatch.setenv(KEEPER_KEY_ENV, DEV_KEYS[4])
        task = asyncio.create_task(
            run_devnet(rpc_url=None, workdir=tmp_path, with_daemon=None, timing=FAST)
        )
        config = tmp_path / "keeper.toml"
        for _ in range(200):
            if config.exists():
                break
            await asyncio.sleep(0.05)
        cfg = load_config(config)
        await asyncio.sleep(1.0)  # some traffic steps
        rpc = cfg.chain.rpc_urls[0]
        evaluator = cfg.verdicts.sources[0].url.split("/v1/")[0]  # type: ignore[union-attr]
        assert port_open(rpc) and port_open(evaluator)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not port_open(rpc)
        assert not port_open(evaluator)

    async def test_a_second_devnet_starts_a_fresh_index(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A new node is a new chain: the index the last devnet left behind is removed before
        the daemon starts, which would otherwise halt on a 'deep reorg' at once."""
        monkeypatch.setenv(KEEPER_KEY_ENV, DEV_KEYS[4])
        seen: list[bool] = []

        def look_and_write(config: Path) -> None:
            db = Path(load_config(config).database.path)
            seen.append(db.exists())
            db.write_bytes(b"an index of this chain")

        async def daemon(config: Path) -> None:
            await asyncio.to_thread(look_and_write, config)

        for _ in range(2):
            await run_devnet(rpc_url=None, workdir=tmp_path, with_daemon=daemon, timing=FAST)
        assert seen == [False, False]


def test_an_appeal_window_below_the_task_markets_minimum_is_refused() -> None:
    """Every evaluated task would revert (AppealWindowTooShort) while the traffic carried on."""
    with pytest.raises(ValueError, match="appeal_window 80 s is below the Task Market's minimum"):
        dataclasses.replace(FAST, appeal_window=80)
