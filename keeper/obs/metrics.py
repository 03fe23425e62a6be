"""Every metric the daemon exports, declared in one place on one registry.

A dedicated :class:`CollectorRegistry` per :class:`Metrics` (never the global
default) lets tests, and a process following several chains, hold several
sets side by side. Names follow Prometheus conventions: ``keeper_`` prefix,
base units (seconds, blocks, wei), ``_total`` only on counters, and no
unbounded label values (no job ids, task ids or tx hashes; RPC endpoints by
configured name, never URL).

Gauges that describe the database (jobs by status, escrow locked, overdue
actions, verdicts) are not set here: :mod:`keeper.obs.dbgauges` computes them
at scrape time, so they cannot drift from the tables.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)

from keeper import __version__

__all__ = ["Metrics", "MetricsRpcObserver"]

# Reorg depths are small integers; anything past the window halts instead.
_REORG_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128)
# RPC latency: local nodes answer in ms, hosted providers in tens to hundreds.
_RPC_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# Deadline to confirmation in chain seconds: a healthy keeper lands in a few
# blocks; the long tail (hours, a day) is what alerting cares about.
_DELAY_BUCKETS = (2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
# seconds without an indexer: the lease (10 s by default) plus a renewal, and worse
_FAILOVER_BUCKETS = (0.5, 1, 2, 3, 5, 8, 11, 15, 20, 30, 60, 120)


class Metrics:
    """The daemon's instruments; attributes are the prometheus_client metric objects."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        version: str = __version__,
        contract_names: Mapping[str, str] | None = None,
    ) -> None:
        # configured contract names by address: the ``contract`` label of every
        # metric is the operator's name for a contract, never its address
        self._contract_names = {a.lower(): n for a, n in (contract_names or {}).items()}
        # *_created series double the exposition for no dashboard or alert use
        # (process-wide switch; harmless to repeat).
        disable_created_metrics()  # type: ignore[no-untyped-call]  # unannotated upstream
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry

        # chain following
        self.head_block = Gauge(
            "keeper_head_block", "Latest head block number seen.", ["chain_id"], registry=r
        )
        self.finalized_block = Gauge(
            "keeper_finalized_block", "Latest finalized block number.", ["chain_id"], registry=r
        )
        self.indexed_block = Gauge(
            "keeper_indexed_block",
            "Highest block whose events are committed to the database.",
            ["chain_id"],
            registry=r,
        )
        self.verifier_block = Gauge(
            "keeper_verifier_block",
            "Block of the last indexed event the verifier's scan has passed.",
            ["chain_id"],
            registry=r,
        )
        self.head_lag_seconds = Gauge(
            "keeper_head_lag_seconds",
            "Wall-clock seconds since the timestamp of the latest head block.",
            ["chain_id"],
            registry=r,
        )
        self.events = Counter(
            "keeper_events",
            "Decoded contract events stored.",
            ["contract", "event"],
            registry=r,
        )
        self.unknown_events = Counter(
            "keeper_unknown_events",
            "Logs from our contracts with an unknown topic0, kept raw.",
            ["contract"],
            registry=r,
        )
        self.reorgs = Counter("keeper_reorgs", "Chain reorganisations handled.", registry=r)
        self.reorg_depth_blocks = Histogram(
            "keeper_reorg_depth_blocks",
            "Depth of handled reorgs in blocks.",
            buckets=_REORG_BUCKETS,
            registry=r,
        )
        self.indexing_halted = Gauge(
            "keeper_indexing_halted",
            "1 while indexing is halted (e.g. a reorg deeper than the window), else 0.",
            registry=r,
        )
        self.fetch_process_unavailable = Gauge(
            "keeper_fetch_process_unavailable",
            "1 once the separate fetch process could not start: historical ranges are fetched "
            "in the daemon's own process (correct, slower), until a restart; else 0.",
            registry=r,
        )

        # the indexer lease (several daemons on one database: keeper.leadership)
        self.lease_leader = Gauge(
            "keeper_lease_leader",
            "1 while this daemon holds the role's lease (indexes the chain), else 0 (standby).",
            ["role"],
            registry=r,
        )
        self.lease_epoch = Gauge(
            "keeper_lease_epoch",
            "Epoch of the role's lease as this daemon last saw it; it rises at every handover.",
            ["role"],
            registry=r,
        )
        self.lease_acquired = Counter(
            "keeper_lease_acquired",
            "Times this daemon became the role's leader (start-up included).",
            ["role"],
            registry=r,
        )
        self.lease_lost = Counter(
            "keeper_lease_lost",
            "Times this daemon stopped leading: taken over, expired, or a commit fenced out.",
            ["role", "reason"],
            registry=r,
        )
        self.lease_failovers = Counter(
            "keeper_lease_failovers",
            "Takeovers of the role's lease by this daemon from another holder.",
            ["role"],
            registry=r,
        )
        self.lease_failover_seconds = Histogram(
            "keeper_lease_failover_seconds",
            "Seconds (database clock) the role had no live leader before this daemon took it "
            "over: from the previous holder's last renewal to the takeover.",
            ["role"],
            buckets=_FAILOVER_BUCKETS,
            registry=r,
        )
        self.lease_fenced_writes = Counter(
            "keeper_lease_fenced_writes",
            "Index commits refused because the writer's epoch no longer held the lease.",
            ["role"],
            registry=r,
        )

        # RPC
        self.rpc_requests = Counter(
            "keeper_rpc_requests",
            "JSON-RPC requests by endpoint name, method and outcome.",
            ["endpoint", "method", "outcome"],
            registry=r,
        )
        self.rpc_request_duration_seconds = Histogram(
            "keeper_rpc_request_duration_seconds",
            "JSON-RPC request latency.",
            ["endpoint", "method"],
            buckets=_RPC_BUCKETS,
            registry=r,
        )
        self.rpc_backoffs = Counter(
            "keeper_rpc_backoffs",
            "Times an endpoint was put on backoff (rate limit or failures).",
            ["endpoint"],
            registry=r,
        )
        self.rpc_backoff_seconds = Counter(
            "keeper_rpc_backoff_seconds",
            "Seconds of backoff imposed on an endpoint.",
            ["endpoint"],
            registry=r,
        )

        # GitHub (GitHubEval re-runs)
        self.github_requests = Counter(
            "keeper_github_requests",
            "GitHub REST API requests of GitHubEval re-runs, by outcome.",
            ["outcome"],
            registry=r,
        )

        # keeper transactions
        self.actions = Counter(
            "keeper_actions",
            "Keeper actions finished, by outcome (confirmed, preempted, not_permitted, ...).",
            ["contract", "action", "outcome"],
            registry=r,
        )
        self.action_delay_seconds = Histogram(
            "keeper_action_delay_seconds",
            "Chain seconds from an action's deadline to its confirmation.",
            ["action"],
            buckets=_DELAY_BUCKETS,
            registry=r,
        )
        self.tx_replacements = Counter(
            "keeper_tx_replacements", "Transactions replaced with higher fees.", registry=r
        )
        self.fee_cap_hits = Counter(
            "keeper_fee_cap_hits", "Fee bumps stopped by the configured cap.", registry=r
        )
        self.intents_adopted = Counter(
            "keeper_intents_adopted",
            "In-flight intents of another keeper (one that stopped renewing its claims) taken "
            "over to settle its stored transactions.",
            registry=r,
        )
        self.tasks_ended_silently = Counter(
            "keeper_tasks_ended_silently",
            "Tasks the index learnt from this keeper ended with no event (a finalize or a "
            "dispute resolution paying no award).",
            ["contract", "how"],
            registry=r,
        )
        self.dispute_probes = Counter(
            "keeper_dispute_probes",
            "Dispute probes made, by what they found (still_disputed, resolved_silently, failed).",
            ["contract", "outcome"],
            registry=r,
        )
        self.claims_lost = Counter(
            "keeper_claims_lost",
            "Signed transactions discarded unsent: another keeper had taken their intents.",
            registry=r,
        )
        self.signer_balance_wei = Gauge(
            "keeper_signer_balance_wei", "Balance of the keeper's signer in wei.", registry=r
        )
        self.pending_txs = Gauge(
            "keeper_pending_txs", "Keeper transactions sent and not yet final.", registry=r
        )

        self.contract_dialect = Gauge(
            "keeper_contract_dialect",
            "The dialect each configured contract was found (or pinned) to speak, at start-up "
            "and after each upgrade; always 1. "
            'dialect="undetermined": indexed, but the keeper leaves it alone.',
            ["contract", "dialect", "source"],
            registry=r,
        )

        self.contract_paused = Gauge(
            "keeper_contract_paused",
            "1 while the contract's last Paused/Unpaused event is Paused (ERC8183): the keeper "
            "plans and simulates nothing there until it is unpaused.",
            ["contract"],
            registry=r,
        )

        self.build_info = Gauge(
            "keeper_build_info",
            "Build information; the value is always 1.",
            ["version"],
            registry=r,
        )
        self.build_info.labels(version=version).set(1)

    def contract_label(self, address: str) -> str:
        """The ``contract`` label for an address: its configured name, else the address."""
        return self._contract_names.get(address.lower(), address.lower())

    def observe_reorg(self, depth: int) -> None:
        """Count one handled reorg of ``depth`` blocks."""
        self.reorgs.inc()
        self.reorg_depth_blocks.observe(depth)


class MetricsRpcObserver:
    """The RPC layer's observer hooks, recorded as ``keeper_rpc_*`` metrics.

    ``endpoint`` must be the configured endpoint name, never its URL, and
    ``method``/``outcome`` come from small fixed sets, which keeps the label
    space bounded.
    """

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def on_request(self, endpoint: str, method: str, outcome: str, seconds: float) -> None:
        self._metrics.rpc_requests.labels(endpoint=endpoint, method=method, outcome=outcome).inc()
        self._metrics.rpc_request_duration_seconds.labels(endpoint=endpoint, method=method).observe(
            seconds
        )

    def on_backoff(self, endpoint: str, seconds: float) -> None:
        self._metrics.rpc_backoffs.labels(endpoint=endpoint).inc()
        self._metrics.rpc_backoff_seconds.labels(endpoint=endpoint).inc(max(seconds, 0.0))
