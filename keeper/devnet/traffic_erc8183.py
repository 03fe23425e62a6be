"""Devnet traffic on the ERC8183.sol-shaped escrow: claims and partial settlement, payout
receivers, a pause window and a hook that blocks claimRefund until the admin detaches it.

A mixin of ``TrafficGenerator`` (it uses the generator's roles, timing, scheduling and
senders). The keeper's own action, ``claimRefund(uint256,bytes)``, is left to the daemon
unless the generator self-keeps; the other parties' late moves (resolving a claim after
expiry, unpausing, detaching the hook) are scheduled as non-keeper actions, so the daemon
sees each obstacle appear and go away.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from web3.contract import Contract
from web3.contract.contract import ContractFunction
from web3.types import TxReceipt

from keeper.devnet.anvil import DEV_KEYS, ChainControl
from keeper.devnet.evaluator_service import SchemaEvalFixtures

__all__ = ["ERC8183_SCENARIOS", "PAYOUT_RECEIVER_KEY", "ERC8183Traffic"]

ERC8183_SCENARIOS: tuple[str, ...] = (
    "erc8183_complete",
    "erc8183_partial_expire",
    "erc8183_claim_pending",
    "erc8183_hook_blocked",
    "erc8183_paused",
    "erc8183_abandoned",
    "erc8183_open_budget",
)

DEPLOYER_KEY = DEV_KEYS[0]  # the escrow's admin and the hook's owner
PAYOUT_RECEIVER_KEY = DEV_KEYS[8]  # the provider's payout receiver, never a signer
GRACE_PERIOD = 3600  # ERC8183.EVALUATION_GRACE_PERIOD, counted from expiredAt
CLAIM_REFUND_SELECTOR = bytes.fromhex("d2fd101b")  # claimRefund(uint256,bytes)
# how long after expiry the other parties clear each obstacle (chain seconds)
CLAIM_RESOLVED_AFTER = 120
UNPAUSE_AFTER = 90
HOOK_DETACHED_AFTER = 150
MIN_TTL = 5 * 60 + 60


class ERC8183Traffic:
    """Scenarios on ``self.erc8183``; needs the generator's attributes declared below."""

    erc8183: Contract | None
    erc8183_hook: Contract | None
    usdc: Contract
    control: ChainControl
    fixtures: SchemaEvalFixtures
    counts: Counter[str]
    roles: Any
    timing: Any

    _address_of: Callable[[str], str]

    if TYPE_CHECKING:  # provided by TrafficGenerator

        def _send(self, key: str, fn: ContractFunction) -> TxReceipt: ...
        def _later(
            self, at: int, label: str, action: Callable[[], Any], *, keeper: bool
        ) -> None: ...
        def _budget(self) -> int: ...
        def _deliver(self, escrow: Contract, job: int, content: bytes) -> tuple[str, int]: ...
        def _judge(
            self, escrow: Contract, job: int, content: bytes, *, tamper: bool = False
        ) -> str: ...
        @staticmethod
        def _created_job(escrow: Contract, receipt: TxReceipt) -> int: ...

    # ----- setup and building blocks -----

    def _setup_erc8183(self, address_of: Callable[[str], str]) -> None:
        """Approve the escrow and arm the hook: it blocks claimRefund from now on."""
        if self.erc8183 is None or self.erc8183_hook is None:
            return
        self._send(self.roles.client, self.usdc.functions.approve(self.erc8183.address, 2**256 - 1))
        self._send(
            DEPLOYER_KEY, self.erc8183_hook.functions.setBlocking(CLAIM_REFUND_SELECTOR, True)
        )
        self._address_of = address_of

    def _escrow(self) -> Contract:
        if self.erc8183 is None:
            raise RuntimeError("this deployment has no ERC8183 escrow")
        return self.erc8183

    def _erc8183_job(
        self, *, fund: bool, hook: str | None = None, receiver: bool = False
    ) -> tuple[int, int, int]:
        """Create a SchemaEval job (provider set later by the client, as the new setter
        events show), budget it and optionally fund it; (job id, expiredAt, budget)."""
        escrow, r, addr = self._escrow(), self.roles, self._address_of
        # the escrow wants expiredAt more than 5 minutes out
        expired_at = self.control.timestamp() + max(self.timing.job_ttl, MIN_TTL)
        zero = "0x" + "00" * 20
        created = self._send(
            r.client,
            escrow.functions.createJob(
                zero, addr(r.evaluator), expired_at, self.fixtures.description, hook or zero, 0,
                b"",
            ),
        )  # fmt: skip
        job = self._created_job(escrow, created)
        self._send(r.client, escrow.functions.setProvider(job, addr(r.provider), 7, b""))
        if receiver:
            fn = escrow.functions.setPayoutReceiver(job, addr(PAYOUT_RECEIVER_KEY), b"")
            self._send(r.provider, fn)
        budget = self._budget()
        self._send(r.provider, escrow.functions.setBudget(job, self.usdc.address, budget, b""))
        if fund:
            self._send(r.client, escrow.functions.fund(job, self.usdc.address, budget, b""))
        return job, expired_at, budget

    def _refund_later_erc8183(self, job: int, at: int) -> None:
        self._party_later(
            at, "claim_refund", self.roles.fallback_keeper,
            self._escrow().functions.claimRefund(job, b""), keeper=True,
        )  # fmt: skip

    def _claim(self, job: int, cumulative: int) -> tuple[int, bytes, bytes]:
        deliverable, opt = bytes.fromhex("c1" * 32), cumulative.to_bytes(8, "big")
        fn = self._escrow().functions.submitClaim(job, cumulative, deliverable, opt)
        self._send(self.roles.provider, fn)
        return cumulative, deliverable, opt

    def _paused_now(self) -> bool:
        return bool(self._escrow().functions.paused().call())

    def _party_later(
        self, at: int, label: str, key: str, fn: ContractFunction, *, keeper: bool = False
    ) -> None:
        """A move at ``at``; while the escrow is paused it is put off, not lost."""

        def act() -> None:
            if self._paused_now():
                self._party_later(at + self.timing.warp, label, key, fn, keeper=keeper)
                return
            self._send(key, fn)

        self._later(at, label, act, keeper=keeper)

    def _unless_paused(self) -> bool:
        """Scenarios start only on a running escrow (the pause scenario's window skips them)."""
        if self._paused_now():
            self.counts["erc8183_skipped_paused"] += 1
            return False
        return True

    # ----- scenarios -----

    def _erc8183_complete(self) -> None:
        """Paid to the payout receiver after a verdict the daemon verifies via the new getJob."""
        job, _, _ = self._erc8183_job(fund=True, receiver=True)
        self._judge(self._escrow(), job, self.fixtures.complete)

    def _erc8183_partial_expire(self) -> None:
        """A third of the budget settled through an approved claim; the rest refunded."""
        job, expired_at, budget = self._erc8183_job(fund=True, receiver=True)
        cumulative, deliverable, opt = self._claim(job, budget // 3)
        fn = self._escrow().functions.approveClaim(job, cumulative, deliverable, opt)
        self._send(self.roles.client, fn)
        self._refund_later_erc8183(job, expired_at)

    def _erc8183_claim_pending(self) -> None:
        """A claim still pending at expiry blocks the refund until the client rejects it."""
        job, expired_at, budget = self._erc8183_job(fund=True)
        cumulative, deliverable, opt = self._claim(job, budget // 2)
        reject = self._escrow().functions.rejectClaim(
            job, cumulative, deliverable, b"late".ljust(32, b"\x00"), opt
        )
        resolved = expired_at + CLAIM_RESOLVED_AFTER
        self._party_later(resolved, "claim_rejected", self.roles.client, reject)
        self._refund_later_erc8183(job, resolved)

    def _erc8183_hook_blocked(self) -> None:
        """The hook reverts claimRefund; the admin detaches it some time after expiry."""
        if self.erc8183_hook is None:
            return
        job, expired_at, _ = self._erc8183_job(fund=True, hook=self.erc8183_hook.address)
        detach = self._escrow().functions.batchDetachHook([job])
        detached = expired_at + HOOK_DETACHED_AFTER
        self._party_later(detached, "hook_detached", DEPLOYER_KEY, detach)
        self._refund_later_erc8183(job, detached)

    def _erc8183_paused(self) -> None:
        """The admin pauses the escrow across a job's expiry, then unpauses it."""
        job, expired_at, _ = self._erc8183_job(fund=True)
        escrow = self._escrow()
        pause, unpause = escrow.functions.pause(), escrow.functions.unpause()
        # two warps ahead, so the pause is in place before the job can be refunded
        paused_at = expired_at - 2 * self.timing.warp
        self._later(paused_at, "paused", lambda: self._send(DEPLOYER_KEY, pause), keeper=False)
        reopened = expired_at + UNPAUSE_AFTER
        self._later(reopened, "unpaused", lambda: self._send(DEPLOYER_KEY, unpause), keeper=False)
        self._refund_later_erc8183(job, reopened)

    def _erc8183_abandoned(self) -> None:
        """Delivered, never judged: refundable from expiredAt + 1 h (not from submission)."""
        job, expired_at, _ = self._erc8183_job(fund=True)
        self._deliver(self._escrow(), job, self.fixtures.complete)
        self._refund_later_erc8183(job, expired_at + GRACE_PERIOD)

    def _erc8183_open_budget(self) -> None:
        """Budget set, never funded: this dialect expires it with no transfer, so it is kept."""
        job, expired_at, _ = self._erc8183_job(fund=False)
        self._refund_later_erc8183(job, expired_at)
