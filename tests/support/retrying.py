"""One-shot verification with the retry policy, no database: the backoff's behaviour in tests.

The daemon retries through stored ``next_retry_at`` times instead; this loop
drives ``verify_verdict`` with a clock and a sleep the test controls.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from keeper.verify.failures import Status
from keeper.verify.verdict import Outcome, Verdict, Verifier, next_retry_at, verify_verdict


async def verify_with_retries(
    verdict: Verdict,
    verifier: Verifier,
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> Outcome:
    """Verify, retrying while unavailable per the verifier's policy."""
    first = int(clock())
    attempts = 0
    while True:
        outcome = await verify_verdict(verdict, verifier)
        attempts += 1
        if outcome.status is not Status.UNAVAILABLE:
            return outcome
        now = int(clock())
        at = next_retry_at(attempts, now, first_attempt_at=first, policy=verifier.policy)
        if at is None:
            return outcome
        await sleep(max(0, at - now))
