"""Dashboards and alerts against a real Prometheus scraping the daemon on the devnet.

One stack per module (see ops_stack.py): anvil, ``keeper devnet`` with the
daemon and its API, and a Prometheus server (Debian package ``prometheus``)
scraping it every second with alerts.yml loaded. After ~20 s of traffic every
panel target, every alert expression and every template variable is evaluated
through Prometheus's HTTP API. Skipped where prometheus/promtool are missing.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest
from ops_assets import (
    VARIABLE_VALUES,
    Query,
    alert_queries,
    load_rules,
    panel_queries,
    variable_queries,
)
from ops_promql import data_sources, grafana_expand, metric_names
from ops_stack import Stack, get, leftover_groups, running_stack

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None, reason="prometheus/promtool are not installed"
)
PANELS = panel_queries()
ALERT_QUERIES = alert_queries()
# Alerts the devnet must trip within seconds: its traffic includes verdicts that
# do not hash to their on-chain reason, and the stack adds an unknown-topic log.
EXPECTED_FIRING = {"VerdictMismatch", "UnknownEventsSeen"}


def referenced_names() -> set[str]:
    names: set[str] = set()
    for q in PANELS + ALERT_QUERIES:
        names |= metric_names(grafana_expand(q.expr, VARIABLE_VALUES))
    names |= {metric for _, metric, _ in variable_queries() if metric}
    return names


def firing(stack: Stack) -> set[str]:
    alerts = stack.prom("/api/v1/alerts")["alerts"]
    return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}


def fully_wired(stack: Stack) -> bool:
    """What the tests below require; the fixture waits for it (bounded) to avoid races."""
    return (
        referenced_names() <= stack.metric_names()
        and not check_wiring(stack, PANELS + ALERT_QUERIES)
        and firing(stack) >= EXPECTED_FIRING
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    assert PROMETHEUS is not None
    workdir = tmp_path_factory.mktemp("ops")
    with running_stack(workdir, PROMETHEUS, ready=fully_wired, min_seconds=20, max_seconds=45) as s:
        yield s
    leaked = leftover_groups(s.process_groups)
    assert not leaked, f"processes still alive after teardown: {leaked}"


def check_wiring(stack: Stack, queries: list[Query]) -> list[str]:
    """Problems found evaluating each query and each of its data sources over the run.

    The query itself must evaluate both as an instant query (alerts, stat panels)
    and as a range query (graphs); its data sources must have series at some
    point of the run, since gauges such as overdue actions come and go.
    """
    problems = []
    for q in queries:
        expr = grafana_expand(q.expr, VARIABLE_VALUES)
        try:
            stack.prom("/api/v1/query", query=expr)
            stack.query_range(expr)
        except AssertionError as exc:
            problems.append(f"{q.where}: error: {exc}")
            continue
        for source in data_sources(expr):
            if not stack.query_range(source):
                problems.append(f"{q.where}: no data for {source!r}")
    return problems


class TestScrape:
    def test_promtool_check_metrics(self, stack: Stack) -> None:
        """The live /metrics exposition passes `promtool check metrics` without a remark."""
        assert PROMTOOL is not None
        body = get(stack.metrics_url).decode()
        result = subprocess.run(
            [PROMTOOL, "check", "metrics"],
            input=body,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert (result.stdout + result.stderr).strip() == ""

    def test_no_secrets_exposed(self, stack: Stack) -> None:
        """Neither RPC URL nor the keeper key appears in the exposition."""
        body = get(stack.metrics_url).decode()
        assert 'endpoint="offline"' in body  # endpoints are there, by name
        for secret in stack.secrets:
            assert secret not in body


class TestWiring:
    def test_every_referenced_metric_is_scraped(self, stack: Stack) -> None:
        """No panel, alert or variable names a metric the daemon does not export."""
        missing = referenced_names() - stack.metric_names()
        assert not missing, f"referenced but never scraped: {sorted(missing)}"

    def test_panel_queries_return_data(self, stack: Stack) -> None:
        """Every target of every panel evaluates without error and returns series."""
        problems = check_wiring(stack, PANELS)
        assert not problems, "\n".join(problems)

    def test_alert_queries_return_data(self, stack: Stack) -> None:
        """Every alert evaluates without error; with filters stripped, each source has data."""
        problems = check_wiring(stack, ALERT_QUERIES)
        assert not problems, "\n".join(problems)

    def test_wiring_check_has_teeth(self, stack: Stack) -> None:
        """Control: a filtered query on a missing metric, and a broken one, are both reported."""
        problems = check_wiring(
            stack,
            [
                Query("control missing", "rate(keeper_no_such_metric_total[1m]) > 0"),
                Query("control broken", "sum(rate(keeper_head_block[1m]))[5m]"),
            ],
        )
        assert len(problems) == 2
        assert "no data for 'rate(keeper_no_such_metric_total[1m])'" in problems[0]
        assert "error" in problems[1]

    def test_template_variables_have_values(self, stack: Stack) -> None:
        """Each `label_values` variable would offer at least one choice in Grafana."""
        for where, metric, label in variable_queries():
            params = {"match[]": metric} if metric else {}
            values = stack.prom(f"/api/v1/label/{label}/values", **params)
            assert values, where


class TestRules:
    def test_rules_loaded_and_healthy(self, stack: Stack) -> None:
        """Prometheus loaded every rule from alerts.yml and evaluates each without error."""
        groups = stack.prom("/api/v1/rules", type="alert")["groups"]
        loaded = {rule["name"]: rule for group in groups for rule in group["rules"]}
        assert set(loaded) == {r["alert"] for r in load_rules()}
        for name, rule in loaded.items():
            assert rule["health"] == "ok", (name, rule.get("lastError"))
            assert not rule.get("lastError"), name
            assert rule["lastEvaluation"] > "2000", name  # evaluated at least once

    def test_devnet_trips_the_expected_alerts(self, stack: Stack) -> None:
        """A devnet mismatching verdict and the unknown-topic log fire their alerts."""
        alerts = stack.prom("/api/v1/alerts")["alerts"]
        assert firing(stack) >= EXPECTED_FIRING, alerts
        unknown = [a for a in alerts if a["labels"]["alertname"] == "UnknownEventsSeen"]
        assert {a["labels"]["contract"] for a in unknown} == {"emitter"}

    def test_healthy_stack_does_not_page(self, stack: Stack) -> None:
        """Nothing critical but the verdict mismatch fires on a healthy devnet."""
        alerts = stack.prom("/api/v1/alerts")["alerts"]
        critical = {
            a["labels"]["alertname"]
            for a in alerts
            if a["labels"].get("severity") == "critical" and a["state"] != "inactive"
        }
        assert critical <= {"VerdictMismatch"}, critical
