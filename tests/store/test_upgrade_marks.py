"""The upgrades the keeper watches (keeper.act.dialect_watch.UpgradeWatch over
keeper.store.queries.latest_upgrade), on both store backends: a proxy's Upgraded and a
diamond's DiamondCut, written by the index store's own batch path, are pending until
marked seen, and pending again once a rollback takes them away."""

from __future__ import annotations

from pathlib import Path

import pytest
from index_builders import JOBS, PROTOCOLS, TASKS, Synth, batch_of, block_hash, encode_log

from keeper.act.dialect_watch import UpgradeWatch
from keeper.config import ContractConfig
from keeper.domain.event_catalog import topic0_of
from keeper.domain.events import decode_logs
from keeper.domain.model import BlockHeader, Log, Protocol
from keeper.store.db import connect
from keeper.store.index_store import Batch, IndexStore
from keeper.store.migrations import migrate

CHAIN = 8453
CUT = "DiamondCut((address,uint8,bytes4[])[],address,bytes)"


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_upgrades_are_pending_until_seen_and_again_after_a_rollback(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    path: Path | str = tmp_path / "marks.db"
    if backend == "postgresql":
        path = request.getfixturevalue("postgres_server").database()
    conn = connect(path)
    migrate(conn)
    store = IndexStore(conn, CHAIN)
    history = Synth(seed=5, events_per_block=3).blocks(1, 10)
    store.apply_batch(batch_of(history, finalized=0))
    contracts = [
        ContractConfig("jobs", Protocol.ERC8183, JOBS, 0),
        ContractConfig("tasks", Protocol.TASKMARKET, TASKS, 0),
    ]
    watch = UpgradeWatch(conn, CHAIN, contracts)
    watch.mark()
    assert watch.pending() == []

    # block 11: the jobs contract's proxy gets a new implementation, the diamond a cut
    header = BlockHeader(11, block_hash(11), history[-1].header.hash, 1_700_000_132)
    upgraded = encode_log(JOBS, "Upgraded", "current", {"implementation": "0x" + "11" * 20},
                          header, 0)  # fmt: skip
    cut = Log(TASKS, (topic0_of(CUT),), b"\x00" * 96, 11, header.hash, "0x" + "cc" * 32, 1, 1)
    events = decode_logs([upgraded, cut], PROTOCOLS, {11: header.timestamp})
    assert [(e.name, e.subject) for e in events] == [("Upgraded", None), ("DiamondCut", None)]
    store.apply_batch(Batch(events, [header], [], 11, header.hash, 0))
    pending = watch.pending()
    assert [(c.name, mark) for c, mark in pending] == [
        ("jobs", (11, 0, header.hash)),
        ("tasks", (11, 1, header.hash)),
    ]
    assert watch.pending() == pending  # still pending: nothing was detected again yet
    for contract, mark in pending:
        watch.seen(contract, mark)
    assert watch.pending() == []

    # a reorg takes block 11 away: both contracts run their old code again
    store.rollback_to(10)
    assert [(c.name, mark) for c, mark in watch.pending()] == [("jobs", None), ("tasks", None)]
    conn.close()
