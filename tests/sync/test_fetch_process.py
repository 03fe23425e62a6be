"""Long historical ranges fetched by a second process (keeper.sync.fetch_process).

A real anvil with the devnet emitter's job flows, indexed by the daemon's own
wiring: through the child (``fetch_process_blocks = 1``) the index equals the
in-process one, whether the child takes the range from its start or from the
batch after which the rest looks large (``fetch_process_events``); the child's
RPC calls reach this process's metrics, a child
killed mid-range costs one retry and nothing else, closing the scan leaves no
child behind, and a failing endpoint's secret URL appears neither in the error
raised here nor in anything the child wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import pickle
import signal
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import structlog
from support.rpc_proxy import ProxyRules, RpcProxy
from sync_support import Harness, emit_job_flows, table_diff, write_config
from web3 import Web3

from bench.common import children
from keeper.config import Config
from keeper.devnet.anvil import AnvilProcess
from keeper.devnet.deploy import Deployment, deploy_all
from keeper.domain.model import BlockHeader, Event, Protocol
from keeper.domain.ranges import RangePolicy
from keeper.domain.rpc_errors import RpcFailure
from keeper.errors import RetryableError
from keeper.indexing import NullListener
from keeper.obs.logging import register_rpc_url
from keeper.rpc import EndpointConfig, RpcClient
from keeper.rpc.errors import RangeTooLargeError
from keeper.store.index_store import ApplyResult
from keeper.sync.fetch_child import portable
from keeper.sync.fetch_process import ProcessFetcher, child_path
from keeper.sync.log_stamps import StampTrust

JOBS_PER_BLOCK = [40] * 8 + [2] * 30


@pytest.fixture(scope="module")
def flows(module_anvil: AnvilProcess) -> Deployment:
    deployment = deploy_all(module_anvil.url)
    emit_job_flows(module_anvil.url, deployment, JOBS_PER_BLOCK)
    return deployment


class KillFirstChild(NullListener):
    """Kills the fetch process right after the first batch it sent is committed."""

    def __init__(self) -> None:
        self.fetcher: ProcessFetcher | None = None
        self.killed: int | None = None
        self.batches = 0

    def on_heads(self, head: BlockHeader, finalized: int, indexed: int) -> None:
        pass

    def on_batch(self, result: ApplyResult, events: Sequence[Event]) -> None:
        self.batches += 1
        assert self.fetcher is not None
        if self.killed is None and self.fetcher.pid is not None:
            self.killed = self.fetcher.pid
            os.kill(self.killed, signal.SIGKILL)


def scan_only(tmp: Path, name: str, d: Deployment, url: str, **chain: Any) -> Config:
    """A config whose whole chain is final at once: range scans alone."""
    return write_config(tmp, name, [url], d, finality="confirmations", confirmations=0, **chain)


def through_child(
    tmp: Path, name: str, d: Deployment, url: str, *, least: int = 0, **chain: Any
) -> Config:
    """A scan-only config whose ranges are candidates for the child, which takes over
    once the rest looks like holding ``least`` events (0: from the range's start),
    however busy this process is (``fetch_process_busy`` has a test of its own)."""
    chain = {"fetch_process_busy": 0, **chain}
    return scan_only(tmp, name, d, url, fetch_process_blocks=1, fetch_process_events=least, **chain)


def assert_same_index(reference: Harness, *others: Harness) -> None:
    """Each of ``others`` holds exactly the tables ``reference`` holds."""
    expected = reference.dump()
    for other in others:
        diff = table_diff(expected, other.dump())
        assert not diff, diff


async def index(tmp: Path, name: str, d: Deployment, url: str, **chain: Any) -> Harness:
    h = Harness(scan_only(tmp, name, d, url, **chain))
    await h.to_head()
    return h


async def test_the_child_builds_the_same_index_and_its_calls_are_counted(
    module_anvil: AnvilProcess, flows: Deployment, tmp_path: Path
) -> None:
    local = await index(tmp_path, "local", flows, module_anvil.url, fetch_process_blocks=0)
    cfg = through_child(tmp_path, "child", flows, module_anvil.url, batch_events=300)
    child, metrics = Harness.composed(cfg)
    try:
        await child.to_head()
        assert metrics.registry.get_sample_value("keeper_fetch_process_unavailable") == 0
        assert local.indexer.remote.started == 0
        assert child.indexer.remote.started >= 1
        assert child.indexer.remote.pid is None  # the child is gone with its range
        assert_same_index(local, child)
        assert len(child.dump()["events"]) > 6 * sum(JOBS_PER_BLOCK) - 1
        # getLogs is only ever sent by the child here: its calls reached these metrics
        logs_ok = metrics.registry.get_sample_value(
            "keeper_rpc_requests_total",
            {"endpoint": "rpc0", "method": "eth_getLogs", "outcome": "ok"},
        )
        assert logs_ok is not None and logs_ok >= 1
    finally:
        await local.close()
        await child.close()


async def test_the_child_runs_this_code_whatever_the_working_directory_holds(
    module_anvil: AnvilProcess,
    flows: Deployment,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Started where another keeper/ lies (an older checkout, say), the child still runs
    the package this process runs: ``-m`` alone would import the working directory's."""
    decoy = tmp_path / "elsewhere"
    (decoy / "keeper" / "sync").mkdir(parents=True)
    (decoy / "keeper" / "__init__.py").write_text("raise SystemExit('the decoy ran')\n")
    (decoy / "keeper" / "sync" / "__init__.py").write_text("")
    (decoy / "keeper" / "sync" / "fetch_child.py").write_text("raise SystemExit(3)\n")
    monkeypatch.setenv("PYTHONPATH", str(decoy))  # this process's path was set at its start
    local = await index(tmp_path, "local", flows, module_anvil.url, fetch_process_blocks=0)
    monkeypatch.chdir(decoy)
    child = Harness(through_child(tmp_path, "child", flows, module_anvil.url))
    try:
        await child.to_head()
        assert child.indexer.remote.started == 1
        assert_same_index(local, child)
    finally:
        await local.close()
        await child.close()


def test_the_child_gets_this_import_path_in_its_order_relative_entries_made_absolute() -> None:
    """The same entries in the same order find the same modules: the standard library
    stays before site-packages, and '' is where this process started, not the child's
    working directory."""
    assert child_path(["", "rel/dir", "/abs", "/usr/lib/python3.11"], "/started/here") == [
        "/started/here",
        "/started/here/rel/dir",
        "/abs",
        "/usr/lib/python3.11",
    ]
    assert child_path(["", "rel", "/abs"], None) == ["/abs"]  # started in a removed directory
    path = child_path(sys.path, os.getcwd())
    places = sysconfig.get_paths()
    assert path.index(places["stdlib"]) < path.index(places["purelib"])


@pytest.mark.parametrize("gone_first", [False, True], ids=["while-told", "before-told"])
async def test_a_child_that_cannot_start_is_not_started_again(
    module_anvil: AnvilProcess,
    flows: Deployment,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    gone_first: bool,
) -> None:
    """An interpreter that fails before the child's first frame fails the same way each
    time: after one retry the ranges are fetched here, and the index is whole. A child
    that fails faster than this process writes its range to it (a loaded machine) closes
    the pipe first (``gone_first`` makes that order certain): the same failure, not
    another kind of error out of the step."""
    reference = await index(tmp_path, "ref", flows, module_anvil.url, fetch_process_blocks=0)
    monkeypatch.setenv("PYTHONHOME", str(tmp_path / "no-python-here"))  # the child's start
    if gone_first:
        start = asyncio.create_subprocess_exec

        async def exited_first(*args: Any, **kwargs: Any) -> asyncio.subprocess.Process:
            proc = await start(*args, **kwargs)
            await proc.wait()
            return proc

        monkeypatch.setattr(asyncio, "create_subprocess_exec", exited_first)
    h, metrics = Harness.composed(
        through_child(tmp_path, "broken", flows, module_anvil.url, max_range=2)
    )
    try:
        assert metrics.registry.get_sample_value("keeper_fetch_process_unavailable") == 0
        with structlog.testing.capture_logs() as logs:
            await h.to_head()
        assert h.indexer.remote.started == 1
        assert h.retries == 1
        said = [e for e in logs if e["event"] == "fetch_process_unavailable"]
        assert len(said) == 1 and "exited (1) before its first message" in said[0]["reason"]
        assert metrics.registry.get_sample_value("keeper_fetch_process_unavailable") == 1
        assert_same_index(reference, h)
    finally:
        await reference.close()
        await h.close()


async def test_a_child_killed_mid_range_costs_one_retry(
    module_anvil: AnvilProcess, flows: Deployment, tmp_path: Path
) -> None:
    reference = await index(tmp_path, "ref", flows, module_anvil.url, fetch_process_blocks=0)
    cfg = through_child(tmp_path, "killed", flows, module_anvil.url, max_range=2)
    killer = KillFirstChild()
    h = Harness(cfg, listener=killer)
    killer.fetcher = h.indexer.remote
    try:
        await h.to_head()
        assert killer.killed is not None
        assert h.retries >= 1
        assert h.indexer.remote.started >= 2
        with pytest.raises(ProcessLookupError):
            os.kill(killer.killed, 0)  # reaped, not a zombie
        assert_same_index(reference, h)
    finally:
        await reference.close()
        await h.close()


class BatchSources(NullListener):
    """Which batches the fetch process sent: its pid while each one is committed."""

    def __init__(self, fetcher: ProcessFetcher) -> None:
        self.fetcher = fetcher
        self.pids: list[int | None] = []

    def on_batch(self, result: ApplyResult, events: Sequence[Event]) -> None:
        if events:
            self.pids.append(self.fetcher.pid)


def fetched_here_then_by_one_child(pids: Sequence[int | None]) -> int:
    """How many batches came from this process (pid None) before all the rest came from
    one child; fails unless the batches are in that shape."""
    here = pids.index(next(p for p in pids if p is not None))
    assert set(pids[:here]) <= {None}, pids
    assert len(set(pids[here:])) == 1 and None not in pids[here:], pids
    return here


async def sourced(
    tmp: Path, name: str, d: Deployment, url: str, least: int
) -> tuple[Harness, list[int | None]]:
    """An index that may hand the rest of its range over, and the pid behind each batch."""
    h = Harness(through_child(tmp, name, d, url, least=least, batch_events=300))
    sources = BatchSources(h.indexer.remote)
    h.indexing.listener = sources
    await h.to_head()
    return h, sources.pids


async def test_the_child_takes_over_where_the_rest_looks_large(
    module_anvil: AnvilProcess, flows: Deployment, tmp_path: Path
) -> None:
    """Once the batches fetched here predict a rest of 1,000 events (the dense blocks
    hold 240 each), one child fetches the rest. A threshold the rest cannot reach
    starts no child at all. Both indexes equal the in-process one."""
    url = module_anvil.url
    reference = await index(tmp_path, "ref", flows, url, fetch_process_blocks=0)
    handed, handed_pids = await sourced(tmp_path, "handed", flows, url, 1_000)
    kept, kept_pids = await sourced(tmp_path, "kept", flows, url, 10**9)
    try:
        # a prefix fetched here (the deployment blocks are nearly empty), then one child
        assert fetched_here_then_by_one_child(handed_pids) >= 1
        assert handed.indexer.remote.started == 1
        assert kept_pids and set(kept_pids) == {None}
        assert kept.indexer.remote.started == 0
        assert_same_index(reference, handed, kept)
    finally:
        for h in (reference, handed, kept):
            await h.close()


async def test_the_rest_is_judged_by_the_last_batch_too(
    module_anvil: AnvilProcess, flows: Deployment, tmp_path: Path
) -> None:
    """Scanned from block 0, the range opens with the deployment's blocks, quiet. Judged
    by all the blocks seen, the dense ones that follow predict a rest of a few thousand
    events; judged by the last batch, one dense block (240 events), of nearly nine
    thousand: the rest looks like holding 5,000 and the child is launched."""
    d = dataclasses.replace(flows, start_block=0)
    w3 = Web3(Web3.HTTPProvider(module_anvil.url))
    logs = w3.eth.get_logs({"address": Web3.to_checksum_address(flows.emitter), "fromBlock": 0})
    first = min(lg["blockNumber"] for lg in logs)
    assert first >= 10  # the empty prefix the estimate must not count
    h = Harness(through_child(tmp_path, "from0", d, module_anvil.url, least=5_000, max_range=1))
    try:
        with structlog.testing.capture_logs() as said:
            await h.to_head()
        assert h.indexer.remote.started == 1
        handed = [e for e in said if e["event"] == "fetch_process_handover"]
        assert all(e["events_seen"] < 5_000 for e in handed), handed
    finally:
        await h.close()


async def test_a_process_waiting_on_its_node_keeps_the_range(
    module_anvil: AnvilProcess, flows: Deployment, tmp_path: Path
) -> None:
    """Behind an endpoint that holds every request 100 ms, this process waits on the
    node, far from the default busy share: the rest of the range stays here (no child,
    and the log says why) and the index is the same; told to hand over however busy
    it is, the same range goes to a child."""
    reference = await index(tmp_path, "ref", flows, module_anvil.url, fetch_process_blocks=0)
    async with RpcProxy(module_anvil.url) as proxy:
        proxy.rules.latency = 0.1
        waiting = Harness(scan_only(tmp_path, "waiting", flows, proxy.url,
                                    fetch_process_blocks=1, fetch_process_events=1_000,
                                    batch_events=300))  # fmt: skip
        eager = Harness(through_child(tmp_path, "eager", flows, proxy.url, least=1_000,
                                      batch_events=300))  # fmt: skip
        try:
            with structlog.testing.capture_logs() as logs:
                await waiting.to_head()
            assert waiting.indexer.remote.started == 0
            said = [e for e in logs if e["event"] == "fetch_process_not_needed"]
            assert len(said) == 1 and said[0]["busy"] < 0.7, said
            await eager.to_head()
            assert eager.indexer.remote.started == 1
            assert_same_index(reference, waiting, eager)
        finally:
            for h in (reference, waiting, eager):
                await h.close()


# A child held at its interpreter's start until the test opens a gate: a site hook on
# the PYTHONPATH the children inherit (this process's import path is already set).
GATED_START = """
import pathlib, time
gate = pathlib.Path(__file__).with_name("open")
while not gate.exists():
    time.sleep(0.01)
"""


def gated_children(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Children started from now on wait at their start for the returned file to exist."""
    site = tmp / "gated-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(GATED_START)
    monkeypatch.setenv("PYTHONPATH", str(site))
    return site / "open"


def fetch_children() -> list[int]:
    """This process's fetch processes still alive."""
    found = []
    for pid in children(os.getpid()):
        with contextlib.suppress(OSError):
            if b"fetch_child" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
    return found


class Launches(NullListener):
    """The source of each batch (the fetch process's pid, None here), how many were
    committed here after the child was launched, and the gate opened after ``opens_after``
    of those (never when None)."""

    def __init__(self, fetcher: ProcessFetcher, gate: Path, opens_after: int | None) -> None:
        self.fetcher, self.gate, self.opens_after = fetcher, gate, opens_after
        self.pids: list[int | None] = []
        self.here_while_starting = 0

    def on_batch(self, result: ApplyResult, events: Sequence[Event]) -> None:
        self.pids.append(self.fetcher.pid)
        if self.fetcher.launched and self.fetcher.pid is None:
            self.here_while_starting += 1
            if self.here_while_starting == self.opens_after:
                self.gate.touch()


async def launched_index(
    tmp: Path, name: str, d: Deployment, url: str, gate: Path, opens_after: int | None
) -> tuple[Harness, Launches]:
    h = Harness(through_child(tmp, name, d, url, least=1_000, max_range=1))
    launches = Launches(h.indexer.remote, gate, opens_after)
    h.indexing.listener = launches
    await h.to_head()
    return h, launches


async def test_the_range_is_fetched_here_while_its_child_starts(
    module_anvil: AnvilProcess,
    flows: Deployment,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once the rest looks large the child is launched, and batches are still fetched
    and committed here until it has started; it then takes the rest. Its start held
    until three batches were committed meanwhile, and every request held 50 ms so that
    the range outlasts the start, the batches come from here, then all from one child."""
    reference = await index(tmp_path, "ref", flows, module_anvil.url, fetch_process_blocks=0)
    gate = gated_children(tmp_path, monkeypatch)
    async with RpcProxy(module_anvil.url) as proxy:
        proxy.rules.latency = 0.05
        h, launches = await launched_index(tmp_path, "gated", flows, proxy.url, gate, 3)
    try:
        assert launches.here_while_starting >= 3
        assert fetched_here_then_by_one_child(launches.pids) >= launches.here_while_starting
        assert h.indexer.remote.started == 1 and h.indexer.remote.pid is None
        assert fetch_children() == []
        assert_same_index(reference, h)
    finally:
        for harness in (reference, h):
            await harness.close()


async def test_a_child_still_starting_when_its_range_ends_here_is_stopped(
    module_anvil: AnvilProcess,
    flows: Deployment,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A child launched for a rest that this process then fetched whole before the child
    started (its start held for good) is killed and reaped with the range: nothing is
    left running, and the index is the in-process one."""
    reference = await index(tmp_path, "ref", flows, module_anvil.url, fetch_process_blocks=0)
    gate = gated_children(tmp_path, monkeypatch)
    h, launches = await launched_index(tmp_path, "never", flows, module_anvil.url, gate, None)
    try:
        assert h.indexer.remote.started == 1 and launches.here_while_starting >= 1
        assert set(launches.pids) == {None}
        assert not h.indexer.remote.launched and fetch_children() == []
        assert_same_index(reference, h)
    finally:
        await reference.close()
        await h.close()


async def test_a_launched_child_is_stopped_whether_or_not_it_has_started(
    module_anvil: AnvilProcess, flows: Deployment
) -> None:
    rpc = RpcClient([EndpointConfig("rpc0", module_anvil.url)])
    fetcher = ProcessFetcher(
        rpc, [flows.emitter], RangePolicy(), {flows.emitter: Protocol.ERC8183}, None, StampTrust()
    )
    try:
        fetcher.launch()
        await fetcher.discard()  # at once: still starting
        assert not fetcher.launched and fetch_children() == []
        fetcher.launch()
        for _ in range(300):
            if fetcher.ready:
                break
            await asyncio.sleep(0.05)
        assert fetcher.ready and len(fetch_children()) == 1
        await fetcher.discard()
        assert not fetcher.launched and fetch_children() == []
    finally:
        await rpc.close()


async def test_a_child_whose_parent_closes_its_pipe_before_its_range_exits_quietly() -> None:
    """A parent that stopped wanting the child it started ahead (or died) closes its end:
    the child, waiting for its range after saying it is ready, exits 0 without a word."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "keeper.sync.fetch_child",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    assert await asyncio.wait_for(proc.stdout.readexactly(4), 60) == bytes(4)  # ready
    proc.stdin.close()
    assert await asyncio.wait_for(proc.wait(), 60) == 0
    assert await proc.stderr.read() == b""


async def test_closing_the_scan_early_leaves_no_child(
    module_anvil: AnvilProcess, flows: Deployment
) -> None:
    rpc = RpcClient([EndpointConfig("rpc0", module_anvil.url)])
    policy = RangePolicy(size=1, minimum=1, maximum=1)
    fetcher = ProcessFetcher(
        rpc, [flows.emitter], policy, {flows.emitter: Protocol.ERC8183}, None, StampTrust()
    )
    head = Web3(Web3.HTTPProvider(module_anvil.url)).eth.block_number
    try:
        scan = fetcher.prefetched(flows.start_block, head, finalized=head, head=head)
        async with contextlib.aclosing(scan) as ranges:
            first = await anext(ranges)
            pid = fetcher.pid
        assert first.anchor.number == flows.start_block
        assert pid is not None and fetcher.pid is None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    finally:
        await rpc.close()


async def test_log_timestamps_a_child_found_wrong_are_believed_by_no_later_range(
    module_anvil: AnvilProcess, flows: Deployment, capfd: pytest.CaptureFixture[str]
) -> None:
    """The node's log timestamps a second off: the first child finds it and says so; the
    finding comes back with its messages, and the next child is told, so it reads every
    block's header from its first batch on and has nothing to find."""
    head = Web3(Web3.HTTPProvider(module_anvil.url)).eth.block_number
    address = flows.emitter
    stamps = StampTrust()
    with RpcProxy(module_anvil.url, rules=ProxyRules(log_stamps="skew")) as proxy:
        rpc = RpcClient([EndpointConfig("rpc0", proxy.url)])
        policy = RangePolicy(size=2, minimum=1, maximum=2)
        fetcher = ProcessFetcher(rpc, [address], policy, {address: Protocol.ERC8183}, None, stamps)
        try:
            for _ in range(2):
                scan = fetcher.prefetched(flows.start_block, head, finalized=head, head=head)
                async with contextlib.aclosing(scan) as ranges:
                    events = [e async for batch in ranges for e in batch.events]
                numbers = sorted({e.log.block_number for e in events})
                times = {h.number: h.timestamp for h in await rpc.get_blocks(numbers) if h}
                assert all(e.block_timestamp == times[e.log.block_number] for e in events)
                assert not stamps.trusted
        finally:
            await rpc.close()
    _, err = capfd.readouterr()
    assert err.count("log_timestamps_disagree") == 1, err[-2000:]


async def test_a_failing_endpoint_raises_here_without_its_secret(
    capfd: pytest.CaptureFixture[str],
) -> None:
    secret = "sk-live-0123456789abcdef"
    url = f"http://127.0.0.1:9/{secret}"
    register_rpc_url(url)
    rpc = RpcClient([EndpointConfig("rpc0", url)], max_attempts=2, deadline=2.0, retry_initial=0.01)
    address = "0x" + "44" * 20
    fetcher = ProcessFetcher(
        rpc, [address], RangePolicy(), {address: Protocol.ERC8183}, None, StampTrust()
    )
    with pytest.raises(Exception) as caught:
        async with contextlib.aclosing(fetcher.prefetched(1, 100, finalized=100, head=100)) as r:
            async for _ in r:
                pass
    assert "rpc0" in str(caught.value), caught.value  # the endpoint, by its name
    assert secret not in str(caught.value) and secret not in repr(caught.value)
    assert fetcher.started == 1 and fetcher.pid is None
    out, err = capfd.readouterr()
    assert secret not in out and secret not in err


class NeedsTwoArguments(Exception):
    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"{code}: {text}")


def test_an_exception_that_cannot_travel_becomes_a_retryable_one_naming_it() -> None:
    kept = RetryableError("node lagging")
    assert portable(kept) is kept
    # the RPC errors travel as themselves: the daemon branches on their class
    rpc_error = RangeTooLargeError(
        RpcFailure("range_too_large", "limited to 10000", max_span=10_000),
        method="eth_getLogs", endpoint="rpc0", attempts=3,
    )  # fmt: skip
    assert portable(rpc_error) is rpc_error
    back = pickle.loads(pickle.dumps(rpc_error))
    assert type(back) is RangeTooLargeError and str(back) == str(rpc_error)
    assert back.failure == rpc_error.failure and back.attempts == 3
    moved = portable(NeedsTwoArguments(7, "odd"))
    assert isinstance(moved, RetryableError)
    assert "NeedsTwoArguments" in str(moved) and "7: odd" in str(moved)


class Calls:
    """An RPC observer that keeps what it was told."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str]] = []
        self.backoffs = 0

    def on_request(self, endpoint: str, method: str, outcome: str, seconds: float) -> None:
        self.requests.append((endpoint, method, outcome))

    def on_backoff(self, endpoint: str, seconds: float) -> None:
        self.backoffs += 1


async def test_calls_held_up_by_a_failing_endpoint_are_reported_while_it_retries() -> None:
    # nothing listens on port 9: every attempt fails at once, and the client keeps trying
    # for a minute, so the child's first batch (or its error) is far off
    calls = Calls()
    rpc = RpcClient([EndpointConfig("rpc0", "http://127.0.0.1:9")], max_attempts=10_000,
                    deadline=60.0, retry_initial=0.05, retry_max=0.2, backoff_cap=0.2,
                    observer=calls)  # fmt: skip
    address = "0x" + "44" * 20
    fetcher = ProcessFetcher(
        rpc, [address], RangePolicy(), {address: Protocol.ERC8183}, None, StampTrust()
    )
    scan = fetcher.prefetched(1, 100, finalized=100, head=100)
    first = asyncio.ensure_future(anext(scan))
    try:
        for _ in range(100):  # the child starts in about a second, then reports each second
            if calls.requests:
                break
            await asyncio.sleep(0.1)
        assert calls.requests, "no call of the child reached this process while it retried"
        assert not first.done()  # no batch, no error: the report came on its own
        assert set(calls.requests) == {("rpc0", "eth_getLogs", "transient")}, calls.requests
        assert calls.backoffs >= 1
        assert rpc.health()[0].failures >= 1  # the child's view of the endpoint, here too
    finally:
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first
        await scan.aclose()
        await rpc.close()
    assert fetcher.pid is None
