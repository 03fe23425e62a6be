"""Write the Grafana dashboards in grafana/dashboards/ from the definitions below.

Why generated: three dashboards of hand-kept JSON drift (duplicate panel ids,
overlapping grid positions, one panel forgetting the datasource variable). Here
every panel goes through the same helpers, and tests/ops checks that the
committed JSON is exactly what this script writes, then evaluates every query
against a real Prometheus scraping the devnet daemon.

Run ``python grafana/generate.py`` after editing; it rewrites the JSON files.
Every query filters on ``instance=~"$instance"`` (one daemon per chain), and
every panel reads the datasource from the ``datasource`` variable, so nothing
names a particular Prometheus or daemon.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["DASHBOARDS", "Dashboard", "Panel", "Target", "render", "write_all"]

DASHBOARD_DIR = Path(__file__).resolve().parent / "dashboards"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRID_WIDTH = 24
SEL = 'instance=~"$instance"'
# Outcomes that mean the endpoint itself failed (same set as the RpcErrorRateHigh alert).
RPC_FAULTS = "rate_limited|timeout|transient|endpoint_rejected|parse_error|permanent"
REFUND_EVENTS = "Refunded|JobExpired|TaskExpired|TaskCancelled"
FINAL_EVENTS = "JobCompleted|PaymentReleased|TaskCompleted"
EVALUATOR_EVENTS = (
    "JobCompleted|JobRejected|EvaluatorAssigned|TaskEvaluated|EvaluatorTimedOut"
    "|TaskAppealed|TaskDisputed"
)
KEEPER_ACTIONS = "claimRefund|refundExpired|finalizeVerdict|evaluatorTimeout"
FAILING_VERDICTS = "mismatch|invalid_document|evaluator_disagrees"


@dataclass(frozen=True)
class Target:
    """One PromQL query of a panel; ``legend`` is Grafana's legendFormat."""

    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True)
class Panel:
    """A panel: ``kind`` is the Grafana panel type, ``width``/``height`` in grid units."""

    title: str
    description: str
    targets: Sequence[Target]
    kind: str = "timeseries"
    unit: str = "short"
    width: int = 12
    height: int = 8
    stacked: bool = False
    thresholds: Sequence[tuple[float, str]] = ()
    decimals: int | None = None


@dataclass(frozen=True)
class Dashboard:
    """A dashboard; ``uid`` is stable so links and provisioning updates keep working."""

    uid: str
    title: str
    description: str
    panels: Sequence[Panel]
    tags: Sequence[str] = field(default=("escrow-keeper",))


def _target(ref: str, t: Target, kind: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "format": "table" if kind == "table" else "time_series",
        "datasource": DATASOURCE,
        "editorMode": "code",
        "expr": t.expr,
        "legendFormat": t.legend or "__auto",
        "range": not t.instant,
        "instant": t.instant,
        "refId": ref,
    }
    return out


def _thresholds(p: Panel) -> dict[str, Any]:
    steps: list[dict[str, Any]] = [{"color": "green", "value": None}]
    steps += [{"color": color, "value": value} for value, color in p.thresholds]
    return {"mode": "absolute", "steps": steps}


def _options(p: Panel) -> dict[str, Any]:
    if p.kind == "stat":
        return {
            "colorMode": "background",
            "graphMode": "none",
            "justifyMode": "auto",
            "orientation": "auto",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "textMode": "auto",
        }
    if p.kind == "table":
        return {"showHeader": True, "cellHeight": "sm"}
    if p.kind == "bargauge":
        return {
            "displayMode": "gradient",
            "orientation": "horizontal",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "showUnfilled": True,
        }
    return {
        "legend": {"displayMode": "table", "placement": "bottom", "showLegend": True},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }


def _field_defaults(p: Panel) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": p.unit, "thresholds": _thresholds(p)}
    if p.decimals is not None:
        defaults["decimals"] = p.decimals
    if p.kind == "timeseries":
        defaults["custom"] = {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 20 if p.stacked else 0,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"mode": "normal" if p.stacked else "none", "group": "A"},
        }
    if p.kind == "stat":
        defaults["color"] = {"mode": "thresholds"}
    return defaults


def _panel(p: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    refs = "ABCDEFGHIJ"
    return {
        "id": panel_id,
        "type": p.kind,
        "title": p.title,
        "description": p.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": p.height, "w": p.width, "x": x, "y": y},
        "targets": [_target(refs[i], t, p.kind) for i, t in enumerate(p.targets)],
        "fieldConfig": {"defaults": _field_defaults(p), "overrides": []},
        "options": _options(p),
    }


def _layout(panels: Sequence[Panel]) -> list[dict[str, Any]]:
    """Left-to-right, top-to-bottom placement; a row is as tall as its tallest panel."""
    out: list[dict[str, Any]] = []
    x = y = row_height = 0
    for i, p in enumerate(panels, start=1):
        if x + p.width > GRID_WIDTH:
            x, y, row_height = 0, y + row_height, 0
        out.append(_panel(p, i, x, y))
        x += p.width
        row_height = max(row_height, p.height)
    return out


def _templating() -> dict[str, Any]:
    instance_query = "label_values(keeper_build_info, instance)"
    return {
        "list": [
            {
                "name": "datasource",
                "label": "Data source",
                "type": "datasource",
                "query": "prometheus",
                "current": {},
                "hide": 0,
                "refresh": 1,
                "regex": "",
                "options": [],
            },
            {
                "name": "instance",
                "label": "Daemon",
                "type": "query",
                "datasource": DATASOURCE,
                "definition": instance_query,
                "query": {"query": instance_query, "refId": "instance"},
                "refresh": 2,
                "includeAll": True,
                "multi": True,
                "allValue": ".*",
                "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
                "options": [],
                "sort": 1,
                "hide": 0,
                "regex": "",
            },
        ]
    }


def render(d: Dashboard) -> dict[str, Any]:
    """The Grafana dashboard model of ``d`` (no ``id``: provisioning assigns it)."""
    return {
        "uid": d.uid,
        "title": d.title,
        "description": d.description,
        "tags": list(d.tags),
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "browser",
        "annotations": {"list": []},
        "links": [
            {
                "type": "dashboards",
                "title": "escrow-keeper",
                "tags": ["escrow-keeper"],
                "asDropdown": True,
                "includeVars": True,
                "keepTime": True,
            }
        ],
        "templating": _templating(),
        "panels": _layout(d.panels),
    }


def sel(metric: str, extra: str = "") -> str:
    """``metric`` restricted to the selected daemons, plus ``extra`` label matchers."""
    matchers = f"{SEL}, {extra}" if extra else SEL
    return f"{metric}{{{matchers}}}"


def over(fn: str, metric: str, extra: str = "", window: str = "$__rate_interval") -> str:
    """A range function such as ``rate`` over the selected series of ``metric``."""
    return f"{fn}({sel(metric, extra)}[{window}])"


def by(labels: str, inner: str, agg: str = "sum") -> str:
    return f"{agg} by ({labels}) ({inner})"


def quantile(q: float, labels: str, metric: str) -> str:
    return f"histogram_quantile({q}, {by(labels + ', le', over('rate', metric + '_bucket'))})"


ESCROW = Dashboard(
    uid="keeper-escrow-health",
    title="Escrow health",
    description="What the escrows hold and whether deadlines and verdicts are being honoured.",
    panels=[
        Panel(
            "Escrow locked by token",
            "Token base units held by non-terminal jobs and tasks, by contract and token. "
            "Raw base units: divide by the token's decimals (USDC: 1e6).",
            [Target(by("contract, token", sel("keeper_escrow_locked")), "{{contract}} {{token}}")],
        ),
        Panel(
            "Overdue keeper actions",
            "Actions past their deadline (chain time) and not yet confirmed. A flat non-zero "
            "line means the keeper is not getting them done.",
            [
                Target(
                    by("contract, action", sel("keeper_overdue_actions")),
                    "{{contract}} {{action}}",
                )
            ],
            thresholds=[(1, "orange")],
        ),
        Panel(
            "Jobs by status",
            "ERC-8183 jobs per status, from the database at scrape time.",
            [Target(by("contract, status", sel("keeper_jobs")), "{{contract}} {{status}}")],
            stacked=True,
        ),
        Panel(
            "Tasks by status",
            "Task-market tasks per status, from the database at scrape time.",
            [Target(by("contract, status", sel("keeper_tasks")), "{{contract}} {{status}}")],
            stacked=True,
        ),
        Panel(
            "Refunds and finalisations",
            "On-chain refund and settlement events per interval, whoever sent them "
            "(keeper, counterparty or another keeper).",
            [
                Target(
                    by(
                        "contract, event",
                        over("increase", "keeper_events_total", f'event=~"{REFUND_EVENTS}"'),
                    ),
                    "refund {{contract}} {{event}}",
                ),
                Target(
                    by(
                        "contract, event",
                        over("increase", "keeper_events_total", f'event=~"{FINAL_EVENTS}"'),
                    ),
                    "settled {{contract}} {{event}}",
                ),
            ],
            stacked=True,
        ),
        Panel(
            "Keeper refunds and finalisations confirmed",
            "Permissionless actions this keeper got confirmed, per interval.",
            [
                Target(
                    by(
                        "contract, action",
                        over(
                            "increase",
                            "keeper_actions_total",
                            f'outcome="confirmed", action=~"{KEEPER_ACTIONS}"',
                        ),
                    ),
                    "{{contract}} {{action}}",
                )
            ],
            stacked=True,
        ),
        Panel(
            "Verdict verification outcomes",
            "Verdicts seen, by verification status (verified, mismatch, invalid_document, "
            "unavailable, evaluator_disagrees).",
            [
                Target(
                    by("contract, status", sel("keeper_verdicts_total")),
                    "{{contract}} {{status}}",
                )
            ],
            stacked=True,
        ),
        Panel(
            "Verdicts failing verification",
            "Verdicts whose digest does not match the chain, whose document is invalid, or "
            "whose deterministic re-run disagrees. Anything above zero needs a look.",
            [
                Target(
                    "sum("
                    + sel("keeper_verdicts_total", f'status=~"{FAILING_VERDICTS}"')
                    + ") or vector(0)",
                    "failing",
                    instant=True,
                )
            ],
            kind="stat",
            width=6,
            thresholds=[(1, "red")],
        ),
        Panel(
            "Verdicts verified",
            "Share of verdicts whose digest and re-run both check out.",
            [
                Target(
                    "sum("
                    + sel("keeper_verdicts_total", 'status="verified"')
                    + ") / sum("
                    + sel("keeper_verdicts_total")
                    + ")",
                    "verified",
                    instant=True,
                )
            ],
            kind="stat",
            unit="percentunit",
            width=6,
        ),
        Panel(
            "Evaluator activity",
            "Evaluator-side events per interval: verdicts (complete, reject, evaluate), "
            "assignments, timeouts, appeals and disputes.",
            [
                Target(
                    by(
                        "contract, event",
                        over("increase", "keeper_events_total", f'event=~"{EVALUATOR_EVENTS}"'),
                    ),
                    "{{contract}} {{event}}",
                )
            ],
            stacked=True,
        ),
    ],
)

INDEXER = Dashboard(
    uid="keeper-indexer",
    title="Indexer",
    description="Chain following: heads, lag, reorgs, RPC endpoints and the event stream.",
    panels=[
        Panel(
            "Head, finalized and indexed block",
            "Newest head seen, the finalized block, the highest block committed to the "
            "database, and the block the verifier's scan has passed (behind the indexed block "
            "while it catches up).",
            [
                Target(by("chain_id", sel("keeper_head_block"), "max"), "head {{chain_id}}"),
                Target(
                    by("chain_id", sel("keeper_finalized_block"), "max"), "finalized {{chain_id}}"
                ),
                Target(by("chain_id", sel("keeper_indexed_block"), "max"), "indexed {{chain_id}}"),
                Target(
                    by("chain_id", sel("keeper_verifier_block"), "max"), "verifier {{chain_id}}"
                ),
            ],
            unit="none",
        ),
        Panel(
            "Blocks behind head",
            "Head minus indexed (indexing backlog) and head minus finalized (the reorg window).",
            [
                Target(
                    by("chain_id", sel("keeper_head_block"), "max")
                    + " - "
                    + by("chain_id", sel("keeper_indexed_block"), "max"),
                    "indexed {{chain_id}}",
                ),
                Target(
                    by("chain_id", sel("keeper_head_block"), "max")
                    + " - "
                    + by("chain_id", sel("keeper_finalized_block"), "max"),
                    "unfinalized {{chain_id}}",
                ),
            ],
            unit="none",
        ),
        Panel(
            "Head lag",
            "Wall-clock age of the newest head block. Alert HeadLagHigh fires above 120 s.",
            [Target(by("chain_id", sel("keeper_head_lag_seconds"), "max"), "{{chain_id}}")],
            unit="s",
            thresholds=[(120, "red")],
            width=6,
        ),
        Panel(
            "Indexing halted",
            "1 when the indexer stopped on purpose (e.g. a reorg deeper than its window).",
            [Target(f"max({sel('keeper_indexing_halted')})", "halted", instant=True)],
            kind="stat",
            width=3,
            thresholds=[(1, "red")],
        ),
        Panel(
            "Fetch process unavailable",
            "1 when the second process that fetches long ranges could not start: the daemon "
            "fetches them itself, slower, same index. Alert FetchProcessUnavailable.",
            [Target(f"max({sel('keeper_fetch_process_unavailable')})", "in process", instant=True)],
            kind="stat",
            width=3,
            thresholds=[(1, "orange")],
        ),
        Panel(
            "Reorgs",
            "Reorganisations handled per interval.",
            [Target(by("instance", over("increase", "keeper_reorgs_total")), "{{instance}}")],
            width=6,
        ),
        Panel(
            "Reorg depth",
            "Reorgs over the selected range by depth bucket (blocks, cumulative).",
            [
                Target(
                    by(
                        "le",
                        over("increase", "keeper_reorg_depth_blocks_bucket", window="$__range"),
                    ),
                    "<= {{le}}",
                    instant=True,
                )
            ],
            kind="bargauge",
            width=6,
        ),
        Panel(
            "RPC requests by endpoint and outcome",
            "Requests per second by configured endpoint name and outcome.",
            [
                Target(
                    by("endpoint, outcome", over("rate", "keeper_rpc_requests_total")),
                    "{{endpoint}} {{outcome}}",
                )
            ],
            unit="reqps",
            stacked=True,
        ),
        Panel(
            "RPC error ratio by endpoint",
            "Share of requests failing at the endpoint (rate limits, timeouts, 5xx, refused). "
            "Alert RpcErrorRateHigh fires above 20%.",
            [
                Target(
                    by(
                        "endpoint",
                        over("rate", "keeper_rpc_requests_total", f'outcome=~"{RPC_FAULTS}"'),
                    )
                    + " / "
                    + by("endpoint", over("rate", "keeper_rpc_requests_total")),
                    "{{endpoint}}",
                )
            ],
            unit="percentunit",
            thresholds=[(0.2, "red")],
        ),
        Panel(
            "RPC latency p50 / p95 by endpoint",
            "Request latency quantiles per endpoint, over all methods.",
            [
                Target(
                    quantile(0.5, "endpoint", "keeper_rpc_request_duration_seconds"),
                    "p50 {{endpoint}}",
                ),
                Target(
                    quantile(0.95, "endpoint", "keeper_rpc_request_duration_seconds"),
                    "p95 {{endpoint}}",
                ),
            ],
            unit="s",
        ),
        Panel(
            "RPC latency by method",
            "Mean request latency per method (all endpoints).",
            [
                Target(
                    by("method", over("rate", "keeper_rpc_request_duration_seconds_sum"))
                    + " / "
                    + by("method", over("rate", "keeper_rpc_request_duration_seconds_count")),
                    "{{method}}",
                )
            ],
            unit="s",
        ),
        Panel(
            "RPC endpoint backoffs",
            "Times an endpoint was put on backoff, and seconds of backoff imposed, per interval.",
            [
                Target(
                    by("endpoint", over("increase", "keeper_rpc_backoffs_total")),
                    "backoffs {{endpoint}}",
                ),
                Target(
                    by("endpoint", over("increase", "keeper_rpc_backoff_seconds_total")),
                    "seconds {{endpoint}}",
                ),
            ],
        ),
        Panel(
            "Events by type",
            "Decoded events stored per second, by contract and event.",
            [
                Target(
                    by("contract, event", over("rate", "keeper_events_total")),
                    "{{contract}} {{event}}",
                )
            ],
            unit="ops",
            stacked=True,
        ),
        Panel(
            "Unknown events",
            "Logs from watched contracts with an unknown topic0 (kept raw, not reduced), per "
            "interval. Usually a contract upgrade.",
            [
                Target(
                    by("contract", over("increase", "keeper_unknown_events_total")),
                    "{{contract}}",
                )
            ],
            thresholds=[(1, "orange")],
        ),
        Panel(
            "Daemons",
            "Running daemons and their versions.",
            [
                Target(
                    by("instance, version", sel("keeper_build_info"), "max"),
                    "{{instance}} {{version}}",
                    instant=True,
                )
            ],
            kind="table",
        ),
    ],
)

KEEPER = Dashboard(
    uid="keeper-keeper",
    title="Keeper",
    description="The keeper's transactions: outcomes, timeliness, fees and the signer.",
    panels=[
        Panel(
            "Actions by outcome",
            "Keeper actions finished per interval by action and outcome (confirmed, "
            "preempted, not_permitted, ...).",
            [
                Target(
                    by("action, outcome", over("increase", "keeper_actions_total")),
                    "{{action}} {{outcome}}",
                )
            ],
            stacked=True,
        ),
        Panel(
            "Actions finished",
            "Totals since the daemon started, by outcome.",
            [Target(by("outcome", sel("keeper_actions_total")), "{{outcome}}", instant=True)],
            kind="stat",
        ),
        Panel(
            "Delay after deadline p50 / p95",
            "Chain seconds from an action's deadline to its confirmation.",
            [
                Target(quantile(0.5, "action", "keeper_action_delay_seconds"), "p50 {{action}}"),
                Target(quantile(0.95, "action", "keeper_action_delay_seconds"), "p95 {{action}}"),
            ],
            unit="s",
        ),
        Panel(
            "Mean delay after deadline",
            "Mean chain seconds from deadline to confirmation over the selected range.",
            [
                Target(
                    by(
                        "action",
                        over("increase", "keeper_action_delay_seconds_sum", window="$__range"),
                    )
                    + " / "
                    + by(
                        "action",
                        over("increase", "keeper_action_delay_seconds_count", window="$__range"),
                    ),
                    "{{action}}",
                    instant=True,
                )
            ],
            kind="stat",
            unit="s",
        ),
        Panel(
            "Overdue actions",
            "Actions due and not yet confirmed: the keeper's backlog.",
            [
                Target(
                    by("contract, action", sel("keeper_overdue_actions")),
                    "{{contract}} {{action}}",
                )
            ],
            width=8,
            thresholds=[(1, "orange")],
        ),
        Panel(
            "Fee cap hits and replacements",
            "Fee bumps stopped by keeper.max_fee_gwei, and transactions replaced with higher "
            "fees, per interval.",
            [
                Target(
                    by("instance", over("increase", "keeper_fee_cap_hits_total")),
                    "cap hits {{instance}}",
                ),
                Target(
                    by("instance", over("increase", "keeper_tx_replacements_total")),
                    "replacements {{instance}}",
                ),
            ],
            width=8,
        ),
        Panel(
            "Pending transactions",
            "Keeper transactions sent and not yet final.",
            [Target(by("instance", sel("keeper_pending_txs"), "max"), "{{instance}}")],
            width=8,
        ),
        Panel(
            "Contract dialects",
            "The dialect each configured contract was detected or pinned to speak at start-up "
            "(docs/protocols.md). undetermined: indexed, but the keeper leaves it alone; "
            "`keeper status` says why.",
            [
                Target(
                    by("contract, dialect, source", sel("keeper_contract_dialect"), "max"),
                    "{{contract}}: {{dialect}} ({{source}})",
                    instant=True,
                )
            ],
            kind="stat",
            width=24,
            height=4,
        ),
        Panel(
            "Signer balance",
            "The keeper signer's native balance in ETH. Alert SignerBalanceLow fires under "
            "0.02; the keeper stops sending under keeper.min_balance_wei.",
            [
                Target(
                    by("instance", sel("keeper_signer_balance_wei"), "max") + " / 1e18",
                    "{{instance}}",
                )
            ],
            unit="none",
            decimals=4,
            thresholds=[(0.02, "red")],
            width=24,
        ),
    ],
)

DASHBOARDS: tuple[Dashboard, ...] = (ESCROW, INDEXER, KEEPER)


def file_name(d: Dashboard) -> str:
    return f"{d.uid}.json"


def dumps(d: Dashboard) -> str:
    return json.dumps(render(d), indent=2, sort_keys=True) + "\n"


def write_all(directory: Path = DASHBOARD_DIR) -> list[Path]:
    """Write every dashboard into ``directory``; return the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in DASHBOARDS:
        path = directory / file_name(d)
        path.write_text(dumps(d))
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in write_all(Path(sys.argv[1]) if len(sys.argv) > 1 else DASHBOARD_DIR):
        print(written)
