"""Which endpoint to ask next: health and latency bookkeeping, no I/O.

Each endpoint keeps an EWMA of its answer time and a count of consecutive
failures. A failure backs the endpoint off for an exponentially growing
delay (or the provider's Retry-After); the next call goes to the healthiest
available endpoint, which is how failover happens. ``now`` is always passed
in (monotonic seconds), so every decision here is testable without sleeping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from keeper.domain.rpc_errors import FailureKind

# Weight of the newest sample: a few slow answers move the estimate, one does not.
EWMA_ALPHA: Final = 0.3
# An endpoint refusing our credentials will not heal in seconds.
REJECTED_BACKOFF: Final = 300.0

# Failures that are the endpoint's fault and move traffic elsewhere. Deliberate
# answers (reverts, nonce errors, range refusals) show the endpoint is fine.
_ENDPOINT_FAULTS: Final = frozenset(
    {"rate_limited", "timeout", "transient", "unknown_block", "endpoint_rejected"}
)


def endpoint_fault(kind: FailureKind) -> bool:
    """Whether a failure of this kind counts against the endpoint's health."""
    return kind in _ENDPOINT_FAULTS


@dataclass(slots=True)
class EndpointHealth:
    """Mutable health of one endpoint; ``index`` is its configured position."""

    name: str
    index: int
    latency: float | None = None
    failures: int = 0
    backoff_until: float = 0.0

    def available(self, now: float) -> bool:
        return now >= self.backoff_until

    def record_success(self, seconds: float) -> None:
        """An answer arrived: fold its latency in and forget past failures."""
        self.failures = 0
        self.record_latency_only(seconds)

    def record_failure(
        self,
        kind: FailureKind,
        now: float,
        *,
        retry_after: float | None = None,
        base: float = 0.25,
        cap: float = 10.0,
        seconds: float | None = None,
    ) -> float:
        """Back the endpoint off after a fault; returns the backoff in seconds.

        A timeout also counts its full duration as latency, so a slow endpoint
        sinks in the ranking even once it recovers from the backoff.
        """
        self.failures += 1
        if kind == "timeout" and seconds is not None:
            self.record_latency_only(seconds)
        if kind == "endpoint_rejected":
            delay = REJECTED_BACKOFF
        elif retry_after is not None:
            delay = min(max(retry_after, 0.0), cap)
        else:
            delay = min(cap, base * 2 ** min(self.failures - 1, 30))
        self.backoff_until = max(self.backoff_until, now + delay)
        return delay

    def record_latency_only(self, seconds: float) -> None:
        self.latency = (
            seconds
            if self.latency is None
            else EWMA_ALPHA * seconds + (1 - EWMA_ALPHA) * self.latency
        )


def rank(healths: Sequence[EndpointHealth], now: float) -> list[EndpointHealth]:
    """Endpoints in the order to try them.

    Available ones first, by fewest recent failures, then lowest latency (an
    untried endpoint counts as fastest so it gets measured), then configured
    order; backed-off ones after, soonest-free first.
    """
    ready = [h for h in healths if h.available(now)]
    waiting = [h for h in healths if not h.available(now)]
    ready.sort(key=lambda h: (h.failures, h.latency or 0.0, h.index))
    waiting.sort(key=lambda h: (h.backoff_until, h.index))
    return ready + waiting


def seconds_until_available(healths: Sequence[EndpointHealth], now: float) -> float:
    """0 when some endpoint is available, else the wait until the first one is."""
    if not healths:
        return 0.0
    return max(0.0, min(h.backoff_until for h in healths) - now)
