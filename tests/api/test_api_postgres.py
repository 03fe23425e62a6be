"""The JSON API on a PostgreSQL database: the same world written to SQLite and to PostgreSQL
serves the same lists, pages, details, verdicts, status and metrics, over real HTTP."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from api_support import build_app
from api_world import ACP, World, build_world, task_id
from support.postgres import PostgresServer

from keeper.api import app as api_app

Client = TestClient[Any, Any]


@pytest.fixture(scope="module")
def pg_world(postgres_server: PostgresServer) -> World:
    return build_world(postgres_server.database())  # type: ignore[arg-type]


@pytest.fixture
async def clients(
    world: World, pg_world: World, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Client, Client]]:
    # the indexed block's age in wall time is on every status page: two renders a second
    # apart differed by one in it (a make test run), so both backends read one clock reading
    frozen = time.time()
    monkeypatch.setattr(api_app, "time", SimpleNamespace(time=lambda: frozen))
    async with (
        TestClient(TestServer(build_app(world))) as lite,
        TestClient(TestServer(build_app(pg_world))) as pg,
    ):
        yield lite, pg


async def _get(client: Client, path: str) -> tuple[int, Any]:
    response = await client.get(path, allow_redirects=False)
    body = await response.json() if response.content_type == "application/json" else None
    return response.status, body


async def test_every_read_route_answers_the_same(
    clients: tuple[Client, Client], world: World, validate: Callable[[str, Any], None]
) -> None:
    """Lists (filtered, paged by cursor), details with events, reads, intents and the
    verification, tasks, verdicts and errors: equal bodies from both backends."""
    lite, pg = clients
    paths = [
        "/v1/jobs?limit=500",
        "/v1/jobs?status=completed,rejected&limit=500",
        "/v1/jobs?contract=acp&limit=500",
        f"/v1/jobs?client=0x{world.clients[next(iter(world.clients))][2:]}&limit=500",
        "/v1/tasks",
        "/v1/tasks?status=claimed",
        "/v1/jobs/acp/3",
        f"/v1/jobs/{ACP}/{world.intent_job}",
        f"/v1/jobs/acp/{world.verified_job}",
        f"/v1/tasks/tm/{task_id(2)}",
        f"/v1/verdicts/acp/{world.verified_job}",
        "/v1/jobs/acp/999",
        f"/v1/tasks/tm/{task_id(99)}",
    ]
    for path in paths:
        got = [await _get(c, path) for c in (lite, pg)]
        assert got[0] == got[1], path
        assert got[0][0] in (200, 404), path
    # a walk through small pages follows each backend's own cursors to the same items
    seen: list[list[Any]] = [[], []]
    for i, client in enumerate((lite, pg)):
        path = "/v1/jobs?limit=5"
        while True:
            status, body = await _get(client, path)
            assert status == 200
            validate("JobList", body)
            seen[i] += body["items"]
            if body["next_cursor"] is None:
                break
            path = f"/v1/jobs?limit=5&cursor={body['next_cursor']}"
    assert seen[0] == seen[1] and len(seen[0]) == len(world.jobs)
    status, job = await _get(pg, f"/v1/jobs/acp/{world.verified_job}")
    validate("JobDetail", job)
    assert job["verification"] is not None and job["events"]


async def test_status_and_metrics_read_the_same_tables(clients: tuple[Client, Client]) -> None:
    """/v1/status and the database gauges of /metrics agree between backends."""
    lite, pg = clients
    (s0, lite_status), (s1, pg_status) = [await _get(c, "/v1/status") for c in (lite, pg)]
    assert s0 == s1 == 200
    assert lite_status["indexed_block"] is not None and lite_status["contracts"]
    assert {k: v for k, v in lite_status.items() if k != "lag_seconds"} == {
        k: v for k, v in pg_status.items() if k != "lag_seconds"
    }

    def gauges(text: str) -> list[str]:
        names = (
            "keeper_jobs",
            "keeper_tasks",
            "keeper_escrow",
            "keeper_overdue",
            "keeper_verdicts",
        )
        return sorted(line for line in text.splitlines() if line.startswith(names))

    texts = [await (await c.get("/metrics")).text() for c in (lite, pg)]
    assert gauges(texts[0]) and gauges(texts[0]) == gauges(texts[1])


async def test_the_status_pages_render_on_postgresql(clients: tuple[Client, Client]) -> None:
    """The status page (its charts read the timeline queries) and the subject pages: 200,
    the same HTML as on SQLite."""
    lite, pg = clients
    for path in ("/", "/jobs/acp/3", f"/tasks/tm/{task_id(2)}"):
        pages = []
        for client in (lite, pg):
            response = await client.get(path)
            assert response.status == 200, (path, await response.text())
            pages.append(await response.text())
        assert pages[0] == pages[1], path
