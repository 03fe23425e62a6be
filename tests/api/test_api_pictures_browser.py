"""The status page's pictures in headless Chromium, on a day of known escrow history.

The expected picture comes from :class:`picture_world.Story` (what was written),
never from the store: every point of the locked line, the bars' counts, the
deadlines and the failure links. Screenshots at a desktop and a phone width
go to ``$KEEPER_TEST_ARTIFACTS`` (default ``test-artifacts/``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from api_support import build_app
from api_world import CHAIN_ID, World
from cdp import Page, browser_page, chromium_path
from picture_world import HEAD_TS, MUTE, USDC, Story, build_picture_world
from test_api_browser import artifacts_dir

from keeper.api.overview import RANGES

CHROMIUM = chromium_path()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Story:
    return build_picture_world(tmp_path_factory.mktemp("pictures") / "keeper.db")


@pytest.fixture
async def base_url(story: Story) -> AsyncIterator[str]:
    live = {"chain_id": CHAIN_ID, "head_block": story.head.number if story.head else 0}
    server = TestServer(build_app(World(story.path), live=live), host="127.0.0.1")
    await server.start_server()
    yield str(server.make_url("")).rstrip("/")
    await server.close()


@pytest.fixture
async def page(tmp_path: Path) -> AsyncIterator[Page]:
    assert CHROMIUM is not None
    async with browser_page(CHROMIUM, tmp_path / "profile") as tab:
        yield tab


def edges(range_name: str) -> list[int]:
    width, buckets = RANGES[range_name]
    start = HEAD_TS - width * buckets
    return [start + i * width for i in range(buckets + 1)]


async def card(page: Page, token: str) -> dict[str, Any]:
    found: dict[str, Any] = await page.evaluate(
        f"(() => {{ const f = document.querySelector('figure[data-token=\"{token}\"]');"
        " return f && {points: [...f.querySelectorAll('circle.point')]"
        ".map(c => c.getAttribute('data-value')),"
        " now: f.querySelector('.locked-now').textContent,"
        " caption: f.querySelector('figcaption').textContent,"
        " ticks: [...f.querySelectorAll('text.x-tick, text.y-tick')].map(t => t.textContent),"
        " title: f.querySelector('svg > title').textContent}; })()"
    )
    assert found is not None, f"no locked card for {token}"
    return found


async def bars(page: Page, chart: str) -> dict[str, int]:
    rows: list[list[Any]] = await page.evaluate(
        f"[...document.querySelectorAll('#{chart} rect.bar')]"
        ".map(r => [r.getAttribute('data-series'), Number(r.getAttribute('data-count'))])"
    )
    out: dict[str, int] = {}
    for series, n in rows:
        out[series] = out.get(series, 0) + n
    return out


class TestPicturesInBrowser:
    @pytest.mark.parametrize("range_name", list(RANGES))
    async def test_locked_line_follows_the_story(
        self, page: Page, base_url: str, story: Story, range_name: str
    ) -> None:
        """One point per bucket edge, each the escrow the story held then, in token units."""
        await page.goto(f"{base_url}/?range={range_name}")
        usdc = await card(page, USDC)
        expected = [story.locked_at(USDC, t) for t in edges(range_name)]
        assert [int(v) for v in usdc["points"]] == expected
        held = story.locked_at(USDC, HEAD_TS)
        assert usdc["now"] == f"{held // 10**6} USDC ({held} base units)"
        assert "y axis: USDC" in usdc["caption"]
        mute = await card(page, MUTE)
        assert mute["now"].endswith("base units (token did not answer decimals(): base units)")
        assert int(mute["points"][-1]) == story.locked_at(MUTE, HEAD_TS)
        text: str = await page.evaluate("document.body.innerText")
        assert "time (UTC, chain time)" in await page.evaluate(
            "[...document.querySelectorAll('#locked-0 text')].map(t => t.textContent).join('|')"
        )
        current = await page.evaluate("document.querySelector('[aria-current=page]').textContent")
        assert current == f"last {range_name}"
        assert "Nothing indexed yet" not in text

    async def test_day_pictures_and_screenshots(
        self, page: Page, base_url: str, story: Story
    ) -> None:
        """Keeper outcomes, verification results, deadlines and failure links as written."""
        await page.goto(f"{base_url}/?range=day")
        assert await bars(page, "keeper-actions") == {"confirmed": 1, "preempted": 1, "failed": 1}
        verification = await bars(page, "verification")
        assert verification == {
            "verified": 1, "mismatch": 1, "disagrees": 1, "unavailable": 1,
        }  # fmt: skip
        due_by = HEAD_TS + 86400
        expected_due = sorted(t for t in story.due.values() if t <= due_by)
        deadlines = await bars(page, "deadlines")
        assert sum(deadlines.values()) == len(expected_due)
        overdue = await page.evaluate("document.getElementById('overdue-count').textContent")
        assert int(overdue) == sum(1 for t in expected_due if t <= HEAD_TS)
        links: list[str] = await page.evaluate(
            "[...document.querySelectorAll('.failures a.report')].map(a => a.pathname)"
        )
        failed = {j for j, s in story.verifications.items() if s != "verified"}
        assert sorted(links) == sorted(f"/v1/verdicts/0x{'a1' * 20}/{j}" for j in failed)
        async with aiohttp.ClientSession() as session:
            for link in links:
                async with session.get(base_url + link) as response:
                    assert response.status == 200
                    body = await response.json()
                    assert body["status"] == story.verifications[int(link.rsplit("/", 1)[1])]
        # every chart names itself for screen readers and needs nothing from outside
        unnamed = await page.evaluate(
            "[...document.querySelectorAll('svg.chart')].filter(s => !s.querySelector('title')"
            " || !s.getAttribute('aria-labelledby')).length"
        )
        assert unnamed == 0
        assert await page.evaluate("document.scripts.length") == 0
        assert await page.evaluate("performance.getEntriesByType('resource').length") == 0
        for name, width in (("wide", 1280), ("narrow", 420)):
            await page.send(
                "Emulation.setDeviceMetricsOverride",
                width=width, height=900, deviceScaleFactor=1, mobile=width < 600,
            )  # fmt: skip
            await page.goto(f"{base_url}/?range=day")
            overflow = await page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 0, f"the page scrolls sideways at {width}px"
            shot = artifacts_dir() / f"status-pictures-{name}.png"
            await page.screenshot(shot)
            assert shot.stat().st_size > 20_000

    async def test_bad_range_is_named(self, base_url: str) -> None:
        """An unknown range comes back as a 400 page saying which values are allowed."""
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{base_url}/?range=year") as response,
        ):
            assert response.status == 400
            text = await response.text()
        assert "range: must be one of hour, day, week, not &#x27;year&#x27;" in text
