"""A stand-in for the SchemaEval evaluator service: it judges deliverables and publishes
each job with its verdict document, the way the daemon's HTTP verdict sources expect.

Routes (all GET, loopback only):

- ``/v1/jobs/{jobId}`` -> ``{"job": {...}, "verdict": {...}}`` for the primary contract,
  like the real service that evaluates a single escrow;
- ``/v1/contracts/{contract}/jobs/{jobId}`` -> the same for any contract, since job ids
  restart at 1 on every escrow;
- ``/v1/content/{hash}`` -> the raw deliverable bytes whose keccak256 is ``hash``.

What is served may differ from what was hashed on chain on purpose (a tampered
document), so the verifier has something to catch.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rfc8785
from aiohttp import web
from jsonschema import Draft202012Validator

from keeper.devnet.anvil import PROJECT_ROOT
from keeper.domain.hashing import keccak
from keeper.verify.schema_refs import ref_loop

__all__ = [
    "EvaluatorService",
    "SchemaEvalFixtures",
    "VerdictBook",
    "fixtures_dir",
    "keccak_hex",
    "load_fixtures",
    "make_app",
    "schemaeval_verdict",
    "verdict_digest",
]

FIXTURE_FILES = (
    "job-description.json",
    "deliverable-complete.json",
    "deliverable-too-few.json",
    "deliverable-bad-piva.json",
    "deliverable-not-json.txt",
)
_SHARED_FIXTURES = PROJECT_ROOT.parent / "shared" / "fixtures" / "schemaeval"
_PACKAGED_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "schemaeval"


def keccak_hex(data: bytes) -> str:
    return "0x" + keccak(data).hex()


def verdict_digest(document: dict[str, Any]) -> str:
    """keccak256 of the RFC 8785 canonical bytes: the ``reason`` the evaluator puts on chain."""
    return keccak_hex(rfc8785.dumps(document))


@dataclass(frozen=True)
class SchemaEvalFixtures:
    """The SchemaEval example job: its description text and four deliverables (exact bytes)."""

    description: str
    complete: bytes
    too_few: bytes
    bad_piva: bytes
    not_json: bytes


def fixtures_dir() -> Path:
    """The shared fixtures beside the project when present, else the packaged copy."""
    if all((_SHARED_FIXTURES / name).is_file() for name in FIXTURE_FILES):
        return _SHARED_FIXTURES
    return _PACKAGED_FIXTURES


def load_fixtures(directory: Path | None = None) -> SchemaEvalFixtures:
    base = directory or fixtures_dir()
    raw = {name: (base / name).read_bytes() for name in FIXTURE_FILES}
    # on chain the description is compact JSON: it must stay under SchemaEval's 4 KB
    description = json.dumps(json.loads(raw["job-description.json"]), separators=(",", ":"))
    return SchemaEvalFixtures(
        description=description,
        complete=raw["deliverable-complete.json"],
        too_few=raw["deliverable-too-few.json"],
        bad_piva=raw["deliverable-bad-piva.json"],
        not_json=raw["deliverable-not-json.txt"],
    )


def _pointer(path: Any) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def schemaeval_verdict(
    job_id: int, description: str, content: bytes, deliverable: str
) -> dict[str, Any]:
    """SchemaEval's three checks, in order, as a verdict document.

    Schema failures are reported as ``"<instance pointer>: <message>"`` (root: ``": ..."``),
    sorted, so the document and its digest depend only on the inputs.
    """
    motivi: list[str] = []
    if keccak_hex(content) != deliverable.lower():
        motivi.append("deliverable: content hash does not match the on-chain deliverable")
    else:
        try:
            instance = json.loads(content)
        except (ValueError, RecursionError):  # not UTF-8, not JSON, too long a number, too deep
            motivi.append("content: not JSON")
        else:
            schema = json.loads(description)["schema"]
            Draft202012Validator.check_schema(schema)
            if ref_loop(schema) is not None:
                raise ValueError("the job schema's $ref loops: SchemaEval cannot evaluate it")
            errors = Draft202012Validator(schema).iter_errors(instance)
            motivi = sorted(f"{_pointer(e.absolute_path)}: {e.message}" for e in errors)
    return {
        "evaluator": "SchemaEval",
        "version": 1,
        "jobId": str(job_id),
        "deliverable": deliverable.lower(),
        "esito": "reject" if motivi else "complete",
        "motivi": motivi,
    }


class VerdictBook:
    """What the service publishes; written by the traffic thread, read by the web handlers."""

    def __init__(self, primary_contract: str) -> None:
        self.primary_contract = primary_contract.lower()
        self._lock = threading.Lock()
        self._jobs: dict[tuple[str, int], dict[str, Any]] = {}
        self._content: dict[str, bytes] = {}

    def publish_job(
        self, contract: str, job_id: int, job: dict[str, Any], verdict: dict[str, Any] | None
    ) -> None:
        entry: dict[str, Any] = {"job": job}
        if verdict is not None:
            entry["verdict"] = verdict
        with self._lock:
            self._jobs[(contract.lower(), job_id)] = json.loads(json.dumps(entry))

    def publish_content(self, content: bytes) -> str:
        digest = keccak_hex(content)
        with self._lock:
            self._content[digest] = content
        return digest

    def job(self, contract: str | None, job_id: int) -> dict[str, Any] | None:
        with self._lock:
            return self._jobs.get(((contract or self.primary_contract).lower(), job_id))

    def content(self, digest: str) -> bytes | None:
        with self._lock:
            return self._content.get(digest.lower())


_BOOK = web.AppKey("book", VerdictBook)


async def _job(request: web.Request) -> web.Response:
    book = request.app[_BOOK]
    entry = book.job(request.match_info.get("contract"), int(request.match_info["job_id"]))
    if entry is None:
        return web.json_response({"error": "unknown job"}, status=404)
    return web.json_response(entry)


async def _content(request: web.Request) -> web.Response:
    body = request.app[_BOOK].content(request.match_info["hash"])
    if body is None:
        return web.json_response({"error": "unknown content"}, status=404)
    return web.Response(body=body, content_type="application/octet-stream")


def make_app(book: VerdictBook) -> web.Application:
    app = web.Application()
    app[_BOOK] = book
    app.router.add_get(r"/v1/jobs/{job_id:\d{1,30}}", _job)
    app.router.add_get(r"/v1/contracts/{contract:0x[0-9a-fA-F]{40}}/jobs/{job_id:\d{1,30}}", _job)
    app.router.add_get(r"/v1/content/{hash:0x[0-9a-fA-F]{64}}", _content)
    return app


class EvaluatorService:
    """The app on a loopback port (0 = any free port); ``start`` returns the base URL."""

    def __init__(self, book: VerdictBook, *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.book = book
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    async def start(self) -> str:
        runner = web.AppRunner(make_app(self.book), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        return self.base_url

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
