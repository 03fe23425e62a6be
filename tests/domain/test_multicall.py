"""The Multicall3 aggregate3 codec, against eth_abi."""

from __future__ import annotations

import pytest
from eth_abi.abi import decode, encode
from eth_utils.crypto import keccak
from hypothesis import given, settings
from hypothesis import strategies as st

from keeper.domain.dialects import selector
from keeper.domain.multicall import (
    _canonical_results,  # the hand-sliced reading of a canonical answer, checked taken
    decode_aggregate3,
    encode_aggregate3,
)

C = "0x" + "12" * 20


def err(signature: str) -> bytes:
    return keccak(text=signature)[:4]


class TestAggregate3:
    def test_aggregate3_roundtrip(self) -> None:
        """aggregate3 calldata carries allowFailure=true per call; results decode per call."""
        calls = [(C, b"\x01\x02"), ("0x" + "34" * 20, b"")]
        data = encode_aggregate3(calls)
        assert data[:4] == selector("aggregate3((address,bool,bytes)[])")
        (decoded,) = decode(["(address,bool,bytes)[]"], data[4:])
        assert [(a.lower(), ok, bytes(d)) for a, ok, d in decoded] == [
            (C, True, b"\x01\x02"),
            ("0x" + "34" * 20, True, b""),
        ]
        ret = encode(["(bool,bytes)[]"], [[(True, b""), (False, err("InvalidStatus()"))]])
        results = decode_aggregate3(ret)
        assert [r.success for r in results] == [True, False]
        assert results[1].return_data == err("InvalidStatus()")


ADDRESSES = st.binary(min_size=20, max_size=20).map(lambda b: "0x" + b.hex())
CALLS = st.lists(st.tuples(ADDRESSES, st.binary(max_size=200)), max_size=12)
RESULTS = st.lists(st.tuples(st.booleans(), st.binary(max_size=200)), max_size=12)


def eth_abi_results(data: bytes) -> list[tuple[bool, bytes]] | str:
    """eth_abi's reading of aggregate3 return data, or the name of its error."""
    try:
        (results,) = decode(["(bool,bytes)[]"], data)
    except Exception as exc:
        return type(exc).__name__
    return [(bool(ok), bytes(ret)) for ok, ret in results]


def ours(data: bytes) -> list[tuple[bool, bytes]] | str:
    try:
        return [(r.success, r.return_data) for r in decode_aggregate3(data)]
    except Exception as exc:
        return type(exc).__name__


class TestAggregate3AgainstEthAbi:
    """The hand-written Multicall3 codec says exactly what eth_abi says."""

    @settings(max_examples=100, deadline=None)
    @given(CALLS, st.booleans())
    def test_calldata_is_eth_abis(self, calls: list[tuple[str, bytes]], allow: bool) -> None:
        items = [(target, allow, data) for target, data in calls]
        expected = selector("aggregate3((address,bool,bytes)[])") + encode(
            ["(address,bool,bytes)[]"], [items]
        )
        assert encode_aggregate3(calls, allow_failure=allow) == expected

    @settings(max_examples=100, deadline=None)
    @given(RESULTS)
    def test_results_decode_as_eth_abi_decodes(self, results: list[tuple[bool, bytes]]) -> None:
        data = encode(["(bool,bytes)[]"], [results])
        assert ours(data) == eth_abi_results(data) == results
        # and a Solidity encoder's layout is read by the hand-sliced path, not eth_abi
        fast = _canonical_results(data)
        assert fast is not None and [(r.success, r.return_data) for r in fast] == results

    @settings(max_examples=200, deadline=None)
    @given(RESULTS, st.integers(min_value=0), st.integers(min_value=0, max_value=255))
    def test_a_mangled_answer_is_accepted_or_refused_as_eth_abi_does(
        self, results: list[tuple[bool, bytes]], where: int, value: int
    ) -> None:
        """One byte changed, or the answer cut short: both readings agree, errors included."""
        data = bytearray(encode(["(bool,bytes)[]"], [results]))
        at = where % len(data)
        data[at] = value
        for candidate in (bytes(data), bytes(data[:at])):
            got, want = ours(candidate), eth_abi_results(candidate)
            if isinstance(want, str):
                assert isinstance(got, str), (candidate.hex(), got)
            else:
                assert got == want

    def test_an_address_of_the_wrong_length_is_refused_by_name(self) -> None:
        with pytest.raises(ValueError, match="0x1234"):
            encode_aggregate3([("0x1234", b"")])
