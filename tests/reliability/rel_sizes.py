"""The two suite sizes: what "fast" and "long" mean for each torture."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

__all__ = ["FAST", "LONG", "SIZES", "Size"]


@dataclass(frozen=True)
class Size:
    name: str
    crash_kills: int
    reorgs: int
    fault_steps: int
    fuzz_examples: int


FAST = Size("fast", crash_kills=20, reorgs=20, fault_steps=24, fuzz_examples=200)
LONG = Size("long", crash_kills=200, reorgs=200, fault_steps=160, fuzz_examples=5000)

# parametrize a test over both; only the long one is slow (and reliability-marked)
SIZES = [
    pytest.param(FAST, id="fast"),
    pytest.param(
        LONG,
        id="long",
        # 200 kills or reorgs take far longer than the suite's default 300 s per test
        marks=[pytest.mark.slow, pytest.mark.reliability, pytest.mark.timeout(7200)],
    ),
]
# the three tortures that run a devnet daemon for a minute or more even at the fast size
# (faults, kills, reorgs): both sizes under `make reliability`, none in `make test`, whose
# 20-minute budget the multi-daemon tests (tests/cluster) now need; what they check
# quickly is also checked by tests/sync (faults, reorgs, a killed backfill) and tests/cluster
# (kill -9 under traffic, tables equal a fresh index, one transaction per action)
TORTURE_SIZES = [
    pytest.param(FAST, id="fast", marks=[pytest.mark.slow, pytest.mark.reliability]),
    SIZES[1],
]
