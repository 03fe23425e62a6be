"""A command on SQLite never imports what only PostgreSQL or the keeper's encodings need:
psycopg (about 100 ms) and eth_abi with pydantic (about 400 ms) are start-up that every
``keeper`` command would pay, a short backfill's largest part (bench/README.md). The daemon
probes dialects, encodes calls and signs without eth_abi, eth_account or pydantic either:
their import was a fifth of its memory (bench/README.md), and none of the parts it imports
as each starts brings py_ecc, whose import would lift the recursion limit the daemon set
(keeper.process_tuning.tune_recursion) back to 100,000."""

from __future__ import annotations

import ast
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg

import keeper.daemon
from keeper.errors import DatabaseUnavailableError
from keeper.store.db import is_lock_timeout, transient_errors

HEAVY = ("psycopg", "eth_abi", "pydantic")
# what the daemon's own work (dialect probes, the keeper's calls, signing) must not import
SIGNING_HEAVY = ("eth_abi", "eth_account", "eth_keys", "eth_utils", "pydantic", "py_ecc")

# the backfill command's start-up (keeper.app.run_backfill): the composition and its lease;
# then the daemon's modules, which encode the keeper's calls (eth_abi) but need psycopg only
# for PostgreSQL (its API's read replicas are PostgreSQL-only)
PROBE = """
import asyncio, importlib, json, sys
from dataclasses import replace
from keeper.app import load
from keeper.compose import build
from keeper.leadership import Leadership
cfg = load(sys.argv[1])
c = build(cfg, asyncio.Event())
lead = Leadership(c.conn, cfg.chain.chain_id, replace(cfg.cluster, node="probe/backfill"))
outcome = lead.attempt()
c.conn.close()
loaded = [m for m in json.loads(sys.argv[2]) if m in sys.modules]
from keeper.process_tuning import tune_recursion
tune_recursion()
import keeper.daemon
for name in json.loads(sys.argv[4]):  # what the daemon imports when it starts a part
    importlib.import_module(name)
from keeper.act import Signer
from keeper.domain.dialects import probe_calldata
probe_calldata("claimRefund(uint256,bytes)")
probe_calldata("finalizeVerdict(bytes32)")
Signer("0x" + "11" * 32).sign({"type": 2, "chainId": 1, "nonce": 0, "to": "0x" + "22" * 20,
                               "data": b"", "gas": 21000, "maxFeePerGas": 2,
                               "maxPriorityFeePerGas": 1})
print(json.dumps({"change": outcome.change, "loaded": loaded,
                  "daemon_psycopg": "psycopg" in sys.modules,
                  "daemon_loaded": [m for m in json.loads(sys.argv[3]) if m in sys.modules],
                  "recursion_limit": sys.getrecursionlimit()}))
"""


def daemon_lazy_imports() -> list[str]:
    """The keeper modules ``keeper.daemon`` imports inside its functions (each part of the
    daemon is imported when it starts): found in its source, so a new one is covered."""
    tree = ast.parse((Path(keeper.daemon.__file__)).read_text())
    found = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("keeper")
    }
    return sorted(found)


def test_start_up_loads_neither_psycopg_nor_eth_abi_nor_eth_account(tmp_path: Path) -> None:
    config = tmp_path / "keeper.toml"
    config.write_text(
        '[chain]\nchain_id = 31337\nrpc_urls = ["http://127.0.0.1:9/"]\n\n'
        f"[database]\npath = {json.dumps(str(tmp_path / 'k.db'))}\n\n[api]\nenabled = false\n\n"
        '[[contracts]]\nname = "escrow"\nprotocol = "erc8183"\n'
        'address = "0x5FbDB2315678afecb367f032d93F642f64180aa3"\nstart_block = 0\n'
    )
    lazy = daemon_lazy_imports()
    assert {"keeper.act.manager", "keeper.verify.configured", "keeper.api.app"} <= set(lazy)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            PROBE,
            str(config),
            json.dumps(HEAVY),
            json.dumps(SIGNING_HEAVY),
            json.dumps(lazy),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {
        "change": "acquired",
        "loaded": [],
        "daemon_psycopg": False,
        "daemon_loaded": [],
        "recursion_limit": 1000,  # py_ecc would raise it to 100,000 (test_recursion_limit)
    }


def test_postgresql_errors_count_once_psycopg_is_loaded() -> None:
    # this process has imported psycopg, as a PostgreSQL connection does
    transient = transient_errors()
    assert psycopg.OperationalError in transient
    assert sqlite3.OperationalError in transient
    assert DatabaseUnavailableError in transient
    assert is_lock_timeout(psycopg.errors.LockNotAvailable("canceling statement"))
    assert not is_lock_timeout(psycopg.errors.QueryCanceled("canceling statement"))
    assert not is_lock_timeout(sqlite3.OperationalError("database is locked"))
