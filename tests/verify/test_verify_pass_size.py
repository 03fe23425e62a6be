"""A verifier pass grows while it is quick and full, shrinks when it is slow."""

from __future__ import annotations

import pytest

from keeper.verify.pass_size import LARGEST, SMALLEST, TARGET_SECONDS, next_size

QUICK = TARGET_SECONDS / 4
SLOW = TARGET_SECONDS * 2


def test_a_catch_up_without_fetches_grows_to_the_largest_pass_and_stays() -> None:
    """Full passes well under the target double up to the bound, and no further."""
    size, sizes = SMALLEST, []
    for _ in range(12):
        size = next_size(size, size, QUICK)
        sizes.append(size)
    assert sizes[:3] == [2 * SMALLEST, 4 * SMALLEST, 8 * SMALLEST]
    assert sizes[-1] == LARGEST and max(sizes) == LARGEST


def test_a_slow_pass_halves_down_to_the_smallest() -> None:
    """A pass over the target (a fetch, a busy disk) halves the next, never below the floor."""
    assert next_size(800, 800, SLOW) == 400
    assert next_size(SMALLEST, SMALLEST, SLOW) == SMALLEST
    assert next_size(SMALLEST + 1, 3, SLOW) == SMALLEST


@pytest.mark.parametrize("ran", [0, 1, 199])
def test_a_pass_that_found_less_than_its_size_keeps_it(ran: int) -> None:
    """Running out of verdicts says nothing about a larger pass."""
    assert next_size(200, ran, QUICK) == 200


def test_a_pass_between_half_and_the_whole_target_keeps_its_size() -> None:
    """Neither quick enough to grow nor slow enough to shrink."""
    assert next_size(200, 200, TARGET_SECONDS * 0.75) == 200
