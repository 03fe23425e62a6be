"""The devnet traffic's two silent endings, played against a running daemon.

``task_finalize_silent`` leaves a verdict paying no award for the keeper to finalize
(which emits nothing), ``task_dispute_silent`` has the resolver settle a dispute paying
no award (which emits nothing either). The daemon's index must end both tasks Accepted
from its keeper's observations, and the chain must agree. A fresh index given those
observations (as the reliability checks give them) equals the daemon's; one the chain
does not bear out is refused.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from rel_audit import adopt_silent_endings
from support.devnet_daemon import devnet_daemon
from support.devnet_timing import FAST
from sync_support import Harness, fresh_index, table_diff

from keeper.devnet.anvil import AnvilProcess, rpc_call
from keeper.devnet.deploy import deploy_all
from keeper.devnet.evaluator_service import VerdictBook, load_fixtures
from keeper.devnet.traffic import TrafficGenerator
from keeper.domain.model import TaskStatus
from keeper.domain.views import decode_view, encode_view
from keeper.store.db import connect

SILENT = ("task_finalize_silent", "task_dispute_silent")
MARKS = ("finalized_silently_at", "resolved_silently_at")


def test_an_unknown_scenario_is_refused_by_name(anvil: AnvilProcess) -> None:
    deployed = deploy_all(anvil.url)
    with pytest.raises(ValueError, match="task_nonsense"):
        TrafficGenerator(
            anvil.url, deployed, VerdictBook(deployed.commerce), load_fixtures(),
            self_keep=False, scenarios=("task_finalize", "task_nonsense"),
        )  # fmt: skip


async def test_the_traffics_silent_endings_end_in_the_daemons_index(
    anvil: AnvilProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployed = await asyncio.to_thread(deploy_all, anvil.url)
    daemon = await devnet_daemon(anvil.url, tmp_path, monkeypatch, deployment=deployed)
    gen = TrafficGenerator(
        anvil.url, deployed, VerdictBook(deployed.commerce), load_fixtures(),
        self_keep=False, timing=FAST, scenarios=SILENT,
    )  # fmt: skip
    conn = connect(daemon.cfg.database.target, readonly=True)

    def ended() -> dict[str, list[tuple[str, int]]]:
        """Each mark's tasks: (task id, the block its observation was made at)."""
        out: dict[str, list[tuple[str, int]]] = {m: [] for m in MARKS}
        for task_id, status, extra in conn.execute(
            "SELECT task_id, status_code, extra_json FROM tasks WHERE contract = ?",
            (deployed.taskmarket,),
        ):
            for mark in MARKS:
                if mark in json.loads(extra):
                    assert status == TaskStatus.ACCEPTED, (task_id, status, extra)
                    out[mark].append((task_id, int(json.loads(extra)[mark])))
        return out

    running = asyncio.create_task(daemon.run())
    traffic = asyncio.create_task(gen.run(steps=6))
    try:
        for _ in range(600):
            assert not running.done(), running
            if traffic.done() and all(len(v) >= 3 for v in ended().values()):
                break
            if traffic.done():  # chain time on, past the last verdict's appeal window
                await asyncio.to_thread(gen.control.increase_time, FAST.warp)
                await asyncio.to_thread(gen.control.mine)
            await asyncio.sleep(0.1)
        await traffic
        assert gen.counts["task_finalize_silent"] == gen.counts["task_dispute_silent"] == 3
        seen = ended()
        assert all(len(v) == 3 for v in seen.values()), seen
        # the chain agrees: each task Accepted at its observation's block, and no award
        # event was ever emitted for it
        for task_id, block in (t for v in seen.values() for t in v):
            call = {"to": deployed.taskmarket, "data": "0x" + encode_view("getTask", task_id).hex()}
            answer = await asyncio.to_thread(rpc_call, anvil.url, "eth_call", [call, hex(block)])
            got = decode_view("getTask", bytes.fromhex(str(answer)[2:]))
            assert (got["status"], got["reward"]) == (TaskStatus.ACCEPTED, 0), (task_id, got)
        named = conn.execute(
            "SELECT count(*) FROM events WHERE contract = ? AND name IN "
            "('TaskCompleted', 'TaskCancelled', 'TaskExpired')",
            (deployed.taskmarket,),
        ).fetchone()[0]
        assert named == 0
    finally:
        conn.close()
        traffic.cancel()
        daemon.stop.set()
        await asyncio.wait({running, traffic}, timeout=30)
    assert running.result() == 0
    db = daemon.cfg.database.target
    fresh = await fresh_index(tmp_path, "fresh", anvil.url, deployed)
    mine = Harness(daemon.cfg)
    try:
        before = fresh.dump()
        assert adopt_silent_endings(db, fresh, anvil.url) == 6
        assert fresh.dump() != before
        assert table_diff(mine.dump(), fresh.dump()) == ""
        # an observation at a block where its task was still Appealing
        task_id, block = seen["finalized_silently_at"][0]
        evaluated = mine.conn.execute(
            "SELECT block_number FROM events WHERE subject = ? AND name = 'TaskEvaluated'",
            (task_id,),
        ).fetchone()[0]
        head = await asyncio.to_thread(rpc_call, anvil.url, "eth_getBlockByNumber",
                                       [hex(evaluated), False])  # fmt: skip
        mine.conn.execute(
            "UPDATE chain_reads SET block_number = ?, block_hash = ? WHERE subject = ? "
            "AND kind = 'finalizeSilent'",
            (evaluated, head["hash"], task_id),
        )
        mine.conn.commit()
        assert evaluated < block
        with pytest.raises(AssertionError, match=task_id):
            adopt_silent_endings(db, fresh, anvil.url)
    finally:
        await mine.close()
        await fresh.close()
