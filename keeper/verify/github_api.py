"""A small client for GitHub's REST API: bounded, conditional, and polite about rate limits.

GitHubEval re-runs read a handful of resources per verdict (the repository,
the pull request, its last commit's check runs and combined status, the
issue). Every GET is conditional: answers are cached with their ``ETag`` and
asked for again with ``If-None-Match``, so an unchanged resource costs a 304
that GitHub does not count against the rate limit. The rate-limit headers
are obeyed: a 403/429 with ``Retry-After``, with ``X-RateLimit-Remaining: 0``
(until ``X-RateLimit-Reset``), or naming a secondary rate limit, blocks every
request until the wait is over; while blocked the client answers
``Unavailable`` at once, without asking, and the verifier retries later.

Each exchange has a timeout and a byte limit enforced while streaming, as
for the other sources. Redirects (a renamed repository answers 301) are
followed by hand and only on the configured origin, so the token is never
sent elsewhere. Failures are values and carry no URL and never the token.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp

from keeper.config import GitHubConfig
from keeper.errors import ConfigError
from keeper.verify.canonical import JsonValue
from keeper.verify.sources import RedirectRefused, read_bounded, redirect_target

API_VERSION = "2022-11-28"
USER_AGENT = "escrow-keeper"
SECONDARY_LIMIT_WAIT = 60  # GitHub: "wait at least one minute" when no Retry-After is given
# GitHub's rate-limit window is an hour: a header asking for longer (a reset years away, a
# number past any float) is wrong, and would stop every GitHub read until a restart
MAX_LIMIT_WAIT = 3600
MAX_REDIRECTS = 3
CACHE_ENTRIES = 1024  # a few resources per verdict: enough for the verdicts of many hours
_REDIRECTS = frozenset({301, 302, 307, 308})
# what ``observe`` hears (the metric's outcome label): "blocked" was not sent at all
OUTCOMES = ("ok", "not_modified", "not_found", "rate_limited", "refused", "error", "blocked")


@dataclass(frozen=True, slots=True)
class NotFound:
    """404/410: the resource does not exist, or the token may not see it."""

    path: str


@dataclass(frozen=True, slots=True)
class Unavailable:
    """No answer to judge by now (rate limit, timeout, server error); retry later."""

    reason: str
    retry_after: int | None = None  # seconds, when GitHub said how long to wait


Answer = JsonValue | NotFound | Unavailable


def read_token(cfg: GitHubConfig, environ: Mapping[str, str]) -> str | None:
    """The token the configuration refers to; errors name the reference, never the value."""
    if cfg.token_env:
        token = environ.get(cfg.token_env, "").strip()
        if not token:
            raise ConfigError(f"verdicts.github.token_env: ${cfg.token_env} is not set")
        return token
    if cfg.token_file:
        try:
            token = Path(cfg.token_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"verdicts.github.token_file: cannot read {cfg.token_file} ({type(exc).__name__})"
            ) from None
        if not token:
            raise ConfigError(f"verdicts.github.token_file: {cfg.token_file} is empty")
        return token
    return None  # unauthenticated: 60 requests an hour, enough for a handful of verdicts


class GitHubClient:
    """GETs under ``api_url`` with ETag caching and rate-limit back-off (one per verifier)."""

    def __init__(
        self,
        api_url: str,
        token: str | None = None,
        *,
        timeout: float = 10.0,
        max_bytes: int = 1_048_576,
        cache_entries: int = CACHE_ENTRIES,
        clock: Callable[[], float] = time.time,
        observe: Callable[[str], None] | None = None,
    ) -> None:
        parts = urlsplit(api_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError("verdicts.github.api_url: needs an http(s) URL")
        self.api_url = api_url.rstrip("/")
        self._origin = (parts.scheme, parts.netloc.lower())
        self._token = token
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._cache: OrderedDict[str, tuple[str, JsonValue]] = OrderedDict()
        self._cache_entries = cache_entries
        self._clock = clock
        self.blocked_until = 0.0
        self.requests = 0  # requests actually sent (a blocked client sends none)
        self._observe = observe or (lambda outcome: None)  # one outcome per get (OUTCOMES)

    @classmethod
    def from_config(
        cls,
        cfg: GitHubConfig,
        environ: Mapping[str, str],
        observe: Callable[[str], None] | None = None,
    ) -> GitHubClient:
        return cls(
            cfg.api_url,
            read_token(cfg, environ),
            timeout=cfg.timeout,
            max_bytes=cfg.max_bytes,
            observe=observe,
        )

    def __repr__(self) -> str:  # the token stays out of every repr and traceback
        return f"GitHubClient({self.api_url!r})"

    async def get(self, path: str) -> Answer:
        """The JSON at ``path`` (e.g. ``/repos/o/r``), a 304 served from the cache."""
        wait = self.blocked_until - self._clock()
        if wait > 0:
            self._observe("blocked")
            return Unavailable(f"GitHub rate limit: waiting {int(wait) + 1} s", int(wait) + 1)
        self._outcome = "error"
        try:
            async with asyncio.timeout(self.timeout), aiohttp.ClientSession() as session:
                return await self._follow(session, path)
        except TimeoutError:
            return Unavailable(f"GitHub did not answer within {self.timeout} s")
        except aiohttp.ClientError as exc:
            return Unavailable(f"cannot reach GitHub ({type(exc).__name__})")
        finally:
            self._observe(self._outcome)

    def _headers(self, url: str) -> dict[str, str]:
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION,
            "User-Agent": USER_AGENT,
        }
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        cached = self._cache.get(url)
        if cached is not None:
            headers["If-None-Match"] = cached[0]
        return headers

    async def _follow(self, session: aiohttp.ClientSession, path: str) -> Answer:
        url = self.api_url + path
        for _ in range(MAX_REDIRECTS + 1):
            self.requests += 1
            async with session.get(url, headers=self._headers(url), allow_redirects=False) as resp:
                if resp.status in _REDIRECTS:
                    try:
                        url = redirect_target(url, resp.headers.get("Location", ""), self._origin)
                    except RedirectRefused as exc:
                        return Unavailable(f"GitHub redirect {exc}")
                    continue
                return await self._answer(resp, url, path)
        return Unavailable(f"more than {MAX_REDIRECTS} redirects")

    async def _answer(self, resp: aiohttp.ClientResponse, url: str, path: str) -> Answer:
        limited = self._note_limits(resp.status, resp.headers, await self._peek(resp))
        if limited is not None:
            self._outcome = "rate_limited" if limited.retry_after is not None else "refused"
            return limited
        if resp.status == 304:
            cached = self._cache.get(url)
            if cached is None:
                return Unavailable("HTTP 304 for a resource not in the cache")
            self._cache.move_to_end(url)
            self._outcome = "not_modified"
            return cached[1]
        if resp.status in (404, 410):
            self._outcome = "not_found"
            return NotFound(path)
        if resp.status != 200:
            return Unavailable(f"HTTP {resp.status}")
        body = await read_bounded(resp, self.max_bytes)
        if body is None:
            return Unavailable(f"answer exceeds {self.max_bytes} bytes")
        try:
            value: JsonValue = json.loads(body)
        # ValueError: a syntax error, bytes not UTF-8, or an integer past int()'s 4,300 digits
        except (ValueError, RecursionError):
            return Unavailable("answer is not JSON")
        etag = resp.headers.get("ETag")
        if etag:
            self._remember(url, etag, value)
        self._outcome = "ok"
        return value

    async def _peek(self, resp: aiohttp.ClientResponse) -> bytes:
        """The (small) body of a refusal, to tell a secondary rate limit from a plain 403."""
        if resp.status not in (403, 429):
            return b""
        return await resp.content.read(4096)

    def _note_limits(
        self, status: int, headers: Mapping[str, str], body: bytes
    ) -> Unavailable | None:
        now = self._clock()
        remaining = headers.get("X-RateLimit-Remaining")
        reset = _int(headers.get("X-RateLimit-Reset"))
        retry_after = _int(headers.get("Retry-After"))
        # int and float compare exactly, while converting a reset of 400 digits raises
        until = None if reset is None else float(min(reset, now + MAX_LIMIT_WAIT))
        if remaining == "0" and until is not None:
            # the next request would be refused: wait for the window to reset
            self.blocked_until = max(self.blocked_until, until)
        if status not in (403, 429):
            return None
        wait: int | None = None
        if retry_after is not None:
            wait = max(0, min(retry_after, MAX_LIMIT_WAIT))
        elif remaining == "0" and until is not None:
            wait = max(1, int(until - now))
        elif b"secondary rate limit" in body.lower() or status == 429:
            wait = SECONDARY_LIMIT_WAIT
        if wait is None:
            return Unavailable(f"HTTP {status}: GitHub refused the request (token or access)")
        self.blocked_until = max(self.blocked_until, now + wait)
        return Unavailable(f"GitHub rate limit (HTTP {status}): retry in {wait} s", wait)

    def _remember(self, url: str, etag: str, value: JsonValue) -> None:
        self._cache[url] = (etag, value)
        self._cache.move_to_end(url)
        while len(self._cache) > self._cache_entries:
            self._cache.popitem(last=False)


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None
