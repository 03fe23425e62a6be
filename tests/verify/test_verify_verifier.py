"""Verifying verdicts end to end against a real local evaluator service and a real SQLite file."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from evaluator_server import EvaluatorServer, Route
from support.retrying import verify_with_retries
from support.verifications import delete_above_block, list_verifications
from verify_helpers import BAD_PIVA, COMPLETE, DESCRIPTION, TOO_FEW, body, facts, verdict

from keeper.store import verifications as store
from keeper.store.db import connect
from keeper.store.migrations import migrate
from keeper.verify.canonical import keccak_hex
from keeper.verify.checks import CheckConfig, VerdictFacts
from keeper.verify.failures import Status
from keeper.verify.report import ChainRef, Report, stored_report, validate_history
from keeper.verify.sources import ContentSource, DirectorySource, HttpSource
from keeper.verify.verdict import (
    Outcome,
    RetryPolicy,
    Verdict,
    Verifier,
    next_retry_at,
    verify_verdict,
)
from keeper.verify.verifier import record_verification, verify_and_record

CONTRACT = "0x" + "c0" * 20
CHAIN_ID = 31337


def _verdict(chain_facts: VerdictFacts, block: int = 5) -> Verdict:
    ref = ChainRef(
        chain_id=CHAIN_ID,
        contract=CONTRACT,
        job_id=chain_facts.job_id,
        event=chain_facts.event_name,
        tx_hash="0x" + f"{block:064x}",
        block_hash="0x" + f"{block + 1000:064x}",
        block_number=block,
        log_index=0,
        reason=chain_facts.reason,
        deliverable=chain_facts.deliverable,
        evaluator=chain_facts.evaluator,
    )
    return Verdict(ref, chain_facts)


def _verifier(server: EvaluatorServer, **kw: Any) -> Verifier:
    return Verifier(
        sources=[HttpSource(server.base + "/v1/jobs/{jobId}", "/verdict", timeout=5)],
        content_sources=[ContentSource(server.base + "/v1/content/{hash}", timeout=5)],
        **kw,
    )


def _publish(server: EvaluatorServer, doc: dict[str, Any], content: bytes) -> None:
    """Serve the job with its verdict (as the evaluator's GET /v1/jobs/:id) and the content."""
    job = {"id": doc["jobId"], "status": "done", "verdict": doc}
    server.serve(f"/v1/jobs/{doc['jobId']}", json.dumps(job, indent=1).encode())
    server.serve(f"/v1/content/{keccak_hex(content)}", content)


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    db = connect(tmp_path / "keeper.db")
    migrate(db)
    yield db
    db.close()


class TestVerifyVerdict:
    async def test_valid_schemaeval_verdict(self, evaluator: EvaluatorServer) -> None:
        """A published verdict with its content verifies, and the report names the document."""
        doc = verdict(7, TOO_FEW, "reject", ["/fornitori: Array has too few items (1 < 3)"])
        _publish(evaluator, doc, TOO_FEW)
        outcome = await verify_verdict(_verdict(facts(doc, TOO_FEW)), _verifier(evaluator))
        assert outcome.status is Status.VERIFIED, outcome.failures
        assert outcome.document_digest == facts(doc, TOO_FEW).reason
        assert outcome.report.body["documentDigest"] == outcome.document_digest

    @pytest.mark.parametrize(
        ("served", "status"),
        [
            (lambda raw: raw.replace(b'"7"', b'"8"', 1), Status.MISMATCH),
            (lambda raw: raw.replace(b"Array", b"array"), Status.MISMATCH),
            (
                lambda raw: json.dumps(dict(reversed(json.loads(raw).items()))).encode(),
                Status.VERIFIED,
            ),
            (lambda raw: json.dumps(json.loads(raw), indent=8).encode(), Status.VERIFIED),
            (lambda raw: raw.replace(b'"version":1', b'"version":1.0'), Status.VERIFIED),
            (lambda raw: raw.replace(b'"version":1', b'"version":1e0'), Status.VERIFIED),
            (lambda raw: raw.replace(b'"version":1', b'"version":1.5'), Status.MISMATCH),
        ],
        ids=[
            "one-byte",
            "one-letter",
            "key-order",
            "whitespace",
            "float-1.0",
            "float-1e0",
            "float-1.5",
        ],
    )
    async def test_served_variants(
        self, evaluator: EvaluatorServer, served: Any, status: Status
    ) -> None:
        """Changed content is a mismatch; key order, whitespace and number spelling are not."""
        doc = verdict(7, TOO_FEW, "reject", ["/fornitori: Array has too few items (1 < 3)"])
        raw: bytes = served(body(doc))
        assert raw != body(doc)
        evaluator.serve("/v1/jobs/7", raw)
        evaluator.serve(f"/v1/content/{keccak_hex(TOO_FEW)}", TOO_FEW)
        verifier = Verifier(
            [HttpSource(evaluator.base + "/v1/jobs/{jobId}")],
            [ContentSource(evaluator.base + "/v1/content/{hash}")],
        )
        outcome = await verify_verdict(_verdict(facts(doc, TOO_FEW)), verifier)
        assert outcome.status is status, outcome.failures
        if status is Status.MISMATCH:
            assert outcome.report.body["failures"] == [
                {"code": "verdict_hash_mismatch", "pointer": "/reason"}
            ]

    async def test_esito_contradicting_schema(self, evaluator: EvaluatorServer) -> None:
        """Completing a deliverable that fails the schema is evaluator_disagrees."""
        doc = verdict(7, BAD_PIVA, "complete")
        _publish(evaluator, doc, BAD_PIVA)
        outcome = await verify_verdict(_verdict(facts(doc, BAD_PIVA)), _verifier(evaluator))
        assert outcome.status is Status.EVALUATOR_DISAGREES

    async def test_served_content_not_matching_the_chain(self, evaluator: EvaluatorServer) -> None:
        """Content not hashing to the on-chain deliverable is caught: complete disagrees."""
        doc = verdict(7, COMPLETE, "complete")
        _publish(evaluator, doc, COMPLETE)
        evaluator.serve(
            f"/v1/content/{keccak_hex(COMPLETE)}", COMPLETE.replace(b"Rossi", b"Bianchi")
        )
        outcome = await verify_verdict(_verdict(facts(doc, COMPLETE)), _verifier(evaluator))
        assert outcome.status is Status.EVALUATOR_DISAGREES
        assert "hash" in outcome.failures[0].detail

    async def test_good_source_wins_over_tampered_one(
        self, evaluator: EvaluatorServer, tmp_path: Path
    ) -> None:
        """A tampered document at the first source does not hide the genuine one at the second."""
        doc = verdict(7, COMPLETE, "complete")
        chain = facts(doc, COMPLETE)
        _publish(evaluator, {**doc, "motivi": ["edited"]}, COMPLETE)
        (tmp_path / f"{chain.reason}.json").write_bytes(body(doc))
        both = _verifier(evaluator)
        both = Verifier([*both.sources, DirectorySource(tmp_path)], both.content_sources)
        outcome = await verify_verdict(_verdict(chain), both)
        assert outcome.status is Status.VERIFIED and outcome.source == f"directory:{tmp_path.name}"
        alone = await verify_verdict(_verdict(chain), _verifier(evaluator))
        assert alone.status is Status.MISMATCH

    @pytest.mark.parametrize(
        "glitch",
        [b"<html>502 Bad Gateway</html>", b'{"verdict":{"jobId":"7"}}', b'{"verdict":null}x'],
        ids=["error-page", "other-document", "not-json"],
    )
    async def test_a_wrong_answer_once_is_asked_again(
        self, evaluator: EvaluatorServer, glitch: bytes
    ) -> None:
        """One wrong answer and then the genuine document: verified, not tampered for good."""
        doc = verdict(7, COMPLETE, "complete")
        _publish(evaluator, doc, COMPLETE)
        evaluator.routes["/v1/jobs/7"].first.append(glitch)
        outcome = await verify_verdict(_verdict(facts(doc, COMPLETE)), _verifier(evaluator))
        assert outcome.status is Status.VERIFIED, outcome.failures
        assert evaluator.requests.count("/v1/jobs/7") == 2

    async def test_content_garbled_once_is_asked_again(self, evaluator: EvaluatorServer) -> None:
        """Deliverable bytes not of the on-chain hash once, then the right ones: the re-run
        judges the right ones (judged as is, the garbled bytes made it disagree)."""
        doc = verdict(7, COMPLETE, "complete")
        _publish(evaluator, doc, COMPLETE)
        path = f"/v1/content/{keccak_hex(COMPLETE)}"
        evaluator.routes[path].first.append(b"<html>502 Bad Gateway</html>")
        outcome = await verify_verdict(_verdict(facts(doc, COMPLETE)), _verifier(evaluator))
        assert outcome.status is Status.VERIFIED, outcome.failures
        assert evaluator.requests.count(path) == 2

    async def test_wrong_answers_that_differ_report_the_first(
        self, evaluator: EvaluatorServer
    ) -> None:
        """A source never answering the committed document is a mismatch, asked twice only."""
        doc = verdict(7, COMPLETE, "complete")
        _publish(evaluator, {**doc, "motivi": ["edited"]}, COMPLETE)
        route = evaluator.routes["/v1/jobs/7"]
        first = {**doc, "motivi": ["first"]}
        route.first.append(json.dumps({"verdict": first}).encode())
        outcome = await verify_verdict(_verdict(facts(doc, COMPLETE)), _verifier(evaluator))
        assert outcome.status is Status.MISMATCH
        assert outcome.document is not None and b'"first"' in outcome.document
        assert evaluator.requests.count("/v1/jobs/7") == 2

    async def test_remote_ref_in_schema_is_never_fetched(self, evaluator: EvaluatorServer) -> None:
        """A schema $ref to a URL is not_reproducible and the server never sees a request for it."""
        remote = evaluator.base + "/schemas/piva.json"
        evaluator.serve("/schemas/piva.json", b'{"type":"string"}')
        description = json.dumps(
            {
                "brief": "x",
                "schema": {"type": "object", "properties": {"fornitori": {"$ref": remote}}},
            }
        )
        doc = verdict(7, COMPLETE, "complete")
        _publish(evaluator, doc, COMPLETE)
        chain = facts(doc, COMPLETE, description=description)
        outcome = await verify_verdict(_verdict(chain), _verifier(evaluator))
        assert outcome.status is Status.NOT_REPRODUCIBLE
        assert "/schemas/piva.json" not in evaluator.requests
        assert evaluator.requests == ["/v1/jobs/7", f"/v1/content/{keccak_hex(COMPLETE)}"]

    @pytest.mark.parametrize(
        ("served", "pointer"),
        [
            (b"[" * 10_000 + b"]" * 10_000, ""),
            (b'{"verdict":{"esito":"\xff"}}', ""),
            (b'{"verdict":{"jobId":"7","jobId":"7"}}', "/verdict/jobId"),
            (b'{"verdict":{"n":' + b"1" * 100_000 + b"}}", "/verdict/n"),
            (b'{"verdict":"[1,2,3]"}', ""),
        ],
        ids=["deep", "utf8", "duplicate", "huge-int", "non-object"],
    )
    async def test_hostile_documents(
        self, evaluator: EvaluatorServer, served: bytes, pointer: str
    ) -> None:
        """Each hostile body ends as invalid_document with a pointer, without retry."""
        doc = verdict(7, COMPLETE, "complete")
        evaluator.serve("/v1/jobs/7", served)
        outcome = await verify_verdict(_verdict(facts(doc, COMPLETE)), _verifier(evaluator))
        assert outcome.status is Status.INVALID_DOCUMENT
        assert outcome.report.body["failures"] == [{"code": "invalid_document", "pointer": pointer}]

    async def test_fifty_megabyte_document(self, evaluator: EvaluatorServer) -> None:
        """A 50 MB answer is cut at the limit and reported as an invalid document."""
        evaluator.routes["/v1/jobs/7"] = Route(stream_bytes=50 * 1024 * 1024)
        doc = verdict(7, COMPLETE, "complete")
        outcome = await verify_verdict(_verdict(facts(doc, COMPLETE)), _verifier(evaluator))
        assert outcome.status is Status.INVALID_DOCUMENT
        assert outcome.source_failures[0].problem.value == "too_large"


class TestRetry:
    @pytest.mark.parametrize(
        ("attempts", "expected"), [(1, 1060), (2, 1120), (3, 1240), (7, 4600), (30, 4600)]
    )
    def test_backoff_doubles_up_to_the_cap(self, attempts: int, expected: int) -> None:
        """1 min, 2 min, 4 min ... capped at one hour."""
        assert next_retry_at(attempts, 1000, first_attempt_at=1000) == expected

    def test_horizon(self) -> None:
        """No retry is scheduled past the horizon counted from the first attempt."""
        policy = RetryPolicy(base=60, cap=3600, horizon=7200)
        assert next_retry_at(10, 3000, first_attempt_at=0, policy=policy) == 6600
        assert next_retry_at(10, 4000, first_attempt_at=0, policy=policy) is None
        # a try falling exactly at the horizon is still made; a second later, none
        assert next_retry_at(10, 3600, first_attempt_at=0, policy=policy) == 7200
        assert next_retry_at(10, 3601, first_attempt_at=0, policy=policy) is None

    async def test_unavailable_then_appears(self, evaluator: EvaluatorServer) -> None:
        """A verdict missing at first is retried after the backoff and verified once published."""
        doc = verdict(7, COMPLETE, "complete")
        now = [1000.0]
        slept: list[float] = []

        async def sleep(seconds: float) -> None:
            slept.append(seconds)
            now[0] += seconds
            if len(slept) == 2:
                _publish(evaluator, doc, COMPLETE)

        outcome = await verify_with_retries(
            _verdict(facts(doc, COMPLETE)), _verifier(evaluator), clock=lambda: now[0], sleep=sleep
        )
        assert outcome.status is Status.VERIFIED
        assert slept == [60, 120]
        assert evaluator.requests.count("/v1/jobs/7") == 3

    async def test_gives_up_at_the_horizon(self, evaluator: EvaluatorServer) -> None:
        """Past the horizon the verdict stays unavailable instead of retrying forever."""
        doc = verdict(7, COMPLETE, "complete")
        now = [0.0]

        async def sleep(seconds: float) -> None:
            now[0] += seconds

        verifier = _verifier(evaluator, policy=RetryPolicy(base=10, cap=10, horizon=35))
        outcome = await verify_with_retries(
            _verdict(facts(doc, COMPLETE)), verifier, clock=lambda: now[0], sleep=sleep
        )
        assert outcome.status is Status.UNAVAILABLE
        assert evaluator.requests.count("/v1/jobs/7") == 4


class TestRecord:
    async def test_history_grows_only_when_the_outcome_changes(
        self, evaluator: EvaluatorServer, conn: sqlite3.Connection
    ) -> None:
        """unavailable, unavailable again, then verified: two revisions chained, three attempts."""
        doc = verdict(7, COMPLETE, "complete")
        item = _verdict(facts(doc, COMPLETE))
        verifier = _verifier(evaluator)
        first = await verify_and_record(conn, item, verifier, now=1000)
        assert (first.status, first.attempts, first.next_retry_at) == ("unavailable", 1, 1060)
        assert store.due_for_retry(conn, CHAIN_ID, now=1059) == []
        assert [r.job_id for r in store.due_for_retry(conn, CHAIN_ID, now=1060)] == ["7"]
        again = await verify_and_record(conn, item, verifier, now=1060)
        assert (again.attempts, again.report_digest, again.next_retry_at) == (
            2,
            first.report_digest,
            1180,
        )
        _publish(evaluator, doc, COMPLETE)
        done = await verify_and_record(conn, item, verifier, now=1180)
        assert (done.status, done.revision_count, done.parent_digest) == (
            "verified",
            1,
            first.report_digest,
        )
        assert done.next_retry_at is None
        revisions = store.history(conn, CHAIN_ID, CONTRACT, "7")
        reports = [stored_report(h.report_json, h.report_digest) for h in revisions]
        assert [h.status for h in revisions] == ["unavailable", "verified"]
        assert validate_history(reports) == []
        assert store.get_document(conn, done.document_digest or "") == body(doc)

    async def test_a_source_wrong_for_a_while_is_checked_again_until_it_is_right(
        self, evaluator: EvaluatorServer, conn: sqlite3.Connection
    ) -> None:
        """A source serving another document for longer than its two asks: a mismatch,
        checked again on the unavailable schedule, verified once the committed one is
        served (a second revision); one never served stays a mismatch past the horizon."""
        doc = verdict(7, COMPLETE, "complete")
        _publish(evaluator, {**doc, "motivi": ["stale"]}, COMPLETE)
        item = _verdict(facts(doc, COMPLETE))
        verifier = _verifier(evaluator, policy=RetryPolicy(base=60, cap=60, horizon=150))
        first = await verify_and_record(conn, item, verifier, now=1000)
        assert (first.status, first.next_retry_at) == ("mismatch", 1060)
        again = await verify_and_record(conn, item, verifier, now=1060)
        assert (again.status, again.attempts, again.next_retry_at) == ("mismatch", 2, 1120)
        assert again.report_digest == first.report_digest  # the same outcome: no revision
        _publish(evaluator, doc, COMPLETE)
        assert [r.job_id for r in store.due_for_retry(conn, CHAIN_ID, now=1120)] == ["7"]
        done = await verify_and_record(conn, item, verifier, now=1120)
        assert (done.status, done.next_retry_at, done.parent_digest) == (
            "verified",
            None,
            first.report_digest,
        )
        assert [h.status for h in store.history(conn, CHAIN_ID, CONTRACT, "7")] == [
            "mismatch",
            "verified",
        ]

        other = verdict(8, COMPLETE, "complete")
        _publish(evaluator, {**other, "motivi": ["never the committed one"]}, COMPLETE)
        item = _verdict(facts(other, COMPLETE))
        times = [1000, 1060, 1120]
        rows = [await verify_and_record(conn, item, verifier, now=t) for t in times]
        assert [(r.status, r.next_retry_at) for r in rows] == [
            ("mismatch", 1060),
            ("mismatch", 1120),
            ("mismatch", None),  # the next try would be past the horizon
        ]

    async def test_a_disagreement_on_content_that_is_not_the_deliverable_is_checked_again(
        self, evaluator: EvaluatorServer, conn: sqlite3.Connection
    ) -> None:
        """The content source serving other bytes than the deliverable (on both asks): the
        re-run disagrees, and is run again on the schedule; the deliverable served later
        verifies it. A reject that the other bytes agree with stays verified."""
        doc = verdict(7, COMPLETE, "complete")
        _publish(evaluator, doc, COMPLETE)
        path = f"/v1/content/{keccak_hex(COMPLETE)}"
        evaluator.serve(path, COMPLETE.replace(b"Rossi", b"Bianchi"))
        item = _verdict(facts(doc, COMPLETE))
        first = await verify_and_record(conn, item, _verifier(evaluator), now=1000)
        assert (first.status, first.next_retry_at) == ("evaluator_disagrees", 1060)
        evaluator.serve(path, COMPLETE)
        done = await verify_and_record(conn, item, _verifier(evaluator), now=1060)
        assert (done.status, done.next_retry_at) == ("verified", None)

        rejected = verdict(8, COMPLETE, "reject", ["content does not hash"])
        _publish(evaluator, rejected, COMPLETE)
        evaluator.serve(path, b"other bytes")
        row = await verify_and_record(
            conn, _verdict(facts(rejected, COMPLETE)), _verifier(evaluator), now=1000
        )
        assert (row.status, row.next_retry_at) == ("verified", None)

    async def test_a_mismatch_in_the_committed_document_is_final(
        self, evaluator: EvaluatorServer, conn: sqlite3.Connection
    ) -> None:
        """The committed document itself contradicts the chain: nothing to ask again."""
        doc = verdict(7, COMPLETE, "complete")
        _publish(evaluator, doc, COMPLETE)
        item = _verdict(facts(doc, COMPLETE, event="JobRejected"))
        row = await verify_and_record(conn, item, _verifier(evaluator), now=1000)
        assert (row.status, row.next_retry_at) == ("mismatch", None)
        assert store.due_for_retry(conn, CHAIN_ID, now=10**9) == []

    async def test_two_daemons_verifying_one_verdict_record_one_revision(
        self, evaluator: EvaluatorServer, new_db: Callable[[], str]
    ) -> None:
        """Daemons sharing a database both verify; the one that writes second adds nothing."""
        target = new_db()
        first, second = connect(target), connect(target)
        migrate(first)
        doc = verdict(8, COMPLETE, "complete")
        _publish(evaluator, doc, COMPLETE)
        item = _verdict(facts(doc, COMPLETE))
        verifier = _verifier(evaluator)
        both_read = asyncio.Barrier(2)

        async def run(parent: Report | None) -> Outcome:
            await both_read.wait()  # each has read the (absent) parent before either writes
            return await verify_verdict(item, verifier, parent=parent)

        try:
            rows = await asyncio.gather(
                record_verification(first, item.chain, run, verifier.policy, 1000),
                record_verification(second, item.chain, run, verifier.policy, 1000),
            )
            revisions = store.history(first, CHAIN_ID, CONTRACT, "8")
            assert [h.status for h in revisions] == ["verified"]
            assert {r.report_digest for r in rows} == {revisions[0].report_digest}
        finally:
            first.close()
            second.close()

    async def test_reorg_removes_the_verification(
        self, evaluator: EvaluatorServer, conn: sqlite3.Connection
    ) -> None:
        """When the verdict event leaves ``events``, delete_orphans drops its verification."""
        doc = verdict(7, COMPLETE, "complete")
        _publish(evaluator, doc, COMPLETE)
        kept, gone = (
            _verdict(facts(doc, COMPLETE), block=5),
            _verdict(facts(doc, COMPLETE, job_id=8), block=9),
        )
        for item in (kept, gone):
            await verify_and_record(conn, item, _verifier(evaluator), now=1000)
            _insert_event(conn, item)
        assert store.delete_orphans(conn) == []
        conn.execute("DELETE FROM events WHERE block_number > 6")
        assert len(store.delete_orphans(conn)) == 1
        assert store.get_verification(conn, CHAIN_ID, CONTRACT, "8") is None
        assert store.history(conn, CHAIN_ID, CONTRACT, "8") == []
        assert store.get_verification(conn, CHAIN_ID, CONTRACT, "7") is not None
        assert delete_above_block(conn, CHAIN_ID, 4) == 1
        assert list_verifications(conn, CHAIN_ID) == []


def _insert_event(conn: sqlite3.Connection, item: Verdict) -> None:
    c = item.chain
    conn.execute(
        "INSERT INTO events (chain_id, block_hash, log_index, block_number, block_timestamp, "
        "tx_hash, tx_index, contract, protocol, name, variant, subject, args_json, topics_json, "
        "data_hex) "
        "VALUES (?, ?, ?, ?, 0, ?, 0, ?, 'erc8183', ?, 'current', ?, '{}', '[]', '0x')",
        (
            c.chain_id,
            c.block_hash,
            c.log_index,
            c.block_number,
            c.tx_hash,
            c.contract,
            c.event,
            str(c.job_id),
        ),
    )


def test_description_fixture_is_schemaeval() -> None:
    """The shared job description is recognised as a SchemaEval job."""
    from keeper.verify.checks import description_kind

    assert description_kind(DESCRIPTION, CheckConfig().limits)[0] == "schemaeval"
