"""Grafana dashboards and provisioning: structure Grafana would accept, wired through variables.

No Grafana server runs here; the live queries are checked by test_ops_live.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from ops_assets import (
    DASHBOARD_DIR,
    PROVISIONING,
    VARIABLE_VALUES,
    load_dashboards,
    load_generator,
    load_rules,
    load_yaml,
    panel_queries,
)
from ops_promql import grafana_expand, metric_names, parse

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
PANEL_TYPES = {"timeseries", "stat", "table", "bargauge"}
# What the issue asks each dashboard to show, as the metrics that show it.
REQUIRED_METRICS = {
    "Escrow health": {
        "keeper_escrow_locked",
        "keeper_jobs",
        "keeper_tasks",
        "keeper_overdue_actions",
        "keeper_events_total",
        "keeper_actions_total",
        "keeper_verdicts_total",
    },
    "Indexer": {
        "keeper_head_block",
        "keeper_finalized_block",
        "keeper_indexed_block",
        "keeper_head_lag_seconds",
        "keeper_reorgs_total",
        "keeper_reorg_depth_blocks_bucket",
        "keeper_rpc_requests_total",
        "keeper_rpc_request_duration_seconds_bucket",
        "keeper_events_total",
        "keeper_unknown_events_total",
    },
    "Keeper": {
        "keeper_actions_total",
        "keeper_action_delay_seconds_bucket",
        "keeper_fee_cap_hits_total",
        "keeper_tx_replacements_total",
        "keeper_signer_balance_wei",
        "keeper_pending_txs",
    },
}
DASHBOARDS = load_dashboards()


def selectors(expr: str) -> list[str]:
    """The text of every vector selector in ``expr``."""
    root = parse(expr)
    out: list[str] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.kind == "selector":
            out.append(expr[node.start : node.end])
        stack.extend(node.children)
    return out


class TestGenerated:
    def test_committed_json_is_generator_output(self, tmp_path: Path) -> None:
        """The JSON in grafana/dashboards/ is exactly what grafana/generate.py writes."""
        generator = load_generator()
        written = generator.write_all(tmp_path)
        assert sorted(p.name for p in written) == sorted(DASHBOARDS)
        for path in written:
            assert path.read_text() == (DASHBOARD_DIR / path.name).read_text(), path.name

    def test_rpc_faults_agree_with_the_alert(self) -> None:
        """The error-ratio panel and RpcErrorRateHigh count the same outcomes as faults."""
        faults = load_generator().RPC_FAULTS
        (rule,) = [r for r in load_rules() if r["alert"] == "RpcErrorRateHigh"]
        assert f'outcome=~"{faults}"' in rule["expr"]
        assert any(f'outcome=~\\"{faults}\\"' in json.dumps(d) for d in DASHBOARDS.values())

    def test_titles(self) -> None:
        """The three dashboards the issue names, with distinct uids."""
        titles = sorted(d["title"] for d in DASHBOARDS.values())
        assert titles == sorted(REQUIRED_METRICS)
        assert len({d["uid"] for d in DASHBOARDS.values()}) == len(DASHBOARDS)


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
class TestDashboard:
    def test_datasource_variable(self, name: str) -> None:
        """A datasource variable of type prometheus is the only way panels find Prometheus."""
        variables = {v["name"]: v for v in DASHBOARDS[name]["templating"]["list"]}
        ds = variables["datasource"]
        assert ds["type"] == "datasource" and ds["query"] == "prometheus"
        for v in variables.values():
            if v["type"] == "query":
                assert v["datasource"] == DATASOURCE

    def test_panels_use_the_variable(self, name: str) -> None:
        """Every panel and every target takes its datasource uid from ${datasource}."""
        for panel in DASHBOARDS[name]["panels"]:
            assert panel["datasource"] == DATASOURCE, panel["title"]
            assert panel["targets"], panel["title"]
            for target in panel["targets"]:
                assert target["datasource"] == DATASOURCE, panel["title"]

    def test_panel_shape(self, name: str) -> None:
        """Known panel types, unique ids and refIds, a title and a description on each."""
        panels = DASHBOARDS[name]["panels"]
        assert len({p["id"] for p in panels}) == len(panels)
        for panel in panels:
            assert panel["type"] in PANEL_TYPES
            assert panel["title"] and panel["description"]
            refs = [t["refId"] for t in panel["targets"]]
            assert len(set(refs)) == len(refs)

    def test_grid_has_no_overlaps(self, name: str) -> None:
        """Panels fit the 24-column grid and no two occupy the same cell."""
        taken: set[tuple[int, int]] = set()
        for panel in DASHBOARDS[name]["panels"]:
            g = panel["gridPos"]
            assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24 and g["h"] > 0
            cells = {
                (x, y)
                for x in range(g["x"], g["x"] + g["w"])
                for y in range(g["y"], g["y"] + g["h"])
            }
            assert not cells & taken, panel["title"]
            taken |= cells

    def test_queries_filter_by_instance_variable(self, name: str) -> None:
        """Every selector is narrowed by the $instance variable, never a fixed instance."""
        for panel in DASHBOARDS[name]["panels"]:
            for target in panel["targets"]:
                expr = grafana_expand(target["expr"], {"instance": "$instance"})
                for sel in selectors(expr):
                    assert 'instance=~"$instance"' in sel, (panel["title"], sel)

    def test_required_metrics_shown(self, name: str) -> None:
        """The dashboard shows everything the issue lists for it."""
        dashboard = DASHBOARDS[name]
        shown: set[str] = set()
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                shown |= metric_names(grafana_expand(target["expr"], VARIABLE_VALUES))
        assert REQUIRED_METRICS[dashboard["title"]] <= shown


class TestNothingHardCoded:
    def test_no_instance_or_address_literals(self) -> None:
        """No host:port, fixed instance label or datasource uid appears in any dashboard."""
        for name, dashboard in DASHBOARDS.items():
            text = json.dumps(dashboard)
            assert not re.search(r"\b(?:localhost|\d+\.\d+\.\d+\.\d+|[\w-]+:\d{2,5})\b", text), name
            assert 'instance=\\"' not in text, name
            assert '"uid": "prometheus"' not in text, name

    def test_every_query_expands_and_parses(self) -> None:
        """All variables used are defined, and every query is PromQL our checker understands."""
        for q in panel_queries():
            parse(grafana_expand(q.expr, VARIABLE_VALUES))


class TestProvisioning:
    def test_datasource(self) -> None:
        """One default Prometheus datasource with a fixed uid for the compose stack."""
        doc: dict[str, Any] = load_yaml(PROVISIONING / "datasources" / "prometheus.yml")
        assert doc["apiVersion"] == 1
        (ds,) = doc["datasources"]
        assert ds["type"] == "prometheus" and ds["uid"] and ds["isDefault"] is True
        assert ds["url"].startswith("http://")

    def test_dashboard_provider(self) -> None:
        """A file provider pointing at a directory, as the compose mount expects."""
        doc: dict[str, Any] = load_yaml(PROVISIONING / "dashboards" / "dashboards.yml")
        assert doc["apiVersion"] == 1
        (provider,) = doc["providers"]
        assert provider["type"] == "file" and provider["options"]["path"].startswith("/")
