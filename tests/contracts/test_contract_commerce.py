"""AgenticCommerce (ERC-8183, current reference shape): every transition, its reverts,
and the exact deadline comparisons of the permissionless claimRefund."""

from __future__ import annotations

import eth_abi
from escrow_harness import (
    CLIENT,
    DEPLOYER,
    EVALUATOR,
    PROVIDER,
    STRANGER,
    USDC,
    Chain,
    address_of,
    selector,
)
from web3 import Web3

from keeper.devnet.deploy import EVALUATOR_FEE_BPS, PLATFORM_FEE_BPS
from keeper.domain.dialects_erc8183 import ERC8183

OPEN, FUNDED, SUBMITTED, COMPLETED, REJECTED, EXPIRED = range(6)
BUDGET = 250 * USDC
GRACE = 3600
NO_HOOK = "0x" + "00" * 20
NOT_A_HOOK = Web3.to_checksum_address("0x" + "ab" * 20)  # an address with no code
ADMIN_ROLE = Web3.keccak(text="ADMIN_ROLE")
EMPTY = b""
# PROTOCOLS.md struct Job, field by field: decoding raw return data with it pins the order
JOB_TUPLE = (
    "(uint256,address,address,address,string,uint256,uint256,uint8,address,address,uint256,uint256)"
)


def encode_uint(value: int) -> str:
    return value.to_bytes(32, "big").hex()


def cs(key: str) -> str:
    return address_of(key)


def create(
    c: Chain, *, expires_in: int = 7200, provider: str | None = PROVIDER, hook: str = NO_HOOK
) -> tuple[int, int]:
    """Create a job from CLIENT; return (job id, expiredAt)."""
    expired_at = c.now() + expires_in
    prov = cs(provider) if provider else NO_HOOK
    receipt = c.send(
        CLIENT,
        c.commerce.functions.createJob(prov, cs(EVALUATOR), expired_at, '{"brief":"x"}', hook, 7),
    )
    (ev,) = c.events(receipt, c.commerce)
    return int(ev.args["jobId"]), expired_at


def funded(c: Chain, *, expires_in: int = 7200, budget: int = BUDGET) -> tuple[int, int]:
    """A job with budget set and escrowed; return (job id, expiredAt)."""
    job, expired_at = create(c, expires_in=expires_in)
    c.fund_account(CLIENT, budget, c.commerce.address)
    c.send(CLIENT, c.commerce.functions.setBudget(job, c.usdc.address, budget, EMPTY))
    c.send(CLIENT, c.commerce.functions.fund(job, budget, EMPTY))
    return job, expired_at


def whitelisted_hook(c: Chain) -> str:
    """The devnet's SwitchableHook (it reports the hook interface), whitelisted by the admin."""
    c.send(DEPLOYER, c.commerce.functions.setHookWhitelist(c.hook.address, True))
    return str(c.hook.address)


def status(c: Chain, job: int) -> int:
    return int(c.commerce.functions.getJob(job).call()[7])


class TestCreate:
    def test_ids_are_sequential_from_one_and_event_carries_hook(self, c: Chain) -> None:
        """Job ids count from 1 and JobCreated reports client, provider, evaluator, hook."""
        first, expired_at = create(c)
        second, _ = create(c)
        assert (first, second) == (1, 2)
        assert c.commerce.functions.jobCounter().call() == 2
        hook = whitelisted_hook(c)
        receipt = c.send(
            CLIENT,
            c.commerce.functions.createJob(cs(PROVIDER), cs(EVALUATOR), c.now() + 99, "d", hook, 0),
        )
        (ev,) = c.events(receipt, c.commerce)
        assert ev.signature == ("JobCreated(uint256,address,address,address,uint256,address)")
        assert ev.args["jobId"] == 3
        assert ev.args["client"] == cs(CLIENT).lower()
        assert ev.args["provider"] == cs(PROVIDER).lower()
        assert ev.args["evaluator"] == cs(EVALUATOR).lower()
        assert ev.args["hook"] == hook.lower()
        assert expired_at > 0

    def test_get_job_returns_the_struct_in_protocol_field_order(self, c: Chain) -> None:
        """getJob returns (id, client, provider, evaluator, description, budget, expiredAt,
        status, hook, paymentToken, providerAgentId, submittedAt)."""
        hook = whitelisted_hook(c)
        job, expired_at = create(c, hook=hook)
        c.send(CLIENT, c.commerce.functions.setBudget(job, c.usdc.address, 5, EMPTY))
        raw = c.w3.eth.call(
            {"to": c.commerce.address, "data": selector("getJob(uint256)") + encode_uint(job)}
        )
        (got,) = eth_abi.decode([JOB_TUPLE], raw)
        assert got == (
            job,
            cs(CLIENT).lower(),
            cs(PROVIDER).lower(),
            cs(EVALUATOR).lower(),
            '{"brief":"x"}',
            5,
            expired_at,
            OPEN,
            hook.lower(),
            c.usdc.address.lower(),
            7,
            0,
        )
        # the reference's public mapping getter answers the same fields
        assert tuple(c.commerce.functions.jobs(job).call()) == tuple(
            c.commerce.functions.getJob(job).call()
        )

    def test_rejects_zero_evaluator_and_past_expiry(self, c: Chain) -> None:
        """createJob needs an evaluator and a deadline in the future (ExpiryTooShort, the
        reference's error; the devnet keeps no five-minute minimum: one second ahead will do)."""
        fn = c.commerce.functions.createJob
        c.expect_revert(
            CLIENT, fn(cs(PROVIDER), NO_HOOK, c.now() + 99, "d", NO_HOOK, 0), "ZeroAddress()"
        )
        now = c.now()
        c.expect_revert(
            CLIENT,
            fn(cs(PROVIDER), cs(EVALUATOR), now + 1, "d", NO_HOOK, 0),
            "ExpiryTooShort()",
            at=now + 1,
        )
        c.send(CLIENT, fn(cs(PROVIDER), cs(EVALUATOR), now + 3, "d", NO_HOOK, 0), at=now + 2)

    def test_provider_cannot_be_evaluator(self, c: Chain) -> None:
        """As in the reference, the evaluator may not be the provider: createJob checks it after
        the evaluator's ZeroAddress and before the expiry, setProvider after its ZeroAddress."""
        fn = c.commerce.functions.createJob
        c.expect_revert(
            CLIENT,
            fn(cs(EVALUATOR), cs(EVALUATOR), c.now() - 1, "d", NO_HOOK, 0),
            "ProviderCannotBeEvaluator()",
        )
        c.expect_revert(
            CLIENT, fn(NO_HOOK, NO_HOOK, c.now() + 99, "d", NO_HOOK, 0), "ZeroAddress()"
        )
        job, _ = create(c, provider=None)  # a zero provider is not the evaluator
        c.expect_revert(
            CLIENT,
            c.commerce.functions.setProvider(job, cs(EVALUATOR), 1),
            "ProviderCannotBeEvaluator()",
        )
        c.expect_revert(CLIENT, c.commerce.functions.setProvider(job, NO_HOOK, 1), "ZeroAddress()")
        c.send(CLIENT, c.commerce.functions.setProvider(job, cs(CLIENT), 1))  # the client may be

    def test_keeper_table_names_every_declared_error(self, c: Chain) -> None:
        """Every error the devnet AgenticCommerce declares is classified by the keeper's table
        (the token library's TransferFailed aside: the reference reverts SafeERC20's)."""
        declared = {
            f"{e['name']}({','.join(i['type'] for i in e['inputs'])})"
            for e in c.commerce.abi
            if e["type"] == "error"
        }
        assert declared - {r.signature for r in ERC8183.errors} == {"TransferFailed()"}

    def test_unknown_job_reverts(self, c: Chain) -> None:
        """Calls on id 0 or an id past jobCounter revert InvalidJob."""
        c.expect_revert(STRANGER, c.commerce.functions.claimRefund(0), "InvalidJob()")
        c.expect_revert(STRANGER, c.commerce.functions.claimRefund(1), "InvalidJob()")


class TestHooks:
    def test_whitelist_is_the_admins(self, c: Chain) -> None:
        """setHookWhitelist: the admin only (the reference's AccessControl error), never the
        zero address; it emits HookWhitelistUpdated. address(0) counts as whitelisted."""
        fn = c.commerce.functions.setHookWhitelist
        receipt = c.expect_revert(
            CLIENT, fn(c.hook.address, True), "AccessControlUnauthorizedAccount(address,bytes32)"
        )
        assert c.revert_data(receipt) == "0x" + (
            selector("AccessControlUnauthorizedAccount(address,bytes32)")[2:]
            + eth_abi.encode(["address", "bytes32"], [cs(CLIENT), ADMIN_ROLE]).hex()
        )
        c.expect_revert(DEPLOYER, fn(NO_HOOK, True), "ZeroAddress()")
        receipt = c.send(DEPLOYER, fn(c.hook.address, True))
        (ev,) = c.events(receipt, c.commerce)
        assert ev.signature == "HookWhitelistUpdated(address,bool)"
        assert ev.args == {"hook": c.hook.address.lower(), "status": True}
        assert c.commerce.functions.whitelistedHooks(c.hook.address).call()
        assert c.commerce.functions.whitelistedHooks(NO_HOOK).call()

    def test_create_job_needs_a_whitelisted_erc165_hook(self, c: Chain) -> None:
        """createJob: a hook not whitelisted reverts HookNotWhitelisted (after ExpiryTooShort),
        a whitelisted address without the hook interface InvalidHook; delisting works."""
        fn = c.commerce.functions.createJob
        now = c.now()
        c.expect_revert(
            CLIENT, fn(cs(PROVIDER), cs(EVALUATOR), now - 1, "d", NOT_A_HOOK, 0), "ExpiryTooShort()"
        )
        args = (cs(PROVIDER), cs(EVALUATOR), now + 999, "d")
        c.expect_revert(CLIENT, fn(*args, NOT_A_HOOK, 0), "HookNotWhitelisted()")
        c.expect_revert(CLIENT, fn(*args, c.hook.address, 0), "HookNotWhitelisted()")
        c.send(DEPLOYER, c.commerce.functions.setHookWhitelist(NOT_A_HOOK, True))
        c.expect_revert(CLIENT, fn(*args, NOT_A_HOOK, 0), "InvalidHook()")
        c.expect_revert(CLIENT, fn(*args, c.usdc.address, 0), "HookNotWhitelisted()")
        c.send(DEPLOYER, c.commerce.functions.setHookWhitelist(c.usdc.address, True))
        c.expect_revert(CLIENT, fn(*args, c.usdc.address, 0), "InvalidHook()")  # a contract
        hook = whitelisted_hook(c)
        c.send(CLIENT, fn(*args, hook, 0))
        c.send(DEPLOYER, c.commerce.functions.setHookWhitelist(hook, False))
        c.expect_revert(CLIENT, fn(*args, hook, 0), "HookNotWhitelisted()")

    def test_hook_gates_lifecycle_calls_but_not_claim_refund(self, c: Chain) -> None:
        """beforeAction runs on setBudget, fund, submit, complete and reject and may block them
        (here: submit); claimRefund calls no hook, so it cannot be blocked."""
        hook = whitelisted_hook(c)
        sw = c.hook.functions.setBlocking
        job, _ = create(c, hook=hook)
        c.fund_account(CLIENT, BUDGET, c.commerce.address)
        c.send(CLIENT, c.commerce.functions.setBudget(job, c.usdc.address, BUDGET, EMPTY))
        c.send(CLIENT, c.commerce.functions.fund(job, BUDGET, EMPTY))
        submit = c.commerce.functions.submit(job, b"\x01" * 32, EMPTY)
        c.send(DEPLOYER, sw(selector("submit(uint256,bytes32,bytes)"), True))
        c.expect_revert(PROVIDER, submit, "HookBlocked(bytes4)")
        c.send(DEPLOYER, sw(selector("submit(uint256,bytes32,bytes)"), False))
        c.send(PROVIDER, submit)
        c.send(DEPLOYER, sw(selector("complete(uint256,bytes32,bytes)"), True))
        c.expect_revert(
            EVALUATOR,
            c.commerce.functions.complete(job, b"\x02" * 32, EMPTY),
            "HookBlocked(bytes4)",
        )
        late, expired_at = create(c, expires_in=100, hook=hook)
        c.send(DEPLOYER, sw(selector("claimRefund(uint256)"), True))
        c.send(STRANGER, c.commerce.functions.claimRefund(late), at=expired_at)
        assert status(c, late) == EXPIRED


class TestSetup:
    def test_set_provider_by_client_once(self, c: Chain) -> None:
        """setProvider is client-only, emits ProviderSet with agentId, and only while unset."""
        job, _ = create(c, provider=None)
        assert c.commerce.functions.getJob(job).call()[10] == 0  # agent id 7 needs a provider
        fn = c.commerce.functions.setProvider(job, cs(PROVIDER), 42)
        c.expect_revert(STRANGER, fn, "Unauthorized()")
        receipt = c.send(CLIENT, fn)
        (ev,) = c.events(receipt, c.commerce)
        assert ev.signature == "ProviderSet(uint256,address,uint256)"
        assert (ev.args["provider"], ev.args["agentId"]) == (cs(PROVIDER).lower(), 42)
        c.expect_revert(CLIENT, fn, "WrongStatus()")  # a provider is set already

    def test_set_budget_by_client_or_provider_with_token(self, c: Chain) -> None:
        """Client and provider may set the budget (token in the event); others may not."""
        job, _ = create(c)
        c.expect_revert(
            STRANGER,
            c.commerce.functions.setBudget(job, c.usdc.address, 1, EMPTY),
            "Unauthorized()",
        )
        c.expect_revert(
            CLIENT, c.commerce.functions.setBudget(job, NO_HOOK, 1, EMPTY), "ZeroAddress()"
        )
        c.send(CLIENT, c.commerce.functions.setBudget(job, c.usdc.address, 1, EMPTY))
        receipt = c.send(PROVIDER, c.commerce.functions.setBudget(job, c.usdc.address, 9, b"x"))
        (ev,) = c.events(receipt, c.commerce)
        assert ev.signature == "BudgetSet(uint256,address,uint256)"
        assert (ev.args["token"], ev.args["amount"]) == (c.usdc.address.lower(), 9)
        assert c.commerce.functions.getJob(job).call()[5] == 9


class TestFund:
    def test_fund_escrows_the_budget(self, c: Chain) -> None:
        """Open -> Funded moves the budget from client to contract and emits JobFunded."""
        job, _ = create(c)
        c.fund_account(CLIENT, BUDGET, c.commerce.address)
        c.send(CLIENT, c.commerce.functions.setBudget(job, c.usdc.address, BUDGET, EMPTY))
        before = c.balance(c.commerce.address)
        receipt = c.send(CLIENT, c.commerce.functions.fund(job, BUDGET, EMPTY))
        assert c.names(receipt, c.commerce) == ["JobFunded"]
        assert c.events(receipt, c.commerce)[0].args["amount"] == BUDGET
        assert c.balance(c.commerce.address) - before == BUDGET
        assert status(c, job) == FUNDED

    def test_fund_guards(self, c: Chain) -> None:
        """fund needs the client, a provider, the expected budget and an open deadline."""
        job, _ = create(c, provider=None)
        c.fund_account(CLIENT, BUDGET, c.commerce.address)
        c.send(CLIENT, c.commerce.functions.setBudget(job, c.usdc.address, BUDGET, EMPTY))
        c.expect_revert(CLIENT, c.commerce.functions.fund(job, BUDGET, EMPTY), "ProviderNotSet()")
        c.send(CLIENT, c.commerce.functions.setProvider(job, cs(PROVIDER), 0))
        c.expect_revert(PROVIDER, c.commerce.functions.fund(job, BUDGET, EMPTY), "Unauthorized()")
        c.expect_revert(
            CLIENT, c.commerce.functions.fund(job, BUDGET - 1, EMPTY), "BudgetMismatch()"
        )
        c.send(CLIENT, c.commerce.functions.fund(job, BUDGET, EMPTY))
        c.expect_revert(CLIENT, c.commerce.functions.fund(job, BUDGET, EMPTY), "WrongStatus()")

    def test_fund_without_a_budget_moves_nothing(self, c: Chain) -> None:
        """As in the reference, a job whose budget (and so token) was never set funds: nothing
        moves, JobFunded reports 0; completing it pays nothing and still emits PaymentReleased
        with 0 (no fee events)."""
        job, _ = create(c)
        before = c.balance(c.commerce.address)
        receipt = c.send(CLIENT, c.commerce.functions.fund(job, 0, EMPTY))
        (ev,) = c.events(receipt, c.commerce)
        assert (ev.name, ev.args["amount"]) == ("JobFunded", 0)
        assert c.balance(c.commerce.address) == before
        assert status(c, job) == FUNDED
        c.send(PROVIDER, c.commerce.functions.submit(job, b"\x03" * 32, EMPTY))
        receipt = c.send(EVALUATOR, c.commerce.functions.complete(job, b"\x04" * 32, EMPTY))
        evs = c.events(receipt, c.commerce)
        assert [e.name for e in evs] == ["JobCompleted", "PaymentReleased"]
        assert evs[1].args == {"jobId": job, "provider": cs(PROVIDER).lower(), "amount": 0}
        assert status(c, job) == COMPLETED

    def test_fund_deadline_is_strictly_before_expiry(self, c: Chain) -> None:
        """fund at expiredAt reverts; at expiredAt - 1 it succeeds."""
        job, expired_at = create(c, expires_in=100)
        other, other_expiry = create(c, expires_in=100)
        c.fund_account(CLIENT, 2 * BUDGET, c.commerce.address)
        for j in (job, other):
            c.send(CLIENT, c.commerce.functions.setBudget(j, c.usdc.address, BUDGET, EMPTY))
        c.send(CLIENT, c.commerce.functions.fund(job, BUDGET, EMPTY), at=expired_at - 1)
        assert status(c, job) == FUNDED
        c.expect_revert(
            CLIENT,
            c.commerce.functions.fund(other, BUDGET, EMPTY),
            "WrongStatus()",
            at=other_expiry,
        )


class TestSubmit:
    def test_submit_records_block_time(self, c: Chain) -> None:
        """Funded -> Submitted by the provider; submittedAt is the block's timestamp."""
        job, _ = funded(c)
        c.expect_revert(
            STRANGER, c.commerce.functions.submit(job, b"\x01" * 32, EMPTY), "Unauthorized()"
        )
        at = c.now() + 17
        receipt = c.send(PROVIDER, c.commerce.functions.submit(job, b"\x01" * 32, EMPTY), at=at)
        (ev,) = c.events(receipt, c.commerce)
        assert ev.name == "JobSubmitted"
        assert ev.args["deliverable"] == b"\x01" * 32
        got = c.commerce.functions.getJob(job).call()
        assert (got[7], got[11]) == (SUBMITTED, at)

    def test_open_submit_only_with_zero_budget(self, c: Chain) -> None:
        """An Open job may be submitted only while its budget is zero."""
        free, _ = create(c)
        c.send(PROVIDER, c.commerce.functions.submit(free, b"\x02" * 32, EMPTY))
        assert status(c, free) == SUBMITTED
        priced, _ = create(c)
        c.send(CLIENT, c.commerce.functions.setBudget(priced, c.usdc.address, 1, EMPTY))
        c.expect_revert(
            PROVIDER, c.commerce.functions.submit(priced, b"\x02" * 32, EMPTY), "WrongStatus()"
        )

    def test_submit_has_no_deadline(self, c: Chain) -> None:
        """As in the reference, submit at or after expiredAt succeeds (no deadline on submit);
        a late submission still holds claimRefund back for the grace period from submittedAt."""
        job, expired_at = funded(c, expires_in=100)
        late = expired_at + 50
        c.send(PROVIDER, c.commerce.functions.submit(job, b"\x02" * 32, EMPTY), at=late)
        got = c.commerce.functions.getJob(job).call()
        assert (got[7], got[11]) == (SUBMITTED, late)
        fn = c.commerce.functions.claimRefund(job)
        c.expect_revert(STRANGER, fn, "GracePeriodActive()", at=late + GRACE - 1)
        c.send(STRANGER, fn, at=late + GRACE)
        assert status(c, job) == EXPIRED


class TestComplete:
    def test_complete_pays_provider_minus_fees(self, c: Chain) -> None:
        """complete splits the budget: platform fee to treasury, evaluator fee, rest to provider."""
        job, _ = funded(c)
        c.send(PROVIDER, c.commerce.functions.submit(job, b"\x03" * 32, EMPTY))
        c.expect_revert(
            CLIENT, c.commerce.functions.complete(job, b"\x04" * 32, EMPTY), "Unauthorized()"
        )
        treasury = c.d.treasury
        before = {a: c.balance(a) for a in (cs(PROVIDER), cs(EVALUATOR), treasury)}
        receipt = c.send(EVALUATOR, c.commerce.functions.complete(job, b"\x04" * 32, EMPTY))
        platform = BUDGET * PLATFORM_FEE_BPS // 10_000
        evaluator = BUDGET * EVALUATOR_FEE_BPS // 10_000
        assert c.balance(cs(PROVIDER)) - before[cs(PROVIDER)] == BUDGET - platform - evaluator
        assert c.balance(cs(EVALUATOR)) - before[cs(EVALUATOR)] == evaluator
        assert c.balance(treasury) - before[treasury] == platform
        evs = c.events(receipt, c.commerce)
        # the reference's order: fees, then JobCompleted, then the provider's payment
        assert [e.name for e in evs] == [
            "PlatformFeePaid",
            "EvaluatorFeePaid",
            "JobCompleted",
            "PaymentReleased",
        ]
        assert evs[2].args["reason"] == b"\x04" * 32
        assert [e.args.get("amount") for e in evs] == [
            platform,
            evaluator,
            None,
            BUDGET - platform - evaluator,
        ]
        assert status(c, job) == COMPLETED

    def test_fees_are_the_admins_to_change(self, c: Chain) -> None:
        """setPlatformFee / setEvaluatorFee: admin only, FeesTooHigh past 10,000 bps together,
        ZeroAddress for the treasury; they emit PlatformFeeSet / EvaluatorFeeSet and the next
        complete pays the new fees to the new treasury."""
        fns = c.commerce.functions
        assert (fns.platformFeeBP().call(), fns.evaluatorFeeBP().call()) == (
            PLATFORM_FEE_BPS,
            EVALUATOR_FEE_BPS,
        )
        assert fns.platformTreasury().call().lower() == c.d.treasury.lower()
        treasury = cs(STRANGER)
        denied = "AccessControlUnauthorizedAccount(address,bytes32)"
        c.expect_revert(CLIENT, fns.setPlatformFee(100, treasury), denied)
        c.expect_revert(CLIENT, fns.setEvaluatorFee(100), denied)
        c.expect_revert(DEPLOYER, fns.setPlatformFee(100, NO_HOOK), "ZeroAddress()")
        c.expect_revert(
            DEPLOYER, fns.setPlatformFee(10_001 - EVALUATOR_FEE_BPS, treasury), "FeesTooHigh()"
        )
        receipt = c.send(DEPLOYER, fns.setPlatformFee(300, treasury))
        (ev,) = c.events(receipt, c.commerce)
        assert (ev.name, ev.args) == (
            "PlatformFeeSet",
            {"feeBP": 300, "treasury": treasury.lower()},
        )
        c.expect_revert(DEPLOYER, fns.setEvaluatorFee(9_701), "FeesTooHigh()")
        receipt = c.send(DEPLOYER, fns.setEvaluatorFee(200))
        (ev,) = c.events(receipt, c.commerce)
        assert (ev.name, ev.args) == ("EvaluatorFeeSet", {"feeBP": 200})
        job, _ = funded(c)
        c.send(PROVIDER, fns.submit(job, b"\x03" * 32, EMPTY))
        before = c.balance(treasury)
        receipt = c.send(EVALUATOR, fns.complete(job, b"\x04" * 32, EMPTY))
        evs = c.events(receipt, c.commerce)
        assert evs[0].args == {
            "jobId": job,
            "treasury": treasury.lower(),
            "amount": BUDGET * 3 // 100,
        }
        assert evs[1].args["amount"] == BUDGET * 2 // 100
        assert c.balance(treasury) - before == BUDGET * 3 // 100

    def test_complete_needs_submitted(self, c: Chain) -> None:
        """A Funded job cannot be completed; as in the reference the status is checked before
        the caller, so a stranger is told WrongStatus too."""
        job, _ = funded(c)
        for who in (EVALUATOR, STRANGER):
            c.expect_revert(
                who, c.commerce.functions.complete(job, b"\x04" * 32, EMPTY), "WrongStatus()"
            )


class TestReject:
    def test_client_rejects_open_without_refund(self, c: Chain) -> None:
        """Open -> Rejected by the client, no Refunded since nothing was escrowed."""
        job, _ = create(c)
        c.send(CLIENT, c.commerce.functions.setBudget(job, c.usdc.address, BUDGET, EMPTY))
        c.expect_revert(
            EVALUATOR, c.commerce.functions.reject(job, b"\x05" * 32, EMPTY), "Unauthorized()"
        )
        receipt = c.send(CLIENT, c.commerce.functions.reject(job, b"\x05" * 32, EMPTY))
        assert c.names(receipt, c.commerce) == ["JobRejected"]
        assert status(c, job) == REJECTED

    def test_evaluator_rejects_funded_and_submitted_with_refund(self, c: Chain) -> None:
        """Funded/Submitted -> Rejected by the evaluator refunds the client."""
        a, _ = funded(c)
        b, _ = funded(c)
        c.send(PROVIDER, c.commerce.functions.submit(b, b"\x06" * 32, EMPTY))
        c.expect_revert(
            CLIENT, c.commerce.functions.reject(a, b"\x05" * 32, EMPTY), "Unauthorized()"
        )
        for job in (a, b):
            before = c.balance(cs(CLIENT))
            receipt = c.send(EVALUATOR, c.commerce.functions.reject(job, b"\x05" * 32, EMPTY))
            evs = c.events(receipt, c.commerce)
            assert [e.name for e in evs] == ["Refunded", "JobRejected"]
            assert evs[1].args["rejector"] == cs(EVALUATOR).lower()
            assert c.balance(cs(CLIENT)) - before == BUDGET
            assert status(c, job) == REJECTED
        c.expect_revert(
            EVALUATOR, c.commerce.functions.reject(a, b"\x05" * 32, EMPTY), "WrongStatus()"
        )


class TestClaimRefund:
    def test_funded_boundary_at_expired_at(self, c: Chain) -> None:
        """Funded: one second before expiredAt reverts WrongStatus; at expiredAt anyone refunds."""
        job, expired_at = funded(c, expires_in=500)
        fn = c.commerce.functions.claimRefund(job)
        c.expect_revert(STRANGER, fn, "WrongStatus()", at=expired_at - 1)
        before = c.balance(cs(CLIENT))
        receipt = c.send(STRANGER, fn, at=expired_at)
        evs = c.events(receipt, c.commerce)
        assert [e.name for e in evs] == ["Refunded", "JobExpired"]
        assert evs[0].args == {"jobId": job, "client": cs(CLIENT).lower(), "amount": BUDGET}
        assert c.balance(cs(CLIENT)) - before == BUDGET
        assert status(c, job) == EXPIRED
        c.expect_revert(STRANGER, fn, "WrongStatus()")

    def test_submitted_late_waits_for_grace_period(self, c: Chain) -> None:
        """Submitted near expiry: refundable at submittedAt + 1 hour, GracePeriodActive before."""
        job, expired_at = funded(c, expires_in=500)
        submitted_at = expired_at - 10
        c.send(PROVIDER, c.commerce.functions.submit(job, b"\x07" * 32, EMPTY), at=submitted_at)
        fn = c.commerce.functions.claimRefund(job)
        c.expect_revert(STRANGER, fn, "WrongStatus()", at=expired_at - 1)
        c.expect_revert(STRANGER, fn, "GracePeriodActive()", at=expired_at)
        c.expect_revert(STRANGER, fn, "GracePeriodActive()", at=submitted_at + GRACE - 1)
        receipt = c.send(STRANGER, fn, at=submitted_at + GRACE)
        assert c.names(receipt, c.commerce) == ["Refunded", "JobExpired"]
        assert status(c, job) == EXPIRED

    def test_submitted_early_refundable_at_expiry(self, c: Chain) -> None:
        """Submitted more than an hour before expiry: refundable exactly at expiredAt."""
        job, expired_at = funded(c, expires_in=3 * GRACE)
        c.send(PROVIDER, c.commerce.functions.submit(job, b"\x07" * 32, EMPTY))
        fn = c.commerce.functions.claimRefund(job)
        c.expect_revert(STRANGER, fn, "WrongStatus()", at=expired_at - 1)
        c.send(STRANGER, fn, at=expired_at)
        assert status(c, job) == EXPIRED

    def test_open_with_budget_pays_out_other_escrow(self, c: Chain) -> None:
        """Hazard reproduced: an expired unfunded Open job with a budget pays that budget to
        its client out of another job's escrow."""
        victim, _ = funded(c, expires_in=10 * GRACE)
        job, expired_at = create(c, expires_in=500)
        c.send(CLIENT, c.commerce.functions.setBudget(job, c.usdc.address, BUDGET // 2, EMPTY))
        fn = c.commerce.functions.claimRefund(job)
        c.expect_revert(STRANGER, fn, "WrongStatus()", at=expired_at - 1)
        escrow, client = c.balance(c.commerce.address), c.balance(cs(CLIENT))
        receipt = c.send(STRANGER, fn, at=expired_at)
        assert c.names(receipt, c.commerce) == ["Refunded", "JobExpired"]
        assert c.balance(cs(CLIENT)) - client == BUDGET // 2
        assert escrow - c.balance(c.commerce.address) == BUDGET // 2
        assert c.balance(c.commerce.address) < BUDGET  # the victim's escrow is short now
        assert status(c, victim) == FUNDED

    def test_open_without_budget_expires_without_refund(self, c: Chain) -> None:
        """An expired Open job with zero budget becomes Expired and emits no Refunded."""
        job, expired_at = create(c, expires_in=500)
        receipt = c.send(STRANGER, c.commerce.functions.claimRefund(job), at=expired_at)
        assert c.names(receipt, c.commerce) == ["JobExpired"]
        assert status(c, job) == EXPIRED

    def test_terminal_states_cannot_be_refunded(self, c: Chain) -> None:
        """Completed and Rejected jobs revert WrongStatus even long after expiry."""
        done, expired_at = funded(c, expires_in=500)
        c.send(PROVIDER, c.commerce.functions.submit(done, b"\x08" * 32, EMPTY))
        c.send(EVALUATOR, c.commerce.functions.complete(done, b"\x09" * 32, EMPTY))
        gone, _ = create(c, expires_in=500)
        c.send(CLIENT, c.commerce.functions.reject(gone, b"\x09" * 32, EMPTY))
        c.expect_revert(
            STRANGER,
            c.commerce.functions.claimRefund(done),
            "WrongStatus()",
            at=expired_at + 2 * GRACE,
        )
        c.expect_revert(STRANGER, c.commerce.functions.claimRefund(gone), "WrongStatus()")
