"""The status page's pictures while the real daemon indexes a devnet, checked against the chain.

Traffic runs on anvil, the daemon (``run_daemon``, as ``keeper run`` starts it)
indexes, keeps and serves; Chromium loads the page again and again meanwhile.
Every load must show one consistent snapshot: the commerce escrow's locked line
ends at the amount the chain itself held in funded and submitted jobs at the
block the page says it was read at, and once the daemon has read MockUSDC's
``decimals()``/``symbol()`` that amount is shown in USDC beside base units.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.devnet_timing import FAST
from web3 import Web3

from keeper.config import load_config
from keeper.daemon import run_daemon
from keeper.devnet.anvil import DEV_KEYS, free_port
from keeper.devnet.contracts import load_abi
from keeper.devnet.deploy import Deployment
from keeper.devnet.runner import KEEPER_KEY_ENV, run_devnet

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "api"))
from cdp import Page, browser_page, chromium_path
from test_api_browser import artifacts_dir

CHROMIUM = chromium_path()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
HOLDING = (1, 2)  # Funded, Submitted
LOADS = 12


def held_on_chain(rpc_url: str, commerce: str, block: int) -> int:
    """What the commerce escrow held at ``block``: funded and submitted jobs' budgets."""
    w3 = Web3(Web3.HTTPProvider(rpc_url))
    c = w3.eth.contract(address=Web3.to_checksum_address(commerce), abi=load_abi("AgenticCommerce"))
    jobs = c.functions.jobCounter().call(block_identifier=block)
    total = 0
    for j in range(1, jobs + 1):
        job = c.functions.getJob(j).call(block_identifier=block)
        if job[7] in HOLDING:
            total += int(job[5])
    return total


async def read_page(page: Page, url: str, commerce: str) -> dict[str, Any]:
    await page.goto(url)
    found: dict[str, Any] = await page.evaluate(
        "(() => { const b = document.getElementById('pictures-block');"
        f" const f = document.querySelector('figure[data-contract=\"{commerce}\"]');"
        " return {block: b && Number(b.textContent),"
        " points: f ? [...f.querySelectorAll('circle.point')]"
        ".map(c => c.getAttribute('data-value')) : [],"
        " now: f && f.querySelector('.locked-now').textContent,"
        " base: f && f.querySelector('.locked-now').getAttribute('data-base'),"
        " bars: document.querySelectorAll('rect.bar').length}; })()"
    )  # fmt: skip
    return found


async def dump_tasks_after(seconds: float) -> None:
    """After ``seconds``, print the stack of every task of the loop (pytest shows it on a
    failure): a daemon that stops making progress is then seen waiting where it waits."""
    # a loop blocked in a synchronous call never runs this task: every thread's stack is
    # then printed by faulthandler's own thread, a few seconds later (a fresh-clone run under
    # load saw indexing stop for two minutes and no task stacks printed)
    faulthandler.dump_traceback_later(seconds + 5, file=sys.stderr)
    try:
        await asyncio.sleep(seconds)
    finally:
        faulthandler.cancel_dump_traceback_later()
    print_tasks()


def print_tasks() -> None:
    """Every task of the loop and where it waits, on stdout (shown with a failure)."""
    for task in asyncio.all_tasks():
        print(f"--- task {task.get_name()}: {task.get_coro()}", flush=True)
        task.print_stack(file=sys.stdout)


class Watch:
    """Page loads until a condition holds, within a deadline, while the daemon still runs:
    a daemon that ended, or a page that never showed what was waited for, fails at once
    naming the step, the time it took and what the page showed last."""

    def __init__(self, page: Page, url: str, commerce: str, daemon: asyncio.Task[int]) -> None:
        self.page, self.url, self.commerce, self.daemon = page, url, commerce, daemon
        self.started = time.monotonic()
        self.last: dict[str, Any] | str = "no page loaded yet"

    def _alive(self, step: str) -> None:
        if self.daemon.done():
            ended = "cancelled" if self.daemon.cancelled() else (
                self.daemon.exception() or f"exit {self.daemon.result()}"
            )  # fmt: skip
            raise AssertionError(f"{step}: the daemon ended ({ended!r}); last page: {self.last}")

    async def load(self, step: str) -> dict[str, Any]:
        self._alive(step)
        snap = await read_page(self.page, self.url, self.commerce)
        self.last = snap
        return snap

    async def until(
        self, step: str, done: Callable[[dict[str, Any]], bool], within: float, pause: float
    ) -> dict[str, Any]:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            try:
                snap = await self.load(step)
            except (RuntimeError, TimeoutError) as exc:  # not served yet, or a slow load
                self.last = f"{type(exc).__name__}: {exc}"
            else:
                if done(snap):
                    return snap
            await asyncio.sleep(pause)
        self._alive(step)
        elapsed = time.monotonic() - self.started
        raise AssertionError(f"{step}: not seen within {within} s ({elapsed:.0f} s in); "
                             f"last page: {self.last}")  # fmt: skip


class TestStatusPageWhileIndexing:
    async def test_pictures_match_the_chain_at_their_block(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv(KEEPER_KEY_ENV, DEV_KEYS[4])
        port = free_port()
        seen: list[dict[str, Any]] = []
        checks: dict[str, Any] = {}

        async def daemon(config_path: Path) -> None:
            cfg = load_config(config_path)
            rpc = cfg.chain.rpc_urls[0]
            d = Deployment(**json.loads((config_path.parent / "deployment.json").read_text()))
            commerce = d.commerce
            running = asyncio.create_task(run_daemon(str(config_path)))
            # a run that overstays prints where every task waits, so a failure says why
            dumper = asyncio.create_task(dump_tasks_after(120))
            try:
                assert CHROMIUM is not None
                async with browser_page(CHROMIUM, tmp_path / "profile") as page:
                    url = f"http://127.0.0.1:{port}/?range=hour"
                    watch = Watch(page, url, commerce, running)
                    # the API comes up once the chain id is checked, the pictures once the
                    # escrow's first funds are indexed
                    await watch.until(
                        "the first pictures",
                        lambda s: bool(s["block"]) and s["base"] is not None, 60, 0.1,
                    )  # fmt: skip
                    for _ in range(LOADS):
                        seen.append(await watch.load("the pictures while indexing"))
                        await asyncio.sleep(0.4)
                    # tokens are read every few seconds
                    last = await watch.until(
                        "the amount in USDC", lambda s: "USDC" in (s["now"] or ""), 40, 0.25
                    )
                    seen.append(last)
                    await page.screenshot(artifacts_dir() / "status-pictures-devnet.png")
                checks["held"] = [
                    await asyncio.to_thread(held_on_chain, rpc, commerce, s["block"]) for s in seen
                ]
            finally:
                dumper.cancel()
                running.cancel()
                # a daemon that does not end on its cancellation held the run here until
                # the test timed out, saying nothing: now its loops' stacks are printed
                stopped, _ = await asyncio.wait({running}, timeout=30)
                if not stopped:
                    print_tasks()
                    checks["not stopped"] = "the daemon did not end within 30 s of its cancellation"
                else:
                    with contextlib.suppress(asyncio.CancelledError):
                        await running

        await asyncio.wait_for(
            run_devnet(
                rpc_url=None,
                workdir=tmp_path,
                with_daemon=daemon,
                self_keep=False,
                timing=FAST,
                api_listen=f"127.0.0.1:{port}",
            ),
            timeout=150,
        )
        assert "not stopped" not in checks, checks["not stopped"]
        assert len(seen) == LOADS + 1
        blocks = [s["block"] for s in seen]
        assert blocks == sorted(blocks) and blocks[-1] > blocks[0], blocks  # it kept indexing
        for snap, held in zip(seen, checks["held"], strict=True):
            points = [int(v) for v in snap["points"]]
            assert len(points) == 61  # an hour in minutes, both edges
            assert points[-1] == int(snap["base"]) == held, (snap["block"], points[-1], held)
            assert min(points) >= 0
        last = seen[-1]
        held = checks["held"][-1]
        whole, frac = divmod(held, 10**6)
        units = f"{whole:,}" + (f".{frac:06d}".rstrip("0") if frac else "")
        assert last["now"] == f"{units} USDC ({held} base units)"
        assert last["bars"] > 0  # keeper actions and verdicts were drawn too
