"""JSON-RPC over HTTP with endpoint choice, throttling, retries and response checks.

The one place in the daemon that retries. A call goes to the healthiest
endpoint (``health.rank``) through that endpoint's throttle; a failure is
classified (``keeper.domain.rpc_errors``), counted against the endpoint when
it is the endpoint's fault, and retried with tenacity only when the kind is
retryable. Deliberate answers (reverts, method not found, parse errors, pool
refusals, range refusals) are raised at once, as the matching ``RpcError``
subclass, for the caller to act on.

A garbage answer (non-JSON, truncated, wrong id, no result, a null where a
value is required, a result failing its validator) is a transient fault of
that endpoint, so the retry lands elsewhere when there is an elsewhere
(``keeper.rpc.replies`` reads and checks the replies).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

import aiohttp
from asyncio_throttle.throttler import Throttler
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)

from keeper.domain.rpc_errors import RpcFailure, classify, retryable
from keeper.obs.logging import get_logger
from keeper.rpc.config import EndpointConfig, scrub
from keeper.rpc.errors import AnswerTooLargeError, RpcError, error_for
from keeper.rpc.health import EndpointHealth, endpoint_fault, rank, seconds_until_available
from keeper.rpc.observer import NullObserver, RpcObserver
from keeper.rpc.replies import (
    BadReply,
    BodyScanner,
    Parser,
    error_member,
    item_result,
    read_capped,
    reply_result,
)

T = TypeVar("T")

log = get_logger(__name__)

# Providers cap batch sizes (commonly 100-1000 items); 100 is accepted everywhere we know.
DEFAULT_MAX_BATCH: Final = 100
# A reply bigger than this is a broken or hostile endpoint, not data we want in memory.
DEFAULT_MAX_BODY: Final = 256 * 1024 * 1024


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, RpcError) and retryable(exc.failure.kind)


class _Endpoint:
    """An endpoint's config, its health record and its throttle."""

    __slots__ = ("config", "health", "throttler")

    def __init__(self, config: EndpointConfig, index: int) -> None:
        self.config = config
        self.health = EndpointHealth(name=config.name, index=index)
        # asyncio-throttle counts whole requests per period; a fractional rate
        # (0.5/s) becomes one request per stretched period.
        limit = max(1, round(config.rate))
        self.throttler = Throttler(rate_limit=limit, period=config.period * limit / config.rate)


class _BatchIncomplete(Exception):
    """Some batch items failed retryably; raised to make tenacity run another round."""

    def __init__(self, last: RpcError) -> None:
        super().__init__(str(last))
        self.last = last


class JsonRpcTransport:
    """Endpoint pool plus the retrying ``request`` and ``batch`` primitives.

    ``timeout`` bounds one HTTP exchange; ``max_attempts`` and ``deadline``
    bound one logical call including its retries. ``clock`` is monotonic
    seconds, replaceable for tests of the waiting logic.
    """

    def __init__(
        self,
        endpoints: Sequence[EndpointConfig],
        *,
        timeout: float = 10.0,
        max_attempts: int = 5,
        deadline: float = 120.0,
        retry_initial: float = 0.1,
        retry_max: float = 10.0,
        backoff_base: float = 0.25,
        # an endpoint's backoff never exceeds this: with one endpoint it is how long a
        # brief outage can keep the keeper from acting, so seconds, not minutes
        backoff_cap: float = 10.0,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_body: int = DEFAULT_MAX_BODY,
        observer: RpcObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not endpoints:
            raise ValueError("at least one RPC endpoint is required")
        names = [e.name for e in endpoints]
        if len(set(names)) != len(names):
            raise ValueError("RPC endpoint names must be unique")
        if max_attempts < 1 or max_batch < 1:
            raise ValueError("max_attempts and max_batch must be at least 1")
        # what another process needs to build the same client (keeper.sync.fetch_process)
        self._settings: dict[str, Any] = {
            "endpoints": list(endpoints),
            "timeout": timeout,
            "max_attempts": max_attempts,
            "deadline": deadline,
            "retry_initial": retry_initial,
            "retry_max": retry_max,
            "backoff_base": backoff_base,
            "backoff_cap": backoff_cap,
            "max_batch": max_batch,
            "max_body": max_body,
        }
        self._endpoints = [_Endpoint(c, i) for i, c in enumerate(endpoints)]
        self._secrets = tuple(e.url for e in endpoints)
        self._timeout = timeout
        self._max_attempts = max_attempts
        self._deadline = deadline
        self._retry_initial = retry_initial
        self._retry_max = retry_max
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._max_batch = max_batch
        self._max_body = max_body
        self._observer: RpcObserver = observer or NullObserver()
        self._clock = clock
        self._ids = itertools.count(1)
        self._session: aiohttp.ClientSession | None = None
        self._exp_wait = wait_exponential_jitter(
            multiplier=retry_initial, max=retry_max, jitter=retry_initial
        )

    # --- lifecycle -------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        """The constructor's arguments but the observer and clock (they hold this
        process's metrics and time): another process builds the same client from them."""
        return dict(self._settings)

    @property
    def observer(self) -> RpcObserver:
        return self._observer

    @property
    def endpoint_names(self) -> list[str]:
        return [e.config.name for e in self._endpoints]

    def health(self) -> list[EndpointHealth]:
        """Copies of the endpoints' health records, in configured order."""
        return [dataclasses.replace(e.health) for e in self._endpoints]

    def adopt_health(self, records: Sequence[EndpointHealth]) -> None:
        """Take another client's health records of the same endpoints (by name), e.g.
        a fetch process's: what it learned about an endpoint holds here too."""
        by_name = {r.name: r for r in records}
        for e in self._endpoints:
            r = by_name.get(e.config.name)
            if r is not None:
                e.health.latency, e.health.failures = r.latency, r.failures
                e.health.backoff_until = r.backoff_until

    def _session_get(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout),
                headers={"content-type": "application/json"},
            )
        return self._session

    async def close(self) -> None:
        """Release the HTTP session; the transport may be used again afterwards."""
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    # --- endpoint choice and waiting -------------------------------------------

    def _pick(self) -> _Endpoint:
        best = rank([e.health for e in self._endpoints], self._clock())[0]
        return self._endpoints[best.index]

    async def _pick_when_ready(self) -> _Endpoint:
        """The best endpoint, after waiting out a backoff that covers every endpoint.

        This is what makes a Retry-After hold across calls, not only between
        the attempts of one call.
        """
        until = seconds_until_available([e.health for e in self._endpoints], self._clock())
        if until > 0:
            await asyncio.sleep(min(until, self._retry_max))
        return self._pick()

    def _wait(self, state: RetryCallState) -> float:
        """Fail over at once when an endpoint is ready, else wait for one (with jitter)."""
        until = seconds_until_available([e.health for e in self._endpoints], self._clock())
        if until == 0.0:
            return random.uniform(0, self._retry_initial / 2)
        return min(max(float(self._exp_wait(state)), until), self._retry_max)

    def _retrying(self, attempts: int | None = None) -> AsyncRetrying:
        budget = self._max_attempts if attempts is None else max(1, attempts)
        return AsyncRetrying(
            stop=stop_after_attempt(budget) | stop_after_delay(self._deadline),
            wait=self._wait,
            retry=retry_if_exception(lambda e: _is_retryable(e) or isinstance(e, _BatchIncomplete)),
            before_sleep=self._before_sleep,
            reraise=True,
        )

    @staticmethod
    def _before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, _BatchIncomplete):
            exc = exc.last
        if isinstance(exc, RpcError):
            log.warning(
                "rpc_retry",
                method=exc.method,
                endpoint=exc.endpoint,
                kind=exc.failure.kind,
                attempt=state.attempt_number,
                wait=round(state.upcoming_sleep, 3),
            )

    # --- outcome bookkeeping ---------------------------------------------------

    def _fail(self, ep: _Endpoint, method: str, failure: RpcFailure, started: float) -> RpcError:
        """Record a failed exchange and build its (URL-free) exception."""
        now = self._clock()
        elapsed = now - started
        failure = dataclasses.replace(failure, message=scrub(failure.message, self._secrets))
        if endpoint_fault(failure.kind):
            delay = ep.health.record_failure(
                failure.kind,
                now,
                retry_after=failure.retry_after,
                base=self._backoff_base,
                cap=self._backoff_cap,
                seconds=elapsed,
            )
            self._observer.on_backoff(ep.config.name, delay)
        else:
            ep.health.record_success(elapsed)
        self._observer.on_request(ep.config.name, method, failure.kind, elapsed)
        return error_for(failure, method=method, endpoint=ep.config.name)

    def _ok(self, ep: _Endpoint, method: str, started: float) -> None:
        elapsed = self._clock() - started
        ep.health.record_success(elapsed)
        self._observer.on_request(ep.config.name, method, "ok", elapsed)

    # --- one HTTP exchange -----------------------------------------------------

    async def _post(
        self, ep: _Endpoint, body: Any, method: str, max_body: int | None = None
    ) -> tuple[Any, float]:
        """POST one JSON-RPC body; returns (decoded JSON, start time) or raises RpcError."""
        raw, started = await self._exchange(ep, body, method, max_body)
        return self._decoded(ep, method, raw, started), started

    async def _exchange(
        self, ep: _Endpoint, body: Any, method: str, max_body: int | None = None
    ) -> tuple[bytes, float]:
        """POST one JSON-RPC body; returns (the 200 reply's bytes, start time) or raises.

        ``max_body`` is a caller's tighter bound on the reply: past it the reply
        is dropped unparsed and ``AnswerTooLargeError`` raised (no retry).
        """
        limit = self._max_body if max_body is None else min(max_body, self._max_body)
        session = self._session_get()
        async with ep.throttler:
            started = self._clock()
            try:
                async with session.post(ep.config.url, json=body) as resp:
                    status = resp.status
                    retry_after = resp.headers.get("Retry-After")
                    raw = await read_capped(resp, limit)
            except TimeoutError:
                failure = RpcFailure("timeout", f"no answer within {self._timeout}s")
                raise self._fail(ep, method, failure, started) from None
            except aiohttp.ClientError as exc:
                text = f"{type(exc).__name__}: {exc}"
                failure = classify(None, text)
                if failure.kind not in ("timeout", "transient"):
                    failure = RpcFailure("transient", failure.message)
                raise self._fail(ep, method, failure, started) from None
        if raw is None and limit < self._max_body:
            failure = RpcFailure("range_too_large", f"answer larger than {limit} bytes")
            err = self._fail(ep, method, failure, started)
            raise AnswerTooLargeError(err.failure, method=method, endpoint=err.endpoint)
        if raw is None:
            failure = RpcFailure("transient", f"reply larger than {self._max_body} bytes")
            raise self._fail(ep, method, failure, started)
        if status != 200:
            failure = classify(status, error_member(raw), retry_after_header=retry_after)
            raise self._fail(ep, method, failure, started)
        return raw, started

    def _decoded(self, ep: _Endpoint, method: str, raw: bytes, started: float) -> Any:
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: nested past the parser's limit
            failure = RpcFailure("transient", "reply body is not JSON (garbage or truncated)")
            raise self._fail(ep, method, failure, started) from None

    def _reply_value(
        self,
        ep: _Endpoint,
        method: str,
        reply: Any,
        expected_id: int,
        nullable: bool,
        parse: Parser[T] | None,
        started: float,
    ) -> Any:
        """One reply object's checked result; a bad reply counts against the endpoint."""
        try:
            return reply_result(reply, expected_id, nullable, parse)
        except BadReply as exc:
            raise self._fail(ep, method, exc.failure, started) from None

    # --- public primitives -----------------------------------------------------

    async def request(
        self,
        method: str,
        params: Sequence[Any] = (),
        *,
        nullable: bool = False,
        parse: Parser[T] | None = None,
        attempts: int | None = None,
        max_body: int | None = None,
        scan: BodyScanner[T] | None = None,
    ) -> Any:
        """Call ``method`` with retries and failover; returns the (parsed) result.

        ``nullable`` allows a ``null`` result (a block or receipt not found);
        ``parse`` validates and converts the result, and an ``InvalidResponse``
        from it counts as a garbage answer. ``attempts`` lowers the attempt
        budget for this call; ``max_body`` bounds the reply's bytes. ``scan``
        reads a reply's bytes straight to what ``parse`` would return, or answers
        None for the generic path (keeper.rpc.logs_reply).
        """
        tries = 0

        async def once() -> Any:
            nonlocal tries
            tries += 1
            ep = await self._pick_when_ready()
            return await self._request_once(ep, method, params, nullable, parse, max_body, scan)

        try:
            return await self._retrying(attempts)(once)
        except RpcError as exc:
            if tries > 1:
                raise error_for(
                    exc.failure, method=exc.method, endpoint=exc.endpoint, attempts=tries
                ) from exc
            raise

    async def request_at(
        self,
        endpoint: str,
        method: str,
        params: Sequence[Any] = (),
        *,
        nullable: bool = False,
        parse: Parser[T] | None = None,
    ) -> Any:
        """One attempt at one named endpoint: for probes that must not fail over."""
        for ep in self._endpoints:
            if ep.config.name == endpoint:
                return await self._request_once(ep, method, params, nullable, parse)
        raise KeyError(endpoint)

    async def _request_once(
        self,
        ep: _Endpoint,
        method: str,
        params: Sequence[Any],
        nullable: bool,
        parse: Parser[T] | None,
        max_body: int | None = None,
        scan: BodyScanner[T] | None = None,
    ) -> Any:
        rid = next(self._ids)
        body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": list(params)}
        raw, started = await self._exchange(ep, body, method, max_body)
        result = None if scan is None else scan(raw, rid)
        if result is None:
            reply = self._decoded(ep, method, raw, started)
            result = self._reply_value(ep, method, reply, rid, nullable, parse, started)
        self._ok(ep, method, started)
        return result

    async def batch(
        self,
        calls: Sequence[tuple[str, Sequence[Any]]],
        *,
        nullable: bool = True,
        parse: Parser[Any] | None = None,
        parse_each: Sequence[Parser[Any] | None] | None = None,
    ) -> list[Any]:
        """Send calls as JSON-RPC batches; one result or ``RpcError`` per call, in order.

        Items that fail retryably (or are missing from the reply) are sent again
        in the next round, possibly to another endpoint; items with deliberate
        errors keep their error. Large lists are split into ``max_batch`` chunks
        sent concurrently (each still throttled). ``parse_each`` gives one
        parser per call, overriding ``parse``.
        """
        if parse_each is not None and len(parse_each) != len(calls):
            raise ValueError("parse_each must have one entry per call")
        parsers = list(parse_each) if parse_each is not None else [parse] * len(calls)
        chunks = [
            list(range(i, min(i + self._max_batch, len(calls))))
            for i in range(0, len(calls), self._max_batch)
        ]
        results: list[Any] = [None] * len(calls)
        await asyncio.gather(
            *(self._batch_chunk(calls, idxs, results, nullable, parsers) for idxs in chunks)
        )
        return results

    async def _batch_chunk(
        self,
        calls: Sequence[tuple[str, Sequence[Any]]],
        indices: list[int],
        results: list[Any],
        nullable: bool,
        parsers: Sequence[Parser[Any] | None],
    ) -> None:
        pending = list(indices)

        async def round_() -> None:
            nonlocal pending
            pending = await self._batch_round(calls, pending, results, nullable, parsers)
            if pending:
                raise _BatchIncomplete(results[pending[0]])

        try:
            await self._retrying()(round_)
        except _BatchIncomplete:
            pass  # the still-failing items keep their last error in ``results``
        except RpcError as exc:
            for i in pending:
                results[i] = exc

    async def _batch_round(
        self,
        calls: Sequence[tuple[str, Sequence[Any]]],
        pending: list[int],
        results: list[Any],
        nullable: bool,
        parsers: Sequence[Parser[Any] | None],
    ) -> list[int]:
        """One batch exchange; fills ``results`` and returns the indices to retry."""
        ep = await self._pick_when_ready()
        ids = {next(self._ids): i for i in pending}
        body = [
            {"jsonrpc": "2.0", "id": rid, "method": calls[i][0], "params": list(calls[i][1])}
            for rid, i in ids.items()
        ]
        try:
            reply, started = await self._post(ep, body, "batch")
            if isinstance(reply, Mapping) and reply.get("error") is not None:
                # Some providers answer a whole batch with one error (rate limit, too big).
                err = reply["error"]
                raise self._fail(
                    ep,
                    "batch",
                    classify(200, err if isinstance(err, Mapping) else str(err)),
                    started,
                )
            if not isinstance(reply, list):
                raise self._fail(
                    ep, "batch", RpcFailure("transient", "batch reply is not a list"), started
                )
        except RpcError as exc:
            for i in pending:
                results[i] = exc
            if retryable(exc.failure.kind):
                return pending
            return []
        by_id = {r.get("id"): r for r in reply if isinstance(r, Mapping)}
        retry: list[int] = []
        fault: RpcFailure | None = None  # the first failure that is the endpoint's fault
        for rid, i in ids.items():
            method = calls[i][0]
            try:
                item = by_id.get(rid)
                if item is None:
                    raise error_for(
                        RpcFailure("transient", "batch reply lacks this item"),
                        method=method,
                        endpoint=ep.config.name,
                    )
                results[i] = self._item_value(ep, method, item, nullable, parsers[i])
            except RpcError as exc:
                results[i] = exc
                if retryable(exc.failure.kind):
                    retry.append(i)
                if fault is None and endpoint_fault(exc.failure.kind):
                    fault = exc.failure
        if fault is not None:
            self._fail(ep, "batch", fault, started)
        else:
            self._ok(ep, "batch", started)
        return retry

    def _item_value(
        self,
        ep: _Endpoint,
        method: str,
        item: Mapping[str, Any],
        nullable: bool,
        parse: Parser[Any] | None,
    ) -> Any:
        """A batch item's value, or raise its error; health is recorded per batch, not per item."""
        try:
            return item_result(item, nullable, parse)
        except BadReply as exc:
            failure = dataclasses.replace(
                exc.failure, message=scrub(exc.failure.message, self._secrets)
            )
            raise error_for(failure, method=method, endpoint=ep.config.name) from None
