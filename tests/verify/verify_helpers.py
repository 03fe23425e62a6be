"""Test data shared by the verify tests: the SchemaEval fixtures and verdicts built on them."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from keeper.verify.canonical import canonical_bytes, digest, keccak_hex
from keeper.verify.checks import VerdictFacts

FIXTURES = Path(__file__).parent / "fixtures"
DESCRIPTION = (FIXTURES / "job-description.json").read_text()
EVALUATOR = "0x" + "e7" * 20


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


COMPLETE = fixture("deliverable-complete.json")
TOO_FEW = fixture("deliverable-too-few.json")
BAD_PIVA = fixture("deliverable-bad-piva.json")
NOT_JSON = fixture("deliverable-not-json.txt")


def verdict(
    job_id: int, content: bytes, esito: str, motivi: list[str] | None = None, **extra: Any
) -> dict[str, Any]:
    """A SchemaEval verdict document as the evaluator would publish it."""
    doc: dict[str, Any] = {
        "evaluator": "SchemaEval",
        "version": 1,
        "jobId": str(job_id),
        "deliverable": keccak_hex(content),
        "esito": esito,
        "motivi": motivi or [],
    }
    doc.update(extra)
    return doc


def facts(
    doc: dict[str, Any],
    content: bytes,
    *,
    job_id: int | None = None,
    event: str | None = None,
    description: str | None = DESCRIPTION,
) -> VerdictFacts:
    """The chain facts matching ``doc``: its digest as reason, the content's hash as deliverable."""
    return VerdictFacts(
        job_id=int(doc["jobId"]) if job_id is None else job_id,
        event_name=event or ("JobCompleted" if doc["esito"] == "complete" else "JobRejected"),
        reason=digest(doc),
        deliverable=keccak_hex(content),
        evaluator=EVALUATOR,
        description=description,
    )


def body(doc: dict[str, Any]) -> bytes:
    return canonical_bytes(doc)


def insert_row(conn: sqlite3.Connection, table: str, values: dict[str, Any]) -> None:
    """Insert a row giving NOT NULL columns the test does not care about a neutral value."""
    row: dict[str, Any] = {}
    for _, name, kind, notnull, _, _ in conn.execute(f"PRAGMA table_info({table})").fetchall():
        if name in values:
            row[name] = values[name]
        elif notnull:
            row[name] = 0 if "INT" in kind.upper() else ""
    marks = ", ".join("?" * len(row))
    conn.execute(f"INSERT INTO {table} ({', '.join(row)}) VALUES ({marks})", tuple(row.values()))
