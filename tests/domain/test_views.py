"""getJob in both layouts: the ERC8183 word slicer agrees with eth_abi; layouts are told apart."""

from __future__ import annotations

from typing import Any

import pytest
from eth_abi.abi import encode
from hypothesis import given, settings
from hypothesis import strategies as st

from keeper.domain.views import (
    _SLICERS,
    GET_JOB_ERC8183,
    VIEWS,
    _abi_decode_view,
    _get_job_spec,
    decode_view,
    encode_view,
)

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


@pytest.mark.parametrize(("value", "fits"), [(2**48 - 1, True), (2**48, False)])
def test_a_uint48_at_its_bound_is_sliced_or_refused_as_eth_abi_does(value: int, fits: bool) -> None:
    """The largest uint48 is read by the slicer; one more is no uint48 (eth_abi refuses)."""
    names = [n for n, _ in GET_JOB_ERC8183.outputs]
    assert dict(GET_JOB_ERC8183.outputs)["expiredAt"] == "uint48"
    values = {n: 0 if t != "address" and t != "string" else "" for n, t in GET_JOB_ERC8183.outputs}
    values.update({n: "0x" + "11" * 20 for n, t in GET_JOB_ERC8183.outputs if t == "address"})
    raw = bytearray(_encode(GET_JOB_ERC8183.outputs, values))
    at = 32 + 32 * names.index("expiredAt")
    raw[at : at + 32] = value.to_bytes(32, "big")
    slicer = _SLICERS[GET_JOB_ERC8183.output_type]
    if fits:
        assert slicer(bytes(raw)) is not None
        assert decode_view("getJob", bytes(raw))["expiredAt"] == value
    else:
        assert slicer(bytes(raw)) is None
        with pytest.raises(Exception):  # noqa: B017 - eth_abi's own range error
            _abi_decode_view(GET_JOB_ERC8183, bytes(raw))


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


# --- every view, through the word slicer -------------------------------------------------

SPECS = {**VIEWS, "getJob/erc8183": GET_JOB_ERC8183}
UINT_BITS = {f"uint{n}": n for n in range(8, 257, 8)}


def _strategy(typ: str) -> st.SearchStrategy[Any]:
    if typ == "address":
        return ADDRESS
    if typ == "bool":
        return st.booleans()
    if typ == "string":
        return st.text(max_size=60)
    if typ in UINT_BITS:
        bits = UINT_BITS[typ]
        return st.one_of(st.integers(0, 2**bits - 1), st.just(2**bits - 1), st.just(0))
    if typ.startswith("bytes") and typ[5:].isdigit():
        n = int(typ[5:])
        return st.binary(min_size=n, max_size=n)
    if typ.endswith("[]"):
        inner = typ[:-2]
        if inner.startswith("("):
            parts = [_strategy(t) for t in inner[1:-1].split(",")]
            return st.lists(st.tuples(*parts), max_size=4)
        return st.lists(_strategy(inner), max_size=4)
    raise AssertionError(typ)


def _kind(name: str) -> str:
    return name.split("/")[0]


@settings(max_examples=60, deadline=None)
@given(data=st.data(), name=st.sampled_from(sorted(SPECS)))
def test_every_view_slices_like_eth_abi(data: st.DataObject, name: str) -> None:
    """Random valid answers of every view: sliced, and equal to eth_abi's decoding."""
    spec = SPECS[name]
    values = {n: data.draw(_strategy(t), label=n) for n, t in spec.outputs}
    raw = _encode(spec.outputs, values)
    slicer = _SLICERS[spec.output_type]
    if name != "getJob" or _get_job_spec(raw) is spec:
        assert slicer(raw) is not None, "a canonical encoding must take the fast path"
    assert decode_view(_kind(name), raw) == _abi_decode_view(_get_spec(name, raw), raw)


def _get_spec(name: str, raw: bytes) -> Any:
    return _get_job_spec(raw) if _kind(name) == "getJob" else SPECS[name]


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    name=st.sampled_from(sorted(SPECS)),
    cut=st.integers(0, 200),
    grow=st.binary(max_size=40),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 7)), max_size=3),
)
def test_mangled_answers_of_every_view_agree_with_eth_abi(
    data: st.DataObject,
    name: str,
    cut: int,
    grow: bytes,
    flips: list[tuple[int, int]],
) -> None:
    """Truncated, extended or bit-flipped answers: accepted or refused exactly as eth_abi
    does, and decoded to the same values when accepted."""
    spec = SPECS[name]
    values = {n: data.draw(_strategy(t), label=n) for n, t in spec.outputs}
    buf = bytearray(_encode(spec.outputs, values))
    buf = buf[: len(buf) - min(cut, len(buf))] + grow
    for pos, bit in flips:
        if buf:
            buf[pos % len(buf)] ^= 1 << bit
    raw = bytes(buf)
    ours = _outcome(lambda d: decode_view(_kind(name), d), raw)
    assert ours == _outcome(lambda d: _abi_decode_view(_get_spec(name, d), d), raw)


def test_the_slicer_declines_what_it_cannot_check() -> None:
    """Dirty padding, a bool of 2, an unaligned offset: no fast answer (eth_abi decides)."""
    spec = VIEWS["getTaskVerdict"]
    values = {
        "issued": True, "verdictType": 1, "score": 7, "confidence": 9,
        "criteriaFlags": [b"\x01" * 32], "evidenceHash": b"\x02" * 32,
        "awards": [("0x" + "33" * 20, 5, 1)],
    }  # fmt: skip
    raw = _encode(spec.outputs, values)
    slicer = _SLICERS[spec.output_type]
    decoded = slicer(raw)
    assert decoded is not None
    assert decoded["awards"] == (("0x" + "33" * 20, 5, 1),)
    assert decoded["criteriaFlags"] == ("0x" + "01" * 32,)
    bad_bool = bytearray(raw)
    bad_bool[32 + 31] = 2
    assert slicer(bytes(bad_bool)) is None
    with pytest.raises(Exception):  # noqa: B017 - eth_abi's own error for a bool of 2
        decode_view("getTaskVerdict", bytes(bad_bool))
    dirty_address = bytearray(raw)
    awards_offset = int.from_bytes(raw[32 + 6 * 32 : 32 + 7 * 32], "big")
    dirty_address[32 + awards_offset + 32] = 1  # the award's address word, high byte
    assert slicer(bytes(dirty_address)) is None


@settings(max_examples=100, deadline=None)
@given(
    kind=st.sampled_from(sorted(VIEWS)),
    job_id=st.integers(0, 2**256 - 1),
    task=st.binary(min_size=32, max_size=32),
)
def test_calldata_is_eth_abi_s(kind: str, job_id: int, task: bytes) -> None:
    """Each view's calldata, written out by hand, is its selector and eth_abi's encoding of
    its one argument (or none): a job id as uint256, a task id as bytes32."""
    spec = VIEWS[kind]
    subject = {(): "", ("uint256",): str(job_id), ("bytes32",): "0x" + task.hex()}[spec.arg_types]
    values = {(): [], ("uint256",): [job_id], ("bytes32",): [task]}[spec.arg_types]
    assert encode_view(kind, subject) == spec.selector + encode(list(spec.arg_types), values)


@pytest.mark.parametrize("task", ["0x" + "ab" * 31, "0x" + "ab" * 33, "0x"])
def test_a_task_id_not_32_bytes_is_refused(task: str) -> None:
    with pytest.raises(ValueError, match="a bytes32 argument needs 32 bytes"):
        encode_view("getTask", task)
