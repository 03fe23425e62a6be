"""promtool's lint of our exposition: names, units and types follow Prometheus conventions.

Skipped where promtool is not installed (Debian: ``apt-get install prometheus``).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from keeper.obs.dbgauges import DatabaseCollector, DbGaugeSources
from keeper.obs.metrics import Metrics, MetricsRpcObserver

PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed")
ACP = "0x" + "aa" * 20


def promtool_check(exposition: bytes) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(
        [PROMTOOL, "check", "metrics"],
        input=exposition.decode(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def populated() -> Metrics:
    """Every family with at least one sample, so promtool sees every name and type."""
    m = Metrics(version="test")
    row = [(ACP, "open", 1)]
    m.registry.register(
        DatabaseCollector(
            DbGaugeSources(
                jobs=lambda: row,
                tasks=lambda: row,
                escrow_locked=lambda: [(ACP, "0x" + "bb" * 20, 10**18)],
                overdue_actions=lambda: [(ACP, "claimRefund", 1)],
                verdicts=lambda: [(ACP, "verified", 2)],
            )
        )
    )
    observer = MetricsRpcObserver(m)
    observer.on_request("anvil", "eth_getLogs", "ok", 0.02)
    observer.on_backoff("anvil", 1.5)
    m.observe_reorg(3)
    for gauge in (m.head_block, m.finalized_block, m.indexed_block, m.head_lag_seconds):
        gauge.labels(chain_id="8453").set(1)
    m.events.labels(contract="acp", event="JobCreated").inc()
    m.unknown_events.labels(contract="acp").inc()
    m.actions.labels(contract="acp", action="claimRefund", outcome="confirmed").inc()
    m.action_delay_seconds.labels(action="claimRefund").observe(4)
    m.tx_replacements.inc()
    m.fee_cap_hits.inc()
    m.signer_balance_wei.set(10**17)
    m.pending_txs.set(1)
    m.indexing_halted.set(0)
    return m


class TestPromtool:
    def test_our_exposition_passes_promtool(self) -> None:
        """promtool check metrics reports no problem with any of our families."""
        result = promtool_check(generate_latest(populated().registry))
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.strip() == "" and result.stderr.strip() == ""

    def test_promtool_catches_a_misnamed_gauge(self) -> None:
        """Control: a gauge with a counter's _total suffix is flagged, so the check has teeth."""
        registry = CollectorRegistry()
        Gauge("keeper_bad_total", "A gauge misnamed as a counter.", registry=registry).set(1)
        result = promtool_check(generate_latest(registry))
        assert "keeper_bad_total" in result.stdout + result.stderr
