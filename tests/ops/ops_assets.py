"""The operator assets under test: dashboards, alert rules, and the queries inside them."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml  # type: ignore[import-untyped]  # no stubs in the lock; one import site

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD_DIR = ROOT / "grafana" / "dashboards"
PROVISIONING = ROOT / "grafana" / "provisioning"
GENERATOR = ROOT / "grafana" / "generate.py"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
PROMETHEUS_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
METRICS_DOC = ROOT / "docs" / "metrics.md"
# What dashboard variables stand for when a query is sent straight to Prometheus.
VARIABLE_VALUES = {"instance": ".*", "datasource": "prometheus"}
_LABEL_VALUES = re.compile(r"^label_values\((?:(?P<metric>.+),\s*)?(?P<label>\w+)\)$")


@dataclass(frozen=True)
class Query:
    """One PromQL expression and where it lives (dashboard/panel/refId or alert name)."""

    where: str
    expr: str


def load_dashboards() -> dict[str, dict[str, Any]]:
    """Dashboard models by file name."""
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARD_DIR.glob("*.json"))}


def load_generator() -> ModuleType:
    """grafana/generate.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("grafana_generate", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


def panel_queries() -> list[Query]:
    out = []
    for dashboard in load_dashboards().values():
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                where = f"{dashboard['title']} / {panel['title']} / {target['refId']}"
                out.append(Query(where, target["expr"]))
    return out


def variable_queries() -> list[tuple[str, str | None, str]]:
    """(where, metric or None, label) of every ``label_values`` template variable."""
    out = []
    for dashboard in load_dashboards().values():
        for var in dashboard["templating"]["list"]:
            if var["type"] != "query":
                continue
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            m = _LABEL_VALUES.match(query.strip())
            assert m is not None, f"{dashboard['title']} ${var['name']}: unsupported {query!r}"
            out.append((f"{dashboard['title']} ${var['name']}", m["metric"], m["label"]))
    return out


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def dump_yaml(data: Any) -> str:
    text: str = yaml.safe_dump(data)
    return text


def load_rules() -> list[dict[str, Any]]:
    doc = load_yaml(ALERTS)
    return [rule for group in doc["groups"] for rule in group["rules"]]


def alert_queries() -> list[Query]:
    return [Query(f"alert {r['alert']}", r["expr"].strip()) for r in load_rules()]
