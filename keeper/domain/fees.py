"""EIP-1559 fee policy: suggest from ``eth_feeHistory``, bump for replacement, respect a cap.

All amounts are integer wei. The cap is a hard limit on ``maxFeePerGas``: a
decision above it is never produced, a :class:`CapHit` is returned instead so
the caller can count it, report it and wait for fees to fall.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

__all__ = [
    "BUMP_DENOMINATOR",
    "CapHit",
    "FeeDecision",
    "FeePolicy",
    "above_signed",
    "bump",
    "gwei_to_wei",
    "suggest",
]

GWEI = 10**9
# Nodes accept a replacement only when both fields rise by at least 10% (geth's
# default price bump); 1/8 = 12.5% clears that with margin and is what the
# EIP-1559 base fee itself can move per block.
BUMP_DENOMINATOR = 8


def gwei_to_wei(gwei: int | float | str) -> int:
    """Config values come in gwei; converted once at the edge, via str to avoid float error."""
    wei = Decimal(str(gwei)) * GWEI
    if wei != wei.to_integral_value() or wei < 0:
        raise ValueError(f"fee {gwei} gwei is not a whole non-negative number of wei")
    return int(wei)


@dataclass(frozen=True, slots=True)
class FeeDecision:
    """``maxFeePerGas`` and ``maxPriorityFeePerGas`` of one transaction, in wei."""

    max_fee: int
    tip: int

    def __post_init__(self) -> None:
        if self.tip < 0 or self.max_fee < self.tip:
            raise ValueError("need 0 <= tip <= max_fee")


@dataclass(frozen=True, slots=True)
class CapHit:
    """The fee the network needs now is above the operator's cap: do not send."""

    needed: int
    cap: int


@dataclass(frozen=True, slots=True)
class FeePolicy:
    """How to read fee history.

    ``base_fee_multiplier``: max fee = next base fee x this + tip, so a pending
    transaction survives that many consecutive full blocks (2 is the usual
    wallet default: six full blocks of +12.5%) before it must be bumped.
    ``min_tip`` guards against an empty history on quiet chains giving tip 0,
    which some builders ignore.
    """

    max_fee_cap: int
    tip_percentile: float = 50.0
    base_fee_multiplier: int = 2
    min_tip: int = 1

    def __post_init__(self) -> None:
        if self.max_fee_cap <= 0:
            raise ValueError("max_fee_cap must be positive")
        if not 0 <= self.tip_percentile <= 100:
            raise ValueError("tip_percentile must be within 0..100")


def _as_int(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError("bool is not a fee")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return int(value, 16) if value.startswith(("0x", "0X")) else int(value)
    raise TypeError(f"cannot read a fee from {type(value).__name__}")


def next_base_fee(history: Mapping[str, Any]) -> int:
    """The base fee of the block after the newest one (feeHistory's last entry)."""
    fees: Sequence[Any] = history.get("baseFeePerGas") or []
    if not fees:
        raise ValueError("fee history without baseFeePerGas")
    return _as_int(fees[-1])


def history_tip(history: Mapping[str, Any]) -> int:
    """Median over blocks of the first requested reward percentile (0 when absent)."""
    rewards: Sequence[Sequence[Any]] = history.get("reward") or []
    values = sorted(_as_int(r[0]) for r in rewards if r)
    if not values:
        return 0
    return values[len(values) // 2]


def suggest(history: Mapping[str, Any], policy: FeePolicy) -> FeeDecision | CapHit:
    """Fees for a new transaction, clamped to the cap, or CapHit if it could not be included.

    A max fee above the cap is clamped when the cap still covers the next base
    fee plus the tip (the transaction is includable now, just with less
    headroom); below that the network is simply too expensive.
    """
    base = next_base_fee(history)
    tip = max(history_tip(history), policy.min_tip)
    needed = base + tip
    if needed > policy.max_fee_cap:
        return CapHit(needed=needed, cap=policy.max_fee_cap)
    max_fee = min(base * policy.base_fee_multiplier + tip, policy.max_fee_cap)
    return FeeDecision(max_fee=max_fee, tip=tip)


def _raise(value: int) -> int:
    """At least +12.5% and at least +1 wei (12.5% of a tiny value rounds to nothing)."""
    return max(value + -(-value // BUMP_DENOMINATOR), value + 1)


def bump(
    prev: FeeDecision, cap: int, market: FeeDecision | CapHit | None = None
) -> FeeDecision | CapHit:
    """Fees for a replacement of ``prev``: both fields up by >= 12.5%, never above ``cap``.

    When the market (a fresh :func:`suggest`) asks for more than the minimum
    bump, the higher value is taken so a replacement is not immediately stale;
    when the market itself is above the cap, so is any useful replacement.
    """
    if isinstance(market, CapHit):
        return market  # the replacement could not be included either: keep waiting
    tip = _raise(prev.tip)
    max_fee = _raise(prev.max_fee)
    if market is not None:
        tip = max(tip, market.tip)
        max_fee = max(max_fee, market.max_fee)
    max_fee = max(max_fee, tip)
    if max_fee > cap:
        return CapHit(needed=max_fee, cap=cap)
    return FeeDecision(max_fee=max_fee, tip=tip)


def above_signed(
    signed: Iterable[FeeDecision], cap: int, market: FeeDecision | CapHit
) -> FeeDecision | CapHit:
    """Fees for a new signature at a nonce: a replacement bump over every fee ever signed
    there. A node that refused one of ours as underpriced, or still holds it, takes
    nothing less, so re-signing at the same fees would be refused forever."""
    prev = list(signed)
    if not prev:
        return market
    return bump(FeeDecision(max(p.max_fee for p in prev), max(p.tip for p in prev)), cap, market)
