"""What the daemon exports and where the dashboards and alerts use it.

Both sides of the docs/metrics.md check: the metric families declared in code
(``Metrics()`` plus the scrape-time database collector), and for each the
panels, alerts and template variables that read it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ops_assets import VARIABLE_VALUES, load_dashboards, load_rules, variable_queries
from ops_promql import grafana_expand, metric_names
from prometheus_client.metrics import MetricWrapperBase

from keeper.api.replicas import ReadTargets, ReplicaCollector
from keeper.config import DEFAULT_REPLICA_LAG_SECONDS as LAG
from keeper.obs.dbgauges import DatabaseCollector, DbGaugeSources
from keeper.obs.metrics import Metrics

# Series a histogram family exposes besides its base name.
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


@dataclass(frozen=True)
class Family:
    """A metric family as it appears in the exposition (counters with ``_total``)."""

    name: str
    kind: str
    labels: frozenset[str]
    help: str


def families() -> dict[str, Family]:
    """Every family the daemon exports, by exposed name."""
    metrics = Metrics(version="doc")
    out: dict[str, Family] = {}
    for attr in vars(metrics).values():
        if not isinstance(attr, MetricWrapperBase):
            continue
        # prometheus_client keeps label names only on this private attribute
        labels = frozenset(attr._labelnames)
        for family in attr.describe():
            name = family.name + "_total" if family.type == "counter" else family.name
            out[name] = Family(name, family.type, labels, family.documentation)
    replicas = ReplicaCollector(
        ReadTargets("postgresql://doc@127.0.0.1/doc", [], max_lag_seconds=LAG)
    )
    for collector in (DatabaseCollector(DbGaugeSources()), replicas):
        for family in collector.describe():
            name = family.name + "_total" if family.type == "counter" else family.name
            labels = frozenset(family._labelnames)  # type: ignore[attr-defined]
            out[name] = Family(name, family.type, labels, family.documentation)
    return out


def family_of(series_name: str, known: set[str]) -> str | None:
    """The family a series name belongs to (``x_bucket`` -> ``x`` for histograms)."""
    if series_name in known:
        return series_name
    for suffix in HISTOGRAM_SUFFIXES:
        base = series_name.removesuffix(suffix)
        if base != series_name and base in known:
            return base
    return None


def usage() -> dict[str, set[str]]:
    """For each family: ``Dashboard: Panel``, ``alert Name`` and ``variable $x`` users."""
    known = set(families())
    used: dict[str, set[str]] = defaultdict(set)

    def add(names: set[str], where: str) -> None:
        for n in names:
            family = family_of(n, known)
            if family is not None:
                used[family].add(where)

    for dashboard in load_dashboards().values():
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                names = metric_names(grafana_expand(target["expr"], VARIABLE_VALUES))
                add(names, f"{dashboard['title']}: {panel['title']}")
    for rule in load_rules():
        add(metric_names(rule["expr"]), f"alert {rule['alert']}")
    for where, metric, _label in variable_queries():
        if metric:
            add({metric}, f"variable ${where.rsplit('$', 1)[1]}")
    return dict(used)
