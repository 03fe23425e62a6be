"""The status page in headless Chromium: it renders live data and the job lookup works.

Skipped where no Chromium is installed (Debian: ``apt-get install chromium``).
The screenshot is written to ``$KEEPER_TEST_ARTIFACTS`` (default: ``test-artifacts/``
at the repository root, which git ignores).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from api_support import build_app
from api_world import BUDGET, World
from cdp import Page, browser_page, chromium_path

CHROMIUM = chromium_path()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")


@pytest.fixture
async def base_url(world: World) -> AsyncIterator[str]:
    server = TestServer(build_app(world), host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/")
    await server.close()


@pytest.fixture
async def page(tmp_path: Path) -> AsyncIterator[Page]:
    assert CHROMIUM is not None
    async with browser_page(CHROMIUM, tmp_path / "profile") as tab:
        yield tab


REPO_ROOT = Path(__file__).resolve().parents[2]


def artifacts_dir() -> Path:
    path = Path(os.environ.get("KEEPER_TEST_ARTIFACTS", REPO_ROOT / "test-artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    return path


class TestStatusPageInBrowser:
    async def test_page_renders_live_data(self, page: Page, base_url: str, world: World) -> None:
        """Chromium renders every section with the database's numbers; a screenshot is kept."""
        await page.goto(f"{base_url}/")
        headings: list[str] = await page.evaluate(
            "[...document.querySelectorAll('h2')].map(h => h.textContent)"
        )
        assert headings == [
            "Sync", "Escrow locked over time", "Keeper actions", "Deadlines ahead",
            "Verification", "Escrow locked", "Jobs and tasks", "Keeper backlog",
            "Recent verdicts", "Look up a job or task",
        ]  # fmt: skip
        text: str = await page.evaluate("document.body.innerText")
        holding = sum(1 for s in world.jobs.values() if s in ("funded", "submitted"))
        assert str(BUDGET * holding) in text
        assert world.head is not None and str(world.head.number) in text
        shot = artifacts_dir() / "status-page.png"
        await page.screenshot(shot)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert shot.stat().st_size > 10_000  # a real rendering, not a blank frame

    async def test_lookup_box_finds_a_job(self, page: Page, base_url: str, world: World) -> None:
        """Typing a job id into the lookup box and submitting lands on that job's page."""
        await page.goto(f"{base_url}/")
        job = world.verified_job
        page.drain()
        await page.evaluate(
            "document.querySelector('select[name=contract]').value = 'acp';"
            f"document.querySelector('input[name=id]').value = '{job}';"
            "document.querySelector('#lookup button').click();"
        )
        await page.wait_for("Page.loadEventFired")
        location: str = await page.evaluate("location.pathname")
        status: Any = await page.evaluate("document.getElementById('status').textContent")
        assert location == f"/jobs/acp/{job}"
        assert status == world.jobs[job]
        assert "Verification: verified" in await page.evaluate("document.body.innerText")

    async def test_lookup_box_reports_bad_id(self, page: Page, base_url: str) -> None:
        """A malformed id comes back on the status page with a message naming the field."""
        await page.goto(f"{base_url}/")
        page.drain()
        await page.evaluate(
            "document.querySelector('input[name=id]').value = 'seven';"
            "document.querySelector('#lookup button').click();"
        )
        await page.wait_for("Page.loadEventFired")
        message = await page.evaluate("document.getElementById('lookup-message').textContent")
        assert message.startswith("id: not a job id")
