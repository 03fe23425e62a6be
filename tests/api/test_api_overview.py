"""The status page's picture data and sections apart from the browser: ranges, units, empties."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from picture_world import HEAD_TS, MUTE, USDC, Story, build_picture_world

from keeper.api.overview import RANGES, parse_range, read_overview
from keeper.api.params import BadParam
from keeper.api.pictures import amount_text, render_pictures
from keeper.domain.planner import PlannerConfig
from keeper.store.db import connect
from keeper.store.migrations import migrate
from keeper.store.tokens import TokenMeta

CHAIN_ID = 31337


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Story:
    return build_picture_world(tmp_path_factory.mktemp("overview") / "keeper.db")


def test_openapi_lists_exactly_the_ranges() -> None:
    spec = json.loads(resources.files("keeper.api").joinpath("openapi.json").read_text())
    (param,) = spec["paths"]["/"]["get"]["parameters"]
    assert param["name"] == "range"
    assert param["schema"]["enum"] == list(RANGES)
    assert param["schema"]["default"] == parse_range([])


def test_parse_range() -> None:
    assert [parse_range([r]) for r in RANGES] == list(RANGES)
    for bad in (["year"], ["day", "week"], [""]):
        with pytest.raises(BadParam) as caught:
            parse_range(bad)
        assert caught.value.param == "range"
        assert "hour, day, week" in caught.value.message


def test_amounts_in_token_units_beside_base_units() -> None:
    assert amount_text(14_000_000, USDC, TokenMeta(USDC, 6, "USDC")) == (
        "14 USDC (14000000 base units)"
    )
    assert amount_text(2**200 + 7, USDC, TokenMeta(USDC, 18, None)).endswith(
        f"tokens (no symbol) ({2**200 + 7} base units)"
    )
    assert amount_text(1234, MUTE, TokenMeta(MUTE, None, None)) == (
        "1,234 base units (token did not answer decimals(): base units)"
    )
    assert amount_text(5, USDC, None) == "5 base units (token not read yet: base units)"
    assert amount_text(5, "", None) == "5 base units (token not indexed: base units)"


def test_an_empty_database_draws_nothing(tmp_path: Path) -> None:
    conn = connect(tmp_path / "keeper.db")
    migrate(conn)
    assert read_overview(conn, CHAIN_ID, "day", PlannerConfig()) is None
    html = render_pictures(None, {}, "day")
    assert "Nothing indexed yet" in html and "<svg" not in html


def test_overview_buckets_follow_the_range(story: Story) -> None:
    conn = connect(story.path, readonly=True)
    for name, (width, buckets) in RANGES.items():
        view = read_overview(conn, CHAIN_ID, name, PlannerConfig())
        assert view is not None and view.now == HEAD_TS
        assert view.edges[0] == HEAD_TS - width * buckets and view.edges[-1] == HEAD_TS
        assert all(len(v.values) == buckets + 1 for v in view.locked)
        assert all(len(counts) == buckets for counts in view.keeper.values())
        due = sorted(t for t in story.due.values() if t <= HEAD_TS + width * buckets)
        assert sorted(a.due_at for a in view.deadlines) == due
