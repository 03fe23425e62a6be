"""The choice of the headers a timed batch reads, and the check of its log timestamps
against them (keeper.sync.log_stamps)."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from keeper.domain.model import BlockHeader
from keeper.sync.log_stamps import disagreements, headers_to_read

# a chain's block times: non-decreasing, as chain time is
chains = st.lists(st.integers(0, 3), min_size=2, max_size=40).map(
    lambda steps: {n: 1_700_000_000 + sum(steps[: n + 1]) for n in range(len(steps))}
)


def header(number: int, timestamp: int) -> BlockHeader:
    return BlockHeader(number, f"0x{number:064x}", f"0x{number - 1:064x}", timestamp)


@given(chains, st.data())
def test_a_batch_reads_its_untimed_blocks_its_last_and_one_timed_block(
    times: dict[int, int], data: st.DataObject
) -> None:
    blocks = set(data.draw(st.sets(st.sampled_from(sorted(times)), min_size=1)))
    stamped = {n: times[n] for n in data.draw(st.sets(st.sampled_from(sorted(blocks))))}
    hi = max(blocks)
    wanted = headers_to_read(blocks, stamped, hi, random.Random(data.draw(st.integers())))
    drawn = wanted - (blocks - stamped.keys()) - {hi}
    assert blocks - stamped.keys() <= wanted and hi in wanted
    assert len(drawn) == (1 if stamped.keys() - {hi} else 0)
    assert drawn <= stamped.keys()


def test_every_timed_block_gets_drawn_in_time() -> None:
    """A fixed choice would leave a node wrong on the others unseen for good."""
    blocks = set(range(10, 30))
    stamped = {n: n for n in blocks}
    rng = random.Random(7)
    drawn: set[int] = set()
    for _ in range(400):
        drawn |= headers_to_read(blocks, stamped, 29, rng) - {29}
    assert drawn == blocks - {29}


@given(chains, st.data())
def test_timestamps_as_the_chain_has_them_agree_with_any_headers(
    times: dict[int, int], data: st.DataObject
) -> None:
    read = data.draw(st.sets(st.sampled_from(sorted(times)), min_size=1))
    assert disagreements(times, {n: header(n, times[n]) for n in read}) == []


@given(chains, st.data())
def test_a_timestamp_off_is_caught_by_its_own_header_or_one_it_passes(
    times: dict[int, int], data: st.DataObject
) -> None:
    block = data.draw(st.sampled_from(sorted(times)))
    off = data.draw(st.integers(-5, 5).filter(bool))
    stamped = {**times, block: times[block] + off}
    own = disagreements(stamped, {block: header(block, times[block])})
    assert own == [(block, times[block] + off, block, times[block])]
    # any block's header: its own, or one the wrong time passes in the chain's order
    other = data.draw(st.sampled_from(sorted(times)))
    passes = (
        other == block
        or (other > block and stamped[block] > times[other])
        or (other < block and stamped[block] < times[other])
    )
    found = disagreements(stamped, {other: header(other, times[other])})
    assert [w[0] for w in found] == ([block] if passes else [])
