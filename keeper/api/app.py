"""The aiohttp application: health, metrics, the read-only JSON API and the status page.

Metrics scrapes (whose collector runs SQL), status sums and verdict
submissions go through a small thread pool with its own read-only
connections, so they never stall the loop that serves requests. Lookups and
list pages (indexed, page-bounded) run on that loop itself when it is the
API's own (the daemon's case), else on the pool too. Responses and errors:
:mod:`keeper.api.responses`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from keeper.api.dbstats import sqlite_sources
from keeper.api.health import Check
from keeper.api.overview import DEFAULT_RANGE, Overview, parse_range, read_overview
from keeper.api.page import render_not_found, render_status, render_subject
from keeper.api.params import (
    BadParam,
    encode_cursor,
    parse_job_id,
    parse_list_query,
    parse_task_id,
    resolve_contract,
)
from keeper.api.pictures import render_pictures
from keeper.api.reads import ApiReads
from keeper.api.replicas import ReadConnection, ReadTargets, ReplicaCollector
from keeper.api.responses import (
    MAX_SUBMISSION_BYTES,
    errors,
    html,
    json_error,
    json_response,
    json_text,
    tagged_json,
)
from keeper.api.submit import VerdictSubmitter
from keeper.domain.model import Protocol
from keeper.domain.planner import PlannerConfig
from keeper.obs.dbgauges import DatabaseCollector
from keeper.obs.logging import get_logger, redact_text
from keeper.store.subjects import Kind

__all__ = ["READS_KEY", "Readiness", "StatusProvider", "VerificationReader", "make_app"]

T = TypeVar("T")
StatusProvider = Callable[[], Mapping[str, Any]]
Readiness = Callable[[], Mapping[str, Check] | Awaitable[Mapping[str, Check]]]
# (contract address, job id) -> {"status", "failures", "report_digest", ...} or None
VerificationReader = Callable[[str, str], Mapping[str, Any] | None]
# (contract address, job id) -> {"document": ..., "report": ...} or None
VerdictReader = Callable[[str, str], Mapping[str, Any] | None]

READS_KEY = web.AppKey("reads", ApiReads)
_log = get_logger(__name__)


def _redacted(value: Any) -> Any:
    """``value`` with every registered secret masked in its strings."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(v) for v in value]
    return value


class _Handlers:
    """Route handlers sharing the read model, the pool and the injected providers."""

    def __init__(
        self,
        reads: ApiReads,
        registry: CollectorRegistry,
        status_provider: StatusProvider,
        readiness: Readiness | None,
        contracts: Mapping[str, str],
        verification: VerificationReader | None,
        verdicts: VerdictReader | None,
        submit: VerdictSubmitter | None,
        pool: ThreadPoolExecutor,
        inline_lookups: bool,
    ) -> None:
        self.reads = reads
        self.registry = registry
        self.status_provider = status_provider
        self.readiness = readiness
        self.contracts = dict(contracts)
        self.names = {address: name for name, address in self.contracts.items()}
        self.verification = verification
        self.verdicts = verdicts
        self.submit = submit
        self.pool = pool
        self.inline_lookups = inline_lookups
        self.openapi = resources.files("keeper.api").joinpath("openapi.json").read_bytes()

    async def _run(self, fn: Callable[[], T]) -> T:
        """Work that may take long or wait for a lock (scrapes, sums, writes): on the pool."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn)

    async def _lookup(self, fn: Callable[[], T]) -> T:
        """An indexed, page-bounded read: inline when the API has its own loop.

        A pool hop costs two thread handoffs, and while the indexer runs
        Python each handoff waits for the GIL (bench/README.md, API).
        """
        return fn() if self.inline_lookups else await self._run(fn)

    # --- health and metrics -------------------------------------------------------------

    async def healthz(self, _request: web.Request) -> web.Response:
        return json_response({"status": "ok"})

    async def readyz(self, _request: web.Request) -> web.Response:
        if self.readiness is None:
            return json_response({"ready": True, "checks": {}})
        result = self.readiness()
        checks = await result if inspect.isawaitable(result) else result
        ready = all(c.ok for c in checks.values())
        body = {
            "ready": ready,
            "checks": {
                name: {"ok": c.ok, "detail": redact_text(c.detail)} for name, c in checks.items()
            },
            "failed": sorted(name for name, c in checks.items() if not c.ok),
        }
        return json_response(body, 200 if ready else 503)

    async def metrics(self, _request: web.Request) -> web.Response:
        payload = await self._run(lambda: generate_latest(self.registry))
        response = web.Response(body=payload)
        # 0.0.4: the text format every Prometheus 2.x parses; the body is the same
        response.headers["Content-Type"] = CONTENT_TYPE_PLAIN_0_0_4
        return response

    async def openapi_doc(self, _request: web.Request) -> web.Response:
        return web.Response(body=self.openapi, content_type="application/json")

    # --- JSON API -----------------------------------------------------------------------

    def _live(self, db: Mapping[str, Any]) -> dict[str, Any]:
        """The daemon's live view; lag falls back to the indexed block's age in wall time."""
        try:
            # halt reasons and RPC errors are free text that may quote a secret URL
            live: dict[str, Any] = _redacted(dict(self.status_provider()))
        except Exception:
            _log.exception("api_status_provider_failed")
            live = {}
        indexed_at = db.get("indexed_block_timestamp")
        if live.get("lag_seconds") is None and indexed_at is not None:
            live["lag_seconds"] = max(0, int(time.time()) - int(indexed_at))
        live.setdefault("lag_seconds", None)
        return live

    async def status(self, _request: web.Request) -> web.Response:
        db = await self._run(self.reads.status)
        locked = await self._run(self.reads.locked)
        live = self._live(db)
        cursor = db["cursor"] or {}
        lag = live["lag_seconds"]
        contracts = []
        addresses = set(self.names) | set(db["counts"])
        for address in sorted(addresses):
            found = db["dialects"].get(address)
            contracts.append(
                {
                    "name": self.names.get(address),
                    "address": address,
                    "dialect": None if found is None else _dialect_view(found),
                    "paused_since_block": db["paused"].get(address),
                    "counts": db["counts"].get(address, {}),
                    "locked": [
                        {k: v for k, v in r.items() if k != "contract"}
                        for r in locked
                        if r["contract"] == address
                    ],
                }
            )
        body = {
            "chain_id": live.get("chain_id", cursor.get("chain_id")),
            "head_block": live.get("head_block"),
            "finalized_block": live.get("finalized_block", cursor.get("finalized_block")),
            "indexed_block": cursor.get("indexed_block"),
            "indexed_hash": cursor.get("indexed_hash"),
            "lag_seconds": lag,
            "halted": bool(live.get("halt_reason")),
            "halt_reason": live.get("halt_reason"),
            "contracts": contracts,
            "keeper": {
                **dict(live.get("keeper") or {}),
                "backlog": db["keeper_backlog"],
                "outcomes": db["keeper_outcomes"],
            },
        }
        for key in ("indexer", "database"):  # a daemon's roles and read replicas
            if key in live:
                body[key] = live[key]
        return json_response(body)

    async def list_jobs(self, request: web.Request) -> web.Response:
        return await self._list("jobs", request)

    async def list_tasks(self, request: web.Request) -> web.Response:
        return await self._list("tasks", request)

    async def _list(self, kind: Kind, request: web.Request) -> web.Response:
        query = {k: request.query.getall(k) for k in request.query}
        parsed = parse_list_query(kind, query, self.contracts)
        page = await self._lookup(lambda: self.reads.list_subjects(parsed))
        cursor = "null" if page.next_key is None else f'"{encode_cursor(kind, page.next_key)}"'
        return json_text(f'{{"items":[{page.items}],"next_cursor":{cursor}}}')

    async def _detail(
        self, kind: Kind, request: web.Request
    ) -> tuple[str, str, tuple[str, str] | None]:
        """(contract, id, the detail's JSON text and entity tag, or None) of a detail path."""
        contract = resolve_contract(request.match_info["contract"], self.contracts)
        if kind == "jobs":
            subject = parse_job_id(request.match_info["job_id"])
        else:
            subject = parse_task_id(request.match_info["task_id"])
        name = self.names.get(contract)
        found = await self._lookup(lambda: self.reads.tagged_detail(kind, contract, subject, name))
        return contract, subject, found

    async def _item(
        self, kind: Kind, request: web.Request
    ) -> tuple[str, str, dict[str, Any] | None]:
        """The detail as a dictionary (for the pages)."""
        contract, subject, found = await self._detail(kind, request)
        if found is None:
            return contract, subject, None
        return contract, subject, await self._verified(json.loads(found[0]), contract, subject)

    async def _verified(self, item: dict[str, Any], contract: str, subject: str) -> dict[str, Any]:
        """A job's verification from an injected reader instead of the store's."""
        reader = self.verification
        if "verification" in item and reader != self.reads.verification:
            item["verification"] = (
                None if reader is None else await self._lookup(lambda: reader(contract, subject))
            )
        return item

    async def get_job(self, request: web.Request) -> web.Response:
        return await self._detail_response("jobs", request)

    async def get_task(self, request: web.Request) -> web.Response:
        return await self._detail_response("tasks", request)

    async def _detail_response(self, kind: Kind, request: web.Request) -> web.Response:
        contract, subject, found = await self._detail(kind, request)
        if found is None:
            return json_error(404, "not_found", f"no {kind[:-1]} {subject} on {contract}")
        text, tag = found
        if kind == "jobs" and self.verification != self.reads.verification:
            return json_response(await self._verified(json.loads(text), contract, subject))
        return tagged_json(request, text, tag)

    async def get_verdict(self, request: web.Request) -> web.Response:
        contract = resolve_contract(request.match_info["contract"], self.contracts)
        job_id = parse_job_id(request.match_info["job_id"])
        found = (
            await self._lookup(lambda: self.verdicts(contract, job_id))  # type: ignore[misc]
            if self.verdicts is not None
            else None
        )
        if found is None:
            return json_error(404, "not_found", f"no stored verdict for job {job_id} on {contract}")
        return json_response({"contract": contract, "job_id": job_id, **found})

    async def post_verdict(self, request: web.Request) -> web.Response:
        """Accept a verdict document only if it is the one an indexed verdict names."""
        if self.submit is None:
            return json_error(503, "submissions_disabled", "verdict submission is not enabled")
        raw = await request.read()
        submit = self.submit
        result = await self._run(lambda: submit(raw))
        if not result.accepted:
            code = result.code or "invalid_document"
            return json_error(422, code, result.detail or code, pointer=result.pointer)
        jobs = [
            {"contract": c, "contract_name": self.names.get(c), "job_id": j} for c, j in result.jobs
        ]
        return json_response({"accepted": True, "digest": result.digest, "jobs": jobs}, 202)

    # --- HTML ---------------------------------------------------------------------------

    async def index(self, request: web.Request) -> web.Response:
        try:
            range_name = parse_range(request.query.getall("range", []))
        except BadParam as exc:
            return html(await self._status_page(f"{exc.param}: {exc.message}"), 400)
        return html(await self._status_page(range_name=range_name))

    def _overview(self, range_name: str) -> Overview | None:
        chain_id = self.reads.chain_id
        if chain_id is None:
            return None  # the pictures are per chain
        return self.reads.snapshot(
            lambda conn: read_overview(conn, chain_id, range_name, PlannerConfig()), None
        )

    async def _status_page(self, message: str = "", range_name: str = DEFAULT_RANGE) -> str:
        view = await self._run(lambda: self._overview(range_name))
        pictures = render_pictures(view, self.names, range_name)
        tokens = view.tokens if view is not None else {}
        db = await self._run(self.reads.status)
        locked = await self._run(self.reads.locked)
        recent = await self._run(self.reads.recent_verdicts)
        if self.verification is not None:
            for v in recent:
                v["verification"] = await self._run(
                    partial(self.verification, v["contract"], v["job_id"])
                )
        return render_status(
            self._live(db), db, locked, recent, self.contracts, message, pictures, tokens
        )

    async def lookup(self, request: web.Request) -> web.Response:
        """The lookup box's target: redirect to the detail page, or explain what is wrong."""
        contract_text = request.query.get("contract", "")
        subject = request.query.get("id", "").strip()
        try:
            contract = resolve_contract(contract_text, self.contracts)
            kind = "tasks" if subject.startswith("0x") else "jobs"
            subject = (
                parse_task_id(subject, "id") if kind == "tasks" else parse_job_id(subject, "id")
            )
        except BadParam as exc:
            return html(await self._status_page(f"{exc.param}: {exc.message}"), 400)
        name = self.names.get(contract, contract)
        raise web.HTTPFound(f"/{kind}/{name}/{subject}")

    async def job_page(self, request: web.Request) -> web.Response:
        return await self._subject_page("jobs", request)

    async def task_page(self, request: web.Request) -> web.Response:
        return await self._subject_page("tasks", request)

    async def _subject_page(self, kind: Kind, request: web.Request) -> web.Response:
        try:
            contract, subject, item = await self._item(kind, request)
        except BadParam as exc:
            return html(render_not_found(f"{exc.param}: {exc.message}", self.contracts), 400)
        name = self.names.get(contract, contract)
        if item is None:
            what = f"No {'job' if kind == 'jobs' else 'task'} {subject} on {name}."
            return html(render_not_found(what, self.contracts), 404)
        return html(render_subject(kind, item, name))


def make_app(
    db_path: str | Path,
    registry: CollectorRegistry,
    status_provider: StatusProvider,
    *,
    readiness: Readiness | None = None,
    contracts: Mapping[str, str] | None = None,
    protocols: Mapping[str, Protocol] | None = None,
    chain_id: int | None = None,
    verification: VerificationReader | None = None,
    verdicts: VerdictReader | None = None,
    submit_verdict: VerdictSubmitter | None = None,
    db_gauges: bool = True,
    read_threads: int = 2,
    inline_lookups: bool = False,
    read_targets: ReadTargets | None = None,
) -> web.Application:
    """Build the HTTP application.

    ``contracts`` maps configured names to addresses (paths and filters accept
    either); ``protocols`` maps those addresses to their protocol, so the
    database gauges export zero series for every status. With ``chain_id``,
    verifications and verdict documents are read from the verify component's
    tables unless ``verification``/``verdicts`` readers are given.
    ``submit_verdict`` (see :func:`keeper.api.submit.submission_handler`)
    enables ``POST /v1/verdicts``; without it the route answers 503. With ``db_gauges``
    the scrape-time database collector is registered on ``registry``.
    ``inline_lookups`` runs single-subject and list reads on the app's own
    event loop instead of the pool: only for an app whose loop serves nothing
    else (:class:`keeper.api.serve.ApiThread`), never on the daemon's loop.
    ``status_provider`` returns the daemon's live view (chain_id, head_block,
    finalized_block, lag_seconds, halt_reason, keeper: {...}); ``readiness``
    returns named :class:`Check` results, sync or async. With ``read_targets``
    the pages are read from its standbys (:mod:`keeper.api.replicas`), whose
    lag is exported on ``registry``.
    """
    names = dict(contracts or {})
    open_read = None
    if read_targets is not None:
        targets = read_targets
        registry.register(ReplicaCollector(targets))
        open_read = lambda: ReadConnection(targets)  # noqa: E731
    reads = ApiReads(
        db_path, chain_id, {address: name for name, address in names.items()}, open_read=open_read
    )
    pool = ThreadPoolExecutor(max_workers=read_threads, thread_name_prefix="keeper-api")
    if db_gauges:
        by_address = {
            address: (name, (protocols or {}).get(address)) for name, address in names.items()
        }
        sources = sqlite_sources(db_path, chain_id, open_read)
        registry.register(DatabaseCollector(sources, by_address))
    if verification is None and chain_id is not None:
        verification = reads.verification
    if verdicts is None and chain_id is not None:
        verdicts = reads.verdict
    h = _Handlers(
        reads, registry, status_provider, readiness, names, verification, verdicts,
        submit_verdict, pool, inline_lookups,
    )  # fmt: skip

    # verdict documents are a few hundred bytes; this caps what a POST may make us read
    app = web.Application(middlewares=[errors], client_max_size=MAX_SUBMISSION_BYTES)
    app[READS_KEY] = reads
    app.router.add_get("/healthz", h.healthz)
    app.router.add_get("/readyz", h.readyz)
    app.router.add_get("/metrics", h.metrics)
    app.router.add_get("/openapi.json", h.openapi_doc)
    app.router.add_get("/v1/status", h.status)
    app.router.add_get("/v1/jobs", h.list_jobs)
    app.router.add_get("/v1/jobs/{contract}/{job_id}", h.get_job)
    app.router.add_get("/v1/tasks", h.list_tasks)
    app.router.add_get("/v1/tasks/{contract}/{task_id}", h.get_task)
    app.router.add_get("/v1/verdicts/{contract}/{job_id}", h.get_verdict)
    app.router.add_post("/v1/verdicts", h.post_verdict)
    app.router.add_get("/", h.index)
    app.router.add_get("/lookup", h.lookup)
    app.router.add_get("/jobs/{contract}/{job_id}", h.job_page)
    app.router.add_get("/tasks/{contract}/{task_id}", h.task_page)

    async def _close(_app: web.Application) -> None:
        pool.shutdown(wait=True)
        reads.close()

    app.on_cleanup.append(_close)
    return app


def _dialect_view(found: Mapping[str, Any]) -> dict[str, Any]:
    """A contract's recorded dialect, as /v1/status shows it."""
    keys = ("dialect", "source", "diamond", "revision", "reason")
    return {k: found[k] for k in keys}
