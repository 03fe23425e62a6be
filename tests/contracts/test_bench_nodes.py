"""The benchmarks' two dev nodes: anvil, and Hardhat Network for the wide sparse chains
(bench/hardhat_node.py); each gets the canonical Multicall3 through its own method."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import bench.hardhat_node as hardhat_node
from bench.backfill import size_label
from bench.escrow_workload import (
    ANVIL_ARGS,
    LOGS_PER_RANGE,
    SPARSE_WIDE,
    canonical_multicall,
    pick_density,
    set_code_method,
)
from keeper.devnet.anvil import AnvilProcess, rpc_call
from keeper.devnet.deploy import deploy_all
from keeper.domain.multicall import MULTICALL3_ADDRESS


class _ClientVersion(BaseHTTPRequestHandler):
    """A JSON-RPC endpoint that names itself as Hardhat Network does."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        assert body["method"] == "web3_clientVersion"
        reply = {"jsonrpc": "2.0", "id": body["id"],
                 "result": "HardhatNetwork/2.29.1/@nomicfoundation/edr/0.3.8"}  # fmt: skip
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def hardhat_like() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ClientVersion)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_anvil_gets_the_multicall_through_its_own_method() -> None:
    with AnvilProcess(extra_args=ANVIL_ARGS) as node:
        d = deploy_all(node.url)
        assert set_code_method(node.url) == "anvil_setCode"
        assert rpc_call(node.url, "eth_getCode", [MULTICALL3_ADDRESS, "latest"]) == "0x"
        canonical_multicall(node.url, d)
        code = rpc_call(node.url, "eth_getCode", [MULTICALL3_ADDRESS, "latest"])
        assert code == rpc_call(node.url, "eth_getCode", [d.multicall, "latest"]) != "0x"


def test_a_hardhat_node_is_known_by_its_client_version(hardhat_like: str) -> None:
    assert set_code_method(hardhat_like) == "hardhat_setCode"


def test_a_missing_hardhat_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hardhat_node, "HARDHAT_DIR", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"`make bench` installs it"):
        hardhat_node.find_hardhat()
    with pytest.raises(FileNotFoundError, match="hardhat not found"):
        hardhat_node.HardhatProcess().start()


def test_the_wide_sparse_density_keeps_sixteen_events_a_block() -> None:
    assert SPARSE_WIDE.events_per_block == 16
    assert SPARSE_WIDE.max_range * SPARSE_WIDE.events_per_block <= LOGS_PER_RANGE
    assert -(-200_000 // SPARSE_WIDE.events_per_block) == 12_500
    assert pick_density("sparse-wide", 1_000_000) is SPARSE_WIDE
    assert [size_label(n) for n in (20_000, 200_000, 1_000_000)] == ["20k", "200k", "1m"]
