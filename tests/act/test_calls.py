"""Calldata, revert classification and receipt reading, without a node."""

from __future__ import annotations

import pytest
from eth_abi.abi import encode
from eth_utils.crypto import keccak

from keeper.act.calls import (
    classify_revert,
    decode_revert,
    subject_topic,
    subject_word,
)
from keeper.act.receipts import landed, moved_subject
from keeper.domain.dialects import Dialect
from keeper.domain.dialects_erc8183 import AGENTIC_COMMERCE, LEGACY_ACP
from keeper.domain.dialects_taskmarket import TASKMARKET_CURRENT, TASKMARKET_PRE7
from keeper.domain.model import Protocol
from keeper.domain.planner import Action, ActionKind

C = "0x" + "12" * 20
TASK = "0x" + "ab" * 32


def err(signature: str, *args: object, types: tuple[str, ...] = ()) -> bytes:
    return keccak(text=signature)[:4] + (encode(list(types), list(args)) if types else b"")


class TestEncoding:
    """Each action encodes by its contract's dialect: selector, subject word, constants."""

    @pytest.mark.parametrize(
        ("dialect", "kind", "subject", "signature", "tail"),
        [
            (AGENTIC_COMMERCE, ActionKind.CLAIM_REFUND, "7", "claimRefund(uint256)", b""),
            (LEGACY_ACP, ActionKind.CLAIM_REFUND, "7", "claimRefund(uint256)", b""),
            (
                TASKMARKET_CURRENT,
                ActionKind.REFUND_EXPIRED,
                TASK,
                "refundExpired(bytes32,uint256)",
                bytes(32),  # requesterAgentId = 0
            ),
            (TASKMARKET_PRE7, ActionKind.REFUND_EXPIRED, TASK, "refundExpired(bytes32)", b""),
            (
                TASKMARKET_CURRENT,
                ActionKind.FINALIZE_VERDICT,
                TASK,
                "finalizeVerdict(bytes32)",
                b"",
            ),
            (TASKMARKET_PRE7, ActionKind.EVALUATOR_TIMEOUT, TASK, "evaluatorTimeout(bytes32)", b""),
        ],
    )
    def test_action_calldata(
        self, dialect: Dialect, kind: ActionKind, subject: str, signature: str, tail: bytes
    ) -> None:
        """Selector from the signature, then the 32-byte subject, then the constants."""
        data = dialect.encode(Action(C, subject, kind, 0, dialect.protocol))
        assert data == keccak(text=signature)[:4] + subject_word(subject) + tail

    def test_dialect_without_the_call(self) -> None:
        """A dialect has no call for another protocol's action: encoding it is refused."""
        with pytest.raises(KeyError, match="no claimRefund call"):
            TASKMARKET_CURRENT.encode(
                Action(C, TASK, ActionKind.CLAIM_REFUND, 0, Protocol.TASKMARKET)
            )

    def test_subject_topic_matches_event_topic(self) -> None:
        """Job ids become left-padded words, task ids stay as they are."""
        assert subject_topic("255") == "0x" + "00" * 31 + "ff"
        assert subject_topic(TASK) == TASK
        with pytest.raises(ValueError):
            subject_topic("0x1234")


class TestRevertClassification:
    """Reverts are classified by 4-byte selector, never by message text."""

    @pytest.mark.parametrize(
        ("data", "verdict", "reason"),
        [
            (err("WrongStatus()"), "preempted", "WrongStatus()"),
            (err("InvalidStatus()"), "preempted", "InvalidStatus()"),  # the devnet's old name
            (err("Unauthorized()"), "not_permitted", "Unauthorized()"),
            (err("NotExpired()"), "reverted_in_simulation", "NotExpired() (not_yet_due)"),
            (err("InvalidJob()"), "reverted_in_simulation", "InvalidJob() (other)"),
            (err("JobNotFound()"), "reverted_in_simulation", "JobNotFound() (other)"),
            (
                err("GracePeriodActive()"),
                "reverted_in_simulation",
                "GracePeriodActive() (not_yet_due)",
            ),
            (
                err("AppealWindowActive()"),
                "reverted_in_simulation",
                "AppealWindowActive() (not_yet_due)",
            ),
            (
                err("Error(string)", "not allowed", types=("string",)),
                "reverted_in_simulation",
                "Error('not allowed')",
            ),
            (
                err("Panic(uint256)", 0x11, types=("uint256",)),
                "reverted_in_simulation",
                "Panic(0x11)",
            ),
            (b"", "reverted_in_simulation", "reverted without data"),
            (None, "reverted_in_simulation", "reverted without data"),
            (b"\xde\xad\xbe\xef", "reverted_in_simulation", "unknown error 0xdeadbeef"),
        ],
    )
    def test_table(self, data: bytes | None, verdict: str, reason: str) -> None:
        """Known custom errors map to outcomes; strings and panics are decoded for the record."""
        assert classify_revert(data) == (verdict, reason)

    def test_message_text_does_not_decide(self) -> None:
        """An Error(string) that merely says "Unauthorized" is not a permission revert."""
        data = err("Error(string)", "Unauthorized()", types=("string",))
        assert classify_revert(data)[0] == "reverted_in_simulation"

    def test_long_error_string_is_clipped(self) -> None:
        """A contract's 10,000-character revert string comes back as 200 characters of its
        repr, marked clipped, so a hostile revert cannot flood a log line."""
        reason = decode_revert(err("Error(string)", "r" * 10_000, types=("string",)))
        assert reason == "Error('" + "r" * 196 + "...)"
        assert decode_revert(err("Error(string)", "r" * 198, types=("string",))) == (
            "Error('" + "r" * 198 + "')"
        )

    def test_malformed_error_string(self) -> None:
        """A truncated Error(string) payload falls back to the raw selector."""
        assert decode_revert(err("Error(string)") + b"\x00" * 5).startswith(
            "unknown error 0x08c379a0"
        )


class TestReceipts:
    """Receipt helpers normalise hex and find the subjects a batch actually moved."""

    def test_landed_reads_hex(self) -> None:
        """Block number, hash and status come out as ints and lowercase hex."""
        where = landed({"blockNumber": "0x1f", "blockHash": "0xABCD", "status": "0x0"})
        assert where.as_tuple() == (31, "0xabcd", 0)

    def test_moved_subject_needs_contract_and_first_topic(self) -> None:
        """Only a log of the same contract with the subject as first indexed arg counts."""
        receipt = {
            "logs": [
                {
                    "address": C.upper().replace("0X", "0x"),
                    "topics": ["0x" + "99" * 32, subject_topic("5")],
                },
                {"address": "0x" + "77" * 20, "topics": ["0x" + "99" * 32, subject_topic("6")]},
            ]
        }
        assert moved_subject(receipt, C, "5")
        assert not moved_subject(receipt, C, "6")
        assert not moved_subject(receipt, C, "7")
        assert not moved_subject({"logs": []}, C, "5")

    def test_a_log_with_no_indexed_argument_is_passed_over(self) -> None:
        """The contract's own Paused(address) has topic0 alone: no subject, and no
        IndexError reading one, before or after the subject's own log."""
        paused = {"address": C, "topics": ["0x" + "62" * 32]}
        moved = {"address": C, "topics": ["0x" + "99" * 32, subject_topic("5")]}
        assert moved_subject({"logs": [paused, moved]}, C, "5")
        assert not moved_subject({"logs": [paused]}, C, "5")
        assert not moved_subject({"logs": [{"address": C, "topics": []}]}, C, "5")
