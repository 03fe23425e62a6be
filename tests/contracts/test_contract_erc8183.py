"""ERC8183 (the ERC8183.sol dialect): claimRefund(uint256,bytes) and its deadline rules,
partial settlement through claims, payout receivers and their IDisburser callback, pause,
hooks (before and after each call, whitelisted), the token allowlist, the admin's setters,
getJob's 13 fields: the interface of the reference's newest ERC8183.sol."""

from __future__ import annotations

from typing import Any

import eth_abi
from escrow_harness import (
    CLIENT,
    DEPLOYER,
    EVALUATOR,
    PROVIDER,
    STRANGER,
    TREASURY,
    USDC,
    WORKER2,
    Chain,
    address_of,
    selector,
)
from web3 import Web3

from keeper.devnet.deploy import EVALUATOR_FEE_BPS, PLATFORM_FEE_BPS
from keeper.domain.dialects_erc8183 import ERC8183

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
ADMIN_ROLE = bytes(Web3.keccak(text="ADMIN_ROLE"))
UNAUTHORIZED_ADMIN = "AccessControlUnauthorizedAccount(address,bytes32)"


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


def refused_admin(c: Chain, key: str, fn: Any) -> None:
    """``fn`` by ``key`` reverts with the reference's AccessControl error, caller and role."""
    receipt = c.expect_revert(key, fn, UNAUTHORIZED_ADMIN)
    assert (
        c.revert_data(receipt)
        == selector(UNAUTHORIZED_ADMIN)
        + eth_abi.encode(["address", "bytes32"], [cs(key), ADMIN_ROLE]).hex()
    )


def hook_calls(c: Chain, receipt: Any) -> list[tuple[str, str, bytes]]:
    """The escrow's calls into the devnet hook during ``receipt``'s transaction, in order:
    (function, the selector argument as 0x-hex, the data argument)."""
    trace = c.control.call(
        "debug_traceTransaction", receipt["transactionHash"].to_0x_hex(), {"tracer": "callTracer"}
    )
    names = {selector(f"{n}(uint256,bytes4,bytes)"): n for n in ("beforeAction", "afterAction")}
    found = []
    for call in trace.get("calls", []):
        if call["to"].lower() == c.hook.address.lower() and call["input"][:10] in names:
            _, sel, data = eth_abi.decode(
                ["uint256", "bytes4", "bytes"], bytes.fromhex(call["input"][10:])
            )
            found.append((names[call["input"][:10]], "0x" + sel.hex(), data))
    return found


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

    def test_functions_are_the_references(self, c: Chain) -> None:
        """The ABI's functions are the reference's, less its OpenZeppelin role, proxy and
        EIP-712 plumbing (a listed devnet departure) and plus admin(); createJob has the
        one seven-argument shape, the six-argument one answers nothing."""
        declared = {
            f"{f['name']}({','.join(i['type'] for i in f['inputs'])})"
            for f in c.erc8183.abi
            if f["type"] == "function"
        }
        assert declared == {
            "ADMIN_ROLE()", "EVALUATION_GRACE_PERIOD()", "admin()", "allowedPaymentTokens(address)",
            "approveClaim(uint256,uint256,bytes32,bytes)", "batchDetachHook(uint256[])",
            "claimRefund(uint256,bytes)", "complete(uint256,bytes32,bytes)",
            "createJob(address,address,uint48,string,address,uint256,bytes)",
            "emergencyWithdraw(address,address,uint256)", "evaluatorFeeBP()",
            "fund(uint256,address,uint256,bytes)", "getJob(uint256)", "jobCounter()",
            "jobs(uint256)", "pause()", "paused()", "pendingClaimHash(uint256)",
            "platformFeeBP()", "platformTreasury()", "reject(uint256,bytes32,bytes)",
            "rejectClaim(uint256,uint256,bytes32,bytes32,bytes)",
            "setBudget(uint256,address,uint256,bytes)", "setEvaluatorFee(uint256)",
            "setHookWhitelist(address,bool)", "setPaymentTokenAllowed(address,bool)",
            "setPayoutReceiver(uint256,address,bytes)", "setPlatformFee(uint256,address)",
            "setProvider(uint256,address,uint256,bytes)",
            "settleClaim(uint256,uint256,bytes32,bytes)", "submit(uint256,bytes32,bytes)",
            "submitClaim(uint256,uint256,bytes32,bytes)", "submittedClaimHash(uint256,bytes32)",
            "unpause()", "whitelistedHooks(address)",
        }  # fmt: skip
        six = eth_abi.encode(
            ["address", "address", "uint48", "string", "address", "uint256"],
            [ZERO, cs(EVALUATOR), c.now() + 3600, "d", ZERO, 0],
        )
        sig = "createJob(address,address,uint48,string,address,uint256)"
        receipt = c.send_raw(CLIENT, c.erc8183.address, selector(sig) + six.hex())
        assert receipt["status"] == 0 and c.revert_data(receipt) == "0x"

    def test_jobs_getter_answers_the_job(self, c: Chain) -> None:
        """The public jobs(uint256) mapping getter answers getJob's 13 fields."""
        job, _ = funded(c, receiver=True)
        assert tuple(c.erc8183.functions.jobs(job).call()) == tuple(
            c.erc8183.functions.getJob(job).call()
        )

    def test_keeper_table_names_every_declared_error(self, c: Chain) -> None:
        """Every error the devnet ERC8183 declares is classified by the keeper's table, and
        it declares the reference's errors (its OpenZeppelin ones included)."""
        declared = {
            f"{e['name']}({','.join(i['type'] for i in e['inputs'])})"
            for e in c.erc8183.abi
            if e["type"] == "error"
        }
        assert declared <= {r.signature for r in ERC8183.errors}
        assert {
            "ClaimAlreadySubmitted()", "UnexpectedFundedAmount()", "PaymentTokenNotAllowed()",
            "HookNotWhitelisted()", "InvalidHook()", "SafeERC20FailedOperation(address)",
            UNAUTHORIZED_ADMIN,
        } <= declared  # fmt: skip
        assert "TransferFailed()" not in declared


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
        """EnforcedPause while paused; pause/unpause are the admin's (the reference's
        AccessControl error for anyone else); refund after unpause."""
        job, expired_at = funded(c)
        c.expect_revert(DEPLOYER, c.erc8183.functions.unpause(), "ExpectedPause()")
        refused_admin(c, STRANGER, c.erc8183.functions.pause())
        c.send(DEPLOYER, c.erc8183.functions.pause())
        c.expect_revert(DEPLOYER, c.erc8183.functions.pause(), "EnforcedPause()")
        c.expect_revert(STRANGER, refund(job, c), "EnforcedPause()", at=expired_at)
        refused_admin(c, STRANGER, c.erc8183.functions.unpause())
        c.send(DEPLOYER, c.erc8183.functions.unpause())
        assert c.names(c.send(STRANGER, refund(job, c)), c.erc8183) == ["Refunded", "JobExpired"]

    def test_emergency_withdraw_only_while_paused_leaves_jobs_alone(self, c: Chain) -> None:
        """emergencyWithdraw(token, to, amount): the admin's, only while paused, never to
        address(0); it emits EmergencyWithdraw and no job event, the job stays Funded."""
        job, _ = funded(c)
        fn = c.erc8183.functions.emergencyWithdraw(c.usdc.address, cs(TREASURY), BUDGET)
        refused_admin(c, STRANGER, fn)
        c.expect_revert(DEPLOYER, fn, "ExpectedPause()")
        c.send(DEPLOYER, c.erc8183.functions.pause())
        c.expect_revert(
            DEPLOYER,
            c.erc8183.functions.emergencyWithdraw(c.usdc.address, ZERO, BUDGET),
            "ZeroAddress()",
        )
        before = c.balance(cs(TREASURY))
        (ev,) = c.events(c.send(DEPLOYER, fn), c.erc8183)
        assert ev.signature == "EmergencyWithdraw(address,address,uint256)"
        assert ev.args == {"token": c.usdc.address.lower(), "to": cs(TREASURY).lower(),
                           "amount": BUDGET}  # fmt: skip
        assert c.balance(cs(TREASURY)) - before == BUDGET
        assert job_of(c, job)[1] == FUNDED

    def test_hook_blocks_refund_until_detached(self, c: Chain) -> None:
        """A hook reverting beforeAction(claimRefund) blocks it; batchDetachHook unblocks."""
        c.send(DEPLOYER, c.hook.functions.setBlocking(bytes.fromhex("d2fd101b"), True))
        job, expired_at = funded(c, hook=c.hook.address)
        c.expect_revert(STRANGER, refund(job, c), "HookBlocked(bytes4)", at=expired_at)
        receipt = c.send(DEPLOYER, c.erc8183.functions.batchDetachHook([job]))
        assert c.names(receipt, c.erc8183) == ["HookDetached"]
        assert c.names(c.send(STRANGER, refund(job, c)), c.erc8183) == ["Refunded", "JobExpired"]


def indexed_shape(entry: dict[str, Any]) -> str:
    """An ABI event as ``Name(type[ indexed],...)``."""
    params = (i["type"] + (" indexed" if i["indexed"] else "") for i in entry["inputs"])
    return f"{entry['name']}({','.join(params)})"


class TestReferenceInterface:
    def test_events_and_their_indexing(self, c: Chain) -> None:
        """Every event the reference's ERC8183.sol declares (OpenZeppelin's role, upgrade and
        EIP-712 events aside), with the same parameters indexed."""
        declared = {indexed_shape(e) for e in c.erc8183.abi if e["type"] == "event"}
        assert declared == {
            "JobCreated(uint256 indexed,address indexed,address indexed,address,uint48,address)",
            "ProviderSet(uint256 indexed,address indexed,address indexed,uint256)",
            "PayoutReceiverSet(uint256 indexed,address indexed,address indexed)",
            "Disbursed(uint256 indexed,address indexed,bytes4,uint256)",
            "BudgetSet(uint256 indexed,address indexed,address indexed,uint256)",
            "JobFunded(uint256 indexed,address indexed,uint256)",
            "JobSubmitted(uint256 indexed,address indexed,bytes32)",
            "JobCompleted(uint256 indexed,address indexed,bytes32)",
            "JobRejected(uint256 indexed,address indexed,bytes32)",
            "JobExpired(uint256 indexed)",
            "PaymentReleased(uint256 indexed,address indexed,uint256)",
            "PlatformFeePaid(uint256 indexed,address indexed,uint256)",
            "EvaluatorFeePaid(uint256 indexed,address indexed,uint256)",
            "Refunded(uint256 indexed,address indexed,uint256)",
            "Settled(uint256 indexed,uint256,uint256)",
            "ClaimSubmitted(uint256 indexed,address indexed,uint256,uint256,bytes32,bytes)",
            "ClaimSettled(uint256 indexed,address indexed,uint256,uint256,bytes32)",
            "ClaimApproved(uint256 indexed,address indexed,uint256,uint256,bytes32)",
            "ClaimRejected(uint256 indexed,address indexed,bytes32)",
            "HookWhitelistUpdated(address indexed,bool)",
            "PaymentTokenAllowlistUpdated(address indexed,bool)",
            "HookDetached(uint256 indexed,address indexed)",
            "PlatformFeeUpdated(uint256,address indexed)",
            "EvaluatorFeeUpdated(uint256)",
            "EmergencyWithdraw(address indexed,address indexed,uint256)",
            "Paused(address)",
            "Unpaused(address)",
        }

    def test_fee_setters_are_the_admins(self, c: Chain) -> None:
        """setPlatformFee/setEvaluatorFee: the admin's; ZeroAddress for no treasury,
        FeesTooHigh past 100 % together; each emits its event and later payouts follow."""
        refused_admin(c, CLIENT, c.erc8183.functions.setPlatformFee(0, cs(TREASURY)))
        refused_admin(c, CLIENT, c.erc8183.functions.setEvaluatorFee(0))
        c.expect_revert(DEPLOYER, c.erc8183.functions.setPlatformFee(0, ZERO), "ZeroAddress()")
        c.expect_revert(
            DEPLOYER,
            c.erc8183.functions.setPlatformFee(10_001 - EVALUATOR_FEE_BPS, cs(TREASURY)),
            "FeesTooHigh()",
        )
        c.expect_revert(
            DEPLOYER,
            c.erc8183.functions.setEvaluatorFee(10_001 - PLATFORM_FEE_BPS),
            "FeesTooHigh()",
        )
        (ev,) = c.events(
            c.send(DEPLOYER, c.erc8183.functions.setPlatformFee(0, cs(STRANGER))), c.erc8183
        )
        assert (ev.name, ev.args) == (
            "PlatformFeeUpdated", {"feeBP": 0, "treasury": cs(STRANGER).lower()},
        )  # fmt: skip
        (ev,) = c.events(c.send(DEPLOYER, c.erc8183.functions.setEvaluatorFee(0)), c.erc8183)
        assert (ev.name, ev.args) == ("EvaluatorFeeUpdated", {"feeBP": 0})
        assert c.erc8183.functions.platformTreasury().call() == cs(STRANGER)
        job, _ = funded(c)
        c.send(PROVIDER, c.erc8183.functions.submit(job, DELIVERABLE, EMPTY))
        receipt = c.send(EVALUATOR, c.erc8183.functions.complete(job, DELIVERABLE, EMPTY))
        assert c.names(receipt, c.erc8183) == ["PaymentReleased", "JobCompleted"]

    def test_payment_token_allowlist(self, c: Chain) -> None:
        """setBudget takes an allowlisted token only (PaymentTokenNotAllowed after the
        caller check); setPaymentTokenAllowed is the admin's, never address(0), and emits
        PaymentTokenAllowlistUpdated."""
        job, _ = create(c)
        other = c.erc8183.address  # any non-allowed address
        fn = c.erc8183.functions.setBudget
        c.expect_revert(STRANGER, fn(job, other, 1, EMPTY), "Unauthorized()")
        c.expect_revert(PROVIDER, fn(job, other, 1, EMPTY), "PaymentTokenNotAllowed()")
        allow = c.erc8183.functions.setPaymentTokenAllowed
        refused_admin(c, PROVIDER, allow(c.usdc.address, False))
        c.expect_revert(DEPLOYER, allow(ZERO, True), "ZeroAddress()")
        (ev,) = c.events(c.send(DEPLOYER, allow(c.usdc.address, False)), c.erc8183)
        assert ev.signature == "PaymentTokenAllowlistUpdated(address,bool)"
        assert ev.args == {"token": c.usdc.address.lower(), "status": False}
        assert not c.erc8183.functions.allowedPaymentTokens(c.usdc.address).call()
        c.expect_revert(PROVIDER, fn(job, c.usdc.address, 1, EMPTY), "PaymentTokenNotAllowed()")

    def test_zero_budget_funds_without_a_transfer(self, c: Chain) -> None:
        """fund with a zero budget moves no token: JobFunded(0) alone."""
        job, _ = create(c)
        c.send(PROVIDER, c.erc8183.functions.setBudget(job, c.usdc.address, 0, EMPTY))
        receipt = c.send(CLIENT, c.erc8183.functions.fund(job, c.usdc.address, 0, EMPTY))
        assert c.names(receipt, c.erc8183) == ["JobFunded"]
        assert [log["address"] for log in receipt["logs"]] == [c.erc8183.address]


class TestClaims:
    def test_a_claim_is_filed_once(self, c: Chain) -> None:
        """A rejected claim cannot be filed again as it was (ClaimAlreadySubmitted, after the
        pending and amount checks); a changed optParams makes it a new claim."""
        job, _ = funded(c)
        claim = (job, BUDGET // 3, DELIVERABLE, b"\x01")
        c.send(PROVIDER, c.erc8183.functions.submitClaim(*claim))
        h = c.erc8183.functions.pendingClaimHash(job).call()
        assert c.erc8183.functions.submittedClaimHash(job, h).call()
        c.expect_revert(PROVIDER, c.erc8183.functions.submitClaim(*claim), "PendingClaimExists()")
        reject = c.erc8183.functions.rejectClaim(job, BUDGET // 3, DELIVERABLE, b"\x02" * 32,
                                                 b"\x01")  # fmt: skip
        assert c.names(c.send(PROVIDER, reject), c.erc8183) == ["ClaimRejected"]
        c.expect_revert(
            PROVIDER, c.erc8183.functions.submitClaim(*claim), "ClaimAlreadySubmitted()"
        )
        c.expect_revert(
            PROVIDER,
            c.erc8183.functions.submitClaim(job, BUDGET + 1, DELIVERABLE, b"\x01"),
            "ExceedsBudget()",
        )
        again = c.erc8183.functions.submitClaim(job, BUDGET // 3, DELIVERABLE, b"\x03")
        assert c.names(c.send(PROVIDER, again), c.erc8183) == ["ClaimSubmitted"]

    def test_disburser_receiver_hears_of_its_payment(self, c: Chain) -> None:
        """A payout receiver that reports IDisburser gets onDisbursement after the transfer:
        PaymentReleased, then Disbursed(jobId, receiver, the calling function's selector,
        net); a plain receiver gets no Disbursed."""
        job, _ = create(c)
        c.send(PROVIDER, c.erc8183.functions.setPayoutReceiver(job, c.hook.address, EMPTY))
        c.send(PROVIDER, c.erc8183.functions.setBudget(job, c.usdc.address, BUDGET, EMPTY))
        c.fund_account(CLIENT, BUDGET, c.erc8183.address)
        c.send(CLIENT, c.erc8183.functions.fund(job, c.usdc.address, BUDGET, EMPTY))
        part = BUDGET // 2
        settle = c.erc8183.functions.settleClaim(job, part, DELIVERABLE, EMPTY)
        events = c.events(c.send(CLIENT, settle), c.erc8183)
        assert [e.name for e in events] == [
            "PlatformFeePaid", "EvaluatorFeePaid", "PaymentReleased", "Disbursed", "Settled",
            "ClaimSettled",
        ]  # fmt: skip
        net = part - part * (PLATFORM_FEE_BPS + EVALUATOR_FEE_BPS) // 10_000
        assert events[3].args == {
            "jobId": job, "receiver": c.hook.address.lower(),
            "selector": bytes.fromhex(selector("settleClaim(uint256,uint256,bytes32,bytes)")[2:]),
            "amount": net,
        }  # fmt: skip
        assert c.balance(c.hook.address) == net
        # a disburser that reverts makes the payout revert
        blocked = bytes.fromhex(
            selector("onDisbursement(uint256,bytes4,address,uint256,bytes)")[2:]
        )
        c.send(DEPLOYER, c.hook.functions.setBlocking(blocked, True))
        c.send(PROVIDER, c.erc8183.functions.submit(job, DELIVERABLE, EMPTY))
        complete = c.erc8183.functions.complete(job, DELIVERABLE, EMPTY)
        c.expect_revert(EVALUATOR, complete, "HookBlocked(bytes4)")
        c.send(DEPLOYER, c.hook.functions.setBlocking(blocked, False))
        assert c.names(c.send(EVALUATOR, complete), c.erc8183) == [
            "PlatformFeePaid", "EvaluatorFeePaid", "PaymentReleased", "Disbursed", "JobCompleted",
        ]  # fmt: skip


class TestHooks:
    def test_hook_must_be_whitelisted_and_report_the_interface(self, c: Chain) -> None:
        """createJob: HookNotWhitelisted for a hook off the admin's whitelist, InvalidHook for
        a whitelisted address without the ERC-165 hook interface; setHookWhitelist is the
        admin's, never address(0), and emits HookWhitelistUpdated."""
        wl = c.erc8183.functions.setHookWhitelist
        refused_admin(c, CLIENT, wl(c.usdc.address, True))
        c.expect_revert(DEPLOYER, wl(ZERO, True), "ZeroAddress()")
        assert c.erc8183.functions.whitelistedHooks(ZERO).call()
        assert c.erc8183.functions.whitelistedHooks(c.hook.address).call()  # the devnet's

        def make(hook: str) -> Any:
            return c.erc8183.functions.createJob(
                ZERO, cs(EVALUATOR), c.now() + 3600, "d", hook, 0, EMPTY
            )

        c.expect_revert(CLIENT, make(c.usdc.address), "HookNotWhitelisted()")
        (ev,) = c.events(c.send(DEPLOYER, wl(c.usdc.address, True)), c.erc8183)
        assert ev.signature == "HookWhitelistUpdated(address,bool)"
        assert ev.args == {"hook": c.usdc.address.lower(), "status": True}
        c.expect_revert(CLIENT, make(c.usdc.address), "InvalidHook()")
        c.send(DEPLOYER, wl(c.hook.address, False))
        c.expect_revert(CLIENT, make(c.hook.address), "HookNotWhitelisted()")

    def test_hook_is_called_before_and_after_with_the_references_data(self, c: Chain) -> None:
        """createJob calls afterAction only; the other calls beforeAction then afterAction,
        with the calling function's selector and its documented data encoding."""
        expired_at = c.now() + 7200
        fn = c.erc8183.functions.createJob(
            ZERO, cs(EVALUATOR), expired_at, "d", c.hook.address, 9, b"\x05"
        )
        receipt = c.send(CLIENT, fn)
        job = int(c.events(receipt, c.erc8183)[0].args["jobId"])
        created = selector("createJob(address,address,uint48,string,address,uint256,bytes)")
        ((name, sel, data),) = hook_calls(c, receipt)
        assert (name, sel) == ("afterAction", created)
        assert eth_abi.decode(
            ["address", "address", "address", "uint48", "address", "uint256", "bytes"], data
        ) == (cs(CLIENT).lower(), ZERO, cs(EVALUATOR).lower(), expired_at,
              c.hook.address.lower(), 0, b"\x05")  # fmt: skip
        receipt = c.send(CLIENT, c.erc8183.functions.setProvider(job, cs(PROVIDER), 4, b"\x06"))
        calls = hook_calls(c, receipt)
        sel = selector("setProvider(uint256,address,uint256,bytes)")
        assert [(n, s) for n, s, _ in calls] == [("beforeAction", sel), ("afterAction", sel)]
        assert (
            calls[0][2]
            == calls[1][2]
            == eth_abi.encode(
                ["address", "address", "uint256", "bytes"], [cs(CLIENT), cs(PROVIDER), 4, b"\x06"]
            )
        )
        c.send(PROVIDER, c.erc8183.functions.setBudget(job, c.usdc.address, BUDGET, EMPTY))
        c.fund_account(CLIENT, BUDGET, c.erc8183.address)
        c.send(CLIENT, c.erc8183.functions.fund(job, c.usdc.address, BUDGET, EMPTY))
        receipt = c.send(STRANGER, refund(job, c), at=expired_at)
        calls = hook_calls(c, receipt)
        sel = selector("claimRefund(uint256,bytes)")
        assert [(n, s) for n, s, _ in calls] == [("beforeAction", sel), ("afterAction", sel)]
        assert calls[1][2] == eth_abi.encode(["address", "bytes"], [cs(STRANGER), EMPTY])
