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
