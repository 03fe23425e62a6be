"""Fee suggestions follow fee history, bumps clear replacement rules, the cap is never crossed."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keeper.domain.fees import (
    CapHit,
    FeeDecision,
    FeePolicy,
    bump,
    gwei_to_wei,
    history_tip,
    next_base_fee,
    suggest,
)

GWEI = 10**9


def history(bases: list[int], tips: list[int]) -> dict[str, Any]:
    """A feeHistory answer shaped like the node's: hex strings, one base fee more than blocks."""
    return {
        "oldestBlock": "0x10",
        "baseFeePerGas": [hex(b) for b in bases],
        "gasUsedRatio": [0.5] * len(tips),
        "reward": [[hex(t)] for t in tips],
    }


class TestSuggest:
    """suggest() reads the next base fee and the median tip."""

    def test_uses_next_block_base_fee_and_median_tip(self) -> None:
        """Max fee is 2 x the next base fee plus the median of the tips."""
        h = history([10 * GWEI, 11 * GWEI, 12 * GWEI, 13 * GWEI], [3, 1, 2])
        assert next_base_fee(h) == 13 * GWEI
        assert history_tip(h) == 2
        assert suggest(h, FeePolicy(max_fee_cap=100 * GWEI)) == FeeDecision(26 * GWEI + 2, 2)

    def test_clamps_to_cap_when_still_includable(self) -> None:
        """If the cap covers base fee plus tip, the max fee is clamped rather than refused."""
        h = history([40 * GWEI, 40 * GWEI], [GWEI])
        decision = suggest(h, FeePolicy(max_fee_cap=50 * GWEI))
        assert decision == FeeDecision(50 * GWEI, GWEI)

    def test_cap_hit_when_base_fee_alone_exceeds_it(self) -> None:
        """A base fee spike above the cap gives CapHit with what was needed."""
        h = history([10 * GWEI, 60 * GWEI], [GWEI])
        decision = suggest(h, FeePolicy(max_fee_cap=50 * GWEI))
        assert decision == CapHit(needed=61 * GWEI, cap=50 * GWEI)

    def test_a_cap_exactly_at_base_fee_plus_tip_is_includable(self) -> None:
        """needed == cap: the transaction can be included now, so it is sent at the cap."""
        h = history([10 * GWEI, 49 * GWEI], [GWEI])
        assert suggest(h, FeePolicy(max_fee_cap=50 * GWEI)) == FeeDecision(50 * GWEI, GWEI)

    def test_empty_rewards_fall_back_to_min_tip(self) -> None:
        """A quiet chain with no rewards still pays the policy's minimum tip."""
        h = {"baseFeePerGas": ["0x7", "0x8"], "reward": []}
        assert suggest(h, FeePolicy(max_fee_cap=GWEI, min_tip=5)) == FeeDecision(21, 5)

    def test_missing_base_fee_is_an_error(self) -> None:
        """A history without base fees is refused, not read as zero."""
        with pytest.raises(ValueError):
            suggest({"reward": []}, FeePolicy(max_fee_cap=GWEI))


class TestBump:
    """bump() raises both fields by at least 12.5% and at least 1 wei."""

    @pytest.mark.parametrize(
        ("prev", "expected"),
        [
            (FeeDecision(80, 8), FeeDecision(90, 9)),
            (FeeDecision(1, 0), FeeDecision(2, 1)),  # +1 wei even where 12.5% rounds to 0
            (FeeDecision(81, 9), FeeDecision(92, 11)),  # rounds up, never down
        ],
    )
    def test_minimum_bump(self, prev: FeeDecision, expected: FeeDecision) -> None:
        """The minimum bump is ceil(12.5%), with +1 wei as a floor."""
        assert bump(prev, cap=10**18) == expected

    def test_never_above_cap(self) -> None:
        """A bump that would cross the cap returns CapHit instead."""
        assert bump(FeeDecision(100, 10), cap=112) == CapHit(needed=113, cap=112)
        assert bump(FeeDecision(100, 10), cap=113) == FeeDecision(113, 12)

    def test_follows_market_when_higher(self) -> None:
        """A market already above the minimum bump sets the replacement's fees."""
        assert bump(FeeDecision(100, 10), 10**6, FeeDecision(500, 40)) == FeeDecision(500, 40)

    def test_market_above_cap_is_cap_hit(self) -> None:
        """When the network needs more than the cap, no replacement is produced."""
        market = CapHit(needed=999, cap=200)
        assert bump(FeeDecision(100, 10), cap=200, market=market) == market


@given(
    max_fee=st.integers(min_value=0, max_value=10**15),
    tip_frac=st.floats(min_value=0, max_value=1),
    cap=st.integers(min_value=1, max_value=2 * 10**15),
)
def test_bump_property(max_fee: int, tip_frac: float, cap: int) -> None:
    """Any bump is >= 12.5% and >= 1 wei on both fields, or CapHit; never above the cap."""
    tip = int(max_fee * tip_frac)
    prev = FeeDecision(max_fee, tip)
    out = bump(prev, cap)
    if isinstance(out, FeeDecision):
        assert out.max_fee <= cap
        assert out.max_fee * 8 >= prev.max_fee * 9 and out.max_fee > prev.max_fee
        assert out.tip * 8 >= prev.tip * 9 and out.tip > prev.tip
        assert out.tip <= out.max_fee
    else:
        assert out.needed > cap


@pytest.mark.parametrize(
    ("gwei", "wei"),
    [(1, GWEI), ("0.5", GWEI // 2), (0.000000001, 1), ("250", 250 * GWEI), (0, 0)],
)
def test_gwei_conversion_is_exact(gwei: int | float | str, wei: int) -> None:
    """Config gwei values convert to exact wei, without float error."""
    assert gwei_to_wei(gwei) == wei


def test_gwei_conversion_rejects_fractional_wei() -> None:
    """A cap finer than one wei is a config mistake, not rounded silently."""
    with pytest.raises(ValueError):
        gwei_to_wei("0.0000000001")


def test_gwei_conversion_rejects_a_negative_fee() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        gwei_to_wei("-1")


@pytest.mark.parametrize(("max_fee", "tip"), [(10, -1), (10, 11)])
def test_a_fee_decision_holds_0_le_tip_le_max_fee(max_fee: int, tip: int) -> None:
    """Either half of the rule alone refuses: a negative tip, or a tip above the max fee."""
    with pytest.raises(ValueError, match="tip"):
        FeeDecision(max_fee, tip)
    assert FeeDecision(10, 10).tip == 10 and FeeDecision(10, 0).tip == 0


def test_a_fee_policy_takes_a_positive_cap_and_a_percentile_from_0_to_100() -> None:
    with pytest.raises(ValueError, match="max_fee_cap"):
        FeePolicy(max_fee_cap=0)
    for percentile in (-0.5, 100.5):
        with pytest.raises(ValueError, match="tip_percentile"):
            FeePolicy(max_fee_cap=1, tip_percentile=percentile)
    assert FeePolicy(max_fee_cap=1, tip_percentile=0).tip_percentile == 0
    assert FeePolicy(max_fee_cap=1, tip_percentile=100).tip_percentile == 100
