"""Task market modes: bytes4 selectors, ``bytes4(keccak256("TMP.mode.<name>"))`` upstream.

Bounty and Benchmark are open contests: submissions do not move the task out of Open
(there is no Review), and the contract refuses to refund or cancel one while it has
active submissions (``SubmissionsExist``).
"""

from __future__ import annotations

from typing import Final

from keeper.domain.hashing import keccak

__all__ = ["BENCHMARK", "BOUNTY", "CLAIM", "CONTEST_MODES", "PITCH", "mode_id"]


def mode_id(name: str) -> str:
    """The mode's bytes4 as our ``0x`` + 8 hex convention."""
    return "0x" + keccak(text=f"TMP.mode.{name}")[:4].hex()


BOUNTY: Final = mode_id("bounty")
CLAIM: Final = mode_id("claim")
PITCH: Final = mode_id("pitch")
BENCHMARK: Final = mode_id("benchmark")
CONTEST_MODES: Final = frozenset({BOUNTY, BENCHMARK})
