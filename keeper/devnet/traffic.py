"""Devnet traffic: clients, providers, evaluators, workers and a dispute resolver using the
deployed escrows, so the daemon has every kind of lifecycle to index, verify and keep.

One scenario runs per step, in a fixed cycle, then chain time jumps ahead
(``evm_increaseTime``) so deadlines fall due every few seconds of wall time. Actions that
belong to the keeper (claimRefund, finalizeVerdict, evaluatorTimeout, refundExpired) are
left to the daemon, unless ``self_keep`` is set, when a fallback key performs them once
they are due (used when no daemon runs, e.g. in tests and `keeper devnet --no-daemon`).

The task-market scenarios are a mixin (``traffic_taskmarket``), as are those on the
ERC8183.sol-shaped escrow (``traffic_erc8183``); roles, timing and dev-key addresses are
in ``traffic_roles``. Web3 calls are blocking; ``run`` drives ``step`` in a worker thread
and never lets a cancellation abandon a step halfway through.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from web3 import Web3
from web3.contract import Contract
from web3.contract.contract import ContractFunction
from web3.exceptions import ContractLogicError
from web3.logs import DISCARD
from web3.types import TxReceipt

from keeper.devnet.anvil import DEV_KEYS, ChainControl
from keeper.devnet.contracts import load_abi, taskmarket_abi
from keeper.devnet.deploy import Deployment, TxFailed, connect, send_call
from keeper.devnet.evaluator_service import (
    SchemaEvalFixtures,
    VerdictBook,
    schemaeval_verdict,
    verdict_digest,
)
from keeper.devnet.traffic_erc8183 import ERC8183_SCENARIOS, ERC8183Traffic
from keeper.devnet.traffic_roles import (
    KEEPER_KEY,
    USDC,
    ZERO_ADDRESS,
    Roles,
    Timing,
    address_of,
)
from keeper.devnet.traffic_taskmarket import TaskMarketTraffic
from keeper.obs.logging import get_logger

__all__ = [
    "KEEPER_KEY",
    "SCENARIOS",
    "ZERO_ADDRESS",
    "Roles",
    "Timing",
    "TrafficGenerator",
    "address_of",
]

log = get_logger(__name__)

GRACE_PERIOD = 3600  # AgenticCommerce.EVALUATION_GRACE_PERIOD
STEP_DRAIN_TIMEOUT = 30.0  # seconds a cancelled run waits for its in-flight step

SCENARIOS: tuple[str, ...] = (
    "job_complete",
    "job_reject_too_few",
    "erc8183_complete",
    "task_finalize",
    "job_expire",
    "erc8183_partial_expire",
    "job_reject_bad_piva",
    "task_appeal",
    "erc8183_claim_pending",
    "legacy_complete",
    "job_tampered",
    "erc8183_hook_blocked",
    "task_timeout",
    "job_reject_not_json",
    "erc8183_paused",
    "task_expire",
    "legacy_expire",
    "erc8183_abandoned",
    "job_abandoned",
    "task_accept",
    "erc8183_open_budget",
    "job_open_budget",
    "task_update",
    "legacy_task_expire",
    "task_bounty",
    "task_finalize_silent",
    "task_dispute_silent",
    # last: its review (twelve warps on the requester-only market) is still open when a
    # single cycle with ten warps for the others' deadlines ends
    "task_timeout_requester",
)
if set(ERC8183_SCENARIOS) - set(SCENARIOS):  # pragma: no cover - caught at import
    raise RuntimeError("an ERC8183 scenario is missing from the cycle")


@dataclass(order=True)
class _Due:
    at: int
    seq: int
    label: str = field(compare=False)
    action: Callable[[], Any] = field(compare=False)


class TrafficGenerator(ERC8183Traffic, TaskMarketTraffic):
    """Plays every party but the keeper on one deployment; ``step`` runs one scenario."""

    def __init__(
        self,
        rpc_url: str,
        deployment: Deployment,
        book: VerdictBook,
        fixtures: SchemaEvalFixtures,
        *,
        self_keep: bool,
        timing: Timing | None = None,
        roles: Roles | None = None,
        scenarios: Sequence[str] = SCENARIOS,
    ) -> None:
        unknown = set(scenarios) - set(SCENARIOS)
        if unknown or not scenarios:
            raise ValueError(f"unknown traffic scenarios {sorted(unknown)}, or none given")
        self.w3 = connect(rpc_url)
        self.control = ChainControl(rpc_url)
        self.d = deployment
        self.book = book
        self.fixtures = fixtures
        self.self_keep = self_keep
        self.timing = timing or Timing()
        self.roles = roles or Roles()
        self.counts: Counter[str] = Counter()
        self.usdc = self._contract("MockUSDC", deployment.usdc)
        self.commerce = self._contract("AgenticCommerce", deployment.commerce)
        self.legacy = self._contract("LegacyAgenticCommerce", deployment.legacy_commerce)
        # the revision-21 diamond (every requester/worker call through the forwarder) and
        # the pre-revision-7 contract (direct calls, the older event shapes)
        self.taskmarket = self.w3.eth.contract(
            address=Web3.to_checksum_address(deployment.taskmarket), abi=taskmarket_abi()
        )
        self.forwarder = self._contract("TaskMarketForwarder", deployment.taskmarket_forwarder)
        self.legacy_tm = self._contract("LegacyTaskMarket", deployment.taskmarket_legacy)
        self.erc8183 = self._contract("ERC8183", deployment.erc8183) if deployment.erc8183 else None
        self.erc8183_hook = (
            self._contract("SwitchableHook", deployment.erc8183_hook)
            if deployment.erc8183_hook
            else None
        )
        self._due: list[_Due] = []
        self._seq = itertools.count()
        self._serial = itertools.count(1)
        self._cycle = itertools.cycle(scenarios)
        self._ready = False

    def _contract(self, name: str, address: str) -> Contract:
        return self.w3.eth.contract(address=Web3.to_checksum_address(address), abi=load_abi(name))

    # ----- driving -----

    async def run(self, steps: int | None = None) -> None:
        """Run ``steps`` steps (forever if None), ``timing.interval`` apart."""
        for _ in itertools.count() if steps is None else range(steps):
            step = asyncio.ensure_future(asyncio.to_thread(self.step))
            try:
                await asyncio.shield(step)
            except asyncio.CancelledError:
                # let the thread finish its transactions before anvil goes away
                await asyncio.wait({step}, timeout=STEP_DRAIN_TIMEOUT)
                if step.done() and not step.cancelled():
                    step.exception()  # retrieved: a late failure is moot once cancelled
                raise
            await asyncio.sleep(self.timing.interval)

    def step(self) -> str:
        """One scenario, a jump in chain time, then whatever fell due. Returns the scenario."""
        if not self._ready:
            self._setup()
        name = next(self._cycle)
        if name.startswith("erc8183_") and (self.erc8183 is None or not self._unless_paused()):
            self.control.increase_time(self.timing.warp)
            self._run_due()
            return name
        try:
            getattr(self, f"_{name}")()
            self.counts[name] += 1
        except (TxFailed, ContractLogicError) as exc:
            self.counts["failed"] += 1
            log.warning(
                "devnet.traffic.scenario_failed",
                scenario=name,
                error=type(exc).__name__,
                detail=str(exc)[:200],
            )
        self.control.increase_time(self.timing.warp)
        self._run_due()
        return name

    def _setup(self) -> None:
        """Mint USDC to the client and approve every escrow once."""
        client = address_of(self.roles.client)
        self._send(DEV_KEYS[0], self.usdc.functions.mint(client, 10**9 * USDC))
        for escrow in (self.commerce, self.legacy, self.taskmarket, self.legacy_tm):
            self._send(self.roles.client, self.usdc.functions.approve(escrow.address, 2**256 - 1))
        self._setup_erc8183(address_of)
        self._ready = True
        log.info("devnet.traffic.ready", client=client.lower())

    def _send(self, key: str, fn: ContractFunction) -> TxReceipt:
        return send_call(self.w3, key, fn)

    def _act(self, key: str, fn: ContractFunction) -> TxReceipt:
        """A party's call to a task market: through the trusted forwarder on the diamond
        (its requester, worker and evaluator calls demand one), directly elsewhere."""
        if fn.address != self.taskmarket.address:
            return self._send(key, fn)
        data = bytes.fromhex(fn._encode_transaction_data()[2:])
        return self._send(key, self.forwarder.functions.forward(self.taskmarket.address, data))

    @staticmethod
    def _created_job(escrow: Contract, receipt: TxReceipt) -> int:
        """The new job's id, from its JobCreated log: a ``jobCounter()`` call at latest can
        be answered from a block still being built (anvil under load returns empty data)."""
        (event,) = escrow.events.JobCreated().process_receipt(receipt, errors=DISCARD)
        return int(event["args"]["jobId"])

    def _block_time(self, receipt: TxReceipt) -> int:
        return int(self.w3.eth.get_block(receipt["blockNumber"])["timestamp"])

    def _later(self, at: int, label: str, action: Callable[[], Any], *, keeper: bool) -> None:
        """Schedule ``action`` for chain time ``at``; keeper actions only when self-keeping."""
        if keeper and not self.self_keep:
            return
        heapq.heappush(self._due, _Due(at, next(self._seq), label, action))

    def _run_due(self) -> None:
        head = self.control.timestamp()
        while self._due and self._due[0].at <= head:
            due = heapq.heappop(self._due)
            try:
                due.action()
                self.counts[due.label] += 1
                log.info("devnet.traffic.due_action", action=due.label)
            except (TxFailed, ContractLogicError) as exc:
                # someone (the daemon) got there first, or the state moved on: nothing to do
                log.info("devnet.traffic.due_skipped", action=due.label, error=type(exc).__name__)

    # ----- ERC-8183 building blocks -----

    def _budget(self) -> int:
        return (10 + next(self._serial) % 90) * USDC

    def _open_job(self, escrow: Contract, *, fund: bool) -> tuple[int, int]:
        """Create a SchemaEval job with a budget (funded unless told); (job id, expiredAt)."""
        r = self.roles
        expired_at = self.control.timestamp() + self.timing.job_ttl
        provider, evaluator = address_of(r.provider), address_of(r.evaluator)
        description = self.fixtures.description
        budget = self._budget()
        if escrow is self.legacy:
            created = self._send(
                r.client, escrow.functions.createJob(provider, evaluator, expired_at, description)
            )
            job = self._created_job(escrow, created)
            self._send(r.client, escrow.functions.setBudget(job, budget, b""))
        else:
            created = self._send(
                r.client,
                escrow.functions.createJob(
                    provider, evaluator, expired_at, description, ZERO_ADDRESS, 0
                ),
            )
            job = self._created_job(escrow, created)
            self._send(r.client, escrow.functions.setBudget(job, self.usdc.address, budget, b""))
        if fund:
            self._send(r.client, escrow.functions.fund(job, budget, b""))
        return job, expired_at

    def _deliver(self, escrow: Contract, job: int, content: bytes) -> tuple[str, int]:
        """The provider uploads ``content`` and submits its hash; (deliverable, submittedAt)."""
        deliverable = self.book.publish_content(content)
        receipt = self._send(
            self.roles.provider, escrow.functions.submit(job, bytes.fromhex(deliverable[2:]), b"")
        )
        return deliverable, self._block_time(receipt)

    def _judge(self, escrow: Contract, job: int, content: bytes, *, tamper: bool = False) -> str:
        """Deliver, then the evaluator publishes its verdict and records its digest on chain."""
        deliverable, _ = self._deliver(escrow, job, content)
        verdict = schemaeval_verdict(job, self.fixtures.description, content, deliverable)
        reason = verdict_digest(verdict)
        served = (
            {**verdict, "esito": "reject", "motivi": ["/fornitori: tampered"]}
            if tamper
            else verdict
        )
        info = {
            "id": str(job),
            "contract": escrow.address.lower(),
            "evaluator": address_of(self.roles.evaluator).lower(),
            "deliverable": deliverable,
            "status": verdict["esito"],
        }
        self.book.publish_job(escrow.address, job, info, served)
        action = (
            escrow.functions.complete if verdict["esito"] == "complete" else escrow.functions.reject
        )
        receipt = self._send(self.roles.evaluator, action(job, bytes.fromhex(reason[2:]), b""))
        log.info(
            "devnet.traffic.job_judged",
            contract=escrow.address.lower(),
            job_id=job,
            esito=verdict["esito"],
            tampered=tamper,
            tx=receipt["transactionHash"].to_0x_hex(),
        )
        return str(verdict["esito"])

    def _refund_later(self, escrow: Contract, job: int, at: int) -> None:
        fn = escrow.functions.claimRefund(job)
        self._later(
            at, "claim_refund", lambda: self._send(self.roles.fallback_keeper, fn), keeper=True
        )

    # ----- ERC-8183 scenarios -----

    def _job_complete(self) -> None:
        job, _ = self._open_job(self.commerce, fund=True)
        self._judge(self.commerce, job, self.fixtures.complete)

    def _job_reject_too_few(self) -> None:
        job, _ = self._open_job(self.commerce, fund=True)
        self._judge(self.commerce, job, self.fixtures.too_few)

    def _job_reject_bad_piva(self) -> None:
        job, _ = self._open_job(self.commerce, fund=True)
        self._judge(self.commerce, job, self.fixtures.bad_piva)

    def _job_reject_not_json(self) -> None:
        job, _ = self._open_job(self.commerce, fund=True)
        self._judge(self.commerce, job, self.fixtures.not_json)

    def _job_tampered(self) -> None:
        job, _ = self._open_job(self.commerce, fund=True)
        self._judge(self.commerce, job, self.fixtures.complete, tamper=True)

    def _job_expire(self) -> None:
        """Funded, never delivered: refundable at expiredAt."""
        job, expired_at = self._open_job(self.commerce, fund=True)
        self._refund_later(self.commerce, job, expired_at)

    def _job_abandoned(self) -> None:
        """Delivered but never judged: refundable after expiry and the grace period."""
        job, expired_at = self._open_job(self.commerce, fund=True)
        _, submitted_at = self._deliver(self.commerce, job, self.fixtures.complete)
        self._refund_later(self.commerce, job, max(expired_at, submitted_at + GRACE_PERIOD))

    def _job_open_budget(self) -> None:
        """Budget set, never funded: claimRefund would pay out other jobs' escrow. Never kept."""
        self._open_job(self.commerce, fund=False)

    def _legacy_complete(self) -> None:
        job, _ = self._open_job(self.legacy, fund=True)
        self._judge(self.legacy, job, self.fixtures.complete)

    def _legacy_expire(self) -> None:
        job, expired_at = self._open_job(self.legacy, fund=True)
        self._refund_later(self.legacy, job, expired_at)
