"""The daemon path: verdicts read from the index, verified, retried and dropped on reorg."""

from __future__ import annotations

import io
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from evaluator_server import EvaluatorServer
from verify_helpers import COMPLETE, DESCRIPTION, EVALUATOR, body, insert_row, verdict

from keeper.store import verifications as store
from keeper.store.db import connect
from keeper.store.index_rows import description_json
from keeper.store.migrations import migrate
from keeper.verify.canonical import digest, keccak_hex
from keeper.verify.command import main
from keeper.verify.failures import Failure, FailureCode
from keeper.verify.github_api import GitHubClient
from keeper.verify.scan import PendingScan
from keeper.verify.sources import ContentSource, DirectorySource, HttpSource
from keeper.verify.submission import Accepted, StoredDocumentSource, accept_submission
from keeper.verify.verdict import RetryPolicy, Verifier
from keeper.verify.verifier import verify_pending

CHAIN_ID = 31337
CONTRACT = "0x" + "c1" * 20


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    db = connect(tmp_path / "keeper.db")
    migrate(db)
    yield db
    db.close()


def _index(conn: sqlite3.Connection, doc: dict[str, Any], content: bytes, block: int) -> None:
    """What the indexer writes for a job that was submitted and then judged."""
    job_id = str(doc["jobId"])
    name = "JobCompleted" if doc["esito"] == "complete" else "JobRejected"
    insert_row(
        conn,
        "events",
        {
            "chain_id": CHAIN_ID,
            "block_hash": "0x" + f"{block:064x}",
            "log_index": 1,
            "block_number": block,
            "tx_hash": "0x" + f"{block + 7:064x}",
            "contract": CONTRACT,
            "protocol": "erc8183",
            "name": name,
            "variant": "current",
            "subject": job_id,
            "args_json": json.dumps(
                {"jobId": job_id, "evaluator": EVALUATOR, "reason": digest(doc)}
            ),
            "topics_json": "[]",
        },
    )
    insert_row(
        conn,
        "jobs",
        {
            "chain_id": CHAIN_ID,
            "contract": CONTRACT,
            "job_id": job_id,
            "evaluator": EVALUATOR,
            "deliverable": keccak_hex(content),
            "reason": digest(doc),
            "description": description_json(DESCRIPTION),  # as the index store keeps it
            "verdict_event": name,
        },
    )


def _verifier(server: EvaluatorServer) -> Verifier:
    return Verifier(
        [HttpSource(server.base + "/v1/jobs/{jobId}", "/verdict")],
        [ContentSource(server.base + "/v1/content/{hash}")],
    )


def _publish(server: EvaluatorServer, doc: dict[str, Any], content: bytes) -> None:
    server.serve(f"/v1/jobs/{doc['jobId']}", json.dumps({"verdict": doc}).encode())
    server.serve(f"/v1/content/{keccak_hex(content)}", content)


class TestVerifyPending:
    async def test_indexed_verdict_is_verified_once(
        self, conn: sqlite3.Connection, evaluator: EvaluatorServer
    ) -> None:
        """A newly indexed verdict is verified; a second pass finds nothing new."""
        scan = PendingScan(CHAIN_ID)
        doc = verdict(3, COMPLETE, "complete")
        _index(conn, doc, COMPLETE, block=10)
        _publish(evaluator, doc, COMPLETE)
        assert await verify_pending(conn, scan, _verifier(evaluator), now=1000) == 1
        row = store.get_verification(conn, CHAIN_ID, CONTRACT, "3")
        assert row is not None and row.status == "verified" and row.block_number == 10
        assert await verify_pending(conn, scan, _verifier(evaluator), now=1001) == 0

    async def test_retry_when_due(
        self, conn: sqlite3.Connection, evaluator: EvaluatorServer
    ) -> None:
        """An unavailable verdict is retried only once due, and verified when it appears."""
        scan = PendingScan(CHAIN_ID)
        doc = verdict(4, COMPLETE, "complete")
        _index(conn, doc, COMPLETE, block=11)
        verifier = _verifier(evaluator)
        await verify_pending(conn, scan, verifier, now=1000)
        assert await verify_pending(conn, scan, verifier, now=1030) == 0
        _publish(evaluator, doc, COMPLETE)
        assert await verify_pending(conn, scan, verifier, now=1060) == 1
        assert [h.status for h in store.history(conn, CHAIN_ID, CONTRACT, "4")] == [
            "unavailable",
            "verified",
        ]

    async def test_two_verdicts_of_a_job_in_one_pass_build_on_each_other(
        self, conn: sqlite3.Connection, evaluator: EvaluatorServer
    ) -> None:
        """The second is checked on top of the first's stored result, not beside it."""
        scan = PendingScan(CHAIN_ID)
        doc = verdict(6, COMPLETE, "complete")
        _index(conn, doc, COMPLETE, block=13)
        insert_row(conn, "events", {  # the same job judged again, a block later
            "chain_id": CHAIN_ID, "block_hash": "0x" + f"{14:064x}", "log_index": 1,
            "block_number": 14, "tx_hash": "0x" + "77" * 32, "contract": CONTRACT,
            "protocol": "erc8183", "name": "JobCompleted", "variant": "current",
            "subject": "6", "topics_json": "[]",
            "args_json": json.dumps({"jobId": "6", "evaluator": EVALUATOR, "reason": digest(doc)}),
        })  # fmt: skip
        assert await verify_pending(conn, scan, _verifier(evaluator), now=1000) == 2
        row = store.get_verification(conn, CHAIN_ID, CONTRACT, "6")
        assert row is not None and (row.block_number, row.attempts) == (14, 2)
        first, second = store.history(conn, CHAIN_ID, CONTRACT, "6")
        assert second.revision_count == first.revision_count + 1
        assert second.parent_digest == first.report_digest

    async def test_reorged_verdict_disappears(
        self, conn: sqlite3.Connection, evaluator: EvaluatorServer
    ) -> None:
        """After the event is rolled back, delete_orphans removes the verification for good."""
        scan = PendingScan(CHAIN_ID)
        doc = verdict(5, COMPLETE, "complete")
        _index(conn, doc, COMPLETE, block=12)
        _publish(evaluator, doc, COMPLETE)
        await verify_pending(conn, scan, _verifier(evaluator), now=1000)
        conn.execute("DELETE FROM events WHERE block_number >= 12")
        assert len(store.delete_orphans(conn)) == 1
        assert await verify_pending(conn, scan, _verifier(evaluator), now=1001) == 0
        assert store.get_verification(conn, CHAIN_ID, CONTRACT, "5") is None


def test_command_from_index(tmp_path: Path, conn: sqlite3.Connection) -> None:
    """keeper verify --from-index reads the facts from the database, no RPC needed."""
    doc = verdict(6, COMPLETE, "complete")
    _index(conn, doc, COMPLETE, block=13)
    verdicts, contents = tmp_path / "v", tmp_path / "c"
    verdicts.mkdir()
    contents.mkdir()
    (verdicts / "6.json").write_bytes(body(doc))
    (contents / keccak_hex(COMPLETE)).write_bytes(COMPLETE)
    config = tmp_path / "k.toml"
    config.write_text(
        f"""
[chain]
chain_id = {CHAIN_ID}
rpc_urls = ["http://127.0.0.1:9"]
rpc_names = ["unused"]
[database]
path = "{tmp_path / "keeper.db"}"
[verdicts]
sources = [{{ kind = "directory", path = "{verdicts}" }}]
content_sources = [{{ kind = "directory", path = "{contents}" }}]
"""
    )
    out = io.StringIO()
    code = main(
        ["--config", str(config), "--contract", CONTRACT, "--id", "6", "--from-index", "--json"],
        out,
    )
    report = json.loads(out.getvalue())
    assert code == 0 and report["status"] == "verified"
    assert report["chain"]["blockNumber"] == 13
    missing = main(["--config", str(config), "--contract", CONTRACT, "--id", "99", "--from-index"])
    assert missing == 3


def test_command_from_index_uses_posted_documents(tmp_path: Path, conn: sqlite3.Connection) -> None:
    """With --from-index, a document posted to the daemon's API is found as the daemon finds it."""
    doc = verdict(8, COMPLETE, "complete")
    _index(conn, doc, COMPLETE, block=15)
    contents = tmp_path / "c"
    contents.mkdir()
    (contents / keccak_hex(COMPLETE)).write_bytes(COMPLETE)
    config = tmp_path / "k.toml"
    config.write_text(
        f"""
[chain]
chain_id = {CHAIN_ID}
rpc_urls = ["http://127.0.0.1:9"]
[database]
path = "{tmp_path / "keeper.db"}"
[verdicts]
content_sources = [{{ kind = "directory", path = "{contents}" }}]
"""
    )
    argv = ["--config", str(config), "--contract", CONTRACT, "--id", "8", "--from-index", "--json"]
    out = io.StringIO()
    assert main(argv, out) == 3 and json.loads(out.getvalue())["status"] == "unavailable"
    assert isinstance(accept_submission(conn, CHAIN_ID, body(doc)), Accepted)
    out = io.StringIO()
    assert main(argv, out) == 0
    report = json.loads(out.getvalue())
    assert (report["status"], report["documentSource"]) == ("verified", "api")


class TestSubmission:
    async def test_submitted_document_is_accepted_and_used(
        self, conn: sqlite3.Connection, evaluator: EvaluatorServer
    ) -> None:
        """Only the document behind an indexed reason is accepted; the verifier then finds it."""
        scan = PendingScan(CHAIN_ID)
        doc = verdict(7, COMPLETE, "complete")
        _index(conn, doc, COMPLETE, block=14)
        wrong = accept_submission(conn, CHAIN_ID, body({**doc, "esito": "reject"}))
        assert isinstance(wrong, Failure) and wrong.code is FailureCode.VERDICT_HASH_MISMATCH
        broken = accept_submission(conn, CHAIN_ID, b'{"a":1,"a":2}')
        assert isinstance(broken, Failure) and (broken.code, broken.pointer) == (
            FailureCode.INVALID_DOCUMENT,
            "/a",
        )
        accepted = accept_submission(conn, CHAIN_ID, json.dumps(doc, indent=4).encode())
        assert accepted == Accepted(digest(doc), ((CONTRACT, "7"),))
        evaluator.serve(f"/v1/content/{keccak_hex(COMPLETE)}", COMPLETE)
        verifier = Verifier(
            [StoredDocumentSource(conn)], [ContentSource(evaluator.base + "/v1/content/{hash}")]
        )
        await verify_pending(conn, scan, verifier, now=1)
        row = store.get_verification(conn, CHAIN_ID, CONTRACT, "7")
        assert row is not None and row.status == "verified"
        accept_submission(conn, CHAIN_ID, body(doc))  # posted again: already checked, not due
        again = store.get_verification(conn, CHAIN_ID, CONTRACT, "7")
        assert again is not None and again.next_retry_at is None
        assert not any(r.startswith("/v1/jobs") for r in evaluator.requests)


class TestRetriesOnlyWhereSomethingCanAnswer:
    def test_a_retry_schedule_only_with_something_to_ask(
        self, conn: sqlite3.Connection, tmp_path: Path
    ) -> None:
        """Posted documents alone give no schedule; a source, content or GitHub's API does."""
        policy = RetryPolicy(horizon=500)
        posted = StoredDocumentSource(conn)
        assert Verifier([], policy=policy).retries is None
        assert Verifier([posted], policy=policy).retries is None
        asked = DirectorySource(tmp_path)
        assert Verifier([posted, asked], policy=policy).retries is policy
        assert Verifier([posted], [asked], policy=policy).retries is policy
        github = GitHubClient("https://github.invalid/api")
        assert Verifier([posted], policy=policy, github=github).retries is policy

    async def test_without_a_source_a_post_is_the_only_retry(
        self, conn: sqlite3.Connection
    ) -> None:
        """Nothing to ask: the verdict stays unavailable with no retry however late it
        gets, until its document is posted, which makes it due at once."""
        scan = PendingScan(CHAIN_ID)
        doc = verdict(8, COMPLETE, "complete")
        _index(conn, doc, COMPLETE, block=15)
        verifier = Verifier([StoredDocumentSource(conn)])
        assert await verify_pending(conn, scan, verifier, now=1000) == 1
        row = store.get_verification(conn, CHAIN_ID, CONTRACT, "8")
        assert row is not None and (row.status, row.next_retry_at) == ("unavailable", None)
        assert await verify_pending(conn, scan, verifier, now=1000 + 86_400) == 0
        assert accept_submission(conn, CHAIN_ID, body(doc)) == Accepted(
            digest(doc), ((CONTRACT, "8"),)
        )
        assert await verify_pending(conn, scan, verifier, now=1000 + 86_401) == 1
        row = store.get_verification(conn, CHAIN_ID, CONTRACT, "8")
        assert row is not None and (row.attempts, row.document_digest) == (2, digest(doc))

    async def test_a_source_configured_later_gets_the_verdicts_within_their_horizon(
        self, conn: sqlite3.Connection, tmp_path: Path
    ) -> None:
        """A daemon restarted with a source retries, on its first pass, the verdicts left
        unavailable without a retry whose first attempt is within the horizon; not the
        older ones, and not again on its next pass."""
        scan = PendingScan(CHAIN_ID)
        old, recent = verdict(9, COMPLETE, "complete"), verdict(10, COMPLETE, "complete")
        alone = Verifier([StoredDocumentSource(conn)])
        _index(conn, old, COMPLETE, block=16)
        assert await verify_pending(conn, scan, alone, now=1000) == 1
        _index(conn, recent, COMPLETE, block=17)
        assert await verify_pending(conn, scan, alone, now=1000 + 3_600) == 1
        folder = tmp_path / "verdicts"
        folder.mkdir()
        for doc in (old, recent):
            (folder / f"{digest(doc)}.json").write_bytes(body(doc))
        asking = Verifier(
            [StoredDocumentSource(conn), DirectorySource(folder)],
            policy=RetryPolicy(horizon=3_000),
        )
        restarted = PendingScan(CHAIN_ID)
        assert await verify_pending(conn, restarted, asking, now=1000 + 3_700) == 1
        first = store.get_verification(conn, CHAIN_ID, CONTRACT, "9")
        second = store.get_verification(conn, CHAIN_ID, CONTRACT, "10")
        assert first is not None and (first.attempts, first.document_digest) == (1, None)
        assert second is not None and (second.attempts, second.document_digest) == (
            2,
            digest(recent),
        )
        assert await verify_pending(conn, restarted, asking, now=1000 + 3_800) == 0
