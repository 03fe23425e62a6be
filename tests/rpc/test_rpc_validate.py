"""Response validation refuses results that do not answer the query that was sent."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rpc_fixtures import ADDR, EMITTER, H1, H2, H3, H4, H5, TOPIC, LogChain, raw_log

from keeper.rpc.validate import (
    InvalidResponse,
    _fast_log,  # the batch parser's fast path, checked taken
    _Memo,
    block_timestamps,
    bloom_may_contain,
    data,
    gas,
    parse_block,
    parse_fee_history,
    parse_log,
    parse_receipt,
    quantity,
    validate_logs,
)

MALFORMED: list[dict[str, Any]] = [
    {"address": "0x1234"},
    {"topics": ["0x12"]},
    {"topics": ["0x" + "00" * 32] * 5},
    {"data": "0x123"},
    {"data": None},
    {"blockNumber": "16"},
    {"blockNumber": "0x"},
    {"blockHash": None},
    {"logIndex": 1},
    {"removed": True},
    # past a signed 64-bit integer: no chain is there, and the store's integers end there
    {"blockNumber": hex(2**63)},
    {"transactionIndex": hex(2**63)},
    {"logIndex": hex(2**64 - 1)},
]


class TestParse:
    def test_log_is_normalised(self) -> None:
        """Hex becomes ints and bytes; addresses and hashes become lowercase."""
        log = parse_log(raw_log())
        assert log.address == ADDR
        assert log.topics == ("0x" + "ab" * 32,)
        assert log.data == b"\x01\x02"
        assert (log.block_number, log.tx_index, log.log_index) == (16, 0, 1)

    def test_four_topics_are_a_log_s_most_and_are_taken(self) -> None:
        """An event with three indexed arguments (ERC-8183's JobCreated) has four topics:
        the one-by-one parser, the batch parser and the receipt check all take them."""
        four = [H1, H2, H3, H4]
        assert len(parse_log(raw_log(topics=four)).topics) == 4
        assert [len(lg.topics) for lg in validate_logs([raw_log(topics=four)])] == [4]
        # on the batch parser's fast path, the backfill's: JobCreated is its commonest log
        assert _fast_log(raw_log(topics=four), _Memo()) == parse_log(raw_log(topics=four))
        receipt = {**RECEIPT, "logs": [{"address": ADDR, "topics": four, "data": "0x"}]}
        assert parse_receipt(receipt) is receipt

    @pytest.mark.parametrize("over", MALFORMED)
    def test_malformed_log_is_refused(self, over: dict[str, Any]) -> None:
        """A missing, non-hex or wrongly sized field, or a removed log, is refused."""
        with pytest.raises(InvalidResponse):
            parse_log(raw_log(**over))

    def test_block_header(self) -> None:
        """A block object yields number, hash, parent and timestamp."""
        header = parse_block(
            {"number": "0x2", "hash": H2, "parentHash": H1, "timestamp": "0x64", "extra": 1}
        )
        assert (header.number, header.hash, header.parent_hash, header.timestamp) == (
            2,
            H2,
            H1,
            100,
        )
        with pytest.raises(InvalidResponse):
            parse_block({"number": "0x2", "hash": H2, "timestamp": "0x64"})

    @pytest.mark.parametrize("field", ["number", "timestamp"])
    def test_a_header_past_64_bits_is_refused_by_name(self, field: str) -> None:
        """A header's uint64 at its top fits no chain and no store integer: refused,
        naming the field, where it would otherwise fail the commit."""
        raw = {"number": "0x2", "hash": H2, "parentHash": H1, "timestamp": "0x64"}
        assert getattr(parse_block({**raw, field: hex(2**63 - 1)}), field) == 2**63 - 1
        with pytest.raises(InvalidResponse, match=f"block.{field}: .* past any chain"):
            parse_block({**raw, field: hex(2**64 - 1)})

    def test_quantity_bounds(self) -> None:
        """Quantities accept leading zeros but not empty, non-hex or >256-bit values."""
        assert quantity("0x00", "q") == 0
        for bad in ("0x", "0xzz", "1", 5, "0x" + "f" * 65):
            with pytest.raises(InvalidResponse):
                quantity(bad, "q")

    def test_gas_past_any_blocks_limit_is_refused(self) -> None:
        assert gas(hex(2**48), "gas") == 2**48
        with pytest.raises(InvalidResponse, match=r"gas: .* past any block's gas limit"):
            gas(hex(2**48 + 1), "gas")


RECEIPT: dict[str, Any] = {
    "blockNumber": "0x10",
    "blockHash": H1,
    "status": "0x1",
    "logs": [{"address": ADDR, "topics": [H2, H3], "data": "0x"}],
}


class TestReceipt:
    def test_a_well_formed_receipt_is_returned_as_it_is(self) -> None:
        assert parse_receipt(RECEIPT) is RECEIPT
        assert parse_receipt({**RECEIPT, "status": None, "logs": []})["logs"] == []

    @pytest.mark.parametrize(
        ("over", "named"),
        [
            ({"blockNumber": None}, "receipt: missing blockNumber"),
            ({"blockNumber": hex(2**64 - 1)}, "receipt.blockNumber"),
            ({"blockHash": "0x12"}, "receipt.blockHash"),
            ({"status": "0x2"}, "receipt.status"),
            ({"status": 1}, "receipt.status"),
            ({"logs": {}}, "receipt.logs: not a list"),
            ({"logs": [1]}, r"receipt.logs\[\]: not an object"),
            ({"logs": [{"address": ADDR}]}, r"receipt.logs\[\]: missing topics"),
            ({"logs": [{"address": "0x1", "topics": []}]}, r"receipt.logs\[\].address"),
            ({"logs": [{"address": ADDR, "topics": [H1] * 5}]}, "at most 4"),
            ({"logs": [{"address": ADDR, "topics": ["0x1"]}]}, r"topics\[\]"),
        ],
    )
    def test_what_the_keeper_reads_is_checked_by_name(
        self, over: dict[str, Any], named: str
    ) -> None:
        """Where it landed, whether it succeeded and its logs: a malformed one is a bad
        answer (asked again), not an error inside the keeper's settlement."""
        with pytest.raises(InvalidResponse, match=named):
            parse_receipt({**RECEIPT, **over})
        with pytest.raises(InvalidResponse, match="receipt: not an object"):
            parse_receipt([RECEIPT])


FEES: dict[str, Any] = {"baseFeePerGas": ["0x3b9aca00", "0x3b9aca01"], "reward": [["0x1"]]}


class TestFeeHistory:
    def test_a_well_formed_history_is_returned_as_it_is(self) -> None:
        assert parse_fee_history(FEES) is FEES
        assert parse_fee_history({**FEES, "reward": None})["reward"] is None

    @pytest.mark.parametrize(
        ("over", "named"),
        [
            ({"baseFeePerGas": []}, "no baseFeePerGas list"),
            ({"baseFeePerGas": "0x1"}, "no baseFeePerGas list"),
            ({"baseFeePerGas": ["0xzz"]}, r"feeHistory.baseFeePerGas\[\]"),
            ({"baseFeePerGas": [-1]}, r"feeHistory.baseFeePerGas\[\]"),
            ({"reward": "0x1"}, "not a list of lists"),
            ({"reward": [["0x1"], "0x2"]}, "not a list of lists"),
            ({"reward": [[1]]}, r"feeHistory.reward\[\]\[\]"),
        ],
    )
    def test_what_the_fee_policy_reads_is_checked_by_name(
        self, over: dict[str, Any], named: str
    ) -> None:
        with pytest.raises(InvalidResponse, match=named):
            parse_fee_history({**FEES, **over})


class TestValidateLogs:
    def test_sorted_into_chain_order(self) -> None:
        """Logs come back sorted by block then log index."""
        logs = validate_logs(
            [
                raw_log(blockNumber="0x11", blockHash=H2, logIndex="0x0"),
                raw_log(logIndex="0x5"),
                raw_log(logIndex="0x2"),
            ],
            addresses=[ADDR],
            from_block=16,
            to_block=17,
        )
        assert [(lg.block_number, lg.log_index) for lg in logs] == [(16, 2), (16, 5), (17, 0)]

    @pytest.mark.parametrize(
        ("logs", "kwargs"),
        [
            ([raw_log(), raw_log(logIndex="0x2", blockHash=H2)], {}),
            ([raw_log(), raw_log()], {}),
            ([raw_log()], {"from_block": 17}),
            ([raw_log()], {"to_block": 15}),
            ([raw_log()], {"addresses": ["0x" + "bb" * 20]}),
            ([raw_log()], {"block_hash": H2}),
            ({"logs": []}, {}),
        ],
        ids=["two-hashes", "duplicate", "below", "above", "address", "other-block", "not-list"],
    )
    def test_inconsistent_answers_are_refused(self, logs: Any, kwargs: dict[str, Any]) -> None:
        """Two hashes for a block, duplicates, out-of-range or foreign logs are refused."""
        with pytest.raises(InvalidResponse):
            validate_logs(logs, **kwargs)

    @pytest.mark.parametrize("over", MALFORMED)
    def test_malformed_log_is_refused_amid_good_ones(self, over: dict[str, Any]) -> None:
        """The batch path refuses exactly what parse_log refuses, and names the field."""
        good = [raw_log(logIndex=hex(i)) for i in range(2, 5)]
        with pytest.raises(InvalidResponse, match="log"):
            validate_logs([*good, raw_log(**over)])

    def test_data_with_whitespace_is_refused(self) -> None:
        """bytes.fromhex skips spaces; a DATA field must not."""
        with pytest.raises(InvalidResponse, match=r"log\.data"):
            validate_logs([raw_log(data="0x01 02")])

    def test_duplicate_far_apart_in_an_unordered_answer(self) -> None:
        """A duplicate is found even when other logs sit between the two copies."""
        logs = [raw_log(logIndex="0x5"), raw_log(logIndex="0x2"), raw_log(logIndex="0x5")]
        with pytest.raises(InvalidResponse, match="duplicate logIndex 5"):
            validate_logs(logs)

    def test_repeated_strings_give_equal_values(self) -> None:
        """Values served from the per-answer memo equal freshly parsed ones."""
        logs = [raw_log(logIndex=hex(i), transactionIndex=hex(i % 2)) for i in range(4)]
        assert validate_logs(logs) == [parse_log(raw) for raw in logs]

    def test_a_transactions_fields_are_each_logs_own(self) -> None:
        """Logs naming one transaction hash with other block fields get their own values
        (the fields checked for a transaction's first log are reused only when equal)."""
        logs = [
            raw_log(logIndex="0x1"),
            raw_log(logIndex="0x2", blockNumber="0x11", blockHash=H2),
            raw_log(logIndex="0x3", transactionIndex="0x7"),
            raw_log(logIndex="0x4", blockNumber="0x11", blockHash=H2),
        ]
        got = validate_logs(logs)
        assert got == sorted(map(parse_log, logs), key=lambda lg: (lg.block_number, lg.log_index))
        assert [(lg.block_number, lg.tx_index) for lg in got] == [
            (16, 0),
            (16, 7),
            (17, 0),
            (17, 0),
        ]


class TestLogTimestamps:
    def test_each_blocks_timestamp_as_its_logs_carry_it(self) -> None:
        """A block's ``blockTimestamp`` comes with the logs; a block whose first log has
        none or a malformed one is left out (its header will be read)."""
        logs = validate_logs(
            [
                raw_log(logIndex="0x1", blockTimestamp="0x64"),
                raw_log(logIndex="0x2", blockTimestamp="0x64"),
                raw_log(blockNumber="0x11", blockHash=H2, blockTimestamp="0x65"),
                raw_log(blockNumber="0x12", blockHash=H3),
                raw_log(blockNumber="0x13", blockHash=H4, blockTimestamp="65"),
                raw_log(blockNumber="0x14", blockHash=H5, blockTimestamp=hex(2**64 - 1)),
            ]
        )
        assert logs.timestamps == {16: 100, 17: 101}
        assert validate_logs([raw_log()]).timestamps == {}

    @pytest.mark.parametrize(
        "stamps",
        [{16: "0x0"}, {16: "0x65", 17: "0x64"}, {16: "0x65", 17: "0x66", 18: "0x0"}],
        ids=["zero", "backwards", "zero-later"],
    )
    def test_an_answer_whose_timestamps_cannot_be_believed_gives_none(
        self, stamps: dict[int, str]
    ) -> None:
        """A zero (a gateway's default) or chain time going back discredits them all."""
        assert block_timestamps(stamps) == {}

    def test_the_genesis_block_may_have_time_zero(self) -> None:
        """Only block 0 may carry timestamp 0 (a dev chain's genesis): it is no gateway's
        default there."""
        assert block_timestamps({0: "0x0", 1: "0x5"}) == {0: 0, 1: 5}

    def test_equal_timestamps_of_successive_blocks_stand(self) -> None:
        """Rollups seal several blocks in one second: equal timestamps are not going back."""
        assert block_timestamps({5: "0x10", 6: "0x10", 9: "0x11"}) == {5: 16, 6: 16, 9: 17}

    @given(st.dictionaries(st.integers(1, 10**6), st.integers(0, 2**40), max_size=12))
    @settings(max_examples=200)
    def test_kept_only_when_every_given_one_is_positive_and_in_order(
        self, given_stamps: dict[int, int]
    ) -> None:
        got = block_timestamps({n: hex(t) for n, t in given_stamps.items()})
        ordered = [given_stamps[n] for n in sorted(given_stamps)]
        believable = all(t > 0 for t in ordered) and ordered == sorted(ordered)
        assert got == (given_stamps if believable else {})


class TestBloom:
    def test_real_block_bloom(self, log_chain: LogChain) -> None:
        """A real anvil bloom holds the emitter and its topic, and not an unrelated address."""
        block = log_chain.ctl.block(log_chain.log_blocks[1])
        bloom = block["logsBloom"]
        assert bloom_may_contain(bloom, bytes.fromhex(EMITTER[2:]))
        assert bloom_may_contain(bloom, bytes.fromhex(TOPIC[2:]))
        assert not bloom_may_contain(bloom, bytes.fromhex("42" * 20))
        assert not bloom_may_contain("0x" + "00" * 256, bytes.fromhex(EMITTER[2:]))

    def test_malformed_bloom(self) -> None:
        """A bloom of the wrong size is refused rather than misread."""
        with pytest.raises(InvalidResponse):
            bloom_may_contain("0x00", b"x")


# what a DATA field is (the JSON-RPC spec): 0x and whole bytes of hex digits, nothing else
DATA_FIELD = re.compile(r"0x([0-9a-fA-F]{2})*\Z")
HEXISH = st.text(alphabet="0123456789abcdefABCDEFxX \t\n\u0660g", max_size=12)


class TestDataField:
    """``data`` takes exactly the strings that are a DATA field, whatever it is handed."""

    @settings(max_examples=400, deadline=None)
    @given(st.one_of(HEXISH, HEXISH.map(lambda t: "0x" + t)))
    def test_accepts_exactly_the_data_fields(self, value: str) -> None:
        if DATA_FIELD.match(value):
            assert data(value, "call") == bytes.fromhex(value[2:])
        else:
            with pytest.raises(InvalidResponse, match="call: not hex data"):
                data(value, "call")

    @pytest.mark.parametrize("value", [None, 12, b"0x00", ["0x00"]])
    def test_a_non_string_is_refused(self, value: object) -> None:
        with pytest.raises(InvalidResponse, match="code: not hex data"):
            data(value, "code")
