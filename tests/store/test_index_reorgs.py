"""Property: any sequence of batches and reorgs ends equal to indexing the final chain once."""

from __future__ import annotations

import sqlite3

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from index_builders import Synth, SynthBlock, batch_of

from keeper.store.index_store import IndexStore
from keeper.store.migrations import migrate

CHAIN = 10


def _memory_store() -> IndexStore:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.row_factory = sqlite3.Row
    migrate(conn)
    return IndexStore(conn, CHAIN, keep_margin=64)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chunk=st.integers(1, 6),
    reorgs=st.lists(st.tuples(st.integers(1, 8), st.integers(1, 6)), max_size=3),
    seed=st.integers(0, 1000),
)
def test_reorg_sequences_converge_to_a_fresh_index(
    chunk: int, reorgs: list[tuple[int, int]], seed: int
) -> None:
    """Apply in chunks, roll back `depth` blocks and replay a new branch, repeatedly: same dump."""
    synth = Synth(seed=seed, events_per_block=4)
    chain: list[SynthBlock] = synth.blocks(1, 12)
    store = _memory_store()
    for i in range(0, len(chain), chunk):
        store.apply_batch(batch_of(chain[i : i + chunk], finalized=0))
    for n, (depth, grow) in enumerate(reorgs):
        fork = len(chain) - depth  # the chain only grows: always >= 4
        assert store.rollback_to(fork) is not None
        synth.switch_fork(f"fork{n}")
        branch = synth.blocks(fork + 1, fork + depth + grow, parent=chain[fork - 1].header.hash)
        chain = chain[:fork] + branch
        for i in range(0, len(branch), chunk):
            store.apply_batch(batch_of(branch[i : i + chunk], finalized=0))
    fresh = _memory_store()
    fresh.apply_batch(batch_of(chain, finalized=0))
    assert store.dump() == fresh.dump()
    store.rebuild_all()
    assert store.dump() == fresh.dump()
