"""Chain reconciliation rules, table-driven: extend, diverge, lag, fork points, pruning."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keeper.domain.model import BlockHeader
from keeper.domain.reconcile import Ahead, Diverged, Extends, Lagging, fork_point, prune, relate


def chain(n0: int, count: int, tag: str = "a") -> list[BlockHeader]:
    out: list[BlockHeader] = []
    for n in range(n0, n0 + count):
        parent = out[-1].hash if out else f"0x{tag}{n - 1}"
        out.append(BlockHeader(n, f"0x{tag}{n}", parent, 1000 + n))
    return out


WINDOW = chain(10, 5)  # blocks 10..14


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (BlockHeader(15, "0xa15", "0xa14", 0), Extends()),
        (BlockHeader(15, "0xb15", "0xb14", 0), Diverged()),
        (BlockHeader(17, "0xa17", "0xa16", 0), Ahead()),
        (BlockHeader(12, "0xa12", "0xa11", 0), Lagging()),
        (BlockHeader(12, "0xb12", "0xa11", 0), Diverged()),
        (BlockHeader(14, "0xb14", "0xa13", 0), Diverged()),
        (BlockHeader(3, "0xz3", "0xz2", 0), Lagging()),
    ],
)
def test_relate(block: BlockHeader, expected: object) -> None:
    """Each new block is classified by number and parent/own hash against the window."""
    assert relate(WINDOW, block) == expected


def test_fork_point_is_highest_surviving_block() -> None:
    """The fork point is the highest window block whose hash is still canonical."""
    canonical = {10: "0xa10", 11: "0xa11", 12: "0xa12", 13: "0xb13", 14: "0xb14"}
    assert fork_point(WINDOW, canonical) == 12


def test_fork_point_none_when_reorg_deeper_than_window() -> None:
    """No surviving block in the window means a deep reorg: None, never a guess."""
    canonical = {n: f"0xb{n}" for n in range(10, 15)}
    assert fork_point(WINDOW, canonical) is None


def test_fork_point_ignores_missing_numbers() -> None:
    """A shorter canonical chain (numbers absent) still finds the fork below."""
    assert fork_point(WINDOW, {10: "0xa10", 11: "0xa11"}) == 11


def test_prune_keeps_unfinalized_and_anchor() -> None:
    """Everything at or above finalized stays even when that exceeds keep."""
    window = chain(0, 20)
    kept = prune(window, finalized=5, keep=4)
    assert [h.number for h in kept] == list(range(5, 20))


def test_prune_keeps_keep_blocks_below_finalized() -> None:
    """With few unfinalized blocks, older ones are kept up to keep in total."""
    window = chain(0, 20)
    kept = prune(window, finalized=18, keep=6)
    assert [h.number for h in kept] == [14, 15, 16, 17, 18, 19]


@given(
    size=st.integers(1, 60),
    finalized_offset=st.integers(-5, 70),
    keep=st.integers(1, 40),
)
def test_prune_properties(size: int, finalized_offset: int, keep: int) -> None:
    """Pruning keeps a contiguous top slice containing all unfinalized blocks and the head."""
    window = chain(100, size)
    finalized = 100 + finalized_offset
    kept = prune(window, finalized, keep)
    assert kept and kept[-1] == window[-1]
    numbers = [h.number for h in kept]
    assert numbers == list(range(numbers[0], numbers[-1] + 1))
    assert all(h in kept for h in window if h.number >= finalized)
    assert len(kept) >= min(keep, size)
