"""keeper.domain.abi.encode writes elementary arguments itself, byte for byte as eth_abi.

Whatever it takes it must encode exactly as eth_abi does; whatever it declines
(arrays, tuples, a value out of range or of another Python type) goes to
eth_abi, so the answer or the error is eth_abi's either way.
"""

from __future__ import annotations

from typing import Any

import pytest
from eth_abi.abi import encode as eth_encode
from hypothesis import given, settings
from hypothesis import strategies as st

from keeper.domain import abi
from keeper.domain.abi import encode


def _int_type(signed: bool) -> st.SearchStrategy[tuple[str, Any]]:
    def pick(bits: int) -> st.SearchStrategy[tuple[str, Any]]:
        lo, hi = (-(1 << bits - 1), (1 << bits - 1) - 1) if signed else (0, (1 << bits) - 1)
        name = ("int" if signed else "uint") + str(bits)
        # edges and one past them: the encoder must decline what eth_abi refuses
        edges = st.sampled_from([lo - 1, lo, hi, hi + 1])
        return st.tuples(st.just(name), st.integers(lo - 2, hi + 2) | edges)

    return st.sampled_from(range(8, 257, 8)).flatmap(pick)


addresses = st.binary(min_size=20, max_size=20).map(lambda b: "0x" + b.hex())
fixed = st.integers(1, 32).flatmap(
    lambda n: st.tuples(st.just(f"bytes{n}"), st.binary(max_size=n + 1))
)
argument = st.one_of(
    _int_type(False),
    _int_type(True),
    st.tuples(st.just("uint256"), st.booleans()),  # a bool is not a uint here
    st.tuples(st.just("address"), addresses),
    st.tuples(st.just("address"), st.sampled_from(["0x" + "AB" * 20, "0x12", "ab" * 20])),
    st.tuples(st.just("bool"), st.booleans()),
    fixed,
    st.tuples(st.just("bytes"), st.binary(max_size=100)),
    st.tuples(st.just("string"), st.text(max_size=40)),
    st.tuples(st.just("bytes"), st.text(max_size=5)),  # a str for bytes: declined
    st.tuples(st.just("uint256[]"), st.lists(st.integers(0, 10), max_size=3)),
    st.tuples(st.just("(uint256,bool)"), st.tuples(st.integers(0, 9), st.booleans())),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(argument, max_size=5))
def test_encode_matches_eth_abi(arguments: list[tuple[str, Any]]) -> None:
    """Same bytes as eth_abi, or the same refusal."""
    types = [t for t, _ in arguments]
    values = [v for _, v in arguments]
    try:
        expected: bytes | None = bytes(eth_encode(types, values))
    except Exception:
        expected = None
    mine = abi._encode_elementary(types, values)
    if mine is not None:
        assert mine == expected, (types, values)
    if expected is None:
        with pytest.raises(Exception):  # noqa: B017 - whatever eth_abi raises
            encode(types, values)
    else:
        assert encode(types, values) == expected


def test_probe_and_call_shapes_need_no_eth_abi() -> None:
    """The shapes the keeper sends (ids, bytes32 task ids, reasons as bytes) are taken here."""
    shapes = [
        (["uint256"], [7]),
        (["uint256", "bytes"], [7, b"\x01" * 33]),
        (["bytes32"], [b"\xff" * 32]),
        (["bytes32", "string"], [b"\x00" * 32, "timeout"]),
        (["address", "uint256", "bool"], ["0x" + "00" * 20, 0, False]),
    ]
    for types, values in shapes:
        assert abi._encode_elementary(types, values) == bytes(eth_encode(types, values))


@pytest.mark.parametrize("bits", range(8, 257, 8))
@pytest.mark.parametrize("signed", [False, True], ids=["uint", "int"])
def test_every_integer_width_ends_where_eth_abi_s_does(bits: int, signed: bool) -> None:
    """Each width's smallest and largest value is written as eth_abi writes it, and one
    past either end is declined, never written (the random test may not draw each edge)."""
    typ = ("int" if signed else "uint") + str(bits)
    lo, hi = (-(1 << bits - 1), (1 << bits - 1) - 1) if signed else (0, (1 << bits) - 1)
    for value in (lo, hi):
        assert abi._encode_elementary([typ], [value]) == bytes(eth_encode([typ], [value]))
    for value in (lo - 1, hi + 1):
        assert abi._encode_elementary([typ], [value]) is None
        with pytest.raises(Exception):  # noqa: B017 - whatever eth_abi raises
            encode([typ], [value])


@pytest.mark.parametrize("value", ["0x12345678", bytearray(b"\x12\x34\x56\x78"), 0x12345678])
def test_fixed_bytes_of_another_type_are_eth_abi_s(value: Any) -> None:
    """A bytes4 given as a string, a bytearray or an int is left to eth_abi, which decides."""
    assert abi._encode_elementary(["bytes4"], [value]) is None
