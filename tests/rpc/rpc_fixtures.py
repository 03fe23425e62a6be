"""RPC test helpers: log-emitting contracts on anvil, a recording observer, raw getLogs
entries, and the check of the native scanner against the generic path."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from keeper.devnet.anvil import AnvilProcess, ChainControl
from keeper.domain.model import Logs
from keeper.rpc.logs_reply import scan_logs_reply
from keeper.rpc.replies import BadReply, reply_result
from keeper.rpc.validate import validate_logs

TOPIC = "0x" + "ab" * 32
# Runtime code: copy calldata to memory, then LOG1(memory[0:calldatasize], TOPIC); STOP.
EMITTER_CODE = "0x366000600037" + "7f" + TOPIC[2:] + "366000a100"
# Runtime code: MSTORE(0, 42); REVERT(0, 32) -- every call reverts with one word of data.
REVERTER_CODE = "0x602a60005260206000fd"
EMITTER = "0x" + "e1" * 20
EMITTER_B = "0x" + "e2" * 20
REVERTER = "0x" + "0d" * 20


@dataclass
class RecordingObserver:
    """A real RpcObserver that keeps what it was told."""

    requests: list[tuple[str, str, str, float]] = field(default_factory=list)
    backoffs: list[tuple[str, float]] = field(default_factory=list)

    def on_request(self, endpoint: str, method: str, outcome: str, seconds: float) -> None:
        self.requests.append((endpoint, method, outcome, seconds))

    def on_backoff(self, endpoint: str, seconds: float) -> None:
        self.backoffs.append((endpoint, seconds))

    def outcomes(self, method: str) -> list[str]:
        return [o for _, m, o, _ in self.requests if m == method]


@dataclass
class LogChain:
    """An anvil node with emitter contracts and the blocks holding their logs."""

    node: AnvilProcess
    ctl: ChainControl
    log_blocks: list[int]

    @property
    def url(self) -> str:
        return self.node.url


def install_contracts(ctl: ChainControl) -> None:
    ctl.call("anvil_setCode", EMITTER, EMITTER_CODE)
    ctl.call("anvil_setCode", EMITTER_B, EMITTER_CODE)
    ctl.call("anvil_setCode", REVERTER, REVERTER_CODE)


def wait_receipt(ctl: ChainControl, tx_hash: str) -> dict[str, Any]:
    """Poll for a receipt: anvil answers a send before its automined block is visible."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        receipt: dict[str, Any] | None = ctl.call("eth_getTransactionReceipt", tx_hash)
        if receipt is not None:
            return receipt
        time.sleep(0.01)
    raise TimeoutError(f"no receipt for {tx_hash}")


def emit(ctl: ChainControl, to: str, payload: bytes) -> int:
    """Send one transaction to an emitter (anvil's unlocked dev account); its block number."""
    sender = ctl.call("eth_accounts")[0]
    tx_hash: str = ctl.call(
        "eth_sendTransaction", {"from": sender, "to": to, "data": "0x" + payload.hex()}
    )
    return int(wait_receipt(ctl, tx_hash)["blockNumber"], 16)


# a getLogs entry as a node writes it (mixed-case hex), and hashes to vary it with
H1 = "0x" + "11" * 32
H2 = "0x" + "22" * 32
H3 = "0x" + "44" * 32
H4 = "0x" + "55" * 32
H5 = "0x" + "66" * 32
ADDR = "0x" + "aa" * 20
OTHER = "0x" + "bb" * 20  # an address no raw_log comes from


def raw_log(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "address": ADDR.upper().replace("0X", "0x"),
        "topics": ["0x" + "AB" * 32],
        "data": "0x0102",
        "blockNumber": "0x10",
        "blockHash": H1,
        "transactionHash": "0x" + "33" * 32,
        "transactionIndex": "0x0",
        "logIndex": "0x1",
        "removed": False,
    }
    base.update(over)
    return base


# the native scanner against the generic path: the oracle of its tests and its fuzz target
def generic(body: bytes, rid: int, **query: Any) -> Logs | None:
    """What the transport makes of a body without the scanner: the logs, or None if refused."""
    try:
        reply = json.loads(body)
        logs: Logs = reply_result(reply, rid, False, lambda r: validate_logs(r, **query))
    except (ValueError, RecursionError, BadReply):
        return None
    return logs


def agree(body: bytes, rid: int, **query: Any) -> Logs | None:
    """The scanner's answer, checked against the generic path's."""
    scanned = scan_logs_reply(body, rid, **query)
    if scanned is not None:
        expected = generic(body, rid, **query)
        assert expected is not None, body[:300]
        assert list(scanned) == list(expected)
        assert scanned.timestamps == expected.timestamps
    return scanned
