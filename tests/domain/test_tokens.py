"""Token metadata decoding and token-unit formatting (pure, integers only)."""

from __future__ import annotations

from decimal import Decimal, localcontext

from eth_abi.abi import encode
from hypothesis import given
from hypothesis import strategies as st

from keeper.domain.tokens import (
    MAX_DECIMALS,
    decode_decimals,
    decode_symbol,
    format_units,
    group_digits,
)

UINT256 = st.integers(min_value=0, max_value=2**256 - 1)


class TestFormatUnits:
    def test_examples(self) -> None:
        assert format_units(1_500_000, 6) == "1.5"
        assert format_units(14_000_000, 6) == "14"
        assert format_units(1, 18) == "0.000000000000000001"
        assert format_units(1_234_567_000_000, 6) == "1,234,567"
        assert format_units(123_456, 0) == "123,456"
        assert format_units(-2_500_000, 6) == "-2.5"
        assert format_units(0, 6) == "0"  # no "-0"
        assert format_units(1_999_999, 6, max_fraction=2) == "1.99"  # cut, never rounded up

    @given(UINT256, st.integers(min_value=0, max_value=MAX_DECIMALS))
    def test_text_is_the_exact_amount(self, amount: int, decimals: int) -> None:
        """Reading the text back (without grouping) and scaling gives the integer again."""
        text = format_units(amount, decimals).replace(",", "")
        with localcontext() as ctx:
            ctx.prec = 200
            assert Decimal(text) * 10**decimals == amount

    @given(UINT256, st.integers(min_value=0, max_value=30), st.integers(min_value=0, max_value=8))
    def test_a_cut_fraction_never_exceeds_the_amount(
        self, amount: int, decimals: int, keep: int
    ) -> None:
        text = format_units(amount, decimals, max_fraction=keep).replace(",", "")
        with localcontext() as ctx:
            ctx.prec = 200
            shown = Decimal(text) * 10**decimals
            assert shown <= amount
            assert amount - shown < 10 ** max(decimals - keep, 0)

    @given(st.integers(min_value=0, max_value=10**40))
    def test_grouping_keeps_digits(self, n: int) -> None:
        grouped = group_digits(str(n))
        assert grouped.replace(",", "") == str(n)
        assert all(len(part) == 3 for part in grouped.split(",")[1:])


class TestDecode:
    def test_decimals(self) -> None:
        assert decode_decimals(encode(["uint8"], [6])) == 6
        assert decode_decimals(b"") is None
        assert decode_decimals(b"\x06") is None  # short: not an ABI word
        assert decode_decimals(encode(["uint256"], [78])) is None  # no uint256 has 78 decimals
        assert decode_decimals(encode(["uint256"], [77])) == 77  # 10**77 still fits
        assert decode_decimals(encode(["uint256"], [2**255])) is None

    def test_symbol_as_string_and_as_bytes32(self) -> None:
        assert decode_symbol(encode(["string"], ["USDC"])) == "USDC"
        assert decode_symbol(b"MKR".ljust(32, b"\0")) == "MKR"

    def test_hostile_symbols_are_refused(self) -> None:
        for bad in ("", "<b>x</b>", "a b", "1000", "x" * 17, "USD\u200bC", 'a"b', "A\x7f"):
            assert decode_symbol(encode(["string"], [bad])) is None, bad
        # the edges of what is kept: 16 characters, '!' (33) and '~' (126)
        for good in ("x" * 16, "!A", "A~"):
            assert decode_symbol(encode(["string"], [good])) == good
        assert decode_symbol(b"") is None
        assert decode_symbol(b"\xff" * 32) is None
        # an offset pointing past the data
        assert decode_symbol(encode(["uint256", "uint256"], [2**64, 4])) is None

    @given(st.binary(max_size=200))
    def test_any_bytes_decode_or_are_refused(self, raw: bytes) -> None:
        symbol = decode_symbol(raw)
        assert symbol is None or (0 < len(symbol) <= 16 and symbol.isprintable())
        decimals = decode_decimals(raw)
        assert decimals is None or 0 <= decimals <= MAX_DECIMALS
