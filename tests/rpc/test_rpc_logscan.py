"""The native getLogs reply scanner: the generic path's logs, or None, never anything else."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import pytest
import rpc_fixtures
from fuzz_logscan import check, query_of, seeds
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rpc_fixtures import (
    ADDR,
    EMITTER,
    EMITTER_B,
    H1,
    H2,
    OTHER,
    TOPIC,
    LogChain,
    agree,
    generic,
    raw_log,
)

from keeper.domain.model import Logs
from keeper.rpc import EndpointConfig, RpcClient
from keeper.rpc.logs_reply import NATIVE

TX = "0x" + "33" * 32


DEEP: list[Any] = []
for _ in range(100):
    DEEP = [DEEP]


def reply(logs: Any, rid: int = 7, **extra: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "result": logs, **extra}).encode()


def test_the_scanner_is_built_here() -> None:
    """`make deps` builds it wherever a C compiler is (every machine CI runs on): a build that
    quietly fell back to Python would pass every other test, only slower."""
    assert NATIVE


def test_a_well_formed_reply_is_scanned() -> None:
    logs = [
        raw_log(),
        raw_log(logIndex="0x2", topics=[], data="0x", blockTimestamp="0x64"),
        raw_log(blockNumber="0x11", blockHash=H2, logIndex="0x0", blockTimestamp="0x65"),
    ]
    scanned = agree(reply(logs), 7, addresses=[ADDR], from_block=16, to_block=17)
    assert scanned is not None
    assert [(lg.block_number, lg.log_index) for lg in scanned] == [(16, 1), (16, 2), (17, 0)]
    assert scanned.timestamps == {17: 0x65}  # block 16's first log carried none
    assert scanned[1].topics == () and scanned[1].data == b""


def test_hex_in_any_case_is_lowercased_and_quantities_may_have_leading_zeros() -> None:
    upper = raw_log(
        address=ADDR.upper().replace("0X", "0x"),
        blockHash=H1.upper().replace("0X", "0x"),
        topics=[TOPIC.upper().replace("0X", "0x")],
        data="0xABcd",
        blockNumber="0x0010",
    )
    scanned = agree(reply([upper]), 7)
    assert scanned is not None
    assert (scanned[0].address, scanned[0].block_hash, scanned[0].topics) == (ADDR, H1, (TOPIC,))
    assert (scanned[0].data, scanned[0].block_number) == (b"\xab\xcd", 16)


def test_members_it_does_not_read_are_passed_over_whatever_their_shape() -> None:
    noisy = raw_log(
        type="mined",
        transactionLogIndex="0x0",
        extra={"a": [1, -2.5e-3, None, True]},
        note='caf\u00e9 "quoted"\n',
    )
    body = reply([noisy], extra_top=[{"x": {}}, []])
    assert b"\\u00e9" in body  # an escape, in a member passed over
    assert agree(body, 7) is not None


@pytest.mark.parametrize(
    ("body", "query"),
    [
        (reply([raw_log(removed=True)]), {}),
        (reply([raw_log(), raw_log()]), {}),  # a log twice
        (
            reply([raw_log(logIndex="0x5"), raw_log(logIndex="0x2")]),
            {},
        ),  # out of order: sorted there
        (reply([raw_log()]), {"from_block": 17}),
        (reply([raw_log()]), {"to_block": 15}),
        (reply([raw_log()]), {"addresses": [OTHER]}),
        (reply([raw_log()]), {"block_hash": H2}),
        (reply([raw_log(), raw_log(logIndex="0x2", blockHash=H2)]), {}),  # two hashes for a block
        (reply([raw_log(topics=[TOPIC] * 5)]), {}),
        (reply([raw_log(blockNumber=hex(2**63))]), {}),
        (reply([raw_log(data="0x123")]), {}),
        (reply([raw_log(data="0x01 02")]), {}),
        (reply([raw_log(address="0x1234")]), {}),
        (reply([raw_log(logIndex=1)]), {}),
        (reply([raw_log(blockHash=None)]), {}),
        (reply([{k: v for k, v in raw_log().items() if k != "transactionHash"}]), {}),
        (reply([raw_log()], rid=8), {}),  # another request's reply
        (reply(None), {}),
        (reply([raw_log()], error={"code": -32000, "message": "boom"}), {}),
        (reply([raw_log()]) + b" x", {}),  # trailing garbage
        (reply([raw_log()]).replace(b'"0x10"', b'"0x\\u0031\\u0030"'), {}),  # an escape in a value
        (reply([raw_log()]).replace(b'"logIndex"', b'"logInd\\u0065x"'), {}),  # ... in a key
        (reply([raw_log(note="X")]).replace(b'"X"', '"é"'.encode()), {}),
        (reply([raw_log()]).replace(b'"data"', b'"data": "0x", "data"'), {}),  # a key twice
        (reply([raw_log(extra=DEEP)]), {}),  # nested past the scanner's depth
        (reply([raw_log(extra=float("nan"))]), {}),  # NaN: JSON to Python, not to RFC 8259
        (b"\xef\xbb\xbf" + reply([raw_log()]), {}),  # a byte-order mark
    ],
    ids=[
        "removed",
        "duplicate",
        "unordered",
        "below",
        "above",
        "address",
        "other-block",
        "two-hashes",
        "five-topics",
        "past-int64",
        "odd-data",
        "spaced-data",
        "short-address",
        "number-index",
        "null-hash",
        "missing-field",
        "other-id",
        "null-result",
        "error",
        "trailing",
        "escaped-value",
        "escaped-key",
        "non-ascii",
        "key-twice",
        "deep",
        "nan",
        "bom",
    ],
)
def test_what_it_does_not_take_goes_the_generic_way(body: bytes, query: dict[str, Any]) -> None:
    """None, whether the generic path then accepts the body (sorting, decoding an escape) or
    refuses it with a named reason."""
    assert agree(body, 7, **query) is None


def test_an_unordered_answer_is_still_sorted_by_the_generic_path() -> None:
    body = reply([raw_log(logIndex="0x5"), raw_log(logIndex="0x2")])
    expected = generic(body, 7)
    assert expected is not None and [lg.log_index for lg in expected] == [2, 5]


HEX = "0123456789abcdefABCDEF"


def hex_text(digits: int) -> st.SearchStrategy[str]:
    return st.text(HEX, min_size=digits, max_size=digits).map(lambda t: "0x" + t)


def quantity(value: int) -> st.SearchStrategy[str]:
    digits = format(value, "x")
    return st.tuples(st.integers(0, 3), st.booleans()).map(
        lambda z: "0x" + "0" * z[0] + (digits.upper() if z[1] else digits)
    )


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=5)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def answers(draw: st.DrawFn) -> tuple[bytes, int]:
    """A reply as a node might write it: ordered logs, any key order, hex case, spacing,
    optional and unknown members."""
    rid = draw(st.integers(0, 10**12))
    numbers = sorted(draw(st.sets(st.integers(0, 2**40), max_size=4)))
    logs: list[dict[str, Any]] = []
    for number in numbers:
        block_hash = draw(hex_text(64))
        stamp = draw(st.one_of(st.none(), st.integers(0, 2**40).flatmap(quantity)))
        for index in sorted(draw(st.sets(st.integers(0, 2**20), min_size=1, max_size=3))):
            entry: dict[str, Any] = {
                "address": draw(st.sampled_from([ADDR, ADDR.upper().replace("0X", "0x")])),
                "topics": draw(st.lists(hex_text(64), max_size=4)),
                "data": "0x" + draw(st.binary(max_size=40)).hex(),
                "blockNumber": draw(quantity(number)),
                "blockHash": block_hash,
                "transactionHash": draw(st.sampled_from([TX, H2])),
                "transactionIndex": draw(st.integers(0, 2**63 - 1).flatmap(quantity)),
                "logIndex": draw(quantity(index)),
            }
            if draw(st.booleans()):
                entry["removed"] = draw(st.sampled_from([False, None]))
            if stamp is not None or draw(st.booleans()):
                entry["blockTimestamp"] = stamp
            entry.update(draw(st.dictionaries(st.sampled_from(["type", "x"]), JSON, max_size=2)))
            logs.append(dict(draw(st.permutations(list(entry.items())))))
    top = [("jsonrpc", "2.0"), ("id", rid), ("result", logs)]
    body = json.dumps(
        dict(draw(st.permutations(top))), indent=draw(st.sampled_from([None, 1, "\t"]))
    )
    return body.encode(), rid


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answers())
def test_any_well_formed_reply_is_scanned_to_the_generic_logs(answer: tuple[bytes, int]) -> None:
    body, rid = answer
    assert agree(body, rid, addresses=[ADDR]) is not None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answers(), st.integers(0, 2**41), st.integers(0, 2**41))
def test_a_narrower_query_takes_or_refuses_as_the_generic_path(
    answer: tuple[bytes, int], lo: int, hi: int
) -> None:
    body, rid = answer
    agree(body, rid, addresses=[ADDR, OTHER], from_block=min(lo, hi), to_block=max(lo, hi))
    agree(body, rid + 1)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answers(), st.data())
def test_a_damaged_reply_is_never_taken_where_the_generic_path_refuses_it(
    answer: tuple[bytes, int], data: st.DataObject
) -> None:
    """Bytes cut, changed, added or dropped anywhere: the scanner answers None or what the
    generic path answers (``agree``), and never crashes."""
    body, rid = answer
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(body)))
        how = data.draw(st.sampled_from(["cut", "change", "add", "drop"]))
        byte = bytes([data.draw(st.integers(0, 255))])
        if how == "cut":
            body = body[:at]
        elif how == "change":
            body = body[:at] + byte + body[at + 1 :]
        elif how == "add":
            body = body[:at] + byte + body[at:]
        else:
            body = body[:at] + body[at + 1 :]
    agree(body, rid)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_are_never_taken_unless_the_generic_path_takes_them(body: bytes) -> None:
    agree(body, 1)  # asserts the generic path's logs for whatever it scans


def test_a_real_nodes_reply_is_scanned(log_chain: LogChain) -> None:
    """anvil's own getLogs body (with its blockTimestamp and removed members) takes the scanner."""
    request = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "eth_getLogs",
        "params": [{"address": [EMITTER, EMITTER_B], "fromBlock": "0x0", "toBlock": "0x78"}],
    }
    http = urllib.request.Request(
        log_chain.url, json.dumps(request).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(http, timeout=10) as resp:
        body = resp.read()
    scanned = agree(body, 3, addresses=[EMITTER, EMITTER_B], from_block=0, to_block=120)
    assert scanned is not None
    assert sorted({lg.block_number for lg in scanned}) == sorted(log_chain.log_blocks)
    assert set(scanned.timestamps) == set(log_chain.log_blocks)


async def test_the_client_answers_as_before(log_chain: LogChain) -> None:
    """RpcClient.get_logs (which scans) and by block hash give the generic path's logs."""
    client = RpcClient([EndpointConfig("rpc0", log_chain.url)], timeout=5.0)
    try:
        logs = await client.get_logs([EMITTER, EMITTER_B], 0, 120)
        first = logs[0]
        by_hash = await client.get_logs_by_block_hash([EMITTER, EMITTER_B], first.block_hash)
    finally:
        await client.close()
    assert sorted({lg.block_number for lg in logs}) == log_chain.log_blocks
    assert by_hash == [lg for lg in logs if lg.block_hash == first.block_hash]
    assert logs.timestamps and all(t > 0 for t in logs.timestamps.values())


def test_the_fuzz_target_checks_each_seed_against_the_generic_path() -> None:
    """`make fuzz` starts from these: some the scanner takes (so the oracle compares logs),
    some it refuses; the target's query heads reach the scanner's bounds."""
    answers = [check(seed) for seed in seeds()]
    taken = [a for a in answers if a is not None]
    assert taken and len(taken) < len(answers)
    assert query_of(bytes([1 | 2 | 4 | 8 | (3 << 5), 16, 9])) == (
        9,
        {"addresses": [ADDR], "from_block": 16, "to_block": 19},
    )


def test_the_fuzz_target_fails_on_an_answer_the_generic_path_does_not_give(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seed = next(s for s in seeds() if check(s) is not None)
    monkeypatch.setattr(rpc_fixtures, "generic", lambda body, rid, **query: Logs([]))
    with pytest.raises(AssertionError):
        check(seed)
