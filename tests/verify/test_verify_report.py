"""Verification reports: canonical, reproducible, and chained across revisions."""

from __future__ import annotations

import json
from dataclasses import replace

from keeper.verify.canonical import canonical_bytes, keccak_hex
from keeper.verify.failures import Failure, FailureCode, Status
from keeper.verify.report import (
    ChainRef,
    Report,
    build_report,
    report_from_bytes,
    same_outcome,
    stored_report,
    validate_history,
)

CHAIN = ChainRef(
    chain_id=31337,
    contract="0x" + "aa" * 20,
    job_id=7,
    event="JobCompleted",
    tx_hash="0x" + "01" * 32,
    block_hash="0x" + "02" * 32,
    block_number=12,
    log_index=3,
    reason="0x" + "03" * 32,
    deliverable="0x" + "04" * 32,
    evaluator="0x" + "05" * 20,
)
UNAVAILABLE = [Failure(FailureCode.UNAVAILABLE, "", "connection refused to some host")]


def _chain_of_three() -> list[Report]:
    first = build_report(CHAIN, Status.UNAVAILABLE, UNAVAILABLE, None)
    second = build_report(CHAIN, Status.VERIFIED, [], "0x" + "03" * 32, parent=first)
    third = build_report(
        CHAIN, Status.VERIFIED, [], "0x" + "03" * 32, parent=second, checks_version="x/2"
    )
    return [first, second, third]


class TestReport:
    def test_names_the_chain_data_and_digests_itself(self) -> None:
        """The body names tx, block and log; the digest is keccak256 of its canonical bytes."""
        report = build_report(CHAIN, Status.UNAVAILABLE, UNAVAILABLE, None)
        chain = report.body["chain"]
        assert isinstance(chain, dict)
        assert (chain["txHash"], chain["blockHash"], chain["logIndex"], chain["jobId"]) == (
            CHAIN.tx_hash,
            CHAIN.block_hash,
            3,
            "7",
        )
        assert report.canonical == canonical_bytes(report.body)
        assert report.digest == keccak_hex(report.canonical)

    def test_failures_carry_code_and_pointer_but_no_prose(self) -> None:
        """Details are left out so that rewording a message never changes a report."""
        worded = [Failure(FailureCode.UNAVAILABLE, "", "another wording entirely")]
        a = build_report(CHAIN, Status.UNAVAILABLE, UNAVAILABLE, None)
        b = build_report(CHAIN, Status.UNAVAILABLE, worded, None)
        assert a.canonical == b.canonical
        assert a.body["failures"] == [{"code": "unavailable", "pointer": ""}]

    def test_round_trip(self) -> None:
        """Reading a report's bytes back gives the same body and digest."""
        report = build_report(CHAIN, Status.VERIFIED, [], "0x" + "03" * 32)
        again = report_from_bytes(report.canonical)
        assert again == report

    def test_same_outcome_ignores_lineage_only(self) -> None:
        """A retry with the same result is the same outcome; a new status or release is not."""
        first, second, third = _chain_of_three()
        repeat = build_report(CHAIN, Status.UNAVAILABLE, UNAVAILABLE, None, parent=first)
        assert same_outcome(first, repeat)
        assert not same_outcome(first, second)
        assert not same_outcome(second, third)


class TestHistory:
    def test_valid_chain(self) -> None:
        """Revisions 0..2 linked by parentDigest validate."""
        chain = _chain_of_three()
        assert [r.revision_count for r in chain] == [0, 1, 2]
        assert chain[1].parent_digest == chain[0].digest and chain[0].parent_digest is None
        assert validate_history(chain) == []

    def test_missing_revision_breaks_the_chain(self) -> None:
        """Dropping a middle revision is detected by count and by parent."""
        first, _, third = _chain_of_three()
        problems = validate_history([first, third])
        assert any("revisionCount" in p for p in problems)
        assert any("parentDigest" in p for p in problems)

    def test_edited_report_is_detected(self) -> None:
        """Changing a stored report's content without its digest fails validation."""
        chain = _chain_of_three()
        body = json.loads(chain[1].canonical)
        body["status"] = "mismatch"
        forged = stored_report(json.dumps(body), chain[1].digest)
        problems = validate_history([chain[0], forged, chain[2]])
        assert problems == ["revision 1: digest does not match its content"]

    def test_other_verdict_in_the_chain(self) -> None:
        """A revision about another job does not belong to this history."""
        first = build_report(CHAIN, Status.UNAVAILABLE, UNAVAILABLE, None)
        second = build_report(replace(CHAIN, job_id=8), Status.VERIFIED, [], None, parent=first)
        assert validate_history([first, second]) == [
            "revision 1: about another verdict than revision 0"
        ]
