"""Documents submitted to the API (``POST /v1/verdicts``) and a source serving them back.

A submitted document is accepted only when its canonical digest equals the
``reason`` of an indexed JobCompleted/JobRejected: the chain, not the
submitter, decides which document is the verdict. Anything else is refused
with a failure code the API returns as 422 (``invalid_document`` for
unreadable bytes, ``verdict_hash_mismatch`` when no indexed verdict has that
digest). Accepted documents are stored under their digest, a verification
of their verdict that has not seen them is made due at once (so the daemon's
next verify cycle re-checks an ``unavailable`` verdict), and
``StoredDocumentSource``, the daemon verifier's first source, serves them
back labelled ``api``.
"""

from __future__ import annotations

from dataclasses import dataclass

from keeper.store import verifications as store
from keeper.store.db import Db
from keeper.verify.canonical import NotCanonicalizable, canonical_bytes, keccak_hex
from keeper.verify.document import DocumentLimits, InvalidDocument, parse_object
from keeper.verify.failures import Failure, FailureCode
from keeper.verify.sources import FetchContext, Fetched, Problem, SourceFailure


@dataclass(frozen=True, slots=True)
class Accepted:
    digest: str
    jobs: tuple[tuple[str, str], ...]  # (contract, job id) of each verdict it belongs to


def accept_submission(
    conn: Db, chain_id: int, raw: bytes, limits: DocumentLimits | None = None
) -> Accepted | Failure:
    """Store ``raw`` if it is the document behind an indexed verdict; else say why not."""
    try:
        document = parse_object(raw, limits)
        canonical = canonical_bytes(document)
    except InvalidDocument as exc:
        return Failure(FailureCode.INVALID_DOCUMENT, exc.pointer, exc.detail)
    except NotCanonicalizable as exc:
        return Failure(FailureCode.INVALID_DOCUMENT, "", f"no canonical form: {exc}")
    digest = keccak_hex(canonical)
    matches = store.verdicts_with_reason(conn, chain_id, digest)
    if not matches:
        return Failure(
            FailureCode.VERDICT_HASH_MISMATCH, "/reason", "no indexed verdict has this digest"
        )
    store.save_submission(
        conn, chain_id, [(v.contract, v.job_id) for v in matches], digest, canonical
    )
    return Accepted(digest, tuple((v.contract, v.job_id) for v in matches))


class StoredDocumentSource:
    """Documents posted to ``POST /v1/verdicts``, by the verdict's reason (label ``api``)."""

    def __init__(self, conn: Db) -> None:
        self.conn = conn

    @property
    def label(self) -> str:
        return "api"

    async def fetch(self, ctx: FetchContext) -> Fetched | SourceFailure:
        body = store.get_submitted_document(self.conn, ctx.reason) if ctx.reason else None
        if body is None:
            return SourceFailure(self.label, Problem.NOT_FOUND, "no document was posted")
        return Fetched(body, "", self.label)
