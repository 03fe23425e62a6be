"""Deploy the devnet contracts and send signed transactions from anvil's dev keys.

Every deployment transaction is signed locally, so this works against any node whose
dev accounts are funded (an anvil we started, or one the operator points us at).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, cast

from eth_account import Account
from eth_account.signers.local import LocalAccount
from eth_typing import ABIFunction
from eth_utils.abi import function_abi_to_4byte_selector
from web3 import Web3
from web3.contract.contract import ContractFunction
from web3.types import Nonce, TxParams, TxReceipt, Wei

from keeper.config import ContractConfig
from keeper.devnet.anvil import DEV_KEYS
from keeper.devnet.contracts import load_artifact
from keeper.domain.model import Protocol

__all__ = [
    "EVALUATOR_FEE_BPS",
    "PLATFORM_FEE_BPS",
    "TASKMARKET_FACETS",
    "TASK_PLATFORM_FEE_BPS",
    "TREASURY_KEY",
    "Deployment",
    "TxFailed",
    "connect",
    "deploy_all",
    "deploy_contract",
    "deploy_erc8183",
    "deploy_taskmarket",
    "facet_selectors",
    "send_call",
    "send_tx",
]

DEPLOYER_KEY = DEV_KEYS[0]
# the last dev account only ever receives fees, so balance assertions on it stay simple
TREASURY_KEY = DEV_KEYS[-1]
PLATFORM_FEE_BPS = 100  # 1% of a job budget to the treasury
EVALUATOR_FEE_BPS = 50  # 0.5% of a job budget to the evaluator
TASK_PLATFORM_FEE_BPS = 100  # 1% of each task award to the treasury
PRIORITY_FEE_WEI = 10**9
RECEIPT_TIMEOUT_S = 30.0


class TxFailed(Exception):
    """A transaction was mined but reverted."""

    def __init__(self, receipt: TxReceipt) -> None:
        super().__init__(f"transaction {receipt['transactionHash'].to_0x_hex()} reverted")
        self.receipt = receipt


@dataclass(frozen=True)
class Deployment:
    """Lowercase addresses of one devnet deployment and the block it started at."""

    chain_id: int
    usdc: str
    commerce: str
    legacy_commerce: str
    taskmarket: str
    taskmarket_forwarder: str
    taskmarket_legacy: str
    multicall: str
    emitter: str
    treasury: str
    start_block: int
    # the ERC8183.sol-shaped escrow (claims, pause, hooks) and the hook it can block with
    erc8183: str = ""
    erc8183_hook: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def escrows(self) -> tuple[tuple[str, Protocol, str], ...]:
        """(name, protocol, address) of every escrow the daemon follows on this devnet.

        An escrow the deployment predates (empty address) is left out.
        """
        escrows = (
            ("commerce", Protocol.ERC8183, self.commerce),
            ("legacy_commerce", Protocol.ERC8183, self.legacy_commerce),
            ("erc8183", Protocol.ERC8183, self.erc8183),
            ("taskmarket", Protocol.TASKMARKET, self.taskmarket),
            ("taskmarket_legacy", Protocol.TASKMARKET, self.taskmarket_legacy),
        )
        return tuple(e for e in escrows if e[2])

    def contract_configs(self) -> tuple[ContractConfig, ...]:
        """The escrows as ``[[contracts]]`` entries (the keeper detects their dialects)."""
        return tuple(
            ContractConfig(name, protocol, address, self.start_block)
            for name, protocol, address in self.escrows()
        )


def connect(rpc_url: str) -> Web3:
    return Web3(Web3.HTTPProvider(rpc_url, request_kwargs={"timeout": 30}))


def _account(key: str) -> LocalAccount:
    return cast(LocalAccount, Account.from_key(key))


def _base_params(w3: Web3, account: LocalAccount, nonce: int | None) -> TxParams:
    base_fee = int(w3.eth.get_block("latest").get("baseFeePerGas", 0))
    if nonce is None:
        nonce = w3.eth.get_transaction_count(account.address, "pending")
    return {
        "from": account.address,
        "chainId": w3.eth.chain_id,
        "nonce": Nonce(nonce),
        "maxPriorityFeePerGas": Wei(PRIORITY_FEE_WEI),
        "maxFeePerGas": Wei(2 * base_fee + PRIORITY_FEE_WEI),
    }


def _sign_and_wait(w3: Web3, account: LocalAccount, params: TxParams, check: bool) -> TxReceipt:
    signed = account.sign_transaction(cast(dict[str, Any], params))
    tx_hash = w3.eth.send_raw_transaction(signed.raw_transaction)
    receipt = w3.eth.wait_for_transaction_receipt(
        tx_hash, timeout=RECEIPT_TIMEOUT_S, poll_latency=0.02
    )
    if check and receipt["status"] != 1:
        raise TxFailed(receipt)
    return receipt


def _with_gas(estimate: int) -> int:
    return estimate * 6 // 5  # 20% headroom: estimates are exact on anvil, not on every node


def send_tx(
    w3: Web3,
    key: str,
    tx: TxParams,
    *,
    gas: int | None = None,
    nonce: int | None = None,
    check: bool = True,
) -> TxReceipt:
    """Sign ``tx`` with ``key``, send it and wait for its receipt.

    ``gas`` skips estimation, which is how a test gets a reverting call mined at all;
    ``check`` raises ``TxFailed`` on a reverted receipt.
    """
    account = _account(key)
    params = cast(TxParams, {**_base_params(w3, account, nonce), **tx})
    if gas is not None:
        params["gas"] = gas
    elif "gas" not in params:
        params["gas"] = _with_gas(w3.eth.estimate_gas(params))
    return _sign_and_wait(w3, account, params, check)


def send_call(
    w3: Web3,
    key: str,
    fn: ContractFunction,
    *,
    gas: int | None = None,
    nonce: int | None = None,
    check: bool = True,
) -> TxReceipt:
    """Send a contract function call as a signed transaction (see ``send_tx``).

    Without ``gas``, estimation runs first, so a call that would revert raises web3's
    ``ContractLogicError`` (or ``ContractCustomError``) before anything is sent.
    """
    account = _account(key)
    params = _base_params(w3, account, nonce)
    params["gas"] = (
        gas if gas is not None else _with_gas(fn.estimate_gas({"from": account.address}))
    )
    return _sign_and_wait(w3, account, fn.build_transaction(params), check)


def deploy_contract(w3: Web3, key: str, name: str, *args: Any) -> str:
    """Deploy artifact ``name`` with constructor ``args``; return its lowercase address."""
    abi, bytecode = load_artifact(name)
    account = _account(key)
    constructor = w3.eth.contract(abi=abi, bytecode=bytecode).constructor(*args)
    params = _base_params(w3, account, None)
    params["gas"] = _with_gas(constructor.estimate_gas({"from": account.address}))
    receipt = _sign_and_wait(w3, account, constructor.build_transaction(params), True)
    address = receipt["contractAddress"]
    if address is None:
        raise TxFailed(receipt)
    return str(address).lower()


TASKMARKET_FACETS: tuple[str, ...] = (
    "TaskMarketCoreFacet",
    "TaskMarketEvaluatorFacet",
    "TaskMarketViewFacet",
)


def facet_selectors(name: str) -> list[bytes]:
    """The 4-byte selectors of every function a facet artifact declares."""
    abi, _ = load_artifact(name)
    functions = [cast(ABIFunction, f) for f in abi if f.get("type") == "function"]
    return [function_abi_to_4byte_selector(f) for f in functions]


def deploy_taskmarket(w3: Web3, treasury: str, usdc: str) -> tuple[str, str]:
    """The task market diamond (facets routed at construction) and its trusted forwarder.

    Returns (diamond, forwarder); the forwarder is registered with ``addForwarder``.
    """
    owner = _account(DEPLOYER_KEY).address
    facets = [deploy_contract(w3, DEPLOYER_KEY, f) for f in TASKMARKET_FACETS]
    selectors = [facet_selectors(f) for f in TASKMARKET_FACETS]
    diamond = deploy_contract(
        w3,
        DEPLOYER_KEY,
        "TaskMarket",
        owner,
        usdc,
        treasury,
        TASK_PLATFORM_FEE_BPS,
        [Web3.to_checksum_address(f) for f in facets],
        selectors,
    )
    forwarder = deploy_contract(w3, DEPLOYER_KEY, "TaskMarketForwarder")
    view = w3.eth.contract(
        address=Web3.to_checksum_address(diamond), abi=load_artifact("TaskMarketViewFacet")[0]
    )
    send_call(w3, DEPLOYER_KEY, view.functions.addForwarder(Web3.to_checksum_address(forwarder)))
    return diamond, forwarder


def deploy_erc8183(w3: Web3, treasury: str, usdc: str) -> tuple[str, str]:
    """The ERC8183.sol-shaped escrow and its switchable hook; (escrow, hook).

    As in the reference, a payment token must be on the admin's allowlist and a hook on its
    whitelist before a job may use them: ``usdc`` and the hook are both put there.
    """
    escrow = deploy_contract(
        w3, DEPLOYER_KEY, "ERC8183", treasury, PLATFORM_FEE_BPS, EVALUATOR_FEE_BPS
    )
    hook = deploy_contract(w3, DEPLOYER_KEY, "SwitchableHook")
    contract = w3.eth.contract(
        address=Web3.to_checksum_address(escrow), abi=load_artifact("ERC8183")[0]
    )
    send_call(w3, DEPLOYER_KEY, contract.functions.setPaymentTokenAllowed(usdc, True))
    send_call(
        w3, DEPLOYER_KEY, contract.functions.setHookWhitelist(Web3.to_checksum_address(hook), True)
    )
    return escrow, hook


def deploy_all(rpc_url: str) -> Deployment:
    """Deploy every devnet contract from DEV_KEYS[0].

    ``taskmarket`` is the diamond in the revision-21 shape (requester-only
    evaluatorTimeout through ``taskmarket_forwarder``); ``taskmarket_legacy`` the
    pre-revision-7 contract (five-argument TaskCreated, refundExpired(bytes32), anyone may
    time an evaluator out), so both dialects and both event histories exist on chain.
    """
    w3 = connect(rpc_url)
    treasury = _account(TREASURY_KEY).address
    start_block = int(w3.eth.block_number) + 1
    usdc = deploy_contract(w3, DEPLOYER_KEY, "MockUSDC")
    usdc_cs = Web3.to_checksum_address(usdc)
    commerce = deploy_contract(
        w3, DEPLOYER_KEY, "AgenticCommerce", treasury, PLATFORM_FEE_BPS, EVALUATOR_FEE_BPS
    )
    legacy = deploy_contract(
        w3,
        DEPLOYER_KEY,
        "LegacyAgenticCommerce",
        usdc_cs,
        treasury,
        PLATFORM_FEE_BPS,
        EVALUATOR_FEE_BPS,
    )
    taskmarket, forwarder = deploy_taskmarket(w3, treasury, usdc_cs)
    legacy_tm = deploy_contract(
        w3, DEPLOYER_KEY, "LegacyTaskMarket", usdc_cs, treasury, TASK_PLATFORM_FEE_BPS, False
    )
    multicall = deploy_contract(w3, DEPLOYER_KEY, "Multicall3")
    emitter = deploy_contract(w3, DEPLOYER_KEY, "EventEmitter")
    erc8183, hook = deploy_erc8183(w3, treasury, usdc_cs)
    return Deployment(
        chain_id=int(w3.eth.chain_id),
        usdc=usdc,
        commerce=commerce,
        legacy_commerce=legacy,
        taskmarket=taskmarket,
        taskmarket_forwarder=forwarder,
        taskmarket_legacy=legacy_tm,
        multicall=multicall,
        emitter=emitter,
        treasury=treasury.lower(),
        start_block=start_block,
        erc8183=erc8183,
        erc8183_hook=hook,
    )
