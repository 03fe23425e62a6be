"""docs/metrics.md agrees with the code, the dashboards and the alert rules."""

from __future__ import annotations

import re

import pytest
from ops_assets import METRICS_DOC, load_rules
from ops_metrics_catalog import families, usage

_LINK = re.compile(r"\[([^\]]+)\]\(([^)]*)\)")


def doc_rows() -> dict[str, list[str]]:
    """Table rows describing a metric, by metric name: [type, labels, meaning, used by]."""
    rows: dict[str, list[str]] = {}
    for line in METRICS_DOC.read_text().splitlines():
        if not line.startswith("| `keeper_"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        name = cells[0].strip("`")
        assert name not in rows, f"{name} documented twice"
        rows[name] = cells[1:]
    return rows


def backticked(cell: str) -> set[str]:
    return set(re.findall(r"`([^`]+)`", cell))


def used_by(cell: str) -> set[str]:
    return {item.strip() for item in _LINK.sub(r"\1", cell).split(";") if item.strip()}


FAMILIES = families()
ROWS = doc_rows()


class TestCoverage:
    def test_every_exported_metric_is_documented(self) -> None:
        """Each family of Metrics() and the database collector has a row."""
        assert set(FAMILIES) - set(ROWS) == set()

    def test_nothing_documented_that_is_not_exported(self) -> None:
        """No row describes a metric the code does not export."""
        assert set(ROWS) - set(FAMILIES) == set()


@pytest.mark.parametrize("name", sorted(FAMILIES))
class TestRow:
    def test_type_and_labels(self, name: str) -> None:
        """Type and label set are the ones declared in code."""
        kind, labels, meaning, _ = ROWS[name]
        assert kind == FAMILIES[name].kind
        assert backticked(labels) == FAMILIES[name].labels
        assert meaning

    def test_used_by_matches_dashboards_and_alerts(self, name: str) -> None:
        """The "used by" column lists exactly the panels, alerts and variables reading it."""
        assert used_by(ROWS[name][3]) == usage().get(name, set())


def test_runbook_links_match_rules() -> None:
    """Alert links in the doc point at the same runbook anchors as the rules."""
    anchors = {r["alert"]: r["annotations"]["runbook_url"].split("#", 1)[1] for r in load_rules()}
    text = METRICS_DOC.read_text()
    for alert, target in _LINK.findall(text):
        if alert in anchors:
            assert target == f"runbook.md#{anchors[alert]}", alert
    documented = {a for a, _ in _LINK.findall(text)}
    assert set(anchors) <= documented
