"""ERC-20 metadata (``decimals()``, ``symbol()``) decoded from raw call results, and
amounts formatted in token units.

Pure functions: the daemon reads the bytes (see :mod:`keeper.sync.tokens`), these
decide what they mean. A token is hostile input like any contract: a symbol is
kept only if it is short printable text, decimals only if a real ERC-20 could
use them, and anything else reads as "did not answer" (amounts then stay in
base units). Formatting works on integers only, so no amount ever passes
through a float.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from keeper.domain.hashing import keccak

__all__ = [
    "DECIMALS_CALL",
    "MAX_DECIMALS",
    "SYMBOL_CALL",
    "TokenMeta",
    "decode_decimals",
    "decode_symbol",
    "format_units",
    "group_digits",
]


@dataclass(frozen=True, slots=True)
class TokenMeta:
    """What a token answered; ``decimals`` None means amounts stay in base units."""

    token: str
    decimals: int | None
    symbol: str | None


DECIMALS_CALL: Final = keccak(text="decimals()")[:4]
SYMBOL_CALL: Final = keccak(text="symbol()")[:4]
# 10**77 < 2**256 < 10**78: more decimals than that cannot describe a uint256 amount
MAX_DECIMALS: Final = 77
MAX_SYMBOL_CHARS: Final = 16


def decode_decimals(raw: bytes) -> int | None:
    """``decimals()``'s uint8, or None for an empty, short or out-of-range answer."""
    if len(raw) < 32:
        return None
    value = int.from_bytes(raw[:32], "big")
    return value if value <= MAX_DECIMALS else None


def decode_symbol(raw: bytes) -> str | None:
    """``symbol()`` as an ABI string, or as the bytes32 some early tokens return.

    None unless the result is 1-16 printable ASCII characters without spaces:
    the symbol is shown beside amounts, so it must not be able to pose as one
    (no digits-only symbols) or carry markup.
    """
    text = _abi_string(raw) if len(raw) >= 64 else None
    if text is None and len(raw) == 32:
        text = raw.rstrip(b"\0").decode("ascii", errors="replace")
    if text is None or not 0 < len(text) <= MAX_SYMBOL_CHARS:
        return None
    if not all(33 <= ord(c) < 127 and c not in "<>&\"'" for c in text) or text.isdigit():
        return None
    return text


def _abi_string(raw: bytes) -> str | None:
    offset = int.from_bytes(raw[:32], "big")
    if offset + 32 > len(raw):
        return None
    length = int.from_bytes(raw[offset : offset + 32], "big")
    body = raw[offset + 32 : offset + 32 + length]
    if len(body) != length:
        return None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def group_digits(digits: str) -> str:
    """``"1234567"`` -> ``"1,234,567"`` (thin, locale-free grouping for tables)."""
    head = len(digits) % 3 or 3
    parts = [digits[:head]] + [digits[i : i + 3] for i in range(head, len(digits), 3)]
    return ",".join(parts)


def format_units(amount: int, decimals: int, *, max_fraction: int | None = None) -> str:
    """An integer amount of base units as a decimal number of tokens, exactly.

    ``format_units(1_500_000, 6) == "1.5"``. With ``max_fraction`` the fraction is
    cut (toward zero) to that many digits, for axis labels; the default keeps every
    significant digit so the text equals the amount.
    """
    if decimals < 0:
        raise ValueError(f"decimals must be >= 0, not {decimals}")
    sign = "-" if amount < 0 else ""
    whole, frac = divmod(abs(amount), 10**decimals)
    fraction = str(frac).rjust(decimals, "0") if decimals else ""
    if max_fraction is not None:
        fraction = fraction[:max_fraction]
    fraction = fraction.rstrip("0")
    text = group_digits(str(whole))
    return f"{sign}{text}.{fraction}" if fraction else f"{sign}{text}"
