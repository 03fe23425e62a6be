"""Reliability suite wiring: two sizes, the indexer test helpers, and the report at the end.

Every torture test takes a ``size``: "fast" runs inside ``make test`` (not
slow), "long" carries the ``reliability`` and ``slow`` markers and runs under
``make reliability``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from keeper.devnet.anvil import AnvilProcess

# the lead's indexer helpers (fresh_index, table_diff, ...) live beside the sync tests
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sync"))

from rel_report import REPORT

# anvil forgets old states by default (a long crash torture's chain reached 4,780
# blocks, and a call at block 600 then failed with BlockOutOfRangeError), so the fresh
# index each torture is compared with recorded such views missing where the daemon had
# read them in time. A torture's node keeps every state, in memory.
KEPT_STATES = "100000"


@pytest.fixture
def anvil() -> Iterator[AnvilProcess]:
    with AnvilProcess(extra_args=["--prune-history", KEPT_STATES]) as node:
        yield node


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    REPORT.flush()
