"""The nonce counter treats the chain as a floor and never moves down on its own."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keeper.domain.nonces import NonceBook, find_gaps, next_nonce


class TestNextNonce:
    """next_nonce is the maximum of the local counter and the chain's pending count."""

    @pytest.mark.parametrize(
        ("local", "chain", "expected"),
        [(None, 4, 4), (7, 4, 7), (4, 7, 7), (0, 0, 0)],
    )
    def test_table(self, local: int | None, chain: int, expected: int) -> None:
        """A lagging node never lowers the counter; a node ahead of us raises it."""
        assert next_nonce(local, chain) == expected

    def test_negative_count_refused(self) -> None:
        """A negative transaction count is a broken answer, not a nonce."""
        with pytest.raises(ValueError):
            next_nonce(None, -1)


class TestNonceBook:
    """NonceBook hands out consecutive nonces above the chain floor."""

    def test_reserve_requires_chain_observation(self) -> None:
        """Reserving before seeing the chain is refused rather than starting at 0."""
        with pytest.raises(RuntimeError):
            NonceBook().reserve()

    def test_lagging_node_does_not_cause_reuse(self) -> None:
        """After reserving 5 and 6, a node reporting 5 pending does not hand out 5 again."""
        book = NonceBook()
        book.observe_chain(5)
        assert [book.reserve(), book.reserve()] == [5, 6]
        book.observe_chain(5)
        assert book.reserve() == 7

    def test_chain_ahead_skips_spent_nonces(self) -> None:
        """Another user of the key moving the chain to 10 moves the counter to 10."""
        book = NonceBook(3)
        assert book.observe_chain(10) == 10
        assert book.reserve() == 10

    @given(st.lists(st.one_of(st.integers(0, 1000), st.none()), max_size=50))
    def test_monotone_under_any_sequence(self, ops: list[int | None]) -> None:
        """Whatever the chain reports, reserved nonces strictly increase."""
        book = NonceBook()
        book.observe_chain(0)
        handed: list[int] = []
        for op in ops:
            if op is None:
                handed.append(book.reserve())
            else:
                book.observe_chain(op)
        assert handed == sorted(set(handed))


class TestFindGaps:
    """Gaps are reserved nonces above the mined count that were never broadcast."""

    @pytest.mark.parametrize(
        ("mined", "local_next", "broadcast", "gaps"),
        [
            (5, 8, [5, 6, 7], []),
            (5, 8, [5, 7], [6]),
            (5, 8, [], [5, 6, 7]),
            (5, 5, [], []),
            (6, 8, [1, 2, 7], [6]),  # old nonces below the mined count are irrelevant
        ],
    )
    def test_table(
        self, mined: int, local_next: int, broadcast: list[int], gaps: list[int]
    ) -> None:
        """Exactly the unsent nonces in [mined, local_next) are gaps."""
        assert find_gaps(mined, local_next, broadcast) == gaps
