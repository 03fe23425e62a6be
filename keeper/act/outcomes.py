"""Ending intents: one place that writes the outcome, counts it and logs it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from keeper.domain.fees import CapHit
from keeper.obs.logging import get_logger
from keeper.obs.metrics import Metrics
from keeper.store.intents import Intent, IntentStore, Outcome

__all__ = ["OutcomeRecorder"]

log = get_logger(__name__)


class OutcomeRecorder:
    """Writes outcomes to the store and mirrors them into metrics and logs."""

    def __init__(self, store: IntentStore, metrics: Metrics | None) -> None:
        self.store = store
        self.metrics = metrics

    def finish(self, intent: Intent, outcome: Outcome, detail: str = "") -> None:
        self.finish_many([intent], outcome, detail)

    def finish_many(self, intents: Sequence[Intent], outcome: Outcome, detail: str) -> None:
        """End intents with one outcome in one transaction; count and log each."""
        self.store.set_outcome(
            [i.id for i in intents], outcome, status="done", detail=detail or None
        )
        for intent in intents:
            self.count(intent, outcome)
            log.info(
                "keeper_action_finished",
                outcome=outcome,
                action=intent.action,
                contract=intent.contract,
                subject=intent.subject,
                detail=detail,
            )

    def finish_hook_blocked(self, intents: Sequence[Intent], detail: str) -> None:
        """A hook reverted the refund: ended, counted as ``hook_blocked``, logged once as an
        error (the planner keeps the job off the chain until the hook is detached)."""
        self.store.set_outcome(
            [i.id for i in intents], "reverted_in_simulation", status="done", detail=detail
        )
        for intent in intents:
            self.count(intent, "hook_blocked")
            log.error(
                "keeper_hook_blocked",
                action=intent.action,
                contract=intent.contract,
                subject=intent.subject,
                detail=detail,
            )

    def finish_ids(self, ids: Iterable[int], outcome: Outcome, detail: str) -> None:
        self.finish_many(self.store.intents(ids), outcome, detail)

    def count(self, intent: Intent, outcome: str) -> None:
        if self.metrics:
            self.metrics.actions.labels(
                self.metrics.contract_label(intent.contract), intent.action, outcome
            ).inc()

    def count_cap(self, hit: CapHit) -> None:
        if self.metrics:
            self.metrics.fee_cap_hits.inc()
        log.warning("keeper_fee_cap_hit", needed=hit.needed, cap=hit.cap)
