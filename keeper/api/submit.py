"""``POST /v1/verdicts``: the bridge from the API to the verify component's submission check.

The API serves reads from read-only connections; accepting a document is the
one write it triggers, so it gets its own short-lived write connection per
request (SQLite serialises it with the daemon's writers via busy_timeout).
Whether a document is accepted is decided by
:func:`keeper.verify.submission.accept_submission`: only a document whose
canonical digest is the reason of an indexed verdict is stored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from keeper.store.db import connect
from keeper.verify.submission import Accepted, accept_submission

__all__ = ["SubmitResult", "VerdictSubmitter", "submission_handler"]


@dataclass(frozen=True, slots=True)
class SubmitResult:
    """Accepted (digest and the verdicts it belongs to) or refused (failure code and where)."""

    accepted: bool
    digest: str | None = None
    jobs: tuple[tuple[str, str], ...] = ()
    code: str | None = None
    pointer: str = ""
    detail: str = ""


# Called in a worker thread with the raw request body.
VerdictSubmitter = Callable[[bytes], SubmitResult]


def submission_handler(db_path: str | Path, chain_id: int) -> VerdictSubmitter:
    """A submitter that checks and stores documents in ``db_path`` for ``chain_id``."""

    def submit(raw: bytes) -> SubmitResult:
        conn = connect(db_path)
        try:
            result = accept_submission(conn, chain_id, raw)
        finally:
            conn.close()
        if isinstance(result, Accepted):
            return SubmitResult(True, digest=result.digest, jobs=result.jobs)
        return SubmitResult(
            False, code=result.code.value, pointer=result.pointer, detail=result.detail
        )

    return submit
