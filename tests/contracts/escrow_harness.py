"""Test harness for the escrow contracts: named actors, signed sends, exact-time blocks,
revert-reason checks and log decoding against the compiled ABIs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import eth_abi
from eth_account import Account
from eth_utils import keccak
from eth_utils.abi import collapse_if_tuple
from web3 import Web3
from web3.contract import Contract
from web3.contract.contract import ContractFunction
from web3.types import TxReceipt

from keeper.devnet.anvil import DEV_KEYS, ChainControl
from keeper.devnet.contracts import load_abi, taskmarket_abi
from keeper.devnet.deploy import (
    TASK_PLATFORM_FEE_BPS,
    Deployment,
    connect,
    deploy_contract,
    send_call,
    send_tx,
)

DEPLOYER = DEV_KEYS[0]
CLIENT = DEV_KEYS[1]
PROVIDER = DEV_KEYS[2]
EVALUATOR = DEV_KEYS[3]
STRANGER = DEV_KEYS[4]  # plays the keeper: anyone without a role
WORKER2 = DEV_KEYS[5]
RESOLVER = DEV_KEYS[6]
TREASURY = DEV_KEYS[9]

TX_GAS = 3_000_000  # fixed, so reverting calls get mined and their reason can be read
USDC = 10**6


def address_of(key: str) -> str:
    """Checksum address of a dev key."""
    return str(Account.from_key(key).address)


def selector(signature: str) -> str:
    """0x selector of a function or custom error signature such as ``NotExpired()``."""
    return "0x" + keccak(text=signature)[:4].hex()


def topic0(signature: str) -> str:
    return "0x" + keccak(text=signature).hex()


def event_signature(entry: dict[str, Any]) -> str:
    """Canonical signature of an ABI event entry."""
    return f"{entry['name']}({','.join(collapse_if_tuple(i) for i in entry['inputs'])})"


@dataclass(frozen=True)
class Ev:
    """A decoded log: event name, canonical signature, arguments (addresses lowercase)."""

    name: str
    signature: str
    args: dict[str, Any]
    address: str


def _norm(value: Any) -> Any:
    if isinstance(value, str) and value.startswith("0x") and len(value) == 42:
        return value.lower()
    return value


def decode_logs(abi: list[dict[str, Any]], logs: Any) -> list[Ev]:
    """Decode every log whose topic0 is an event of ``abi``; others are skipped."""
    by_topic = {
        topic0(event_signature(e)): e for e in abi if e["type"] == "event" and not e["anonymous"]
    }
    out = []
    for log in logs:
        topics = ["0x" + bytes(t).hex() for t in log["topics"]]
        entry = by_topic.get(topics[0]) if topics else None
        if entry is None:
            continue
        indexed = [i for i in entry["inputs"] if i["indexed"]]
        plain = [i for i in entry["inputs"] if not i["indexed"]]
        args: dict[str, Any] = {}
        for inp, topic in zip(indexed, topics[1:], strict=True):
            args[inp["name"]] = _norm(
                eth_abi.decode([collapse_if_tuple(inp)], bytes.fromhex(topic[2:]))[0]
            )
        values = eth_abi.decode([collapse_if_tuple(i) for i in plain], bytes(log["data"]))
        for inp, value in zip(plain, values, strict=True):
            args[inp["name"]] = _norm(value)
        out.append(Ev(entry["name"], event_signature(entry), args, str(log["address"]).lower()))
    return out


class Reverted(AssertionError):
    """A send expected to succeed reverted; carries the revert data."""


class Chain:
    """One deployment on a running anvil, driven by the dev keys."""

    def __init__(self, url: str, deployment: Deployment) -> None:
        self.url = url
        self.d = deployment
        self.w3 = connect(url)
        self.control = ChainControl(url)
        self.usdc = self.contract("MockUSDC", deployment.usdc)
        self.commerce = self.contract("AgenticCommerce", deployment.commerce)
        self.legacy = self.contract("LegacyAgenticCommerce", deployment.legacy_commerce)
        self.tm = self.contract("LegacyTaskMarket", deployment.taskmarket_legacy)
        # the pre-7 contract built requester-only (deployed here: the devnet has none)
        strict = deploy_contract(
            self.w3, DEPLOYER, "LegacyTaskMarket", Web3.to_checksum_address(deployment.usdc),
            Web3.to_checksum_address(deployment.treasury), TASK_PLATFORM_FEE_BPS, True,
        )  # fmt: skip
        self.tm_strict = self.contract("LegacyTaskMarket", strict)
        # the revision-21 diamond: one address, every facet's functions
        self.dm = self.w3.eth.contract(
            address=Web3.to_checksum_address(deployment.taskmarket), abi=taskmarket_abi()
        )
        self.forwarder = self.contract("TaskMarketForwarder", deployment.taskmarket_forwarder)
        self.multicall = self.contract("Multicall3", deployment.multicall)
        self.emitter = self.contract("EventEmitter", deployment.emitter)
        self.erc8183 = self.contract("ERC8183", deployment.erc8183)
        self.hook = self.contract("SwitchableHook", deployment.erc8183_hook)

    def contract(self, name: str, address: str) -> Contract:
        return self.w3.eth.contract(address=Web3.to_checksum_address(address), abi=load_abi(name))

    # ----- time -----

    def now(self) -> int:
        """Timestamp of the latest block (deadlines follow block time, never the wall clock)."""
        return self.control.timestamp()

    # ----- sending -----

    def _send(self, key: str, fn: ContractFunction, at: int | None) -> TxReceipt:
        if at is not None:
            self.control.set_next_timestamp(at)
        return send_call(self.w3, key, fn, gas=TX_GAS, check=False)

    def send_raw(self, key: str, to: str, data: str, *, at: int | None = None) -> TxReceipt:
        """Send raw calldata (a selector the ABI lacks) and return the receipt, reverted or not."""
        if at is not None:
            self.control.set_next_timestamp(at)
        tx = {"to": Web3.to_checksum_address(to), "data": data}
        return send_tx(self.w3, key, tx, gas=TX_GAS, check=False)  # type: ignore[arg-type]

    def revert_data(self, receipt: TxReceipt) -> str:
        trace = self.control.call(
            "debug_traceTransaction",
            receipt["transactionHash"].to_0x_hex(),
            {"tracer": "callTracer"},
        )
        return str(trace.get("output", "0x"))

    def send(self, key: str, fn: ContractFunction, *, at: int | None = None) -> TxReceipt:
        """Send and require success; ``at`` places the tx in a block with that timestamp."""
        receipt = self._send(key, fn, at)
        if receipt["status"] != 1:
            raise Reverted(f"{fn.fn_name} reverted with {self.revert_data(receipt)}")
        return receipt

    def expect_revert(
        self, key: str, fn: ContractFunction, error: str, *, at: int | None = None
    ) -> TxReceipt:
        """Send, require a revert with custom error ``error`` (e.g. ``"NotExpired()"``)."""
        receipt = self._send(key, fn, at)
        assert receipt["status"] == 0, f"{fn.fn_name} succeeded, expected {error}"
        data = self.revert_data(receipt)
        assert data[:10] == selector(error), f"{fn.fn_name} reverted with {data}, not {error}"
        return receipt

    def block_time(self, receipt: TxReceipt) -> int:
        return int(self.w3.eth.get_block(receipt["blockNumber"])["timestamp"])

    # ----- tokens and logs -----

    def balance(self, who: str) -> int:
        return int(self.usdc.functions.balanceOf(Web3.to_checksum_address(who)).call())

    def fund_account(self, key: str, amount: int, spender: str) -> None:
        """Mint ``amount`` USDC to ``key``'s account and approve ``spender`` for it."""
        self.send(DEPLOYER, self.usdc.functions.mint(address_of(key), amount))
        self.send(key, self.usdc.functions.approve(Web3.to_checksum_address(spender), amount))

    def events(self, receipt: TxReceipt, contract: Contract) -> list[Ev]:
        """Logs of ``receipt`` emitted by ``contract``, decoded with its ABI, in order."""
        mine = [
            log for log in receipt["logs"] if log["address"].lower() == contract.address.lower()
        ]
        return decode_logs(contract.abi, mine)

    def names(self, receipt: TxReceipt, contract: Contract) -> list[str]:
        return [e.name for e in self.events(receipt, contract)]
