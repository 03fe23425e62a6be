"""bench.chain_cost's line through the slices' build times and its estimate of a larger
chain's build time: the figures the README gives for the sparse chains not built."""

from __future__ import annotations

import pytest

from bench.chain_cost import SLICE_EVENTS, build_seconds, fit


@pytest.mark.parametrize(("first", "growth", "slices"), [(32.0, 65.0, 5), (10.0, 0.0, 3),
                                                         (7.5, 2.25, 2)])  # fmt: skip
def test_the_fit_finds_the_line_the_slices_lie_on(first: float, growth: float, slices: int) -> None:
    got = fit([first + growth * k for k in range(slices)])
    assert got == pytest.approx((first, growth))


def test_the_fit_of_noisy_slices_is_the_least_squares_line() -> None:
    # residuals +1, -2, +1 around 10 + 5k: they sum to zero and are orthogonal to k
    assert fit([11.0, 13.0, 21.0]) == pytest.approx((10.0, 5.0))


def test_one_slice_gives_no_growth() -> None:
    assert fit([40.0]) == (40.0, 0.0)


def test_the_estimate_sums_every_slice_on_the_line() -> None:
    first, growth = 32.0, 65.0
    for events in (SLICE_EVENTS, 3 * SLICE_EVENTS, 10 * SLICE_EVENTS):
        slices = events // SLICE_EVENTS
        brute = sum(first + growth * k for k in range(slices))
        assert build_seconds(events, first, growth) == pytest.approx(brute)


def test_a_part_slice_is_built_as_a_whole_one() -> None:
    assert build_seconds(SLICE_EVENTS + 1, 30.0, 10.0) == pytest.approx(30.0 + 40.0)
