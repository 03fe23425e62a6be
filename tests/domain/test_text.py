"""keeper.domain.text: outside text shown back, bounded."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from keeper.domain.text import clipped


@given(text=st.text(max_size=60), limit=st.integers(4, 40))
def test_never_longer_than_the_limit_and_whole_when_it_fits(text: str, limit: int) -> None:
    shown = clipped(text, limit)
    assert len(shown) <= limit
    if len(text) <= limit:
        assert shown == text
    else:
        assert shown == text[: limit - 3] + "..."


def test_a_long_text_keeps_its_start() -> None:
    assert clipped("abcdefghij", 8) == "abcde..."
    assert clipped("abcdefgh", 8) == "abcdefgh"
