"""Devnet traffic: clients, providers, evaluators, workers and a dispute resolver using the
deployed escrows, so the daemon has every kind of lifecycle to index, verify and keep.

One scenario runs per step, in a fixed cycle, then chain time jumps ahead
(``evm_increaseTime``) so deadlines fall due every few seconds of wall time. Actions that
belong to the keeper (claimRefund, finalizeVerdict, evaluatorTimeout, refundExpired) are
left to the daemon, unless ``self_keep`` is set, when a fallback key performs them once
they are due (used when no daemon runs, e.g. in tests and `keeper devnet --no-daemon`).

Web3 calls are blocking; ``run`` drives ``step`` in a worker thread and never lets a
cancellation abandon a step halfway through.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from eth_account import Account
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
    keccak_hex,
    schemaeval_verdict,
    verdict_digest,
)
from keeper.devnet.traffic_erc8183 import ERC8183_SCENARIOS, ERC8183Traffic
from keeper.domain.taskmodes import BOUNTY, CLAIM
from keeper.obs.logging import get_logger

__all__ = ["KEEPER_KEY", "SCENARIOS", "Roles", "Timing", "TrafficGenerator", "address_of"]

log = get_logger(__name__)

# left for the daemon's keeper, so its nonces never race the traffic's
KEEPER_KEY = DEV_KEYS[4]
ZERO_ADDRESS = "0x" + "00" * 20
USDC = 10**6
GRACE_PERIOD = 3600  # AgenticCommerce.EVALUATION_GRACE_PERIOD
EVALUATOR_STAKE = 5 * USDC
EVALUATOR_FEE_BPS = 200
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
    # last: its review (twelve warps on the requester-only market) is still open when a
    # single cycle with ten warps for the others' deadlines ends
    "task_timeout_requester",
)
if set(ERC8183_SCENARIOS) - set(SCENARIOS):  # pragma: no cover - caught at import
    raise RuntimeError("an ERC8183 scenario is missing from the cycle")


@dataclass(frozen=True)
class Roles:
    """Dev keys per role; DEV_KEYS[0] deploys, [4] is the daemon's, [9] the treasury."""

    client: str = DEV_KEYS[1]
    provider: str = DEV_KEYS[2]
    evaluator: str = DEV_KEYS[3]
    worker: str = DEV_KEYS[5]
    resolver: str = DEV_KEYS[6]
    fallback_keeper: str = DEV_KEYS[7]


@dataclass(frozen=True)
class Timing:
    """Wall and chain time. Chain seconds per wall second = warp / interval."""

    interval: float = 0.5
    warp: int = 30
    job_ttl: int = 300
    task_ttl: int = 300
    evaluation_window: int = 120
    appeal_window: int = 300  # the diamond refuses less (rev 21 minimum)
    # on the requester-only market, how long after the evaluation deadline the requester
    # gets round to timing the evaluator out itself
    requester_patience: int = 240


@dataclass(order=True)
class _Due:
    at: int
    seq: int
    label: str = field(compare=False)
    action: Callable[[], Any] = field(compare=False)


@cache
def address_of(key: str) -> str:
    """Checksum address of a dev key (web3 wants checksums in calls)."""
    return str(Account.from_key(key).address)


class TrafficGenerator(ERC8183Traffic):
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
    ) -> None:
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
        self._cycle = itertools.cycle(SCENARIOS)
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
            log.warning("devnet.traffic.scenario_failed", scenario=name, error=type(exc).__name__)
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

    # ----- task market building blocks -----

    def _new_task(
        self, market: Contract, *, evaluator: bool, mode: str = CLAIM
    ) -> tuple[bytes, int, int]:
        """Create a task (with an evaluator, if told); (id, reward, expiryTime).

        On the diamond the evaluator terms travel in createTask (EvaluatorAssigned is
        emitted before TaskCreated) and the contract picks the id; the pre-7 contract takes
        a caller-chosen id and a separate assignEvaluator.
        """
        r = self.roles
        n = next(self._serial)
        reward = (20 + n % 50) * USDC
        terms = (
            address_of(r.evaluator),
            EVALUATOR_STAKE,
            EVALUATOR_FEE_BPS,
            self.timing.evaluation_window,
            self.timing.appeal_window,
            address_of(r.resolver),
        )
        if market is self.taskmarket:
            no_terms = (ZERO_ADDRESS, 0, 0, 0, 0, ZERO_ADDRESS)
            config = (reward, self.timing.task_ttl, bytes.fromhex(mode[2:]), 0, 0, b"\0" * 4)
            fn = market.functions.createTask(
                config, (False, 0), ([], b""), (b"\0" * 32, "", []),
                terms if evaluator else no_terms,
            )  # fmt: skip
            (event,) = market.events.TaskCreated().process_receipt(
                self._act(r.client, fn), errors=DISCARD
            )
            return bytes(event["args"]["taskId"]), reward, int(event["args"]["expiryTime"])
        task = bytes.fromhex(keccak_hex(f"devnet-task-{market.address}-{n}".encode())[2:])
        expiry = self.control.timestamp() + self.timing.task_ttl
        self._send(r.client, market.functions.createTask(task, reward, expiry, b"eval"))
        if evaluator:
            self._send(r.client, market.functions.assignEvaluator(task, *terms))
        return task, reward, expiry

    def _work(self, market: Contract, task: bytes) -> tuple[bytes, int]:
        """The worker claims and submits; returns (deliverable, submittedAt)."""
        claim = (
            market.functions.claimTask(task, 0)
            if market is self.taskmarket
            else market.functions.claimTask(task)
        )
        self._act(self.roles.worker, claim)
        content = self.fixtures.complete
        deliverable = bytes.fromhex(self.book.publish_content(content)[2:])
        receipt = self._act(self.roles.worker, market.functions.submitWork(task, deliverable))
        return deliverable, self._block_time(receipt)

    def _award(self, reward: int) -> list[tuple[str, int, int]]:
        fee = reward * EVALUATOR_FEE_BPS // 10_000
        return [(address_of(self.roles.worker), reward - fee, 1)]

    def _evaluate(self, market: Contract, task: bytes, verdict: int, awards: list[Any]) -> int:
        evidence = bytes.fromhex(keccak_hex(task + bytes([verdict]))[2:])
        fn = market.functions.evaluate(task, verdict, 90, 80, evidence, awards)
        return self._block_time(self._act(self.roles.evaluator, fn))

    def _refund_task_later(self, market: Contract, task: bytes, at: int) -> None:
        fn = (
            market.functions.refundExpired(task, 0)
            if market is self.taskmarket
            else market.functions.refundExpired(task)
        )
        self._later(
            at, "refund_expired", lambda: self._send(self.roles.fallback_keeper, fn), keeper=True
        )

    # ----- task market scenarios -----

    def _task_finalize(self) -> None:
        """APPROVE verdict; the appeal window runs out and the keeper finalizes."""
        task, reward, _ = self._new_task(self.taskmarket, evaluator=True)
        self._work(self.taskmarket, task)
        evaluated_at = self._evaluate(self.taskmarket, task, 0, self._award(reward))
        fn = self.taskmarket.functions.finalizeVerdict(task)
        self._later(
            evaluated_at + self.timing.appeal_window,
            "finalize_verdict",
            lambda: self._send(self.roles.fallback_keeper, fn),
            keeper=True,
        )

    def _task_appeal(self) -> None:
        """REJECT verdict; the worker appeals and the resolver awards the reward."""
        task, reward, _ = self._new_task(self.taskmarket, evaluator=True)
        self._work(self.taskmarket, task)
        self._evaluate(self.taskmarket, task, 1, [])
        self._act(self.roles.worker, self.taskmarket.functions.appeal(task))
        self._act(
            self.roles.resolver,
            self.taskmarket.functions.resolveDispute(task, 0, self._award(reward)),
        )

    def _task_timeout(self) -> None:
        """The evaluator never answers; on the pre-7 contract anyone may time it out."""
        task, _, _ = self._new_task(self.legacy_tm, evaluator=True)
        _, submitted_at = self._work(self.legacy_tm, task)
        fn = self.legacy_tm.functions.evaluatorTimeout(task)
        self._later(
            submitted_at + self.timing.evaluation_window + 1,
            "evaluator_timeout",
            lambda: self._send(self.roles.fallback_keeper, fn),
            keeper=True,
        )

    def _task_timeout_requester(self) -> None:
        """On the diamond only the requester (through the forwarder) may time the evaluator
        out: the keeper is refused (not_permitted, once); the requester acts, late."""
        task, _, _ = self._new_task(self.taskmarket, evaluator=True)
        _, submitted_at = self._work(self.taskmarket, task)
        fn = self.taskmarket.functions.evaluatorTimeout(task)
        due = submitted_at + self.timing.evaluation_window + 1 + self.timing.requester_patience
        self._later(
            due, "requester_timeout", lambda: self._act(self.roles.client, fn), keeper=False
        )

    def _task_expire(self) -> None:
        """Nobody claims it; refundable one second after expiryTime."""
        task, _, expiry = self._new_task(self.taskmarket, evaluator=False)
        self._refund_task_later(self.taskmarket, task, expiry + 1)

    def _legacy_task_expire(self) -> None:
        """The same on the pre-7 contract: five-argument TaskCreated, refundExpired(bytes32)."""
        task, _, expiry = self._new_task(self.legacy_tm, evaluator=False)
        self._refund_task_later(self.legacy_tm, task, expiry + 1)

    def _task_update(self) -> None:
        """The requester raises the reward and moves the expiry out (TaskUpdated)."""
        task, reward, expiry = self._new_task(self.taskmarket, evaluator=False)
        later = expiry + self.timing.task_ttl
        fn = self.taskmarket.functions.updateTask(task, reward + USDC, later, 0, 0)
        self._act(self.roles.client, fn)
        self._refund_task_later(self.taskmarket, task, later + 1)

    def _task_bounty(self) -> None:
        """A Bounty: two submissions keep it Open; the requester rejects one and accepts the
        other (no refund is ever due while submissions are active)."""
        task, _, _ = self._new_task(self.taskmarket, evaluator=False, mode=BOUNTY)
        content = self.fixtures.complete
        deliverable = bytes.fromhex(self.book.publish_content(content)[2:])
        worker, other = address_of(self.roles.worker), address_of(self.roles.provider)
        self._act(self.roles.worker, self.taskmarket.functions.submitWork(task, deliverable))
        self._act(self.roles.provider, self.taskmarket.functions.submitWork(task, deliverable))
        self._act(self.roles.client, self.taskmarket.functions.rejectSubmission(task, other))
        fn = self.taskmarket.functions.acceptSubmission(task, worker, deliverable, 0)
        self._act(self.roles.client, fn)

    def _task_accept(self) -> None:
        """No evaluator: the requester accepts the submission itself."""
        task, _, _ = self._new_task(self.taskmarket, evaluator=False)
        deliverable, _ = self._work(self.taskmarket, task)
        worker = address_of(self.roles.worker)
        fn = self.taskmarket.functions.acceptSubmission(task, worker, deliverable, 0)
        self._act(self.roles.client, fn)
