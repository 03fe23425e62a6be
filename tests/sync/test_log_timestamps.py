"""Block timestamps taken from the getLogs entries (``blockTimestamp``) instead of one
header a block, and the same index whatever the node does with that field.

The same chain is indexed four times through a proxy: as the node answers (anvil sends
``blockTimestamp``), with the field stripped (a node that predates it), set to zero
(a gateway that leaves it at its default) and one second off its header's. The four
indexes are identical, event timestamps included; the first asks for far fewer headers,
and a wrong timestamp is caught against a header and said once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs
from support.rpc_proxy import ProxyRules, RpcProxy
from sync_support import Harness, proxied_index, run_traffic, table_diff, traffic, write_config

from keeper.devnet.anvil import AnvilProcess, rpc_call
from keeper.devnet.deploy import Deployment, deploy_all
from keeper.sync.changes import BlockBatch


@pytest.fixture
def deployed(anvil: AnvilProcess) -> Deployment:
    return deploy_all(anvil.url)


async def index(
    tmp: Path, name: str, url: str, deployed: Deployment, stamps: str, max_range: int = 40
) -> tuple[dict[str, list[tuple[Any, ...]]], set[int], list[dict[str, Any]]]:
    """A fresh index of the whole chain: its tables, the blocks whose headers were asked
    for, and the log lines said while indexing."""
    rules = ProxyRules(log_stamps=stamps)
    with capture_logs() as logs:
        async with proxied_index(tmp, name, url, deployed, rules, max_range=max_range) as (
            h,
            proxy,
        ):
            asked = {int(p[0], 16) for p in proxy.requests_for("eth_getBlockByNumber")
                     if p[0].startswith("0x")}  # fmt: skip
            dump = h.dump()
            dump["log_blocks"] = list(h.conn.execute("SELECT DISTINCT block_number FROM events"))
    return dump, asked, logs


async def test_the_index_is_the_same_whatever_the_logs_say_of_their_blocks_time(
    anvil: AnvilProcess, deployed: Deployment, tmp_path: Path
) -> None:
    await run_traffic(traffic(anvil.url, deployed), 8)
    told, told_asked, told_logs = await index(tmp_path, "told", anvil.url, deployed, "")
    bare, bare_asked, _ = await index(tmp_path, "bare", anvil.url, deployed, "strip")
    zero, zero_asked, zero_logs = await index(tmp_path, "zero", anvil.url, deployed, "zero")
    skew, skew_asked, skew_logs = await index(tmp_path, "skew", anvil.url, deployed, "skew")

    assert table_diff(told, bare) == ""
    assert table_diff(told, zero) == ""
    assert table_diff(told, skew) == ""
    log_blocks = {row[0] for row in told["log_blocks"]}
    assert len(log_blocks) > 20, len(log_blocks)
    # without the field (or with zeros), every block with logs has its header read
    assert log_blocks <= bare_asked and log_blocks <= zero_asked
    # with it, about one header a range: the anchor and the one the timestamps are checked on
    assert len(log_blocks & told_asked) < len(log_blocks) / 2, (len(told_asked), len(log_blocks))
    assert not [e for e in told_logs + zero_logs if e["event"] == "log_timestamps_disagree"]
    # a timestamp off by one second is caught on the first range, said once, then headers
    (said,) = [e for e in skew_logs if e["event"] == "log_timestamps_disagree"]
    assert said["log_timestamp"] == said["header_timestamp"] + 1
    assert log_blocks <= skew_asked


async def test_log_timestamps_wrong_on_some_blocks_only_are_caught(
    anvil: AnvilProcess, deployed: Deployment, tmp_path: Path
) -> None:
    """A node that times each answer's logs as its first block's, but for the block asked
    up to: the lowest block and the cursor's anchor agree with their headers, so a fixed
    choice of the header to check would never see it; a drawn one does, on the first
    batches."""
    rpc_call(anvil.url, "anvil_setBlockTimestampInterval", [1])  # each block a second on
    await run_traffic(traffic(anvil.url, deployed), 16)
    # ranges of up to 16 blocks: batches timing 6 to 14 blocks, each drawing a right one
    # at 1 in 5 or less, all of them about 1 in a million
    _, _, first_logs = await index(tmp_path, "first", anvil.url, deployed, "first", 16)
    (said,) = [e for e in first_logs if e["event"] == "log_timestamps_disagree"]
    assert said["log_timestamp"] < said["header_timestamp"], said
    assert said["header_block"] == said["block"], said


async def test_times_committed_before_the_logs_were_found_wrong_are_set_right(
    anvil: AnvilProcess, deployed: Deployment, tmp_path: Path
) -> None:
    """A node whose log timestamps and headers were both a second off (so nothing told)
    has the events of a first backfill committed a second off; once its headers are
    right again, the next range finds its log timestamps wrong, and the events committed
    before are checked against their headers and set right, projections included."""
    await run_traffic(traffic(anvil.url, deployed), 8)
    right_then, _, _ = await index(tmp_path, "right-then", anvil.url, deployed, "")
    rules = _late_node()
    with capture_logs() as logs:
        async with proxied_index(tmp_path, "late", anvil.url, deployed, rules) as (h, _):
            first = h.dump()
            assert not [e for e in logs if e["event"] == "log_timestamps_disagree"]
            del rules.methods["eth_getBlockByNumber"]  # the headers are right from now on
            await run_traffic(traffic(anvil.url, deployed), 4)
            await h.to_head()
            repaired = h.dump()
    await _assert_set_right(tmp_path, anvil.url, deployed, right_then, first, repaired)
    (said,) = [e for e in logs if e["event"] == "log_timestamps_disagree"]
    (rechecked,) = [e for e in logs if e["event"] == "log_timestamps_rechecked"]
    assert rechecked["retimed"] > 0 and rechecked["to_block"] >= said["block"]


async def test_times_an_earlier_process_committed_are_set_right_by_a_later_one(
    anvil: AnvilProcess, deployed: Deployment, tmp_path: Path
) -> None:
    """A node both of whose times were a second off has a first process's backfill
    committed a second off; the next process, on the same index, finds the log timestamps
    wrong and sets right what the first one committed as well as its own."""
    await run_traffic(traffic(anvil.url, deployed), 8)
    right_then, _, _ = await index(tmp_path, "right-then", anvil.url, deployed, "")
    with capture_logs():
        async with proxied_index(tmp_path, "late", anvil.url, deployed, _late_node()) as (h, _):
            first = h.dump()
    await run_traffic(traffic(anvil.url, deployed), 4)
    with capture_logs() as logs:
        rules = ProxyRules(log_stamps="skew")  # the headers are right
        async with proxied_index(tmp_path, "late", anvil.url, deployed, rules) as (h, _):
            repaired = h.dump()
    await _assert_set_right(tmp_path, anvil.url, deployed, right_then, first, repaired)
    (rechecked,) = [e for e in logs if e["event"] == "log_timestamps_rechecked"]
    assert rechecked["from_block"] <= min(row[0] for row in right_then["log_blocks"])


async def test_a_check_owed_when_the_process_died_is_made_by_the_next_one(
    anvil: AnvilProcess, deployed: Deployment, tmp_path: Path
) -> None:
    """The process that finds the log timestamps wrong is killed before it could check
    what was committed from them; the next one, on a node whose times are all right (so
    it finds nothing itself), believes them no more and makes the check first."""
    await run_traffic(traffic(anvil.url, deployed), 8)
    with capture_logs():
        async with proxied_index(tmp_path, "late", anvil.url, deployed, _late_node()):
            pass
    await run_traffic(traffic(anvil.url, deployed), 4)
    with capture_logs() as found_logs, RpcProxy(anvil.url, rules=ProxyRules(log_stamps="skew")) \
            as proxy:  # fmt: skip
        cfg = write_config(tmp_path, "late", [proxy.url], deployed, finality="confirmations",
                           confirmations=0, max_range=8)  # fmt: skip
        h = Harness(cfg)
        try:
            # a kill just after the first batch committed once it was found: the
            # rest of the range, and the check at its end, never come
            changes = h.indexer.changes()
            async for change in changes:
                h.indexing.apply(change)
                if isinstance(change, BlockBatch) and change.stamps_wrong:
                    break
            await changes.aclose()
        finally:
            await h.close()
    assert [e for e in found_logs if e["event"] == "log_timestamps_disagree"]
    assert not [e for e in found_logs if e["event"] == "log_timestamps_rechecked"]
    with capture_logs() as logs:
        async with proxied_index(tmp_path, "late", anvil.url, deployed) as (h, _):
            repaired = h.dump()
    right, _, _ = await index(tmp_path, "right", anvil.url, deployed, "")
    assert table_diff(repaired, right) == ""
    assert not [e for e in logs if e["event"] == "log_timestamps_disagree"]
    (rechecked,) = [e for e in logs if e["event"] == "log_timestamps_rechecked"]
    assert rechecked["retimed"] > 0


async def _assert_set_right(
    tmp: Path,
    url: str,
    deployed: Deployment,
    right_then: dict[str, Any],
    first: dict[str, Any],
    repaired: dict[str, Any],
) -> None:
    """The late node's first backfill had every event exactly a second late (``right_then``
    being an honest index of that chain), and the repaired index is an honest node's."""
    right, _, _ = await index(tmp, "right", url, deployed, "")
    late = {(*row[:4], row[4] + 1, *row[5:]) for row in right_then["events"]}
    assert set(first["events"]) == late
    assert table_diff(repaired, right) == ""


def _late_node() -> ProxyRules:
    """A node whose log timestamps and headers are both a second late: nothing tells."""
    rules = ProxyRules(log_stamps="skew")
    rules.on("eth_getBlockByNumber", patched=10**9, patch=_a_second_late)
    return rules


def _a_second_late(params: Any, header: Any) -> Any:
    if isinstance(header, dict):
        return {**header, "timestamp": hex(int(header["timestamp"], 16) + 1)}
    return header
