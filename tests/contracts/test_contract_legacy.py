"""LegacyAgenticCommerce (older ACP shape): legacy event shapes, a fixed payment token,
no evaluation grace period and no Open -> Expired."""

from __future__ import annotations

from escrow_harness import CLIENT, EVALUATOR, PROVIDER, STRANGER, USDC, Chain, address_of

from keeper.devnet.deploy import EVALUATOR_FEE_BPS, PLATFORM_FEE_BPS

OPEN, FUNDED, SUBMITTED, COMPLETED, REJECTED, EXPIRED = range(6)
BUDGET = 40 * USDC
EMPTY = b""
ZERO = "0x" + "00" * 20


def cs(key: str) -> str:
    return address_of(key)


def create(c: Chain, *, expires_in: int = 7200, with_provider: bool = True) -> tuple[int, int]:
    expired_at = c.now() + expires_in
    provider = cs(PROVIDER) if with_provider else ZERO
    receipt = c.send(
        CLIENT, c.legacy.functions.createJob(provider, cs(EVALUATOR), expired_at, "legacy")
    )
    (ev,) = c.events(receipt, c.legacy)
    return int(ev.args["jobId"]), expired_at


def funded(c: Chain, *, expires_in: int = 7200) -> tuple[int, int]:
    job, expired_at = create(c, expires_in=expires_in)
    c.fund_account(CLIENT, BUDGET, c.legacy.address)
    c.send(CLIENT, c.legacy.functions.setBudget(job, BUDGET, EMPTY))
    c.send(CLIENT, c.legacy.functions.fund(job, BUDGET, EMPTY))
    return job, expired_at


def status(c: Chain, job: int) -> int:
    return int(c.legacy.functions.getJob(job).call()[7])


class TestLegacyShapes:
    def test_events_use_the_legacy_signatures(self, c: Chain) -> None:
        """JobCreated has no hook, ProviderSet no agentId, BudgetSet no token."""
        job, _ = create(c, with_provider=False)
        assert job == 1
        receipt = c.send(CLIENT, c.legacy.functions.setProvider(job, cs(PROVIDER)))
        (provider_set,) = c.events(receipt, c.legacy)
        receipt = c.send(CLIENT, c.legacy.functions.setBudget(job, 3, EMPTY))
        (budget_set,) = c.events(receipt, c.legacy)
        created = c.events(
            c.send(CLIENT, c.legacy.functions.createJob(ZERO, cs(EVALUATOR), c.now() + 9, "x")),
            c.legacy,
        )[0]
        assert created.signature == "JobCreated(uint256,address,address,address,uint256)"
        assert provider_set.signature == "ProviderSet(uint256,address)"
        assert budget_set.signature == "BudgetSet(uint256,uint256)"
        assert budget_set.args == {"jobId": job, "amount": 3}

    def test_payment_token_is_fixed(self, c: Chain) -> None:
        """paymentToken() is the constructor's token and getJob reports it with zero hook."""
        job, _ = create(c)
        assert c.legacy.functions.paymentToken().call() == c.usdc.address
        got = c.legacy.functions.getJob(job).call()
        assert (got[8], got[9], got[10]) == (ZERO, c.usdc.address, 0)


class TestLegacyFlow:
    def test_complete_pays_with_the_fixed_token(self, c: Chain) -> None:
        """Funded -> Submitted -> Completed pays provider and fees in the fixed token."""
        job, _ = funded(c)
        c.send(PROVIDER, c.legacy.functions.submit(job, b"\x01" * 32, EMPTY))
        before = c.balance(cs(PROVIDER))
        receipt = c.send(EVALUATOR, c.legacy.functions.complete(job, b"\x02" * 32, EMPTY))
        fees = BUDGET * (PLATFORM_FEE_BPS + EVALUATOR_FEE_BPS) // 10_000
        assert c.balance(cs(PROVIDER)) - before == BUDGET - fees
        assert c.names(receipt, c.legacy)[0] == "JobCompleted"
        assert status(c, job) == COMPLETED

    def test_submit_needs_funding_even_with_zero_budget(self, c: Chain) -> None:
        """Unlike the current reference, an Open job cannot be submitted."""
        job, _ = create(c)
        c.expect_revert(
            PROVIDER, c.legacy.functions.submit(job, b"\x01" * 32, EMPTY), "InvalidStatus()"
        )

    def test_reject_funded_refunds(self, c: Chain) -> None:
        """Evaluator rejects a funded job and the client gets the escrow back."""
        job, _ = funded(c)
        before = c.balance(cs(CLIENT))
        receipt = c.send(EVALUATOR, c.legacy.functions.reject(job, b"\x03" * 32, EMPTY))
        assert c.names(receipt, c.legacy) == ["JobRejected", "Refunded"]
        assert c.balance(cs(CLIENT)) - before == BUDGET
        assert status(c, job) == REJECTED


class TestLegacyClaimRefund:
    def test_funded_boundary(self, c: Chain) -> None:
        """Funded: reverts one second before expiredAt, refunds at expiredAt."""
        job, expired_at = funded(c, expires_in=300)
        fn = c.legacy.functions.claimRefund(job)
        c.expect_revert(STRANGER, fn, "NotExpired()", at=expired_at - 1)
        receipt = c.send(STRANGER, fn, at=expired_at)
        assert c.names(receipt, c.legacy) == ["JobExpired", "Refunded"]
        assert status(c, job) == EXPIRED

    def test_submitted_has_no_grace_period(self, c: Chain) -> None:
        """A job submitted ten seconds before expiry is refundable right at expiredAt."""
        job, expired_at = funded(c, expires_in=300)
        c.send(PROVIDER, c.legacy.functions.submit(job, b"\x01" * 32, EMPTY), at=expired_at - 10)
        fn = c.legacy.functions.claimRefund(job)
        c.expect_revert(STRANGER, fn, "NotExpired()", at=expired_at - 1)
        before = c.balance(cs(CLIENT))
        c.send(STRANGER, fn, at=expired_at)
        assert c.balance(cs(CLIENT)) - before == BUDGET
        assert status(c, job) == EXPIRED

    def test_open_never_expires(self, c: Chain) -> None:
        """No Open -> Expired: claimRefund on an expired Open job with a budget reverts."""
        funded(c)  # escrow that a buggy refund could drain
        job, expired_at = create(c, expires_in=300)
        c.send(CLIENT, c.legacy.functions.setBudget(job, BUDGET, EMPTY))
        c.expect_revert(
            STRANGER, c.legacy.functions.claimRefund(job), "InvalidStatus()", at=expired_at + 60
        )
        assert status(c, job) == OPEN
        assert c.balance(c.legacy.address) == BUDGET
