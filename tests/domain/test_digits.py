"""keeper.domain.digits: bounded decimal text, the same answer as int() without its limit."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from keeper.domain.digits import at_most


@given(value=st.integers(0, 2**300), zeros=st.integers(0, 3), maximum=st.integers(-1, 2**260))
def test_agrees_with_int(value: int, zeros: int, maximum: int) -> None:
    assert at_most("0" * zeros + str(value), maximum) == (value if value <= maximum else None)


def test_past_int_s_4300_digits_is_none_not_a_value_error() -> None:
    assert at_most("9" * 5000, 2**256 - 1) is None
    assert at_most("0" * 5000 + "7", 500) == 7
