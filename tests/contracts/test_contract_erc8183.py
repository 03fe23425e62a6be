"""ERC8183 (the ERC8183.sol dialect): claimRefund(uint256,bytes) and its deadline rules,
partial settlement through claims, payout receivers, pause, hooks, getJob's 13 fields."""

from __future__ import annotations

import eth_abi
from escrow_harness import (
    CLIENT,
    DEPLOYER,
    EVALUATOR,
    PROVIDER,
    STRANGER,
    USDC,
    WORKER2,
    Chain,
    address_of,
    selector,
)

from keeper.devnet.deploy import EVALUATOR_FEE_BPS, PLATFORM_FEE_BPS

OPEN, FUNDED, SUBMITTED, COMPLETED, REJECTED, EXPIRED = range(6)
BUDGET = 300 * USDC
GRACE = 3600
ZERO = "0x" + "00" * 20
EMPTY = b""
DELIVERABLE = b"\x0d" * 32
# PROTOCOLS.md section 1b struct Job: decoding raw return data with it pins the order
JOB_TUPLE = (
    "(address,uint8,address,uint48,address,uint48,uint256,address,address,uint256,string,"
    "uint256,address)"
)
RECEIVER = WORKER2


def cs(key: str) -> str:
    return address_of(key)


def job_of(c: Chain, job: int) -> tuple[object, ...]:
    raw = c.w3.eth.call({"to": c.erc8183.address, "data": selector("getJob(uint256)") +
                         job.to_bytes(32, "big").hex()})  # fmt: skip
    (decoded,) = eth_abi.decode([JOB_TUPLE], bytes(raw))
    return tuple(decoded)


def create(c: Chain, *, expires_in: int = 7200, hook: str = ZERO) -> tuple[int, int]:
    expired_at = c.now() + expires_in
    fn = c.erc8183.functions.createJob(
        ZERO, cs(EVALUATOR), expired_at, '{"brief":"x"}', hook, 0, EMPTY
    )
    (ev,) = c.events(c.send(CLIENT, fn), c.erc8183)
    assert ev.name == "JobCreated"
    job = int(ev.args["jobId"])
    c.send(CLIENT, c.erc8183.functions.setProvider(job, cs(PROVIDER), 42, EMPTY))
    return job, expired_at


def funded(c: Chain, *, hook: str = ZERO, receiver: bool = False) -> tuple[int, int]:
    job, expired_at = create(c, hook=hook)
    if receiver:
        c.send(PROVIDER, c.erc8183.functions.setPayoutReceiver(job, cs(RECEIVER), EMPTY))
    c.send(PROVIDER, c.erc8183.functions.setBudget(job, c.usdc.address, BUDGET, EMPTY))
    c.fund_account(CLIENT, BUDGET, c.erc8183.address)
    c.send(CLIENT, c.erc8183.functions.fund(job, c.usdc.address, BUDGET, EMPTY))
    return job, expired_at


def refund(job: int, c: Chain) -> object:
    return c.erc8183.functions.claimRefund(job, EMPTY)


class TestShapes:
    def test_selectors_and_layout_match_the_reference(self, c: Chain) -> None:
        """claimRefund(uint256,bytes) is 0xd2fd101b, claimRefund(uint256) is absent (reverts
        with no data), and getJob returns the 13 fields in the reference's order."""
        assert selector("claimRefund(uint256,bytes)") == "0xd2fd101b"
        job, expired_at = funded(c, receiver=True)
        j = job_of(c, job)
        assert j[0] == cs(CLIENT).lower() and j[1] == FUNDED and j[3] == expired_at
        assert (j[6], j[8], j[9], j[10], j[11]) == (BUDGET, c.usdc.address.lower(), 42,
                                                    '{"brief":"x"}', 0)  # fmt: skip
        assert j[12] == cs(RECEIVER).lower()
        old = selector("claimRefund(uint256)") + job.to_bytes(32, "big").hex()
        receipt = c.send_raw(STRANGER, c.erc8183.address, old, at=expired_at)
        assert receipt["status"] == 0 and c.revert_data(receipt) == "0x"

    def test_both_create_job_shapes_exist(self, c: Chain) -> None:
        """createJob with and without the trailing optParams creates a job."""
        fn = c.erc8183.get_function_by_signature(
            "createJob(address,address,uint48,string,address,uint256)"
        )(ZERO, cs(EVALUATOR), c.now() + 3600, "d", ZERO, 0)
        assert c.names(c.send(CLIENT, fn), c.erc8183) == ["JobCreated"]


class TestRefundRules:
    def test_funded_job_refunded_at_expiry_not_before(self, c: Chain) -> None:
        """WrongStatus one second early; at expiredAt anyone refunds the whole escrow."""
        job, expired_at = funded(c)
        c.expect_revert(STRANGER, refund(job, c), "WrongStatus()", at=expired_at - 1)
        before = c.balance(cs(CLIENT))
        receipt = c.send(STRANGER, refund(job, c), at=expired_at)
        assert c.names(receipt, c.erc8183) == ["Refunded", "JobExpired"]
        assert c.balance(cs(CLIENT)) - before == BUDGET

    def test_submitted_job_waits_for_expiry_plus_grace(self, c: Chain) -> None:
        """A Submitted job is refundable from expiredAt + 1 h, however early it was submitted."""
        job, expired_at = funded(c)
        c.send(PROVIDER, c.erc8183.functions.submit(job, DELIVERABLE, EMPTY), at=c.now() + 10)
        c.expect_revert(STRANGER, refund(job, c), "GracePeriodActive()", at=expired_at + GRACE - 1)
        c.send(STRANGER, refund(job, c), at=expired_at + GRACE)
        assert job_of(c, job)[1] == EXPIRED

    def test_open_job_expires_without_transfer(self, c: Chain) -> None:
        """An Open job with a budget expires after expiredAt and pays nothing out."""
        job, expired_at = create(c)
        c.send(PROVIDER, c.erc8183.functions.setBudget(job, c.usdc.address, BUDGET, EMPTY))
        receipt = c.send(STRANGER, refund(job, c), at=expired_at)
        assert c.names(receipt, c.erc8183) == ["JobExpired"]

    def test_pending_claim_blocks_refund_until_resolved(self, c: Chain) -> None:
        """PendingClaimExists while a claim waits; after its approval the rest is refunded."""
        job, expired_at = funded(c, receiver=True)
        claim = (job, BUDGET // 3, DELIVERABLE, b"\x01")
        c.send(PROVIDER, c.erc8183.functions.submitClaim(*claim))
        c.expect_revert(STRANGER, refund(job, c), "PendingClaimExists()", at=expired_at)
        before = c.balance(cs(RECEIVER))
        receipt = c.send(CLIENT, c.erc8183.functions.approveClaim(*claim))
        assert c.names(receipt, c.erc8183) == [
            "PlatformFeePaid", "EvaluatorFeePaid", "PaymentReleased", "Settled", "ClaimApproved",
        ]  # fmt: skip
        fees = BUDGET // 3 * (PLATFORM_FEE_BPS + EVALUATOR_FEE_BPS) // 10_000
        assert c.balance(cs(RECEIVER)) - before == BUDGET // 3 - fees
        client = c.balance(cs(CLIENT))
        c.send(STRANGER, refund(job, c))
        assert c.balance(cs(CLIENT)) - client == BUDGET - BUDGET // 3
        assert job_of(c, job)[11] == BUDGET // 3

    def test_paused_escrow_refuses_then_refunds_after_unpause(self, c: Chain) -> None:
        """EnforcedPause while paused; forceRefund only while paused; refund after unpause."""
        job, expired_at = funded(c)
        c.expect_revert(
            DEPLOYER, c.erc8183.functions.forceRefund(job, cs(CLIENT)), "ExpectedPause()"
        )
        c.send(DEPLOYER, c.erc8183.functions.pause())
        c.expect_revert(STRANGER, refund(job, c), "EnforcedPause()", at=expired_at)
        c.expect_revert(STRANGER, c.erc8183.functions.pause(), "Unauthorized()")
        c.send(DEPLOYER, c.erc8183.functions.unpause())
        assert c.names(c.send(STRANGER, refund(job, c)), c.erc8183) == ["Refunded", "JobExpired"]

    def test_hook_blocks_refund_until_detached(self, c: Chain) -> None:
        """A hook reverting beforeAction(claimRefund) blocks it; batchDetachHook unblocks."""
        c.send(DEPLOYER, c.hook.functions.setBlocking(bytes.fromhex("d2fd101b"), True))
        job, expired_at = funded(c, hook=c.hook.address)
        c.expect_revert(STRANGER, refund(job, c), "HookBlocked(bytes4)", at=expired_at)
        receipt = c.send(DEPLOYER, c.erc8183.functions.batchDetachHook([job]))
        assert c.names(receipt, c.erc8183) == ["HookDetached"]
        assert c.names(c.send(STRANGER, refund(job, c)), c.erc8183) == ["Refunded", "JobExpired"]
