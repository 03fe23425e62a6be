"""Multicall3 aggregate3, the EventEmitter's logs (single, raw and bulk) and MockUSDC."""

from __future__ import annotations

from typing import Any

import eth_abi
import pytest
from escrow_harness import (
    CLIENT,
    DEPLOYER,
    EVALUATOR,
    PROVIDER,
    STRANGER,
    USDC,
    Chain,
    selector,
    topic0,
)
from escrow_harness import address_of as cs
from eth_utils import keccak

EMPTY = b""
A = cs(CLIENT)
B = cs(PROVIDER)
T = b"\x11" * 32

# emitter function, its arguments, the PROTOCOLS.md signature it must produce, indexed count
SINGLE: list[tuple[str, tuple[Any, ...], str, int]] = [
    (
        "emitJobCreated",
        (1, A, B, A, 9, B),
        "JobCreated(uint256,address,address,address,uint256,address)",
        3,
    ),
    (
        "emitLegacyJobCreated",
        (1, A, B, A, 9),
        "JobCreated(uint256,address,address,address,uint256)",
        3,
    ),
    ("emitProviderSet", (1, B, 4), "ProviderSet(uint256,address,uint256)", 2),
    ("emitLegacyProviderSet", (1, B), "ProviderSet(uint256,address)", 2),
    ("emitBudgetSet", (1, A, 5), "BudgetSet(uint256,address,uint256)", 2),
    ("emitLegacyBudgetSet", (1, 5), "BudgetSet(uint256,uint256)", 1),
    ("emitJobFunded", (1, A, 5), "JobFunded(uint256,address,uint256)", 2),
    ("emitJobSubmitted", (1, B, T), "JobSubmitted(uint256,address,bytes32)", 2),
    ("emitJobCompleted", (1, A, T), "JobCompleted(uint256,address,bytes32)", 2),
    ("emitJobRejected", (1, A, T), "JobRejected(uint256,address,bytes32)", 2),
    ("emitJobExpired", (1,), "JobExpired(uint256)", 1),
    ("emitPaymentReleased", (1, B, 5), "PaymentReleased(uint256,address,uint256)", 2),
    ("emitPlatformFeePaid", (1, A, 5), "PlatformFeePaid(uint256,address,uint256)", 2),
    ("emitEvaluatorFeePaid", (1, A, 5), "EvaluatorFeePaid(uint256,address,uint256)", 2),
    ("emitRefunded", (1, A, 5), "Refunded(uint256,address,uint256)", 2),
    (
        "emitTaskCreated",
        (T, A, 5, b"mode", 9, True, 250),
        "TaskCreated(bytes32,address,uint256,bytes4,uint256,bool,uint16)",
        3,
    ),
    (
        "emitPre14TaskCreated",
        (T, A, 5, b"mode", 9),
        "TaskCreated(bytes32,address,uint256,bytes4,uint256)",
        3,
    ),
    (
        "emitOlderTaskCreated",
        (T, A, 5, 9, b"mode"),
        "TaskCreated(bytes32,address,uint256,uint256,bytes4)",
        2,
    ),
    (
        "emitTaskAccepted",
        (T, A, B, 5, 1),
        "TaskAccepted(bytes32,address,address,uint256,uint256)",
        3,
    ),
    ("emitTaskClaimed", (T, B, 0), "TaskClaimed(bytes32,address,uint256)", 2),
    ("emitTaskWorkerSelected", (T, B), "TaskWorkerSelected(bytes32,address)", 2),
    ("emitTaskSubmitted", (T, B, T), "TaskSubmitted(bytes32,address,bytes32)", 2),
    ("emitEvaluatorAssigned", (T, A, 3), "EvaluatorAssigned(bytes32,address,uint256)", 2),
    ("emitTaskEvaluated", (T, A, 2, 77), "TaskEvaluated(bytes32,address,uint8,uint16)", 2),
    ("emitTaskAppealed", (T, B), "TaskAppealed(bytes32,address)", 2),
    ("emitTaskDisputed", (T, A), "TaskDisputed(bytes32,address)", 2),
    ("emitEvaluatorTimedOut", (T, A, 3), "EvaluatorTimedOut(bytes32,address,uint256)", 2),
    (
        "emitTaskCompleted",
        (T, A, B, 5, 1),
        "TaskCompleted(bytes32,address,address,uint256,uint256)",
        3,
    ),
    ("emitTaskExpired", (T, A, 5), "TaskExpired(bytes32,address,uint256)", 2),
    ("emitTaskCancelled", (T, A, 5), "TaskCancelled(bytes32,address,uint256)", 2),
    ("emitTaskReopened", (T,), "TaskReopened(bytes32)", 1),
    ("emitMystery", (7, b"\x01\x02"), "Mystery(uint256,bytes)", 1),
]


def raw_logs(c: Chain, receipt: Any) -> list[tuple[list[str], bytes]]:
    return [
        (["0x" + bytes(t).hex() for t in log["topics"]], bytes(log["data"]))
        for log in receipt["logs"]
        if log["address"] == c.emitter.address
    ]


class TestEventEmitter:
    @pytest.mark.parametrize(("fn", "args", "sig", "n_indexed"), SINGLE, ids=[s[0] for s in SINGLE])
    def test_single_event_topic0(
        self, c: Chain, fn: str, args: tuple[Any, ...], sig: str, n_indexed: int
    ) -> None:
        """Each emitter function logs its protocol event: topic0 and topic count match."""
        receipt = c.send(STRANGER, c.emitter.functions[fn](*args))
        ((topics, _),) = raw_logs(c, receipt)
        assert topics[0] == topic0(sig)
        assert len(topics) == 1 + n_indexed

    def test_job_flow_batch(self, c: Chain) -> None:
        """A 3-stage batch of 40 jobs logs 6 events per job with ids and hashes in order."""
        receipt = c.send(
            STRANGER,
            c.emitter.functions.emitJobFlowBatch(100, 40, A, B, cs(EVALUATOR), A, 5 * USDC, 999, 3),
        )
        logs = raw_logs(c, receipt)
        assert len(logs) == 240
        created = [t for t, _ in logs if t[0] == topic0(SINGLE[0][2])]
        assert [int(t[1], 16) for t in created] == list(range(100, 140))
        submitted = [d for t, d in logs if t[0] == topic0("JobSubmitted(uint256,address,bytes32)")]
        assert submitted[0] == keccak(eth_abi.encode(["uint256"], [100]))

    def test_partial_stages_and_legacy_batch(self, c: Chain) -> None:
        """Stage 1 logs created/budget/funded only; the legacy batch uses legacy shapes."""
        r1 = c.send(STRANGER, c.emitter.functions.emitJobFlowBatch(1, 10, A, B, A, A, 1, 9, 1))
        assert len(raw_logs(c, r1)) == 30
        r2 = c.send(STRANGER, c.emitter.functions.emitLegacyJobFlowBatch(1, 10, A, B, A, 1, 9))
        sigs = {t[0] for t, _ in raw_logs(c, r2)}
        assert sigs == {
            topic0("JobCreated(uint256,address,address,address,uint256)"),
            topic0("BudgetSet(uint256,uint256)"),
            topic0("JobFunded(uint256,address,uint256)"),
        }

    def test_task_and_mystery_batches(self, c: Chain) -> None:
        """Task ids of the batch are keccak256(seed, i); Mystery batches count up."""
        r = c.send(STRANGER, c.emitter.functions.emitTaskCreatedBatch(T, 5, A, 1, b"mode", 9))
        ids = [t[1] for t, _ in raw_logs(c, r)]
        assert ids == [
            "0x" + keccak(eth_abi.encode(["bytes32", "uint256"], [T, i])).hex() for i in range(5)
        ]
        r = c.send(STRANGER, c.emitter.functions.emitMysteryBatch(3, 4, b"zz"))
        assert [int(t[1], 16) for t, _ in raw_logs(c, r)] == [3, 4, 5, 6]

    @pytest.mark.parametrize("n_topics", [0, 1, 4])
    def test_raw_log(self, c: Chain, n_topics: int) -> None:
        """emitRaw logs exactly the given topics and data."""
        topics = [bytes([i + 1]) * 32 for i in range(n_topics)]
        receipt = c.send(STRANGER, c.emitter.functions.emitRaw(topics, b"payload"))
        ((got_topics, data),) = raw_logs(c, receipt)
        assert got_topics == ["0x" + t.hex() for t in topics]
        assert data == b"payload"


class TestMulticall:
    def _two_jobs(self, c: Chain) -> tuple[int, int, int]:
        """Two funded jobs, the first expiring sooner; return (first, second, first expiry)."""
        ids = []
        expiries = []
        for expires_in in (100, 10_000):
            expiry = c.now() + expires_in
            r = c.send(
                CLIENT,
                c.commerce.functions.createJob(B, cs(EVALUATOR), expiry, "m", "0x" + "00" * 20, 0),
            )
            job = c.events(r, c.commerce)[0].args["jobId"]
            c.fund_account(CLIENT, 3, c.commerce.address)
            c.send(CLIENT, c.commerce.functions.setBudget(job, c.usdc.address, 3, EMPTY))
            c.send(CLIENT, c.commerce.functions.fund(job, 3, EMPTY))
            ids.append(job)
            expiries.append(expiry)
        return ids[0], ids[1], expiries[0]

    def test_aggregate3_allow_failure(self, c: Chain) -> None:
        """A due and a not-yet-due claimRefund in one aggregate3: one succeeds, one fails."""
        due, early, expiry = self._two_jobs(c)
        calls = [
            (
                c.commerce.address,
                True,
                c.commerce.encode_abi("claimRefund", [j]),
            )
            for j in (due, early)
        ]
        c.control.mine_at(expiry)
        results = c.multicall.functions.aggregate3(calls).call()
        assert results[0] == (True, b"")
        assert results[1] == (False, bytes.fromhex(selector("WrongStatus()")[2:]))
        receipt = c.send(STRANGER, c.multicall.functions.aggregate3(calls))
        assert c.names(receipt, c.commerce) == ["Refunded", "JobExpired"]
        assert c.commerce.functions.getJob(due).call()[7] == 5
        assert c.commerce.functions.getJob(early).call()[7] == 1

    def test_aggregate3_strict_failure_reverts(self, c: Chain) -> None:
        """With allowFailure false, a failing call reverts the whole batch with the revert
        the Multicall3 deployed on real chains gives: Error("Multicall3: call failed")."""
        due, early, expiry = self._two_jobs(c)
        c.control.mine_at(expiry)
        calls = [
            (c.commerce.address, True, c.commerce.encode_abi("claimRefund", [due])),
            (c.commerce.address, False, c.commerce.encode_abi("claimRefund", [early])),
        ]
        receipt = c.expect_revert(
            STRANGER, c.multicall.functions.aggregate3(calls), "Error(string)"
        )
        reason = eth_abi.decode(["string"], bytes.fromhex(c.revert_data(receipt)[10:]))
        assert reason == ("Multicall3: call failed",)
        assert c.commerce.functions.getJob(due).call()[7] == 1  # the allowed call undone too

    def test_block_getters(self, c: Chain) -> None:
        """Block getters report the block the call runs on."""
        latest = c.w3.eth.get_block("latest")
        assert (
            c.multicall.functions.getCurrentBlockTimestamp().call(block_identifier=latest["number"])
            == latest["timestamp"]
        )
        assert c.multicall.functions.getChainId().call() == 31337


class TestMockUsdc:
    def test_six_decimals_and_errors(self, c: Chain) -> None:
        """6 decimals, public mint, and allowance/balance checks revert with custom errors."""
        assert c.usdc.functions.decimals().call() == 6
        c.send(STRANGER, c.usdc.functions.mint(A, 10))
        assert c.balance(A) == 10
        c.expect_revert(DEPLOYER, c.usdc.functions.transferFrom(A, B, 1), "InsufficientAllowance()")
        c.expect_revert(CLIENT, c.usdc.functions.transfer(B, 11), "InsufficientBalance()")
        c.send(CLIENT, c.usdc.functions.transfer(B, 10))
        assert c.balance(B) == 10
