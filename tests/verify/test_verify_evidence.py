"""Task-market verdicts: the evidence document behind evidenceHash, checked and stored."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from evaluator_server import EvaluatorServer
from verify_helpers import insert_row

from keeper.store import verifications as store
from keeper.store.db import connect
from keeper.store.migrations import migrate
from keeper.verify.canonical import canonical_bytes, digest, keccak_hex
from keeper.verify.checks import ZERO_HASH, CheckConfig
from keeper.verify.evidence import check_evidence
from keeper.verify.scan import PendingScan
from keeper.verify.sources import HttpSource
from keeper.verify.verdict import Verifier
from keeper.verify.verifier import verify_pending

CHAIN_ID = 8453
MARKET = "0x" + "7a" * 20
TASK = "0x" + "11" * 32
EVIDENCE = {"task": TASK, "criteria": ["tests pass"], "score": 90}


def _codes(body: bytes | None, evidence_hash: str, pointer: str = "") -> list[tuple[str, str]]:
    checked = check_evidence(body, evidence_hash, CheckConfig(), pointer)
    return [(f.code.value, f.pointer) for f in checked.failures]


class TestCheckEvidence:
    def test_canonical_json_digest(self) -> None:
        """JSON whose canonical digest is the evidence hash is authentic, however written."""
        assert _codes(json.dumps(EVIDENCE, indent=3).encode(), digest(EVIDENCE)) == []

    def test_raw_bytes_digest(self) -> None:
        """Non-JSON evidence matches when keccak256 of its exact bytes is the hash."""
        blob = b"\x00binary evidence\xff"
        assert _codes(blob, keccak_hex(blob)) == []

    def test_mismatch(self) -> None:
        """Different evidence is a hash mismatch at /evidenceHash."""
        assert _codes(canonical_bytes({**EVIDENCE, "score": 10}), digest(EVIDENCE)) == [
            ("verdict_hash_mismatch", "/evidenceHash")
        ]

    def test_no_evidence_committed(self) -> None:
        """A zero evidence hash has nothing to check: not_reproducible, never retried."""
        assert _codes(None, ZERO_HASH) == [("not_reproducible", "/evidenceHash")]

    def test_unreadable_and_missing(self) -> None:
        """Bytes that match neither reading and are not JSON are invalid; nothing is unavailable."""
        assert _codes(b"\xff\xfe", digest(EVIDENCE)) == [("invalid_document", "")]
        assert _codes(None, digest(EVIDENCE)) == [("unavailable", "")]
        assert _codes(b'{"evidence":null}', digest(EVIDENCE), "/evidence") == [("unavailable", "")]


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    db = connect(tmp_path / "keeper.db")
    migrate(db)
    yield db
    db.close()


def _index_task(conn: sqlite3.Connection, evidence_hash: str, block: int) -> None:
    """A TaskEvaluated event and the task projection carrying getTaskVerdict's evidence hash."""
    insert_row(
        conn,
        "events",
        {
            "chain_id": CHAIN_ID,
            "block_hash": "0x" + f"{block:064x}",
            "log_index": 0,
            "block_number": block,
            "tx_hash": "0x" + f"{block + 1:064x}",
            "contract": MARKET,
            "protocol": "taskmarket",
            "name": "TaskEvaluated",
            "variant": "current",
            "subject": TASK,
            "args_json": "{}",
            "topics_json": "[]",
        },
    )
    conn.execute("DELETE FROM tasks WHERE task_id = ?", (TASK,))
    insert_row(
        conn,
        "tasks",
        {
            "chain_id": CHAIN_ID,
            "contract": MARKET,
            "task_id": TASK,
            "evidence_hash": evidence_hash,
            "evaluator": "0x" + "e0" * 20,
            "extra_json": "{}",
        },
    )


class TestTaskVerdicts:
    async def test_evidence_verified_from_a_source(
        self, conn: sqlite3.Connection, evaluator: EvaluatorServer
    ) -> None:
        """The latest task verdict's evidence, fetched by {reason}, verifies and is stored."""
        scan = PendingScan(CHAIN_ID)
        evaluator.serve(
            f"/evidence/{digest(EVIDENCE)}", json.dumps({"evidence": EVIDENCE}).encode()
        )
        _index_task(conn, digest(EVIDENCE), block=20)
        verifier = Verifier([HttpSource(evaluator.base + "/evidence/{reason}", "/evidence")])
        assert await verify_pending(conn, scan, verifier, now=5) == 1
        row = store.get_verification(conn, CHAIN_ID, MARKET, TASK)
        assert row is not None and (row.status, row.event_name) == ("verified", "TaskEvaluated")
        report: dict[str, Any] = json.loads(row.report_json)
        assert report["chain"]["jobId"] == TASK and report["chain"]["reason"] == digest(EVIDENCE)
        assert await verify_pending(conn, scan, verifier, now=6) == 0

    async def test_re_evaluation_is_verified_again(
        self, conn: sqlite3.Connection, evaluator: EvaluatorServer
    ) -> None:
        """A later TaskEvaluated with new evidence gets a new revision; missing evidence retries."""
        scan = PendingScan(CHAIN_ID)
        verifier = Verifier([HttpSource(evaluator.base + "/evidence/{reason}")])
        evaluator.serve(f"/evidence/{digest(EVIDENCE)}", canonical_bytes(EVIDENCE))
        _index_task(conn, digest(EVIDENCE), block=20)
        await verify_pending(conn, scan, verifier, now=5)
        second = {**EVIDENCE, "score": 40}
        _index_task(conn, digest(second), block=30)
        assert await verify_pending(conn, scan, verifier, now=6) == 1
        row = store.get_verification(conn, CHAIN_ID, MARKET, TASK)
        assert row is not None and (row.status, row.block_number, row.revision_count) == (
            "unavailable",
            30,
            1,
        )
        evaluator.serve(f"/evidence/{digest(second)}", canonical_bytes(second))
        assert await verify_pending(conn, scan, verifier, now=(row.next_retry_at or 0)) == 1
        statuses = [h.status for h in store.history(conn, CHAIN_ID, MARKET, TASK)]
        assert statuses == ["verified", "unavailable", "verified"]

    async def test_evidence_served_wrong_is_checked_again_until_it_is_right(
        self, conn: sqlite3.Connection, evaluator: EvaluatorServer
    ) -> None:
        """A source serving other evidence: a mismatch retried on the unavailable schedule,
        verified once the committed evidence is served."""
        scan = PendingScan(CHAIN_ID)
        verifier = Verifier([HttpSource(evaluator.base + "/evidence/{reason}")])
        path = f"/evidence/{digest(EVIDENCE)}"
        evaluator.serve(path, canonical_bytes({**EVIDENCE, "score": 1}))
        _index_task(conn, digest(EVIDENCE), block=20)
        assert await verify_pending(conn, scan, verifier, now=5) == 1
        row = store.get_verification(conn, CHAIN_ID, MARKET, TASK)
        assert row is not None and (row.status, row.next_retry_at) == ("mismatch", 65)
        evaluator.serve(path, canonical_bytes(EVIDENCE))
        assert await verify_pending(conn, scan, verifier, now=64) == 0
        assert await verify_pending(conn, scan, verifier, now=65) == 1
        statuses = [h.status for h in store.history(conn, CHAIN_ID, MARKET, TASK)]
        assert statuses == ["mismatch", "verified"]
