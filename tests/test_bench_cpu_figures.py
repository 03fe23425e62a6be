"""bench.backfill's CPU figures: the limit the cores set at a run's CPU an event, and the
command's CPU an event that half the ceiling allows (what the README's bound rests on)."""

from __future__ import annotations

import pytest

from bench.backfill import cpu_figures
from bench.common import Result


def _figures(
    keeper: float, node: float, events: int, ceiling: float, cores: int
) -> dict[str, float]:
    res = Result("backfill-dense", "quick")
    cpu_figures(res, "", keeper, node, events, ceiling, cores)
    return {f.name: f.value for f in res.figures}


def test_the_limit_is_the_cores_over_the_cpu_an_event() -> None:
    got = _figures(keeper=0.03, node=0.01, events=1_000, ceiling=100_000.0, cores=2)
    assert got["CPU an event, the command (its fetch process included)"] == pytest.approx(30.0)
    assert got["CPU an event, the node"] == pytest.approx(10.0)
    assert got["limit of 2 cores at that CPU"] == pytest.approx(50_000.0)
    assert got["share of the ceiling that limit allows"] == pytest.approx(0.5)
    assert got["command's CPU an event that a 0.5 share allows"] == pytest.approx(30.0)


@pytest.mark.parametrize(
    ("node", "ceiling", "cores"),
    [(6.35e-3, 110_373.0, 2), (0.0, 60_000.0, 1), (2e-3, 250_000.0, 8)],
)
def test_a_command_at_its_budget_reaches_half_the_ceiling_at_the_limit(
    node: float, ceiling: float, cores: int
) -> None:
    events = 1_000
    budget = _figures(0.01, node, events, ceiling, cores)[
        "command's CPU an event that a 0.5 share allows"
    ]
    at_budget = _figures(budget * events / 1e6, node, events, ceiling, cores)
    assert at_budget["share of the ceiling that limit allows"] == pytest.approx(0.5)
