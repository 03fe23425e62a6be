"""Gauges computed from the database at scrape time.

Jobs and tasks by status, escrow still locked, overdue keeper actions and
verdicts by verification status are facts about the tables; computing them
when Prometheus scrapes means they cannot drift from the tables after a
reorg, a rebuild or a restart, which hand-maintained gauges would.

The collector depends only on callables returning rows (:class:`DbGaugeSources`),
so the tables behind them may evolve, and one failing source costs its own
metric family, never the whole scrape.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from keeper.domain.model import JobStatus, Protocol, TaskStatus
from keeper.obs.logging import get_logger

__all__ = ["CountRows", "DatabaseCollector", "DbGaugeSources"]

# (contract address, label, count or amount): label is a status, token or action.
CountRows = Iterable[tuple[str, str, int]]

_log = get_logger(__name__)


def _nothing() -> CountRows:
    return ()


@dataclass(frozen=True, slots=True)
class DbGaugeSources:
    """Row providers, each returning ``(contract, label, value)`` tuples.

    - ``jobs``/``tasks``: (contract, status label, count);
    - ``escrow_locked``: (contract, token, base units held in non-terminal subjects);
    - ``overdue_actions``: (contract, action, count due and not confirmed);
    - ``verdicts``: (contract, verification status, count);
    - ``missing_reads``: (contract, read kind, count of chain reads no node state could answer).
    """

    jobs: Callable[[], CountRows] = _nothing
    tasks: Callable[[], CountRows] = _nothing
    escrow_locked: Callable[[], CountRows] = _nothing
    overdue_actions: Callable[[], CountRows] = _nothing
    verdicts: Callable[[], CountRows] = _nothing
    missing_reads: Callable[[], CountRows] = _nothing


class DatabaseCollector(Collector):
    """prometheus_client collector over :class:`DbGaugeSources`.

    ``contracts`` maps a contract address to (name, protocol): the metric label
    is the configured name (readable, bounded), and every status of a contract
    whose protocol is given is exported, zero included, so dashboards see a
    flat line rather than a missing series.
    """

    def __init__(
        self,
        sources: DbGaugeSources,
        contracts: Mapping[str, tuple[str, Protocol | None]] | None = None,
    ) -> None:
        self._sources = sources
        self._contracts = dict(contracts or {})

    def describe(self) -> Iterable[Metric]:
        """Declare the families without querying, so registration never touches the database."""
        return list(self._families())

    def collect(self) -> Iterable[Metric]:
        families = self._families()
        self._fill(families[0], self._sources.jobs, self._statuses(Protocol.ERC8183))
        self._fill(families[1], self._sources.tasks, self._statuses(Protocol.TASKMARKET))
        self._fill(families[2], self._sources.escrow_locked, {})
        self._fill(families[3], self._sources.overdue_actions, {})
        self._fill(families[4], self._sources.verdicts, {})
        self._fill(families[5], self._sources.missing_reads, {})
        return families

    def _families(self) -> list[GaugeMetricFamily | CounterMetricFamily]:
        return [
            GaugeMetricFamily(
                "keeper_jobs", "ERC-8183 jobs by status.", labels=["contract", "status"]
            ),
            GaugeMetricFamily(
                "keeper_tasks", "Task-market tasks by status.", labels=["contract", "status"]
            ),
            GaugeMetricFamily(
                "keeper_escrow_locked",
                "Token base units held in escrow by non-terminal jobs and tasks.",
                labels=["contract", "token"],
            ),
            GaugeMetricFamily(
                "keeper_overdue_actions",
                "Keeper actions past their deadline and not yet confirmed.",
                labels=["contract", "action"],
            ),
            # Counter: verdicts only accumulate; a status may move (unavailable ->
            # verified) but the family is read as rate/increase by status.
            CounterMetricFamily(
                "keeper_verdicts",
                "Verdicts seen, by verification status.",
                labels=["contract", "status"],
            ),
            GaugeMetricFamily(
                "keeper_chain_reads_missing",
                "View reads the node had no state to answer exactly, by read kind.",
                labels=["contract", "kind"],
            ),
        ]

    def _statuses(self, protocol: Protocol) -> dict[tuple[str, str], int]:
        """Zero series for every status of every configured contract of ``protocol``."""
        names: Iterator[str] = (
            (s.label for s in JobStatus)
            if protocol is Protocol.ERC8183
            else (s.label for s in TaskStatus)
        )
        labels = list(names)
        return {
            (name, status): 0
            for name, proto in self._contracts.values()
            if proto is protocol
            for status in labels
        }

    def _fill(
        self,
        family: GaugeMetricFamily | CounterMetricFamily,
        source: Callable[[], CountRows],
        zeros: dict[tuple[str, str], int],
    ) -> None:
        values: dict[tuple[str, str], int] = defaultdict(int, zeros)
        try:
            for contract, label, value in source():
                values[(self._label(contract), label)] += int(value)
        except Exception as exc:  # one broken source must not fail the whole scrape
            _log.warning("db_gauge_source_failed", metric=family.name, error=str(exc))
            return
        for (contract, label), value in sorted(values.items()):
            # Prometheus samples are float64: amounts above 2**53 lose precision
            # here, and only here; the API serves exact decimal strings.
            family.add_metric([contract, label], float(value))

    def _label(self, contract: str) -> str:
        known = self._contracts.get(contract.lower())
        return known[0] if known else contract.lower()
