"""Tests for keeper.api.app: every route against a real aiohttp server and a real database."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from api_support import build_app, failing_readiness
from api_world import ACP, BUDGET, CHAIN_ID, CLIENTS, TM, USDC, World, task_id
from prometheus_client.parser import text_string_to_metric_families

from keeper.api.health import Check
from keeper.api.submit import submission_handler
from keeper.obs.logging import clear_secrets, register_rpc_url
from keeper.store.db import connect
from keeper.store.index_rows import description_json
from keeper.store.verifications import get_document
from keeper.verify.canonical import canonical_bytes

Client = TestClient[Any, Any]
Validate = Callable[[str, Any], None]


async def get_json(client: Client, path: str, status: int = 200) -> Any:
    response = await client.get(path, allow_redirects=False)
    assert response.status == status, await response.text()
    assert response.content_type == "application/json"
    return await response.json()


class TestHealth:
    async def test_healthz(self, client: Client) -> None:
        """/healthz answers 200 while the process runs."""
        assert await get_json(client, "/healthz") == {"status": "ok"}

    async def test_readyz_without_checks_is_ready(self, client: Client) -> None:
        """With no readiness callable configured the server reports ready."""
        assert (await get_json(client, "/readyz"))["ready"] is True

    async def test_readyz_names_failed_checks(self, world: World) -> None:
        """A failing check turns /readyz into a 503 that names it and says why."""
        async with TestClient(TestServer(build_app(world, readiness=failing_readiness))) as c:
            body = await get_json(c, "/readyz", 503)
        assert body["failed"] == ["indexing"]
        assert body["checks"]["indexing"] == {"ok": False, "detail": "halted: deep reorg"}

    async def test_readyz_accepts_async_checks(self, world: World) -> None:
        """The readiness callable may be a coroutine function."""

        async def checks() -> dict[str, Check]:
            await asyncio.sleep(0)
            return {"rpc": Check(True, "fine")}

        async with TestClient(TestServer(build_app(world, readiness=checks))) as c:
            assert (await get_json(c, "/readyz"))["checks"]["rpc"]["ok"] is True


class TestMetrics:
    async def test_metrics_include_database_gauges(self, client: Client, world: World) -> None:
        """A scrape carries the declared metrics and job counts computed from the database."""
        response = await client.get("/metrics")
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        families = {f.name: f for f in text_string_to_metric_families(await response.text())}
        funded = sum(1 for s in world.jobs.values() if s == "funded")
        jobs = {
            (s.labels["contract"], s.labels["status"]): s.value
            for s in families["keeper_jobs"].samples
        }
        assert jobs[("acp", "funded")] == funded
        assert jobs[("acp", "expired")] == 0
        assert "keeper_build_info" in families and "keeper_rpc_requests" in families
        verdicts = {(s.labels["status"], s.value) for s in families["keeper_verdicts"].samples}
        assert verdicts == {("verified", 1.0)}
        overdue = families["keeper_overdue_actions"].samples
        assert [(s.labels["action"], s.value) for s in overdue] == [("claimRefund", 1.0)]


class TestOpenApi:
    async def test_document_served_and_covers_every_route(self, client: Client) -> None:
        """/openapi.json is the repo file, version 3.1, and documents exactly the app's routes."""
        doc = await get_json(client, "/openapi.json")
        assert doc["openapi"].startswith("3.1")
        app_paths = {re.sub(r"\{[^}]+\}", "{}", r.canonical) for r in client.app.router.resources()}
        doc_paths = {re.sub(r"\{[^}]+\}", "{}", p) for p in doc["paths"]}
        assert app_paths == doc_paths

    def test_every_ref_resolves_and_every_operation_is_complete(
        self, openapi: dict[str, Any]
    ) -> None:
        """Each $ref points at a defined schema; each operation has an id and a 2xx/3xx answer."""
        refs: list[str] = []

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                if "$ref" in node:
                    refs.append(node["$ref"])
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)

        walk(openapi)
        schemas = openapi["components"]["schemas"]
        assert refs and all(r.removeprefix("#/components/schemas/") in schemas for r in refs)
        ids = [op["operationId"] for item in openapi["paths"].values() for op in item.values()]
        assert len(ids) == len(set(ids))
        for item in openapi["paths"].values():
            for op in item.values():
                assert any(code.startswith(("2", "3")) for code in op["responses"])


class TestStatus:
    async def test_status_reflects_database(
        self, client: Client, world: World, validate: Validate
    ) -> None:
        """Cursor, per-contract counts, exact locked escrow and keeper backlog come back."""
        body = await get_json(client, "/v1/status")
        validate("Status", body)
        assert world.head is not None
        assert body["chain_id"] == CHAIN_ID
        assert body["indexed_block"] == world.head.number
        assert body["finalized_block"] == world.head.number - 2
        acp = next(c for c in body["contracts"] if c["name"] == "acp")
        expected: dict[str, int] = {}
        for status in world.jobs.values():
            expected[status] = expected.get(status, 0) + 1
        assert acp["counts"]["jobs"] == expected
        holding = sum(1 for s in world.jobs.values() if s in ("funded", "submitted"))
        unfunded = sum(1 for s in world.jobs.values() if s == "open")
        assert acp["locked"] == [
            {
                "token": USDC,
                "kind": "jobs",
                "amount": str(BUDGET * holding),
                "count": holding,
                "open_budget": str(BUDGET * unfunded),
            }
        ]
        assert body["keeper"]["backlog"] == {"claimRefund": 1}
        assert body["halted"] is False
        assert world.head is not None and body["lag_seconds"] >= 0

    async def test_halt_reason_from_live_view(self, world: World) -> None:
        """The daemon's live halt reason is surfaced in status and on the page."""
        live = {"chain_id": CHAIN_ID, "halt_reason": "reorg deeper than window"}
        async with TestClient(TestServer(build_app(world, live=live))) as c:
            body = await get_json(c, "/v1/status")
            page = await (await c.get("/")).text()
        assert body["halted"] is True and body["halt_reason"] == "reorg deeper than window"
        assert "Indexing halted: reorg deeper than window" in page

    async def test_missing_database_is_503(self, tmp_db: Path, world: World) -> None:
        """Reads against a database that cannot be opened answer 503, not 500."""
        world_copy = World(tmp_db)
        async with TestClient(TestServer(build_app(world_copy))) as c:
            body = await get_json(c, "/v1/status", 503)
        assert body["error"] == "database_unavailable"


class TestJobs:
    async def test_list_is_newest_first_and_valid(
        self, client: Client, world: World, validate: Validate
    ) -> None:
        """The default page lists every job, newest (highest creation block) first."""
        body = await get_json(client, "/v1/jobs?limit=500")
        validate("JobList", body)
        ids = [item["job_id"] for item in body["items"]]
        assert ids == sorted(world.jobs, key=int, reverse=True)
        assert body["next_cursor"] is None
        assert {item["contract_name"] for item in body["items"]} == {"acp"}

    @pytest.mark.parametrize("statuses", ["funded", "funded,submitted", "completed"])
    async def test_status_filter(self, client: Client, world: World, statuses: str) -> None:
        """status= (one or several) returns exactly the jobs in those states."""
        body = await get_json(client, f"/v1/jobs?status={statuses}&limit=500")
        wanted = set(statuses.split(","))
        assert {i["job_id"] for i in body["items"]} == {
            j for j, s in world.jobs.items() if s in wanted
        }

    async def test_party_and_contract_filters(self, client: Client, world: World) -> None:
        """client= matches case-insensitively; contract accepts a name or an address."""
        client_addr = CLIENTS[0]
        by_client = await get_json(client, f"/v1/jobs?client={client_addr.upper()[2:]}", 400)
        assert by_client["parameter"] == "client"
        body = await get_json(client, f"/v1/jobs?client=0x{client_addr[2:].upper()}&limit=500")
        assert {i["job_id"] for i in body["items"]} == {
            j for j, c in world.clients.items() if c == client_addr
        }
        by_name = await get_json(client, "/v1/jobs?contract=acp&limit=500")
        by_address = await get_json(client, f"/v1/jobs?contract={ACP.upper()[2:]}", 400)
        assert by_address["parameter"] == "contract"
        by_address = await get_json(client, f"/v1/jobs?contract=0x{ACP[2:].upper()}&limit=500")
        assert by_name == by_address
        assert (await get_json(client, "/v1/jobs?contract=tm"))["items"] == []

    async def test_pagination_walks_every_job_once(self, client: Client, world: World) -> None:
        """Following next_cursor with limit=5 visits each job exactly once, in order."""
        seen: list[str] = []
        path = "/v1/jobs?limit=5"
        pages = 0
        while True:
            body = await get_json(client, path)
            pages += 1
            assert len(body["items"]) <= 5
            seen += [i["job_id"] for i in body["items"]]
            if body["next_cursor"] is None:
                break
            path = f"/v1/jobs?limit=5&cursor={body['next_cursor']}"
        assert seen == sorted(world.jobs, key=int, reverse=True)
        assert pages == -(-len(world.jobs) // 5)

    async def test_list_items_are_the_detail_objects(
        self, world: World, tmp_path: Path, validate: Validate
    ) -> None:
        """A list item is the detail object without events/intents/verification, byte for byte
        in meaning: a page is encoded as one text by SQLite, a detail decoded and re-encoded.
        Hostile text (quotes, NUL and control characters, non-ASCII), a legacy job and a task
        verdict type go through both."""
        copy = tmp_path / "hostile.db"
        shutil.copy(world.path, copy)
        conn = connect(copy)
        hostile = 'q"\\ \x00\x01\x1f \u2028 é 😀 </script> {"x":1}'
        kept = description_json(hostile)  # as the index store writes it
        conn.execute("UPDATE jobs SET description = ?, legacy = 1 WHERE job_id = '3'", [kept])
        conn.execute("UPDATE jobs SET deliverable = NULL WHERE job_id = '4'")
        conn.execute(
            "UPDATE tasks SET verdict_type = 2, score = 77 WHERE task_id = ?", [task_id(2)]
        )
        conn.close()
        detail_only = {"events", "reads", "intents", "verification", "contract_paused"}
        async with TestClient(TestServer(build_app(World(copy), inline_lookups=True))) as c:
            for kind, key in (("jobs", "job_id"), ("tasks", "task_id")):
                body = await get_json(c, f"/v1/{kind}?limit=500")
                validate("JobList" if kind == "jobs" else "TaskList", body)
                assert len(body["items"]) == len(world.jobs if kind == "jobs" else world.tasks)
                for item in body["items"]:
                    detail = await get_json(c, f"/v1/{kind}/{item['contract']}/{item[key]}")
                    expected = {k: v for k, v in detail.items() if k not in detail_only}
                    assert list(item) == list(expected)
                    assert item == expected
            job3 = await get_json(c, "/v1/jobs/acp/3")
            task2 = await get_json(c, f"/v1/tasks/tm/{task_id(2)}")
        assert (job3["description"], job3["legacy"]) == (hostile, True)
        assert (task2["verdict_type"], task2["extra"]["worker_stake"]) == ("partial", "5")

    async def test_list_follows_every_commit(self, world: World, tmp_path: Path) -> None:
        """A page asked for again is the same page until another connection commits;
        after any commit (status, amount, a new job) the next request shows it."""
        copy = tmp_path / "changing.db"
        shutil.copy(world.path, copy)
        path = "/v1/jobs?status=completed&limit=500"
        writer = connect(copy)
        async with TestClient(TestServer(build_app(World(copy), inline_lookups=True))) as c:
            first = await get_json(c, path)
            assert await get_json(c, path) == first
            done = [i["job_id"] for i in first["items"]]
            writer.execute("UPDATE jobs SET status = 'rejected' WHERE job_id = ?", [done[0]])
            writer.commit()
            after_status = await get_json(c, path)
            assert [i["job_id"] for i in after_status["items"]] == done[1:]
            writer.execute("UPDATE jobs SET paid_amount = '12345' WHERE job_id = ?", [done[1]])
            writer.commit()
            paid = (await get_json(c, path))["items"][0]
            assert (paid["job_id"], paid["paid_amount"]) == (done[1], "12345")
            writer.execute(
                "INSERT INTO jobs SELECT chain_id, contract, '999', client, provider, evaluator,"
                " hook, token, budget, funded_amount, expired_at, submitted_at, status,"
                " status_code, deliverable, reason, description, legacy, created_block + 100,"
                " updated_block + 100, verdict_event, refunded_amount, paid_amount,"
                " settled_amount, payout_receiver, pending_claim_amount, dialect"
                " FROM jobs WHERE job_id = ?",
                [done[1]],
            )
            writer.commit()
            assert (await get_json(c, path))["items"][0]["job_id"] == "999"
            # requests arriving together after a commit all get the new page
            writer.execute("UPDATE jobs SET paid_amount = '777' WHERE job_id = '999'")
            writer.commit()
            together = await asyncio.gather(*(get_json(c, path) for _ in range(8)))
            assert all(body == together[0] for body in together)
            assert together[0]["items"][0]["paid_amount"] == "777"
            assert await get_json(c, path) == together[0]
        writer.close()

    @pytest.mark.parametrize(
        ("query", "parameter"),
        [
            ("limit=0", "limit"),
            ("limit=501", "limit"),
            ("limit=ten", "limit"),
            ("limit=5&limit=6", "limit"),
            ("status=done", "status"),
            ("status=", "status"),
            ("client=0x12", "client"),
            ("requester=" + "0x" + "11" * 20, "requester"),
            ("contract=nope", "contract"),
            ("cursor=!!!", "cursor"),
            ("cursor=WyJ0IiwxLCJ4IiwieSJd", "cursor"),  # a tasks cursor
            # jobs cursors at block 2**70 (past the store's integers: it was a 500) and -1
            (
                "cursor=WyJqIiwxMTgwNTkxNjIwNzE3NDExMzAzNDI0LCIweDExMTExMTExMTExMTExMTExMTExMTEx"
                "MTExMTExMTExMTExMTExMTExMTEiLCIxIl0",
                "cursor",
            ),
            (
                "cursor=WyJqIiwtMSwiMHgxMTExMTExMTExMTExMTExMTExMTExMTExMTExMTExMTExMTExMTExIiwiMSJd",
                "cursor",
            ),
            ("colour=blue", "colour"),
        ],
    )
    async def test_bad_parameters_are_400_naming_them(
        self, client: Client, validate: Validate, query: str, parameter: str
    ) -> None:
        """Each invalid parameter yields 400 with a JSON error naming that parameter."""
        body = await get_json(client, f"/v1/jobs?{query}", 400)
        validate("Error", body)
        assert body["error"] == "bad_parameter"
        assert body["parameter"] == parameter

    async def test_job_detail(self, client: Client, world: World, validate: Validate) -> None:
        """One job comes with exact amounts, its events in order, and its keeper intents."""
        completed = next(
            j for j, s in world.jobs.items() if s == "completed" and j != world.verified_job
        )
        body = await get_json(client, f"/v1/jobs/acp/{completed}")
        validate("JobDetail", body)
        assert body["status"] == "completed"
        assert body["budget"] == str(BUDGET)
        assert body["token"] == USDC
        assert body["reason"] == world.reasons[completed]
        assert [e["name"] for e in body["events"]] == [
            "JobCreated",
            "BudgetSet",
            "JobFunded",
            "JobSubmitted",
            "JobCompleted",
        ]
        assert body["events"][1]["args"]["amount"] == str(BUDGET)
        assert body["intents"] == []
        assert body["verification"] is None

    async def test_job_intents(self, client: Client, world: World) -> None:
        """A job with a keeper intent lists it with its action and state."""
        body = await get_json(client, f"/v1/jobs/{ACP}/{world.intent_job}")
        assert [(i["action"], i["status"]) for i in body["intents"]] == [("claimRefund", "open")]

    async def test_job_verification_from_store(
        self, client: Client, world: World, validate: Validate
    ) -> None:
        """A verified job carries its latest verification as recorded by the verify store."""
        body = await get_json(client, f"/v1/jobs/acp/{world.verified_job}")
        validate("JobDetail", body)
        verification = body["verification"]
        assert verification["status"] == "verified"
        assert verification["report_digest"] == world.report_digest
        assert verification["revision_count"] == 2
        assert verification["event"]["name"] == "JobCompleted"

    async def test_job_verification_from_reader(self, world: World, validate: Validate) -> None:
        """The verification object is whatever the verification reader returns for that job."""
        calls: list[tuple[str, str]] = []

        def reader(contract: str, job_id: str) -> dict[str, Any]:
            calls.append((contract, job_id))
            return {"status": "verified", "failures": [], "report_digest": "0x" + "ab" * 32}

        async with TestClient(TestServer(build_app(world, verification=reader))) as c:
            body = await get_json(c, "/v1/jobs/acp/3")
        validate("JobDetail", body)
        assert body["verification"]["status"] == "verified"
        assert calls == [(ACP, "3")]

    @pytest.mark.parametrize(
        ("path", "status", "parameter"),
        [
            ("/v1/jobs/acp/999", 404, None),
            ("/v1/jobs/acp/abc", 400, "jobId"),
            ("/v1/jobs/acp/007", 400, "jobId"),
            (f"/v1/jobs/acp/{2**256}", 400, "jobId"),
            ("/v1/jobs/nope/1", 400, "contract"),
            (f"/v1/jobs/{TM}/1", 404, None),
        ],
    )
    async def test_job_errors(
        self, client: Client, path: str, status: int, parameter: str | None
    ) -> None:
        """Malformed ids are 400 naming the parameter; unknown ones are 404."""
        body = await get_json(client, path, status)
        assert body.get("parameter") == parameter


class TestTasks:
    async def test_list_and_filter(self, client: Client, world: World, validate: Validate) -> None:
        """Tasks list newest first and filter by status."""
        body = await get_json(client, "/v1/tasks")
        validate("TaskList", body)
        assert [i["task_id"] for i in body["items"]] == sorted(world.tasks, reverse=True)
        claimed = await get_json(client, "/v1/tasks?status=claimed")
        assert {i["task_id"] for i in claimed["items"]} == {
            t for t, s in world.tasks.items() if s == "claimed"
        }
        assert (await get_json(client, "/v1/tasks?client=0x" + "11" * 20, 400))[
            "parameter"
        ] == "client"

    async def test_task_detail(self, client: Client, validate: Validate) -> None:
        """One task with its events; an upper-case id finds the same task."""
        tid = task_id(2)
        body = await get_json(client, f"/v1/tasks/tm/0x{tid[2:].upper()}")
        validate("TaskDetail", body)
        assert body["task_id"] == tid
        assert body["status"] == "claimed"
        assert body["reward"] == str(10**6)
        assert [e["name"] for e in body["events"]] == ["TaskCreated", "TaskClaimed"]

    async def test_task_errors(self, client: Client) -> None:
        """A short task id is 400 naming taskId; an unknown one is 404."""
        assert (await get_json(client, "/v1/tasks/tm/0x12", 400))["parameter"] == "taskId"
        await get_json(client, f"/v1/tasks/tm/{task_id(99)}", 404)


class TestVerdicts:
    async def test_unverified_job_is_404(self, client: Client, world: World) -> None:
        """A job without a recorded verification has no verdict to serve."""
        other = next(j for j in world.jobs if j != world.verified_job)
        assert (await get_json(client, f"/v1/verdicts/acp/{other}", 404))["error"] == "not_found"

    async def test_stored_verdict_document_and_history(
        self, client: Client, world: World, validate: Validate
    ) -> None:
        """The stored document, latest report and the report chain are served."""
        body = await get_json(client, f"/v1/verdicts/acp/{world.verified_job}")
        validate("Verdict", body)
        assert body["document"] == world.documents[world.verified_job]
        assert body["report_digest"] == world.report_digest
        assert body["report"]["status"] == "verified"
        history = body["history"]
        assert [h["status"] for h in history] == ["unavailable", "verified"]
        assert history[1]["parent_digest"] == history[0]["report_digest"]

    async def test_reader_result_served(self, world: World, validate: Validate) -> None:
        """A stored document and report are served for that job."""
        doc = {"evaluator": "SchemaEval", "esito": "complete"}

        def verdicts(contract: str, job_id: str) -> dict[str, Any] | None:
            return {"document": doc, "report": {"status": "verified"}} if job_id == "3" else None

        async with TestClient(TestServer(build_app(world, verdicts=verdicts))) as c:
            body = await get_json(c, "/v1/verdicts/acp/3")
            await get_json(c, "/v1/verdicts/acp/4", 404)
        validate("Verdict", body)
        assert body["document"] == doc and body["contract"] == ACP


class TestErrorsAndHeaders:
    async def test_unknown_route_is_json_404(self, client: Client, validate: Validate) -> None:
        """Any unknown path answers a JSON 404."""
        body = await get_json(client, "/v2/nothing", 404)
        validate("Error", body)
        assert body["message"] == "no route for /v2/nothing"

    async def test_a_long_unknown_path_is_not_echoed_whole(self, client: Client) -> None:
        """The 404 names the path, clipped: 8 KB of path is not 8 KB of answer."""
        path = "/v2/" + "x" * 7000
        body = await get_json(client, path, 404)
        assert body["message"] == f"no route for {path[:197]}..."

    async def test_wrong_method_is_json_405(self, client: Client) -> None:
        """The API is read-only: POST on a GET route is a JSON 405."""
        response = await client.post("/v1/jobs")
        assert response.status == 405
        assert (await response.json())["error"] == "method_not_allowed"

    async def test_security_headers(self, client: Client) -> None:
        """JSON and HTML responses carry nosniff; the page forbids scripts via CSP."""
        api = await client.get("/v1/status")
        page = await client.get("/")
        assert api.headers["X-Content-Type-Options"] == "nosniff"
        assert "default-src 'none'" in page.headers["Content-Security-Policy"]


class TestPages:
    async def test_status_page_shows_state(self, client: Client, world: World) -> None:
        """The page renders sync state, escrow, counts, backlog, recent verdicts and lookup."""
        response = await client.get("/")
        assert response.status == 200 and response.content_type == "text/html"
        text = await response.text()
        for heading in (
            "Sync",
            "Escrow locked",
            "Jobs and tasks",
            "Keeper backlog",
            "Recent verdicts",
        ):
            assert f"<h2>{heading}</h2>" in text
        holding = sum(1 for s in world.jobs.values() if s in ("funded", "submitted"))
        assert str(BUDGET * holding) in text
        assert '<form method="get" action="/lookup" id="lookup">' in text
        assert world.reasons[next(iter(world.reasons))] in text
        assert "<td>verified</td>" in text
        assert "<script" not in text

    async def test_lookup_redirects_to_job_page(self, client: Client, world: World) -> None:
        """The lookup box sends a job id to its detail page, which escapes chain text."""
        response = await client.get("/lookup?contract=acp&id=3", allow_redirects=False)
        assert response.status == 302
        assert response.headers["Location"] == "/jobs/acp/3"
        page = await (await client.get("/jobs/acp/3")).text()
        assert f'<strong id="status">{world.jobs["3"]}</strong>' in page
        assert "&lt;b&gt;bold&lt;/b&gt;" in page and "<b>bold" not in page

    async def test_lookup_task_id(self, client: Client) -> None:
        """A 0x id is looked up as a task."""
        response = await client.get(f"/lookup?contract=tm&id={task_id(1)}", allow_redirects=False)
        assert response.headers["Location"] == f"/tasks/tm/{task_id(1)}"
        assert (await client.get(response.headers["Location"])).status == 200

    async def test_lookup_bad_input_explains(self, client: Client) -> None:
        """A malformed id re-renders the page with a message naming the field."""
        response = await client.get("/lookup?contract=acp&id=seven")
        assert response.status == 400
        assert "id: not a job id" in await response.text()

    async def test_unknown_job_page_is_404(self, client: Client) -> None:
        """An unknown job renders a not-found page with the lookup box."""
        response = await client.get("/jobs/acp/424242")
        assert response.status == 404
        assert "No job 424242 on acp." in await response.text()

    async def test_unknown_task_page_is_404(self, client: Client) -> None:
        response = await client.get(f"/tasks/tm/{task_id(4242)}")
        assert response.status == 404
        assert f"No task {task_id(4242)} on tm." in await response.text()


class TestNoSecrets:
    async def test_registered_secrets_never_served(self, world: World) -> None:
        """A secret URL quoted in a halt reason or a readiness detail is masked on every route."""
        secret_url = "https://user:pw0rd123@rpc.example/v3/0123456789abcdefKEY"
        register_rpc_url(secret_url)
        try:
            live = {"chain_id": CHAIN_ID, "halt_reason": f"eth_getLogs failed at {secret_url}"}

            def readiness() -> dict[str, Check]:
                return {"rpc": Check(False, f"{secret_url} timed out")}

            app = build_app(world, live=live, readiness=readiness)
            async with TestClient(TestServer(app)) as c:
                bodies = [
                    await (await c.get(path)).text()
                    for path in ("/v1/status", "/readyz", "/", "/jobs/acp/3", "/metrics")
                ]
        finally:
            clear_secrets()
        assert "[REDACTED]" in bodies[0] and "[REDACTED]" in bodies[1]
        for body in bodies:
            for piece in ("pw0rd123", "0123456789abcdefKEY", secret_url):
                assert piece not in body


class TestSubmitVerdict:
    @pytest.fixture
    async def submitting(self, world: World) -> AsyncIterator[Client]:
        app = build_app(world, submit_verdict=submission_handler(world.path, CHAIN_ID))
        async with TestClient(TestServer(app)) as c:
            yield c

    async def test_matching_document_is_stored(
        self, submitting: Client, world: World, validate: Validate
    ) -> None:
        """A document whose canonical digest is a verdict's reason is accepted and stored."""
        job = next(j for j in world.documents if j != world.verified_job)
        document = world.documents[job]
        # reordered and indented: canonicalisation, not the sender's bytes, decides
        raw = json.dumps(dict(reversed(list(document.items()))), indent=2).encode()
        response = await submitting.post("/v1/verdicts", data=raw)
        assert response.status == 202, await response.text()
        body = await response.json()
        validate("SubmissionAccepted", body)
        assert body["digest"] == world.reasons[job]
        assert body["jobs"] == [{"contract": ACP, "contract_name": "acp", "job_id": job}]
        conn = connect(world.path, readonly=True)
        try:
            assert get_document(conn, world.reasons[job]) == canonical_bytes(document)
        finally:
            conn.close()

    @pytest.mark.parametrize(
        ("raw", "code"),
        [
            (b'{"esito": "complete", "jobId": "1"}', "verdict_hash_mismatch"),
            (b"not json", "invalid_document"),
            (b"[1, 2]", "invalid_document"),
        ],
    )
    async def test_refused_documents_are_422(
        self, submitting: Client, validate: Validate, raw: bytes, code: str
    ) -> None:
        """A document no verdict names, or no document at all, is refused with its code."""
        response = await submitting.post("/v1/verdicts", data=raw)
        assert response.status == 422
        body = await response.json()
        validate("Error", body)
        assert body["error"] == code

    async def test_oversized_body_is_413(self, submitting: Client) -> None:
        """A body over the limit is refused before it is read whole."""
        response = await submitting.post("/v1/verdicts", data=b"{" + b" " * (1 << 20) + b"}")
        assert response.status == 413
        assert (await response.json())["error"] == "too_large"

    async def test_disabled_without_submitter(self, client: Client) -> None:
        """Without a submitter the route answers 503, naming why."""
        response = await client.post("/v1/verdicts", data=b"{}")
        assert response.status == 503
        assert (await response.json())["error"] == "submissions_disabled"
