"""The devnet's traffic against a daemon, checked as the reliability suite checks it: the
indexer and reliability helpers are shared."""

from __future__ import annotations

import sys
from pathlib import Path

# fresh_index and the audit's adoption of the keeper's observations
for folder in ("sync", "reliability"):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / folder))
