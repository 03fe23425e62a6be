"""Secrets: with a known keeper key and RPC URLs carrying a password and an API key, nothing the
daemon writes or serves contains either: logs, /metrics, every API route, CLI output and the
text of the exceptions its RPC layer raises."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rel_daemon import DaemonProc, keeper_traffic
from rel_report import REPORT
from rel_sizes import SIZES, Size
from support.rpc_proxy import RpcProxy
from sync_support import write_config

from keeper.compose import build_rpc
from keeper.config import load_config
from keeper.devnet.anvil import AnvilProcess, free_port
from keeper.devnet.deploy import deploy_all
from keeper.devnet.traffic import KEEPER_KEY
from keeper.errors import KeeperError
from keeper.store.db import connect

PASSWORD = "s3cret-pw-7781"
API_KEY = "APIKEY123xyz"
WINDOW = 12  # hex characters: a shorter run of the key could occur by chance in hashes


def secret_needles(key: str) -> list[str]:
    """The password, the API key, and every 12-character run of the private key."""
    hex_key = key.removeprefix("0x").lower()
    runs = {hex_key[i : i + WINDOW] for i in range(len(hex_key) - WINDOW + 1)}
    return [PASSWORD, API_KEY, *sorted(runs)]


def leaks(text: str, needles: list[str]) -> list[str]:
    lowered = text.lower()
    return [n for n in needles if n.lower() in lowered]


def cli(*args: str, env: dict[str, str]) -> str:
    """A keeper command's combined output (its exit code does not matter here)."""
    done = subprocess.run(
        [sys.executable, "-m", "keeper", *args],
        capture_output=True,
        env={**os.environ, **env},
        timeout=60,
        check=False,
    )
    return (done.stdout + done.stderr).decode(errors="replace")


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
async def test_no_secret_in_logs_metrics_api_cli_or_exceptions(
    size: Size, backend: str, anvil: AnvilProcess, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Zero hits of the key, the password or the API key anywhere the daemon speaks; on
    PostgreSQL the database URL carries the password too."""
    fig = REPORT.figures(size.name)
    needles = secret_needles(KEEPER_KEY)
    deployed = await asyncio.to_thread(deploy_all, anvil.url)
    dead = free_port()
    async with RpcProxy(anvil.url) as proxy:
        port = int(proxy.url.rsplit(":", 1)[1])
        secret_url = f"http://user:{PASSWORD}@127.0.0.1:{port}/v3/{API_KEY}"
        dead_url = f"https://user:{PASSWORD}@127.0.0.1:{dead}/v3/{API_KEY}?key={API_KEY}"
        database = ""
        if backend == "postgresql":
            # the test server trusts any password: the secret travels all the way through
            server = request.getfixturevalue("postgres_server")
            database = server.database().replace("postgres@", f"postgres:{PASSWORD}@")
        cfg = write_config(
            tmp_path, "secret", [secret_url, dead_url], deployed, database=database,
            poll_interval=0.1, finality="confirmations", confirmations=2, request_timeout=1.0,
        )  # fmt: skip
        config_file = tmp_path / "secret.toml"
        daemon = DaemonProc.for_config(config_file, tmp_path / "secret.log", KEEPER_KEY)
        daemon.start()
        texts: dict[str, str] = {}
        try:
            assert await daemon.wait_ready(90) is not None, daemon.tail()
            # faults make the RPC layer raise, retry and log with its error text (armed after
            # start-up: see test_a_transient_rpc_error_at_start_up_does_not_kill_the_daemon)
            proxy.rules.on(
                "eth_getBlockByNumber", error=3, error_message="header not found", garbage=2
            )
            proxy.rules.on("eth_call", flaky=0.2)
            gen = keeper_traffic(anvil.url, deployed, interval=0.05)
            await gen.run(max(12, size.fault_steps // 2))  # the keeper signs and sends
            # the keeper's first confirmed action follows the index through the injected
            # faults: wait for it, so that the scan below reads a log that has signed, sent
            # and confirmed (what is checked is what the daemon said, not how soon)
            confirmed, task = 0, None
            for _ in range(300):
                conn = connect(cfg.database.target)
                try:
                    confirmed = conn.execute(
                        "SELECT COUNT(*) FROM keeper_intents WHERE outcome = 'confirmed'"
                    ).fetchone()[0]
                    task = conn.execute("SELECT contract, task_id FROM tasks LIMIT 1").fetchone()
                finally:
                    conn.close()
                if confirmed >= 1 and task is not None:
                    break
                await asyncio.sleep(0.1)
            assert confirmed >= 1 and task is not None, daemon.tail()
            c = deployed.commerce
            t, tid = task
            paths = [
                "/healthz", "/readyz", "/metrics", "/openapi.json", "/v1/status", "/v1/jobs",
                "/v1/jobs?limit=2", f"/v1/jobs/{c}/1", "/v1/tasks", f"/v1/tasks/{t}/{tid}",
                f"/v1/verdicts/{c}/1", "/", f"/lookup?q={c}", f"/jobs/{c}/1", f"/tasks/{t}/{tid}",
                "/v1/jobs?cursor=%%%", "/v1/nope",
                f"/v1/jobs/{c}/not-a-number",
            ]  # fmt: skip
            for path in paths:
                reply = await daemon.aget(path)
                assert reply is not None, path
                texts[f"GET {path}"] = reply[1].decode(errors="replace")
            assert "keeper_" in texts["GET /metrics"]
        finally:
            code = daemon.stop() if daemon.alive() else None
        assert code == 0, daemon.tail()
        texts["daemon log"] = daemon.output()
        env = {"KEEPER_PRIVATE_KEY": KEEPER_KEY}
        texts["config check"] = cli("config", "check", "--config", str(config_file), env=env)
        texts["status"] = cli("status", "--config", str(config_file), "--json", env=env)
        wrong_chain = {**env, "KEEPER_CHAIN__CHAIN_ID": "5", "KEEPER_API__ENABLED": "false"}
        texts["wrong chain"] = cli("run", "--config", str(config_file), env=wrong_chain)
        bad_port = {**env, "KEEPER_CHAIN__RPC_URLS": f"http://u:{PASSWORD}@h:99999/{API_KEY}"}
        texts["bad url"] = cli("config", "check", "--config", str(config_file), env=bad_port)
        only_dead = {**env, "KEEPER_CHAIN__RPC_URLS": json.dumps([dead_url])}
        texts["backfill, no node"] = cli(
            "backfill", "--config", str(config_file), "--no-progress", env=only_dead
        )
        # the exception text the RPC layer raises when every endpoint fails
        rpc = build_rpc(load_config(config_file, env={"KEEPER_CHAIN__RPC_URLS": dead_url}), None)
        try:
            with pytest.raises(KeeperError) as info:
                await rpc.chain_id()
            texts["exception"] = f"{info.value}\n{info.value!r}\n{info.value.__cause__!r}"
        finally:
            await rpc.close()
    assert "configuration error" in texts["wrong chain"] or "chain" in texts["wrong chain"]
    found = {where: leaks(text, needles) for where, text in texts.items()}
    hits = {where: n for where, n in found.items() if n}
    fig.secret_leaks += sum(len(n) for n in hits.values())
    fig.secret_bytes_scanned += sum(len(t) for t in texts.values())
    REPORT.flush()
    assert not hits, hits
    # the scan looked at real output, not empty strings
    assert "rpc_retry" in texts["daemon log"] and "keeper_action" in texts["daemon log"]
    assert "127.0.0.1" in texts["exception"] and "keeper_" in texts["GET /metrics"]
