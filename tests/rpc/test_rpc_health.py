"""Endpoint choice: failures back off exponentially, latency ranks, Retry-After is obeyed."""

from __future__ import annotations

from keeper.rpc.health import EndpointHealth, endpoint_fault, rank, seconds_until_available


def test_backoff_doubles_and_caps() -> None:
    """Consecutive faults double the backoff up to the cap; success resets the count."""
    h = EndpointHealth("a", 0)
    delays = [h.record_failure("transient", 0.0, base=1.0, cap=5.0) for _ in range(5)]
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]
    h.record_success(0.1)
    assert h.failures == 0
    assert h.record_failure("transient", 100.0, base=1.0, cap=5.0) == 1.0


def test_retry_after_and_rejection() -> None:
    """Retry-After sets the backoff exactly; a rejected key backs off for minutes."""
    h = EndpointHealth("a", 0)
    assert h.record_failure("rate_limited", 10.0, retry_after=3.0) == 3.0
    assert not h.available(12.9) and h.available(13.0)
    assert EndpointHealth("b", 1).record_failure("endpoint_rejected", 0.0) == 300.0


def test_rank_prefers_healthy_then_fast() -> None:
    """Available before backed off; fewer failures, then lower latency, then config order."""
    slow, fast, untried, broken = (EndpointHealth(n, i) for i, n in enumerate("abcd"))
    slow.record_success(0.5)
    fast.record_success(0.05)
    broken.record_failure("timeout", 0.0, base=10.0, seconds=1.0)
    assert [h.name for h in rank([slow, fast, untried, broken], now=1.0)] == ["c", "b", "a", "d"]
    assert seconds_until_available([broken], now=1.0) == 9.0
    assert seconds_until_available([broken, slow], now=1.0) == 0.0


def test_timeout_counts_as_latency() -> None:
    """A timeout raises the latency estimate, so a slow endpoint sinks after recovering."""
    h = EndpointHealth("a", 0)
    h.record_success(0.01)
    h.record_failure("timeout", 0.0, seconds=10.0)
    assert h.latency is not None and h.latency > 1.0


def test_deliberate_answers_are_not_faults() -> None:
    """Reverts, pool refusals and range refusals say nothing bad about the endpoint."""
    assert endpoint_fault("timeout") and endpoint_fault("rate_limited")
    for kind in ("execution_reverted", "nonce_too_low", "range_too_large", "method_not_found"):
        assert not endpoint_fault(kind)
