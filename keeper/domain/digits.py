"""Decimal text from outside (a query string, an environment variable, a JSON pointer) read
as a bounded integer.

``int()`` refuses more than 4,300 digits with a bare ValueError, which no caller expects
from text that already passed a digits check; comparing the significant digits' length
with the bound's first never converts such text, and answers the same.
"""

from __future__ import annotations

__all__ = ["UINT256_MAX", "at_most"]

UINT256_MAX = 2**256 - 1  # a job id's and an amount of wei's largest value


def at_most(digits: str, maximum: int) -> int | None:
    """The value of ASCII decimal ``digits`` (leading zeros allowed) when it is at most
    ``maximum``, else None. The caller has checked that ``digits`` is only digits.

    Other Unicode decimal digits are read as ``int()`` reads them, but only an ASCII
    ``0`` counts as a leading zero: such text with leading zeros of its own script may
    be None where its value is within ``maximum`` (an answer on the safe side)."""
    significant = digits.lstrip("0") or "0"
    if len(significant) > len(str(maximum)):
        return None
    value = int(significant)
    return value if value <= maximum else None
