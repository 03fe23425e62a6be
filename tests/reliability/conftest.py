"""Reliability suite wiring: two sizes, the indexer test helpers, and the report at the end.

Every torture test takes a ``size``: "fast" runs inside ``make test`` (not
slow), "long" carries the ``reliability`` and ``slow`` markers and runs under
``make reliability``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# the lead's indexer helpers (fresh_index, table_diff, ...) live beside the sync tests
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sync"))

from rel_report import REPORT


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    REPORT.flush()
