"""A fault-injecting JSON-RPC proxy in front of a real node, for tests.

It forwards to an upstream (an anvil node) and, per method, injects the
failures real providers produce: 429s with Retry-After, timeouts, garbage,
truncated or wrong-id bodies, ``null`` results, provider error strings, range
refusals with suggested ranges, a lagging head, empty log lists, log entries
whose ``blockTimestamp`` is missing or wrong, calls at the head answered from
the next block's state, and a
``sendRawTransaction`` that is forwarded but whose reply is lost.

Faults are budgets ("the next N calls") so tests are deterministic; the one
probabilistic knob (``flaky``) uses a seeded RNG. Everything injected is
counted in ``stats``; every call received is recorded in ``calls``.

Runs its own event loop in a thread, so it serves sync tests
(``with RpcProxy(url) as proxy``) and async ones (``async with``) alike.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
from collections import Counter
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import aiohttp
from aiohttp import web

ALCHEMY_RANGE = (
    "Log response size exceeded. You can make eth_getLogs requests with up to a 2K block range "
    "and no limit on the response size, or you can request any block range with a cap of 10K "
    "logs in the response. Based on your parameters, this block range should work: [{lo}, {hi}]"
)
RANGE_STYLES = ("alchemy", "infura", "reth", "quicknode", "geth", "bare")

# Transaction-pool refusals as real clients word them: (JSON-RPC code, message).
POOL_ERRORS: dict[str, dict[str, tuple[int, str]]] = {
    "nonce_too_low": {
        "geth": (
            -32000,
            "nonce too low: address 0x0000000000000000000000000000000000000001, tx: 0 state: 1",
        ),
        "anvil": (-32003, "nonce too low"),
        "besu": (-32001, "Nonce too low"),
        "nethermind": (-32010, "OldNonce, Current nonce: 1, nonce of rejected tx: 0"),
    },
    "already_known": {
        "geth": (-32000, "already known"),
        "anvil": (-32003, "transaction already imported"),
        "besu": (-32000, "Known transaction"),
        "nethermind": (-32010, "AlreadyKnown"),
    },
    "underpriced": {
        "geth": (-32000, "replacement transaction underpriced"),
        "anvil": (-32003, "replacement transaction underpriced"),
        "besu": (-32000, "Replacement transaction underpriced"),
        "nethermind": (-32010, "ReplacementNotAllowed"),
    },
}


HUGE = hex(2**64 - 1)


@dataclass
class MethodRule:
    """Faults for one method (or ``"batch"`` for whole-batch faults).

    Each count is a budget consumed by the next matching calls.
    """

    rate_limit: int = 0
    retry_after: float | None = None
    timeout: int = 0
    delay: float = 5.0
    garbage: int = 0
    truncate: int = 0
    deep: int = 0  # a body of 200,000 '[': deeper than any JSON parser recurses
    wrong_id: int = 0
    null_result: int = 0
    http_error: int = 0
    http_status: int = 503
    error: int = 0
    error_code: int = -32000
    error_message: str = "header not found"
    # ``error`` only for calls to this address (an eth_call's ``to``): which of the calls
    # comes first is the scheduler's choice, which of them fails must not be
    to: str | None = None
    drop_reply: int = 0
    drop_mode: str = "close"  # "close": forward, then cut the connection; "timeout": hang
    empty_logs: int = 0
    # calls at a numbered block answered from the next block's state, as a node
    # does for its head block while it builds the next one (anvil under mining)
    ahead: int = 0
    flaky: float = 0.0  # probability of an HTTP 503, drawn from the seeded RNG
    # a quantity past any 64-bit integer (a uint64 at its top): the result's own, or a
    # header's timestamp, a receipt's block
    huge_quantity: int = 0
    # an object result gets ``patch``'s keys set over its own (a malformed field, say);
    # any other result is replaced by ``patch`` (only calls to ``to``, when it is set).
    # A callable ``patch`` is given the call's params and its result, and returns the answer
    patched: int = 0
    patch: Any = None


@dataclass
class ProxyRules:
    """All fault settings; mutate freely from the test while the proxy runs."""

    methods: dict[str, MethodRule] = field(default_factory=dict)
    max_log_range: int | None = None
    range_style: str = "alchemy"
    lag: int = 0
    # seconds every HTTP request waits before it is served: a remote endpoint's round trip
    latency: float = 0.0
    # getLogs entries' blockTimestamp: "strip" (a node before execution-apis#639),
    # "zero" (a gateway leaving it at 0x0), "skew" (one second off its header's),
    # "first" (each answer's entries timed as its first, but the last block asked's)
    log_stamps: str = ""
    seed: int = 1234

    def on(self, method: str, **settings: Any) -> MethodRule:
        """Set faults for ``method`` (merging with existing ones) and return its rule."""
        rule = self.methods.setdefault(method, MethodRule())
        for key, value in settings.items():
            if not hasattr(rule, key):
                raise AttributeError(f"MethodRule has no setting {key!r}")
            setattr(rule, key, value)
        return rule

    def reject_tx(self, kind: str, *, client: str = "geth", count: int = 1) -> MethodRule:
        """Answer the next ``count`` broadcasts with a pool refusal worded like ``client``."""
        code, message = POOL_ERRORS[kind][client]
        return self.on(
            "eth_sendRawTransaction", error=count, error_code=code, error_message=message
        )

    def clear(self) -> None:
        self.methods.clear()
        self.max_log_range = None
        self.lag = 0


@dataclass(frozen=True)
class _Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"


def _aimed_at(rule: MethodRule | None, params: Any) -> bool:
    """Whether a call is one its rule's ``error`` (or ``patched``) faults: every call, or
    those to ``rule.to``."""
    if rule is None or rule.to is None:
        return True
    first = params[0] if isinstance(params, list) and params else None
    return isinstance(first, dict) and str(first.get("to", "")).lower() == rule.to.lower()


def _restamp(logs: Any, how: str, to_block: Any) -> None:
    """Rewrite each getLogs entry's ``blockTimestamp`` as ``ProxyRules.log_stamps`` says.

    ``first`` times every entry as the answer's first one, but those of the block asked
    up to (``to_block``): wrong on the blocks between only, in chain time's order."""
    entries = logs if isinstance(logs, list) else []
    for entry in entries:
        if how == "strip":
            entry.pop("blockTimestamp", None)
        elif how == "zero":
            entry["blockTimestamp"] = "0x0"
        elif how == "skew":
            entry["blockTimestamp"] = hex(int(entry["blockTimestamp"], 16) + 1)
        elif how == "first":
            if not _numbered(to_block) or int(entry["blockNumber"], 16) != int(to_block, 16):
                entry["blockTimestamp"] = entries[0]["blockTimestamp"]
        else:
            raise ValueError(f"log_stamps: {how!r} is not strip, zero, skew or first")


def _numbered(tag: Any) -> bool:
    return isinstance(tag, str) and tag.startswith("0x")


class _Drop(Exception):
    """Abort the connection without a reply."""


class RpcProxy:
    """The proxy. ``url`` is where clients connect; ``rules``, ``stats``, ``calls`` are live."""

    def __init__(self, upstream: str, *, rules: ProxyRules | None = None) -> None:
        self.upstream = upstream
        self.rules = rules or ProxyRules()
        self.stats: Counter[tuple[str, str]] = Counter()
        self.calls: list[tuple[str, Any]] = []
        self._rng = random.Random(self.rules.seed)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._port = 0
        self._error: BaseException | None = None

    # --- lifecycle -------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> RpcProxy:
        self._thread = threading.Thread(target=self._run, name="rpc-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise TimeoutError("rpc proxy did not start")
        if self._error is not None:
            raise RuntimeError("rpc proxy failed to start") from self._error
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(10)
        self._thread = None

    def __enter__(self) -> RpcProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> RpcProxy:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # surfaced to start()
            self._error = exc
            self._ready.set()
        finally:
            # Handlers still sleeping (injected timeouts) must not outlive the loop.
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        server = getattr(site, "_server", None)
        assert server is not None and server.sockets
        self._port = int(server.sockets[0].getsockname()[1])
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await self._session.close()
            await runner.cleanup()

    # --- bookkeeping -----------------------------------------------------------

    def _take(self, method: str, budget: str) -> bool:
        """Consume one unit of ``budget`` for ``method``; True if a fault is due."""
        with self._lock:
            rule = self.rules.methods.get(method)
            if rule is None or getattr(rule, budget) <= 0:
                return False
            setattr(rule, budget, getattr(rule, budget) - 1)
            self.stats[(method, budget)] += 1
            return True

    def _flaky(self, method: str) -> bool:
        with self._lock:
            rule = self.rules.methods.get(method)
            if rule is None or rule.flaky <= 0 or self._rng.random() >= rule.flaky:
                return False
            self.stats[(method, "flaky")] += 1
            return True

    def count(self, kind: str, method: str | None = None) -> int:
        """How many faults of ``kind`` were injected (for ``method``, or in total)."""
        with self._lock:
            return sum(n for (m, k), n in self.stats.items() if k == kind and method in (None, m))

    def requests_for(self, method: str) -> list[Any]:
        """The params of every call of ``method`` received, in order."""
        with self._lock:
            return [params for m, params in self.calls if m == method]

    # --- serving ---------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return web.Response(status=400, text="bad json")
        label = "batch" if isinstance(body, list) else str(body.get("method"))
        with self._lock:  # recorded on arrival, so calls that later time out still count
            self.stats[(label, "received")] += 1  # HTTP requests: what faults are drawn per
            for item in body if isinstance(body, list) else [body]:
                if isinstance(item, dict):
                    self.calls.append((str(item.get("method")), item.get("params") or []))
        try:
            if self.rules.latency:
                await asyncio.sleep(self.rules.latency)
            reply = await self._body_faults(label)
            if reply is None:
                if isinstance(body, list):
                    items = await asyncio.gather(*(self._one(item) for item in body))
                    payload: Any = [i for i in items if i is not None]
                else:
                    payload = await self._one(body)
                reply = await self._after_faults(label, payload)
        except _Drop:
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError from None
        return web.Response(
            status=reply.status,
            body=reply.body,
            headers=reply.headers,
            content_type=reply.content_type,
        )

    async def _body_faults(self, method: str) -> _Reply | None:
        """Faults decided before forwarding: 429, HTTP errors, timeouts."""
        rule = self.rules.methods.get(method)
        if self._take(method, "rate_limit"):
            headers = {}
            if rule is not None and rule.retry_after is not None:
                headers["Retry-After"] = str(rule.retry_after)
            error = {"code": 429, "message": "Too Many Requests"}
            body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
            return _Reply(status=429, body=body, headers=headers)
        if self._take(method, "http_error") or self._flaky(method):
            status = rule.http_status if rule is not None else 503
            page = b"<html>upstream trouble</html>"
            return _Reply(status=status, body=page, content_type="text/html")
        if self._take(method, "timeout"):
            await asyncio.sleep(rule.delay if rule is not None else 5.0)
        return None

    async def _after_faults(self, method: str, payload: Any) -> _Reply:
        """Faults applied to a real reply: lost, garbage, truncated."""
        body = json.dumps(payload).encode()
        if self._take(method, "drop_reply"):
            rule = self.rules.methods.get(method)
            if rule is not None and rule.drop_mode == "timeout":
                await asyncio.sleep(rule.delay)
            raise _Drop
        if self._take(method, "garbage"):
            return _Reply(body=b"<html><body>502 Bad Gateway</body></html>")
        if self._take(method, "truncate"):
            return _Reply(body=body[: max(1, len(body) // 2)])
        if self._take(method, "deep"):
            return _Reply(body=b"[" * 200_000)
        return _Reply(body=body)

    async def _one(self, item: Any) -> dict[str, Any] | None:
        """Serve one JSON-RPC request object, with item-level faults."""
        if not isinstance(item, dict):
            return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "invalid"}}
        method = str(item.get("method"))
        params = item.get("params") or []
        rid = item.get("id")

        def error(code: int, message: str) -> dict[str, Any]:
            return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}

        rule = self.rules.methods.get(method)
        if _aimed_at(rule, params) and self._take(method, "error"):
            assert rule is not None
            return error(rule.error_code, rule.error_message)
        head: int | None = None
        if self.rules.lag:
            head = max(0, await self._upstream_head() - self.rules.lag)
            params, refused = self._lagged(method, params, head)
            if refused:
                with self._lock:
                    self.stats[(method, "lag")] += 1
                if method == "eth_getBlockByNumber":  # a node answers null for a future block
                    return {"jsonrpc": "2.0", "id": rid, "result": None}
                return error(-32000, "header not found")
        if method == "eth_getLogs" and self.rules.max_log_range is not None:
            refusal = await self._range_refusal(params)
            if refusal is not None:
                with self._lock:
                    self.stats[(method, "range_too_large")] += 1
                return error(*refusal)
        at = params[1] if method == "eth_call" and len(params) > 1 else None
        if _numbered(at) and self._take(method, "ahead"):
            params = [params[0], hex(int(params[1], 16) + 1), *params[2:]]
        reply = await self._forward({**item, "params": params})
        if head is not None and method == "eth_blockNumber" and "result" in reply:
            reply["result"] = hex(head)
        if "result" in reply:
            if method == "eth_getLogs" and self.rules.log_stamps:
                to_block = params[0].get("toBlock") if params else None
                _restamp(reply["result"], self.rules.log_stamps, to_block)
            if isinstance(reply["result"], dict) and self._take(method, "huge_quantity"):
                for key in ("timestamp", "blockNumber"):  # a header's, a receipt's
                    if key in reply["result"]:
                        reply["result"][key] = HUGE
            elif _numbered(reply["result"]) and self._take(method, "huge_quantity"):
                reply["result"] = HUGE  # a quantity's: a count, a gas estimate
            if _aimed_at(rule, params) and self._take(method, "patched"):
                assert rule is not None
                if callable(rule.patch):
                    reply["result"] = rule.patch(params, reply["result"])
                elif isinstance(reply["result"], dict) and isinstance(rule.patch, dict):
                    reply["result"].update(rule.patch)
                else:
                    reply["result"] = rule.patch
            if method == "eth_getLogs" and reply["result"] and self._take(method, "empty_logs"):
                reply["result"] = []
            elif self._take(method, "null_result"):
                reply["result"] = None
        if self._take(method, "wrong_id"):
            reply["id"] = (rid if isinstance(rid, int) else 0) + 1000
        return reply

    def _lagged(self, method: str, params: list[Any], head: int) -> tuple[list[Any], bool]:
        """Rewrite ``latest`` to the lagged head; refuse blocks the lagging node lacks."""
        out = ["latest" if p == "pending" else p for p in params]
        out = [hex(head) if p == "latest" else p for p in out]
        first = out[0] if out else None
        future = isinstance(first, str) and first.startswith("0x") and int(first, 16) > head
        if method == "eth_getBlockByNumber" and future:
            return out, True
        if method == "eth_getLogs" and out and isinstance(out[0], dict):
            flt = dict(out[0])
            for key in ("fromBlock", "toBlock"):
                value = flt.get(key, "latest")
                if value == "latest":
                    flt[key] = hex(head)
                elif isinstance(value, str) and value.startswith("0x") and int(value, 16) > head:
                    return out, True
            if "blockHash" in flt:
                flt.pop("fromBlock", None)
                flt.pop("toBlock", None)
            out[0] = flt
        return out, False

    async def _range_refusal(self, params: list[Any]) -> tuple[int, str] | None:
        limit = self.rules.max_log_range
        if limit is None or not params or not isinstance(params[0], dict):
            return None
        flt = params[0]
        if "blockHash" in flt:
            return None
        head: int | None = None

        async def num(value: Any) -> int:
            nonlocal head
            if isinstance(value, str) and value.startswith("0x"):
                return int(value, 16)
            if head is None:
                head = await self._upstream_head()
            return head

        lo = await num(flt.get("fromBlock", "latest"))
        hi = await num(flt.get("toBlock", "latest"))
        if hi - lo + 1 <= limit:
            return None
        s_lo, s_hi = lo, lo + limit - 1
        style = self.rules.range_style
        if style == "alchemy":
            return -32602, ALCHEMY_RANGE.format(lo=hex(s_lo), hi=hex(s_hi))
        if style == "infura":
            return (
                -32005,
                f"query returned more than 10000 results. "
                f"Try with this block range [{hex(s_lo)}, {hex(s_hi)}].",
            )
        if style == "reth":
            return -32602, f"query exceeds max results 20000, retry with the range {s_lo}-{s_hi}"
        if style == "quicknode":
            return -32602, f"eth_getLogs is limited to a {limit:,} range"
        if style == "geth":
            return -32000, f"exceed maximum block range: {limit}"
        return -32000, "block range too large"

    async def _upstream_head(self) -> int:
        reply = await self._forward(
            {"jsonrpc": "2.0", "id": 0, "method": "eth_blockNumber", "params": []}
        )
        return int(reply["result"], 16)

    async def _forward(self, item: dict[str, Any]) -> dict[str, Any]:
        async with self._session.post(self.upstream, json=item) as resp:
            reply: dict[str, Any] = await resp.json(content_type=None)
        with self._lock:
            self.stats[(str(item.get("method")), "forwarded")] += 1
        return reply
