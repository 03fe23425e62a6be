"""Several daemons on one database: the indexer and reliability helpers are shared."""

from __future__ import annotations

import sys
from pathlib import Path

# the lead's indexer helpers (fresh_index, ...) and the daemon-as-a-child harness
for folder in ("sync", "reliability"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / folder))
