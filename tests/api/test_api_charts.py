"""The pure chart functions: data in, SVG out, checked by parsing what they draw."""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keeper.api.charts import (
    HEIGHT,
    PLOT_H,
    TOP,
    BarSeries,
    bar_chart,
    compact_int,
    line_chart,
    nice_ticks,
    pattern_defs,
    time_label,
)

NS = "{http://www.w3.org/2000/svg}"
T0 = 1_700_000_000
AMOUNTS = st.integers(min_value=0, max_value=2**256 - 1)


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1))


class TestNiceTicks:
    @given(st.integers(min_value=1, max_value=2**256))
    def test_ticks_cover_the_top_in_round_steps(self, top: int) -> None:
        ticks = nice_ticks(top)
        step = ticks[1]
        assert ticks[0] == 0 and ticks[-1] >= top and ticks[-2] < top
        assert all(b - a == step for a, b in itertools.pairwise(ticks))
        assert str(step).rstrip("0") in ("1", "2", "5")
        assert len(ticks) <= 6

    def test_empty_axis(self) -> None:
        assert nice_ticks(0) == [0, 1]


class TestLineChart:
    @given(st.lists(AMOUNTS, min_size=2, max_size=80))
    def test_one_point_per_value_inside_the_plot(self, values: list[int]) -> None:
        edges = [T0 + 60 * i for i in range(len(values))]
        root = parse(line_chart("c", "t", edges, values, str, compact_int))
        points = root.findall(f"{NS}circle")
        assert [int(p.get("data-value", "")) for p in points] == values
        ys = [int(p.get("cy", "")) for p in points]
        assert all(TOP <= y <= TOP + PLOT_H for y in ys)
        # a larger amount is never drawn lower (integer scaling keeps the order)
        pairs = list(zip(values, ys, strict=True))
        for (a, ya), (b, yb) in itertools.product(pairs, pairs):
            assert a > b or ya >= yb

    def test_names_itself_and_its_axis(self) -> None:
        svg = line_chart("locked-x", "Escrow <acp>", [T0, T0 + 60], [0, 5], str, str)
        root = parse(svg)
        assert root.get("role") == "img"
        assert root.get("aria-labelledby") == "locked-x-title locked-x-desc"
        assert root.find(f"{NS}title") is not None
        assert root.find(f"{NS}title").text == "Escrow <acp>"  # type: ignore[union-attr]
        texts = [t.text for t in root.iter(f"{NS}text")]
        assert "time (UTC, chain time)" in texts
        assert "2 points" in (root.find(f"{NS}desc").text or "")  # type: ignore[union-attr]
        assert "<acp>" not in svg  # escaped

    def test_mismatched_input_is_refused(self) -> None:
        with pytest.raises(ValueError, match="2 edges for 1 values"):
            line_chart("c", "t", [T0, T0 + 1], [1], str, str)


class TestBarChart:
    @given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=60))
    def test_segments_carry_every_count(self, rows: list[tuple[int, int]]) -> None:
        a = BarSeries("confirmed", "solid", [r[0] for r in rows])
        b = BarSeries("failed", "hatch", [r[1] for r in rows])
        svg = bar_chart("k", "t", [str(i) for i in range(len(rows))], [a, b], [(0, "x")], "time")
        rects = parse(svg).findall(f"{NS}rect")
        drawn: dict[str, int] = {}
        for r in rects:
            drawn[r.get("data-series", "")] = drawn.get(r.get("data-series", ""), 0) + int(
                r.get("data-count", "")
            )
            assert TOP <= int(r.get("y", "")) <= HEIGHT
            assert r.get("fill", "").startswith("url(#pat-")
            assert r.find(f"{NS}title") is not None
        assert drawn.get("confirmed", 0) == sum(a.counts)
        assert drawn.get("failed", 0) == sum(b.counts)
        assert len(rects) == sum(1 for r in rows for n in r if n > 0)

    def test_counts_must_match_slots(self) -> None:
        with pytest.raises(ValueError, match="one count per slot"):
            bar_chart("k", "t", ["a", "b"], [BarSeries("x", "solid", [1])], [], "time")


def test_every_pattern_is_defined_once() -> None:
    defs = pattern_defs()
    ids = re.findall(r'<pattern id="(pat-[a-z]+)"', defs)
    assert len(ids) == len(set(ids)) >= 7


def test_labels() -> None:
    assert compact_int(1234) == "1234"
    assert compact_int(2**200) == "1.6e60"
    assert compact_int(10**12) == "1e12"
    assert time_label(T0, 3600) == "22:13"
    assert time_label(T0, 7 * 86400) == "Tue 22:13"
