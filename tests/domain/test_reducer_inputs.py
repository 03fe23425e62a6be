"""What the reducers take from events and reads: a subject's reads only, the read of the
event's own block (or the latest one below it), and an address or nothing."""

from __future__ import annotations

import pytest

from keeper.domain.model import ChainRead, Event, Log, Protocol
from keeper.domain.reducer_inputs import ZERO_ADDRESS, Reads, addr_or_none

ESCROW, OTHER = "0x" + "e1" * 20, "0x" + "e2" * 20


def _hash(block: int, fork: int = 0) -> str:
    return f"0x{fork:02x}{block:062x}"


def _read(block: int, result: dict[str, object], *, fork: int = 0, **where: str) -> ChainRead:
    contract, subject = where.get("contract", ESCROW), where.get("subject", "1")
    return ChainRead(contract, subject, "getJob", block, _hash(block, fork), result)


def _event(block: int) -> Event:
    log = Log(ESCROW, ("0x" + "00" * 32,), b"", block, _hash(block), "0x" + "11" * 32, 0, 0)
    return Event(ESCROW, Protocol.ERC8183, "JobFunded", "current", "1", {}, log, 0)


def test_a_subject_s_reads_are_its_own() -> None:
    """Another job's read on the same contract, or the same job id on another contract,
    is not this job's."""
    reads = [
        _read(5, {"n": "mine"}),
        _read(6, {"n": "another job"}, subject="2"),
        _read(7, {"n": "another contract"}, contract=OTHER),
    ]
    mine = Reads.of(reads, ESCROW, "1")
    assert [r.result["n"] for r in mine.by_kind["getJob"]] == ["mine"]


def test_the_event_s_own_block_first_else_the_latest_below() -> None:
    reads = [_read(3, {"n": 3}), _read(5, {"n": 5}), _read(9, {"n": 9})]
    by = Reads.of(reads, ESCROW, "1")
    assert by.at("getJob", _event(5)) == {"n": 5}
    assert by.at("getJob", _event(7)) == {"n": 5}
    assert by.at("getJob", _event(7), exact=True) is None
    assert by.at("getJob", _event(2)) is None


def test_a_read_of_another_block_at_the_event_s_height_is_not_below_it() -> None:
    """A read recorded at the same height on another fork is neither the event's block
    nor one before it: the read below is taken."""
    by = Reads.of([_read(4, {"n": 4}), _read(6, {"n": "fork"}, fork=1)], ESCROW, "1")
    assert by.at("getJob", _event(6)) == {"n": 4}


def test_a_failed_read_is_no_answer() -> None:
    by = Reads.of([_read(4, {"n": 4}), _read(6, {"error": "reverted"})], ESCROW, "1")
    assert by.at("getJob", _event(6)) == {"n": 4}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        (7, None),
        (ZERO_ADDRESS, None),
        ("0x" + "AB" * 20, "0x" + "ab" * 20),
    ],
)
def test_an_address_or_nothing(value: object, expected: str | None) -> None:
    assert addr_or_none(value) == expected
