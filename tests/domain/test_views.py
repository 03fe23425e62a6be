"""getJob in both layouts: the ERC8183 word slicer agrees with eth_abi; layouts are told apart."""

from __future__ import annotations

from typing import Any

import pytest
from eth_abi.abi import encode
from hypothesis import given, settings
from hypothesis import strategies as st

from keeper.domain.views import GET_JOB_ERC8183, VIEWS, _abi_decode_view, decode_view

ADDRESS = st.binary(min_size=20, max_size=20).map(lambda b: "0x" + b.hex())


def _values(spec_outputs: tuple[tuple[str, str], ...], draw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, typ in spec_outputs:
        if typ == "address":
            out[name] = draw(ADDRESS)
        elif typ == "string":
            out[name] = draw(st.text(max_size=80))
        elif typ == "uint8":
            out[name] = draw(st.integers(0, 5))
        else:
            out[name] = draw(st.integers(0, 2 ** int(typ[4:]) - 1))
    return out


def _encode(outputs: tuple[tuple[str, str], ...], values: dict[str, Any]) -> bytes:
    types = "(" + ",".join(t for _, t in outputs) + ")"
    return encode([types], [tuple(values[n] for n, _ in outputs)])


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_erc8183_layout_decodes_like_eth_abi(data: st.DataObject) -> None:
    """For random jobs, the fast path returns exactly eth_abi's (normalised) decoding."""
    values = _values(GET_JOB_ERC8183.outputs, data.draw)
    raw = _encode(GET_JOB_ERC8183.outputs, values)
    decoded = decode_view("getJob", raw)
    assert decoded == _abi_decode_view(GET_JOB_ERC8183, raw)
    assert decoded["description"] == values["description"]
    assert decoded["settledAmount"] == values["settledAmount"]
    assert list(decoded) == [n for n, _ in GET_JOB_ERC8183.outputs]


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_agentic_commerce_layout_still_decodes(data: st.DataObject) -> None:
    """The 12-field layout, whatever its agent id, is never mistaken for the new one."""
    outputs = VIEWS["getJob"].outputs
    values = _values(outputs, data.draw)
    values["providerAgentId"] = data.draw(st.sampled_from([416, values["providerAgentId"]]))
    raw = _encode(outputs, values)
    decoded = decode_view("getJob", raw)
    assert decoded == _abi_decode_view(VIEWS["getJob"], raw)
    assert "settledAmount" not in decoded


def test_unusual_but_valid_encodings_go_to_eth_abi() -> None:
    """Dirty address padding or an out-of-range uint48 are not sliced: eth_abi decides."""
    values = {n: 0 if t != "address" and t != "string" else "" for n, t in GET_JOB_ERC8183.outputs}
    values.update({n: "0x" + "11" * 20 for n, t in GET_JOB_ERC8183.outputs if t == "address"})
    values["description"] = "brief"
    raw = bytearray(_encode(GET_JOB_ERC8183.outputs, values))
    assert decode_view("getJob", bytes(raw))["description"] == "brief"
    raw[32 + 3 * 32] = 0x01  # expiredAt above 2**48
    with pytest.raises(Exception):  # noqa: B017 - eth_abi's own range error
        decode_view("getJob", bytes(raw))


def _outcome(fn: Any, data: bytes) -> object:
    try:
        return fn(data)
    except Exception as exc:  # compared by kind below
        return type(exc)


@settings(max_examples=300, deadline=None)
@given(cut=st.integers(0, 600), flip=st.integers(0, 700), bit=st.integers(0, 7))
def test_mangled_returns_agree_with_eth_abi(cut: int, flip: int, bit: int) -> None:
    """Truncated or bit-flipped new-layout data: the fast path accepts exactly what eth_abi does."""
    values = {n: 1 for n, t in GET_JOB_ERC8183.outputs if t not in ("address", "string")}
    values.update({n: "0x" + "22" * 20 for n, t in GET_JOB_ERC8183.outputs if t == "address"})
    values["description"] = "x" * 40
    data = bytearray(_encode(GET_JOB_ERC8183.outputs, values))
    data = data[: len(data) - min(cut, len(data))]
    if data:
        data[flip % len(data)] ^= 1 << bit
    raw = bytes(data)
    ours = _outcome(lambda d: decode_view("getJob", d), raw)

    def word(i: int) -> int:
        return int.from_bytes(raw[32 * i : 32 * i + 32], "big")

    new_layout = len(raw) >= 15 * 32 and word(0) == 32 and word(5) != 384 and word(11) == 416
    spec = GET_JOB_ERC8183 if new_layout else VIEWS["getJob"]
    assert ours == _outcome(lambda d: _abi_decode_view(spec, d), raw)
