"""Dialect detection against every devnet contract shape, pinning, and the undetermined case."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from erc8183_flows import indexer  # the daemon's indexer over chosen contracts
from keeper_harness import DEPLOYER, Escrows, MakeKeeper, head, make_rpc, open_db
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs
from support import keeper_books
from support.rpc_proxy import RpcProxy
from web3 import Web3

from keeper.act.detect import (
    DialectMismatchError,
    detect,
    detect_all,
    publish_dialects,
    redetect,
)
from keeper.config import ContractConfig
from keeper.devnet.anvil import free_port
from keeper.devnet.deploy import deploy_contract
from keeper.domain.model import Protocol
from keeper.obs.metrics import Metrics
from keeper.rpc.client import RpcClient
from keeper.store.dialects import load_dialects

E, T = Protocol.ERC8183, Protocol.TASKMARKET


def _contract(name: str, protocol: Protocol, address: str, dialect: str = "") -> ContractConfig:
    return ContractConfig(name, protocol, address, 0, dialect)


async def test_each_devnet_shape_is_detected(escrows: Escrows, rpc: RpcClient) -> None:
    """Every escrow the devnet deploys is told apart from the others by what it answers."""
    book = await detect_all(rpc, escrows.d.contract_configs())
    found = {d.name: (d.dialect, d.source, d.diamond) for d in book.detections.values()}
    assert found == {
        "commerce": ("AgenticCommerce", "detected", False),
        "legacy_commerce": ("LegacyACP", "detected", False),
        "erc8183": ("ERC8183", "detected", False),
        "taskmarket": ("TaskMarket", "detected", True),
        "taskmarket_legacy": ("TaskMarketPre7", "detected", False),
    }
    assert book.detections[escrows.d.taskmarket].revision == 21


async def test_erc8183_told_apart_even_paused(escrows: Escrows, rpc: RpcClient) -> None:
    """The three ERC-8183 dialects by which claimRefund answers; a paused ERC8183 escrow
    still answers its probes (EnforcedPause is revert data), and a wrong pin names why."""
    escrows.call(DEPLOYER, escrows.d.erc8183, "pause()")
    d = await detect(rpc, _contract("new", E, escrows.d.erc8183))
    assert (d.dialect, d.source) == ("ERC8183", "detected")
    with pytest.raises(DialectMismatchError) as err:
        await detect(rpc, _contract("new", E, escrows.d.erc8183, "AgenticCommerce"))
    assert "claimRefund(uint256) (5b7baf64) not answered" in str(err.value)
    with pytest.raises(DialectMismatchError) as err:
        await detect(rpc, _contract("old", E, escrows.d.commerce, "ERC8183"))
    assert "claimRefund(uint256,bytes) (d2fd101b) not answered" in str(err.value)


async def test_pinned_dialect_confirmed(escrows: Escrows, rpc: RpcClient) -> None:
    """A pin the contract answers is kept, and says so."""
    d = await detect(rpc, _contract("tm", T, escrows.d.taskmarket_legacy, "TaskMarketPre7"))
    assert (d.dialect, d.source) == ("TaskMarketPre7", "pinned")
    d = await detect(rpc, _contract("dm", T, escrows.d.taskmarket, "TaskMarket"))
    assert (d.dialect, d.source, d.reason) == (
        "TaskMarket",
        "pinned",
        "pinned, confirmed by diamond loupe",
    )


async def test_wrong_pin_fails_naming_it(escrows: Escrows, rpc: RpcClient) -> None:
    """A pin the contract does not answer is a start-up error naming the pin and the call."""
    with pytest.raises(DialectMismatchError) as err:
        await detect(rpc, _contract("tm", T, escrows.d.taskmarket_legacy, "TaskMarket"))
    text = str(err.value)
    assert "'TaskMarket'" in text and "contracts 'tm'" in text
    assert "refundExpired(bytes32,uint256) (3e91a36b) not answered" in text
    with pytest.raises(DialectMismatchError) as err:  # the diamond routes the rev-7 refund
        await detect(rpc, _contract("dm", T, escrows.d.taskmarket, "TaskMarketPre7"))
    assert "refundExpired(bytes32) (cc3e049b) not answered (diamond loupe)" not in str(err.value)
    assert "'TaskMarketPre7'" in str(err.value) and "diamond loupe" in str(err.value)
    with pytest.raises(DialectMismatchError, match="'LegacyACP'"):
        await detect(rpc, _contract("c", E, escrows.d.commerce, "LegacyACP"))


async def test_undetermined_is_recorded_and_said_once(
    escrows: Escrows, rpc: RpcClient, tmp_path: Path
) -> None:
    """A contract no dialect fits (here: the token) is kept, undetermined, with the reason."""
    contracts = [_contract("odd", T, escrows.d.usdc), _contract("c", E, escrows.d.commerce)]
    with capture_logs() as logs:
        book = await detect_all(rpc, contracts)
    warned = [e for e in logs if e["event"] == "contract_dialect_undetermined"]
    assert len(warned) == 1 and warned[0]["contract"] == "odd"
    odd = book.detections[escrows.d.usdc]
    assert odd.dialect is None and "no taskmarket dialect matches" in odd.reason
    assert book.dialect(escrows.d.usdc) is None
    conn = open_db(tmp_path / "d.db")
    metrics = Metrics(contract_names={c.address: c.name for c in contracts})
    publish_dialects(book, conn, 31337, metrics)
    rows = {r["name"]: r for r in load_dialects(conn, 31337)}
    assert rows["odd"]["dialect"] is None and rows["c"]["dialect"] == "AgenticCommerce"
    sample = metrics.registry.get_sample_value(
        "keeper_contract_dialect",
        {"contract": "odd", "dialect": "undetermined", "source": "detected"},
    )
    assert sample == 1.0


def _daemon_config(tmp_path: Path, escrows: Escrows, pin: str) -> Path:
    d = escrows.d
    path = tmp_path / "pinned.toml"
    path.write_text(
        f'[chain]\nchain_id = 31337\nrpc_urls = ["{escrows.url}"]\nfinality = "confirmations"\n'
        f'confirmations = 0\npoll_interval = 0.2\n\n[database]\npath = "{tmp_path / "p.db"}"\n\n'
        f"[api]\nenabled = false\n\n"
        f'[[contracts]]\nname = "tm"\nprotocol = "taskmarket"\naddress = "{d.taskmarket}"\n'
        f'dialect = "{pin}"\n\n'
        f'[[contracts]]\nname = "old"\nprotocol = "taskmarket"\naddress = "{d.taskmarket_legacy}"\n'
    )
    return path


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEPER_")}
    env.pop("PYTHONPATH", None)
    return env


def test_daemon_refuses_a_wrong_pin_at_start_up(escrows: Escrows, tmp_path: Path) -> None:
    """`keeper run` with a pin the diamond does not answer exits 1 naming pin and contract."""
    config = _daemon_config(tmp_path, escrows, "TaskMarketPre7")
    proc = subprocess.run(
        [sys.executable, "-m", "keeper", "run", "--config", str(config)],
        capture_output=True, text=True, timeout=60, env=_env(),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "pinned dialect 'TaskMarketPre7'" in proc.stderr
    assert "contracts 'tm'" in proc.stderr


def test_daemon_records_dialects_for_status(escrows: Escrows, tmp_path: Path) -> None:
    """A daemon that started (pin confirmed, the other detected) leaves them for `keeper status`."""
    config = _daemon_config(tmp_path, escrows, "TaskMarket")
    cmd = [sys.executable, "-m", "keeper"]
    daemon = subprocess.Popen(
        [*cmd, "run", "--config", str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        rows: list[dict[str, object]] = []
        while time.monotonic() < deadline and len(rows) < 2:
            time.sleep(0.3)
            status = subprocess.run(
                [*cmd, "status", "--config", str(config), "--json"],
                capture_output=True, text=True, timeout=30, env=_env(),
            )  # fmt: skip
            if status.returncode == 0:
                rows = json.loads(status.stdout)["dialects"]
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    found = {r["name"]: (r["dialect"], r["source"], r["diamond"], r["revision"]) for r in rows}
    assert found == {
        "tm": ("TaskMarket", "pinned", True, 21),
        "old": ("TaskMarketPre7", "detected", False, None),
    }
    text = subprocess.run(
        [*cmd, "status", "--config", str(config)], capture_output=True, text=True, env=_env()
    ).stdout
    assert "dialect tm: TaskMarket [pinned]" in text


async def test_keeper_leaves_an_undetermined_contract_alone(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper
) -> None:
    """Jobs due on a contract whose dialect nobody could determine: nothing is simulated or
    sent for it, and the metric says why."""
    metrics = Metrics(contract_names={escrows.d.commerce: "commerce"})
    # the ERC-8183 escrow configured as a task market: no task-market dialect fits it
    keeper = make_keeper(metrics=metrics, contracts=[_contract("commerce", T, escrows.d.commerce)])
    expiry = escrows.now() + 100
    ids = escrows.funded_jobs(2, expiry)
    escrows.control.mine_at(expiry)
    head = await rpc.get_block("latest")
    assert head is not None
    summary = await keeper.tick(head, escrows.jobs(ids), [])
    assert summary.planned == 0 and summary.sent == 0
    assert keeper_books.all_intents(keeper.store) == []
    labels = {"contract": "commerce", "dialect": "undetermined", "source": "detected"}
    assert metrics.registry.get_sample_value("keeper_contract_dialect", labels) == 1.0


def _dialects_now(config: Path) -> dict[str, object]:
    """``keeper status --json``'s dialect per contract name ({} before the daemon wrote any)."""
    status = subprocess.run(
        [sys.executable, "-m", "keeper", "status", "--config", str(config), "--json"],
        capture_output=True, text=True, timeout=30, env=_env(),
    )  # fmt: skip
    if status.returncode != 0:
        return {}
    return {r["name"]: r["dialect"] for r in json.loads(status.stdout)["dialects"]}


def _dialect_series(port: int) -> set[tuple[str, str]]:
    """(dialect, source) of every keeper_contract_dialect series the daemon exports."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "keeper_contract_dialect":
                out.add((sample.labels["dialect"], sample.labels["source"]))
    return out


@pytest.mark.parametrize("keeper", ["enabled = true\ndry_run = true", "enabled = false"])
def test_daemon_detects_an_upgraded_contract_again(
    escrows: Escrows, tmp_path: Path, keeper: str
) -> None:
    """A proxy moved from an AgenticCommerce implementation to an ERC8183 one while the
    daemon runs (one transaction, emitting Upgraded, as on chain): it is detected again,
    by the keeper or, with the keeper disabled, by the daemon itself, and status, metric
    and log say so. A reorg that takes the upgrade away has it detected back as
    AgenticCommerce."""
    d, control = escrows.d, escrows.control
    w3 = Web3(Web3.HTTPProvider(escrows.url))
    proxy = deploy_contract(w3, DEPLOYER, "UpgradeableProxy", Web3.to_checksum_address(d.commerce))
    port = free_port()
    config = tmp_path / "upgraded.toml"
    config.write_text(
        f'[chain]\nchain_id = 31337\nrpc_urls = ["{escrows.url}"]\nfinality = "confirmations"\n'
        f'confirmations = 64\npoll_interval = 0.1\n\n[database]\npath = "{tmp_path / "u.db"}"\n\n'
        f'[api]\nlisten = "127.0.0.1:{port}"\n\n[keeper]\n{keeper}\n\n'
        f'[log]\nformat = "json"\n\n'
        f'[[contracts]]\nname = "up"\nprotocol = "erc8183"\naddress = "{proxy}"\n'
        f"start_block = {control.block_number()}\n"
    )
    log_path = tmp_path / "daemon.log"

    def until(dialect: str) -> None:
        """Mine a block now and then (the keeper decides on new heads) until status says it."""
        deadline = time.monotonic() + 60
        while _dialects_now(config).get("up") != dialect:
            assert time.monotonic() < deadline, (dialect, log_path.read_text()[-3000:])
            control.mine()
            time.sleep(0.3)

    def redetected() -> list[dict[str, Any]]:
        lines = [json.loads(x) for x in log_path.read_text().splitlines() if x.startswith("{")]
        return [e for e in lines if e["event"] == "contract_dialect_redetected"]

    with log_path.open("wb") as out:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "keeper", "run", "--config", str(config)],
            stdout=out, stderr=subprocess.STDOUT, env=_env(),
        )  # fmt: skip
    try:
        until("AgenticCommerce")
        # the proxy's own first Upgraded indexed and looked at (detected the same again):
        # otherwise a loaded daemon may first look at it after the upgrade below, and say
        # the change is that block's
        deadline = time.monotonic() + 60
        while not redetected():
            assert time.monotonic() < deadline, log_path.read_text()[-3000:]
            control.mine()
            time.sleep(0.3)
        before_upgrade = control.snapshot()
        upgrade_head = control.block_number() + 1
        escrows.call(DEPLOYER, proxy, "upgradeTo(address)", d.erc8183)
        until("ERC8183")
        assert _dialect_series(port) == {("ERC8183", "detected")}  # the old series is gone
        old_head = control.block_number()
        control.call("evm_revert", before_upgrade)
        control.mine(old_head - control.block_number() + 2)  # a longer chain without it
        until("AgenticCommerce")
        assert _dialect_series(port) == {("AgenticCommerce", "detected")}
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    lines = [json.loads(x) for x in log_path.read_text().splitlines() if x.startswith("{")]
    said = redetected()
    # a change of dialect is a warning; the same one again (the proxy's first Upgraded,
    # indexed after the start-up detection) is info
    assert all((e["level"] == "warning") == (e["dialect_before"] != e["dialect"])
               for e in said), said  # fmt: skip
    assert said[0]["dialect_before"] == said[0]["dialect"] == "AgenticCommerce"
    changes = [
        (e["dialect_before"], e["dialect"], e["upgrade_block"])
        for e in said
        if e["dialect_before"] != e["dialect"]
    ]
    assert changes[0] == ("AgenticCommerce", "ERC8183", upgrade_head)
    # back to the proxy's first implementation: its constructor's Upgraded is the latest now
    assert changes[1][:2] == ("ERC8183", "AgenticCommerce") and changes[1][2] < upgrade_head
    assert len(changes) == 2
    assert not [e for e in lines if e.get("level") == "error"], lines


async def test_a_pin_an_upgrade_broke_leaves_the_contract_alone(
    escrows: Escrows, rpc: RpcClient
) -> None:
    """Detected again after an upgrade, a pinned contract that no longer answers its pin
    does not stop the running daemon: it becomes undetermined, with the reason."""
    d = escrows.d
    w3 = Web3(Web3.HTTPProvider(escrows.url))
    proxy = deploy_contract(w3, DEPLOYER, "UpgradeableProxy", Web3.to_checksum_address(d.commerce))
    pinned = _contract("up", E, proxy, "AgenticCommerce")
    book = await detect_all(rpc, [pinned])
    assert (book.detections[proxy].dialect, book.detections[proxy].source) == (
        "AgenticCommerce",
        "pinned",
    )
    escrows.call(DEPLOYER, proxy, "upgradeTo(address)", d.erc8183)
    with capture_logs() as logs:
        book = await redetect(rpc, book, pinned, 123)
    found = book.detections[proxy]
    assert (found.dialect, found.source) == (None, "pinned")
    assert "pinned dialect 'AgenticCommerce' does not match" in found.reason
    assert book.dialect(proxy) is None
    (said,) = [e for e in logs if e["event"] == "contract_dialect_redetected"]
    assert (said["dialect_before"], said["dialect"], said["upgrade_block"]) == (
        "AgenticCommerce",
        None,
        123,
    )
    assert said["effect"] == "the keeper leaves it alone"


async def test_a_failed_detection_after_an_upgrade_holds_that_contract_only(
    escrows: Escrows, make_keeper: MakeKeeper, tmp_path: Path
) -> None:
    """The node fails every call to the contract just upgraded: the keeper goes on ticking
    and keeps the other escrow as usual, plans nothing on the upgraded one (its old
    dialect may be wrong now), says so once, and detects it once the node answers."""
    d, control = escrows.d, escrows.control
    w3 = Web3(Web3.HTTPProvider(escrows.url))
    proxy = deploy_contract(w3, DEPLOYER, "UpgradeableProxy", Web3.to_checksum_address(d.commerce))
    contracts = [_contract("commerce", E, d.commerce), _contract("up", E, proxy)]
    index = indexer(tmp_path / "held.db", escrows, contracts)
    async with RpcProxy(escrows.url) as node:
        client = make_rpc(node.url, attempts=1)
        keeper = make_keeper(db=tmp_path / "held.db", client=client, contracts=contracts)
        try:
            await keeper.detect_dialects()
            escrows.call(DEPLOYER, proxy, "upgradeTo(address)", d.erc8183)
            expiry = escrows.now() + 100
            ids = escrows.funded_jobs(1, expiry)
            control.mine_at(expiry)
            await index.to_head()
            node.rules.on("eth_call", to=proxy, error=10**6, error_code=-32603,
                          error_message="internal error")  # fmt: skip
            with capture_logs() as logs:
                for _ in range(2):
                    summary = await keeper.tick(await head(client), escrows.jobs(ids), [])
                    control.mine()
            failed = [e for e in logs if e["event"] == "contract_redetect_failed"]
            assert len(failed) == 1 and failed[0]["contract"] == "up", failed
            assert keeper.dialects is not None and keeper.dialects.dialect(proxy) is not None
            assert keeper.dialects.detections[proxy].dialect == "AgenticCommerce"
            # the other escrow's due refund went out in the first tick
            assert [i.outcome for i in keeper_books.all_intents(keeper.store)] == ["confirmed"]
            assert summary.planned == 0
            node.rules.clear()
            with capture_logs() as logs:
                await keeper.tick(await head(client), escrows.jobs(ids), [])
            (said,) = [e for e in logs if e["event"] == "contract_dialect_redetected"]
            assert (said["dialect_before"], said["dialect"]) == ("AgenticCommerce", "ERC8183")
            assert keeper.dialects.detections[proxy].dialect == "ERC8183"
        finally:
            await client.close()
            await index.rpc.close()
            index.conn.close()


async def test_a_diamond_cut_has_the_diamond_detected_again(
    escrows: Escrows, make_keeper: MakeKeeper, tmp_path: Path
) -> None:
    """The owner's diamondCut unroutes refundExpired(bytes32,uint256): the keeper detects
    the diamond again, no task-market dialect fits it now, and it is left alone; a second
    cut routes the selector back, and it is TaskMarket again."""
    d, zero = escrows.d, "0x" + "00" * 20
    contracts = [_contract("taskmarket", T, d.taskmarket)]
    index = indexer(tmp_path / "cut.db", escrows, contracts)
    client = make_rpc(escrows.url)
    keeper = make_keeper(db=tmp_path / "cut.db", client=client, contracts=contracts)
    cut = "diamondCut((address,uint8,bytes4[])[],address,bytes)"
    refund = bytes.fromhex("3e91a36b")  # refundExpired(bytes32,uint256)
    loupe = escrows.view(d.taskmarket, "0xcdffacc6" + refund.hex() + "00" * 28)  # facetAddress
    facet = "0x" + loupe[-20:].hex()

    async def redetected() -> dict[str, object]:
        await index.to_head()
        with capture_logs() as logs:
            await keeper.tick(await head(client), [], [])
        (said,) = [e for e in logs if e["event"] == "contract_dialect_redetected"]
        return said

    try:
        await keeper.detect_dialects()
        escrows.call(DEPLOYER, d.taskmarket, cut, [(zero, 2, [refund])], zero, b"")  # Remove
        said = await redetected()
        assert (said["dialect_before"], said["dialect"], said["log_level"]) == (
            "TaskMarket",
            None,
            "warning",
        )
        assert "no taskmarket dialect matches" in str(said["reason"])
        assert keeper.dialects is not None and keeper.dialects.dialect(d.taskmarket) is None
        escrows.call(DEPLOYER, d.taskmarket, cut, [(facet, 0, [refund])], zero, b"")  # Add
        said = await redetected()
        assert (said["dialect_before"], said["dialect"]) == (None, "TaskMarket")
        assert keeper.dialects.detections[d.taskmarket].revision == 21
    finally:
        await client.close()
        await index.rpc.close()
        index.conn.close()
