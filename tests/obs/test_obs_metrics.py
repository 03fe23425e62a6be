"""Tests for keeper.obs.metrics and keeper.obs.dbgauges, read back through the text format."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from keeper.domain.model import JobStatus, Protocol, TaskStatus
from keeper.obs.dbgauges import CountRows, DatabaseCollector, DbGaugeSources
from keeper.obs.metrics import Metrics, MetricsRpcObserver

ACP = "0x" + "aa" * 20
TM = "0x" + "bb" * 20
USDC = "0x" + "cc" * 20

REQUIRED_NAMES = {
    "keeper_head_block",
    "keeper_finalized_block",
    "keeper_indexed_block",
    "keeper_head_lag_seconds",
    "keeper_events_total",
    "keeper_unknown_events_total",
    "keeper_reorgs_total",
    "keeper_reorg_depth_blocks",
    "keeper_indexing_halted",
    "keeper_rpc_requests_total",
    "keeper_rpc_request_duration_seconds",
    "keeper_jobs",
    "keeper_tasks",
    "keeper_escrow_locked",
    "keeper_overdue_actions",
    "keeper_actions_total",
    "keeper_action_delay_seconds",
    "keeper_tx_replacements_total",
    "keeper_fee_cap_hits_total",
    "keeper_signer_balance_wei",
    "keeper_pending_txs",
    "keeper_verdicts_total",
    "keeper_build_info",
}


def samples(registry: CollectorRegistry) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a scrape, keyed by (sample name, label set)."""
    text = generate_latest(registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return samples(registry)[(name, frozenset(labels.items()))]


def sample_names(registry: CollectorRegistry) -> set[str]:
    text = generate_latest(registry).decode()
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            names.add(line.split()[2])
    return names


class TestDeclarations:
    def test_every_required_name_is_exported(self) -> None:
        """The full list of names from the operator spec appears in one scrape."""
        metrics = Metrics(version="9.9.9")
        metrics.registry.register(DatabaseCollector(DbGaugeSources()))
        assert sample_names(metrics.registry) >= REQUIRED_NAMES

    def test_all_names_have_prefix_and_no_created_series(self) -> None:
        """Every exported family starts with keeper_, and no *_created clutter is exported."""
        metrics = Metrics()
        metrics.registry.register(DatabaseCollector(DbGaugeSources()))
        names = sample_names(metrics.registry)
        assert all(n.startswith("keeper_") for n in names)
        assert not [n for n in names if n.endswith("_created")]

    def test_registries_are_independent(self) -> None:
        """Two Metrics objects never share values (nor collide on registration)."""
        a, b = Metrics(), Metrics()
        a.head_block.labels(chain_id="1").set(100)
        b.head_block.labels(chain_id="1").set(5)
        assert value(a.registry, "keeper_head_block", chain_id="1") == 100
        assert value(b.registry, "keeper_head_block", chain_id="1") == 5

    def test_build_info_carries_version(self) -> None:
        """keeper_build_info is 1 with the version label."""
        metrics = Metrics(version="1.2.3")
        assert value(metrics.registry, "keeper_build_info", version="1.2.3") == 1

    def test_reorg_helper_counts_and_observes(self) -> None:
        """observe_reorg bumps the counter and files the depth in the right bucket."""
        metrics = Metrics()
        metrics.observe_reorg(3)
        metrics.observe_reorg(40)
        r = metrics.registry
        assert value(r, "keeper_reorgs_total") == 2
        assert value(r, "keeper_reorg_depth_blocks_bucket", le="3.0") == 1
        assert value(r, "keeper_reorg_depth_blocks_bucket", le="64.0") == 2
        assert value(r, "keeper_reorg_depth_blocks_sum") == 43


class TestRpcObserver:
    def test_requests_and_backoff_recorded_by_endpoint_name(self) -> None:
        """Observer calls land in the rpc counters and latency histogram."""
        metrics = Metrics()
        observer = MetricsRpcObserver(metrics)
        observer.on_request("alchemy", "eth_getLogs", "ok", 0.2)
        observer.on_request("alchemy", "eth_getLogs", "ok", 0.03)
        observer.on_request("alchemy", "eth_getLogs", "rate_limited", 0.01)
        observer.on_backoff("alchemy", 2.5)
        r = metrics.registry
        ok = {"endpoint": "alchemy", "method": "eth_getLogs", "outcome": "ok"}
        assert value(r, "keeper_rpc_requests_total", **ok) == 2
        limited = {**ok, "outcome": "rate_limited"}
        assert value(r, "keeper_rpc_requests_total", **limited) == 1
        latency = {"endpoint": "alchemy", "method": "eth_getLogs"}
        assert value(r, "keeper_rpc_request_duration_seconds_count", **latency) == 3
        assert value(r, "keeper_rpc_request_duration_seconds_bucket", le="0.05", **latency) == 2
        assert value(r, "keeper_rpc_backoffs_total", endpoint="alchemy") == 1
        assert value(r, "keeper_rpc_backoff_seconds_total", endpoint="alchemy") == 2.5


def rows(*items: tuple[str, str, int]) -> Callable[[], CountRows]:
    def source() -> CountRows:
        return list(items)

    return source


class TestDatabaseCollector:
    def collector_registry(self, sources: DbGaugeSources) -> CollectorRegistry:
        registry = CollectorRegistry()
        contracts = {ACP: ("acp", Protocol.ERC8183), TM: ("tm", Protocol.TASKMARKET)}
        registry.register(DatabaseCollector(sources, contracts))
        return registry

    def test_counts_by_status_with_zero_series(self) -> None:
        """Known contracts export every status, zero where no row exists, labelled by name."""
        sources = DbGaugeSources(
            jobs=rows((ACP, "funded", 3), (ACP, "expired", 1)),
            tasks=rows((TM.upper().replace("0X", "0x"), "appealing", 2)),
        )
        registry = self.collector_registry(sources)
        got = samples(registry)
        assert value(registry, "keeper_jobs", contract="acp", status="funded") == 3
        assert value(registry, "keeper_jobs", contract="acp", status="open") == 0
        job_series = [k for k in got if k[0] == "keeper_jobs"]
        assert len(job_series) == len(JobStatus)
        assert value(registry, "keeper_tasks", contract="tm", status="appealing") == 2
        task_series = [k for k in got if k[0] == "keeper_tasks"]
        assert len(task_series) == len(TaskStatus)

    def test_unknown_contract_labelled_by_address(self) -> None:
        """Rows for a contract not in the config still export, under the address."""
        other = "0x" + "dd" * 20
        registry = self.collector_registry(DbGaugeSources(jobs=rows((other, "open", 1))))
        assert value(registry, "keeper_jobs", contract=other, status="open") == 1

    def test_values_are_recomputed_every_scrape(self) -> None:
        """The collector reads its sources on each scrape, never a cached value."""
        data: list[tuple[str, str, int]] = [(ACP, "claimRefund", 1)]
        registry = self.collector_registry(DbGaugeSources(overdue_actions=lambda: list(data)))
        assert value(registry, "keeper_overdue_actions", contract="acp", action="claimRefund") == 1
        data[0] = (ACP, "claimRefund", 4)
        assert value(registry, "keeper_overdue_actions", contract="acp", action="claimRefund") == 4

    def test_escrow_and_verdicts(self) -> None:
        """Amount rows are summed per (contract, token); verdicts export as a counter."""
        sources = DbGaugeSources(
            escrow_locked=rows((ACP, USDC, 10**18), (ACP, USDC, 5)),
            verdicts=rows((ACP, "verified", 4), (ACP, "mismatch", 1)),
        )
        registry = self.collector_registry(sources)
        assert value(registry, "keeper_escrow_locked", contract="acp", token=USDC) == float(
            10**18 + 5
        )
        assert value(registry, "keeper_verdicts_total", contract="acp", status="mismatch") == 1

    def test_failing_source_costs_only_its_family(self) -> None:
        """A source that raises drops its own samples; the scrape and other families survive."""

        def broken() -> Iterable[tuple[str, str, int]]:
            raise RuntimeError("no such table: jobs")

        registry = self.collector_registry(DbGaugeSources(jobs=broken, tasks=rows((TM, "open", 1))))
        got = samples(registry)
        assert not [k for k in got if k[0] == "keeper_jobs"]
        assert value(registry, "keeper_tasks", contract="tm", status="open") == 1

    @pytest.mark.parametrize("with_db", [False, True])
    def test_registration_does_not_query(self, with_db: bool) -> None:
        """Registering the collector (describe) never calls a source."""
        calls: list[str] = []

        def source() -> CountRows:
            calls.append("x")
            return []

        registry = CollectorRegistry()
        registry.register(DatabaseCollector(DbGaugeSources(jobs=source)))
        assert calls == []
        if with_db:
            generate_latest(registry)
            assert calls == ["x"]
