"""Devnet traffic on the task markets: the revision-21 diamond (every requester, worker
and evaluator call through the trusted forwarder) and the pre-revision-7 contract.

A mixin of ``TrafficGenerator`` (it uses the generator's roles, timing, scheduling and
senders). The keeper's own actions (finalizeVerdict, evaluatorTimeout, refundExpired)
are left to the daemon unless the generator self-keeps.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from web3.contract import Contract
from web3.contract.contract import ContractFunction
from web3.logs import DISCARD
from web3.types import TxReceipt

from keeper.devnet.anvil import ChainControl
from keeper.devnet.evaluator_service import SchemaEvalFixtures, VerdictBook, keccak_hex
from keeper.devnet.traffic_roles import USDC, ZERO_ADDRESS, Roles, Timing, address_of
from keeper.domain.taskmodes import BOUNTY, CLAIM

__all__ = ["TaskMarketTraffic"]

EVALUATOR_STAKE = 5 * USDC
EVALUATOR_FEE_BPS = 200


class TaskMarketTraffic:
    """Scenarios on ``self.taskmarket`` and ``self.legacy_tm``; needs the generator's
    attributes declared below."""

    taskmarket: Contract
    legacy_tm: Contract
    control: ChainControl
    fixtures: SchemaEvalFixtures
    book: VerdictBook
    roles: Roles
    timing: Timing
    _serial: itertools.count[int]

    if TYPE_CHECKING:  # provided by TrafficGenerator

        def _send(self, key: str, fn: ContractFunction) -> TxReceipt: ...
        def _act(self, key: str, fn: ContractFunction) -> TxReceipt: ...
        def _block_time(self, receipt: TxReceipt) -> int: ...
        def _later(
            self, at: int, label: str, action: Callable[[], Any], *, keeper: bool
        ) -> None: ...

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
        """The worker's award of what ``reward`` leaves after the evaluator's fee (0: an
        award naming the worker that pays nothing)."""
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
        self._verdict_finalized(paid=True)

    def _task_finalize_silent(self) -> None:
        """APPROVE verdict whose award pays nothing: the keeper's finalize (sent alone)
        refunds the requester and emits no event; the keeper records what it saw."""
        self._verdict_finalized(paid=False)

    def _task_appeal(self) -> None:
        """REJECT verdict; the worker appeals and the resolver awards the reward."""
        self._dispute_resolved(paid=True)

    def _task_dispute_silent(self) -> None:
        """REJECT verdict; the worker appeals and the resolver approves paying nothing: the
        task ends Accepted with no event, which only the keeper's dispute probe learns."""
        self._dispute_resolved(paid=False)

    def _verdict_finalized(self, *, paid: bool) -> None:
        task, reward, _ = self._new_task(self.taskmarket, evaluator=True)
        self._work(self.taskmarket, task)
        awards = self._award(reward if paid else 0)
        evaluated_at = self._evaluate(self.taskmarket, task, 0, awards)
        fn = self.taskmarket.functions.finalizeVerdict(task)
        self._later(
            evaluated_at + self.timing.appeal_window,
            "finalize_verdict",
            lambda: self._send(self.roles.fallback_keeper, fn),
            keeper=True,
        )

    def _dispute_resolved(self, *, paid: bool) -> None:
        task, reward, _ = self._new_task(self.taskmarket, evaluator=True)
        self._work(self.taskmarket, task)
        self._evaluate(self.taskmarket, task, 1, [])
        self._act(self.roles.worker, self.taskmarket.functions.appeal(task))
        awards = self._award(reward if paid else 0)
        self._act(self.roles.resolver, self.taskmarket.functions.resolveDispute(task, 0, awards))

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
