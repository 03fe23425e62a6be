"""Where verdict documents and deliverable contents come from: configured places only.

A URL or path is never taken from chain data or from a document: templates
are fixed in the configuration and only the placeholders ``{jobId}``,
``{contract}``, ``{chainId}``, ``{reason}`` and ``{hash}`` are filled, with
values validated as decimal or hex so they cannot steer a request elsewhere.
The host of an HTTP template cannot contain a placeholder, and redirects are
followed by hand, at most a few and only on the configured origin.

Every fetch is bounded: a timeout over the whole exchange (redirects
included) and a byte limit enforced while streaming, so a 50 MB answer costs
at most ``max_bytes`` of memory and is cut as soon as it crosses the limit.
Failures are values (``SourceFailure``), never exceptions, and never carry the
URL: templates may embed access tokens.
"""

from __future__ import annotations

import asyncio
import re
import string
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol
from urllib.parse import quote, urljoin, urlsplit

import aiohttp

from keeper.domain.text import shown
from keeper.errors import ConfigError

PLACEHOLDERS = frozenset({"jobId", "contract", "chainId", "reason", "hash"})
DEFAULT_MAX_BYTES = 1 << 20
DEFAULT_TIMEOUT = 10.0  # seconds for the whole exchange; evaluator APIs answer in well under 1 s
MAX_REDIRECTS = 3  # enough for http->https or a trailing-slash hop, too few for a loop to cost
_CHUNK = 64 * 1024
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_HEX = re.compile(r"^0x[0-9a-f]*\Z")


@dataclass(frozen=True, slots=True)
class FetchContext:
    """The values placeholders may take, validated so that none can alter a URL or a path."""

    chain_id: int
    contract: str
    job_id: int | str  # an ERC-8183 job number, or a task id (0x hex) for task markets
    reason: str = ""
    hash: str = ""

    def __post_init__(self) -> None:
        for name in ("contract", "reason", "hash"):
            value = getattr(self, name)
            if value and not _HEX.match(value):
                raise ValueError(f"{name} must be lowercase 0x hex")
        if isinstance(self.job_id, str) and not _HEX.match(self.job_id):
            raise ValueError("a task id must be lowercase 0x hex")
        if (isinstance(self.job_id, int) and self.job_id < 0) or self.chain_id < 0:
            raise ValueError("job id and chain id are non-negative")

    def values(self) -> dict[str, str]:
        return {
            "jobId": str(self.job_id),
            "contract": self.contract,
            "chainId": str(self.chain_id),
            "reason": self.reason,
            "hash": self.hash,
        }


class Problem(StrEnum):
    NOT_FOUND = "not_found"
    TIMEOUT = "timeout"
    TOO_LARGE = "too_large"
    HTTP_ERROR = "http_error"
    REDIRECT_REFUSED = "redirect_refused"
    CONNECTION = "connection"


@dataclass(frozen=True, slots=True)
class Fetched:
    """A body from one source; the document sits at ``pointer`` inside it ("" = the body is it)."""

    body: bytes
    pointer: str
    source: str


@dataclass(frozen=True, slots=True)
class SourceFailure:
    source: str
    problem: Problem
    detail: str = ""


class Source(Protocol):
    @property
    def label(self) -> str: ...

    async def fetch(self, ctx: FetchContext) -> Fetched | SourceFailure: ...


def template_fields(template: str) -> set[str]:
    """Placeholder names used by a template; unknown names are a configuration error."""
    names = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    unknown = names - PLACEHOLDERS
    if unknown:
        raise ConfigError(f"unknown placeholder(s) {sorted(unknown)} in a source template")
    return names


class HttpSource:
    """GET a templated URL; the verdict is at ``pointer`` in the JSON response ("" = whole body)."""

    def __init__(
        self,
        url_template: str,
        pointer: str = "",
        timeout: float = DEFAULT_TIMEOUT,
        max_bytes: int = DEFAULT_MAX_BYTES,
        *,
        max_redirects: int = MAX_REDIRECTS,
    ) -> None:
        template_fields(url_template)
        parts = urlsplit(url_template)
        if parts.scheme not in ("http", "https") or not parts.netloc or "{" in parts.netloc:
            raise ConfigError("an http source needs an http(s) URL with a fixed host")
        if pointer and not pointer.startswith("/"):
            raise ConfigError("a source pointer is empty or starts with '/'")
        self.url_template = url_template
        self.pointer = pointer
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.max_redirects = max_redirects
        self._origin = (parts.scheme, parts.netloc.lower())
        self._label = f"http:{parts.hostname}"

    @property
    def label(self) -> str:
        return self._label

    def url_for(self, ctx: FetchContext) -> str:
        values = {k: quote(v, safe="") for k, v in ctx.values().items()}
        return self.url_template.format_map(values)

    async def fetch(self, ctx: FetchContext) -> Fetched | SourceFailure:
        try:
            async with asyncio.timeout(self.timeout), aiohttp.ClientSession() as session:
                return await self._follow(session, self.url_for(ctx))
        except TimeoutError:
            return self._fail(Problem.TIMEOUT, f"no complete answer within {self.timeout}s")
        except aiohttp.ClientError as exc:
            return self._fail(Problem.CONNECTION, type(exc).__name__)

    async def _follow(self, session: aiohttp.ClientSession, url: str) -> Fetched | SourceFailure:
        for _ in range(self.max_redirects + 1):
            async with session.get(url, allow_redirects=False) as resp:
                if resp.status in _REDIRECT_STATUSES:
                    try:
                        url = redirect_target(url, resp.headers.get("Location", ""), self._origin)
                    except RedirectRefused as exc:
                        return self._fail(Problem.REDIRECT_REFUSED, f"redirect {exc}")
                    continue
                if resp.status in (404, 410):
                    return self._fail(Problem.NOT_FOUND, f"HTTP {resp.status}")
                if resp.status != 200:
                    return self._fail(Problem.HTTP_ERROR, f"HTTP {resp.status}")
                body = await read_bounded(resp, self.max_bytes)
                if body is None:
                    return self._fail(Problem.TOO_LARGE, f"body exceeds {self.max_bytes} bytes")
                return Fetched(body, self.pointer, self._label)
        return self._fail(Problem.REDIRECT_REFUSED, f"more than {self.max_redirects} redirects")

    def _fail(self, problem: Problem, detail: str) -> SourceFailure:
        return SourceFailure(self._label, problem, detail)


class ContentSource(HttpSource):
    """An HTTP source of raw deliverable content, usually addressed by ``{hash}``."""

    def __init__(
        self,
        url_template: str,
        timeout: float = DEFAULT_TIMEOUT,
        max_bytes: int = DEFAULT_MAX_BYTES,
        *,
        max_redirects: int = MAX_REDIRECTS,
    ) -> None:
        super().__init__(url_template, "", timeout, max_bytes, max_redirects=max_redirects)


VERDICT_FILE_NAMES = ("{reason}.json", "{jobId}.json")
CONTENT_FILE_NAMES = ("{hash}",)


class DirectorySource:
    """Files in a local directory, tried by name pattern in order.

    Verdicts are looked up as ``<reason>.json`` first (content-addressed: the
    on-chain reason names exactly one document, whatever the contract or
    chain), then ``<jobId>.json`` (convenient for one contract). Deliverable
    contents are named by their hash. Names are built only from validated
    placeholders, so no lookup can leave the directory.
    """

    def __init__(
        self,
        path: str | Path,
        names: tuple[str, ...] = VERDICT_FILE_NAMES,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        for name in names:
            template_fields(name)
            if "/" in name or "\\" in name:
                raise ConfigError("directory source file names cannot contain a path separator")
        self.path = Path(path)
        self.names = names
        self.max_bytes = max_bytes
        self._label = f"directory:{self.path.name}"

    @property
    def label(self) -> str:
        return self._label

    async def fetch(self, ctx: FetchContext) -> Fetched | SourceFailure:
        return await asyncio.to_thread(self._read, ctx)

    def _read(self, ctx: FetchContext) -> Fetched | SourceFailure:
        values = ctx.values()
        for pattern in self.names:
            used = template_fields(pattern)
            if any(not values[name] for name in used):
                continue
            candidate = self.path / pattern.format_map(values)
            try:
                if candidate.stat().st_size > self.max_bytes:
                    return SourceFailure(self._label, Problem.TOO_LARGE, candidate.name)
                with candidate.open("rb") as handle:
                    body = handle.read(self.max_bytes + 1)
            except FileNotFoundError:
                continue
            except OSError as exc:
                return SourceFailure(self._label, Problem.CONNECTION, type(exc).__name__)
            if len(body) > self.max_bytes:  # grew between stat and read
                return SourceFailure(self._label, Problem.TOO_LARGE, candidate.name)
            return Fetched(body, "", self._label)
        return SourceFailure(self._label, Problem.NOT_FOUND, "no file for this job")


class RedirectRefused(Exception):
    """A redirect not followed; the message says where it went (after "redirect")."""


def redirect_target(url: str, location: str, origin: tuple[str, str]) -> str:
    """Where a redirect from ``url`` goes when it stays on ``origin`` (scheme, host), or
    RedirectRefused: another origin could be anyone's, and a Location that is no URL
    (``http://[::1``) makes urljoin raise ValueError."""
    try:
        target = urljoin(url, location)
        parts = urlsplit(target)
    except ValueError:
        raise RedirectRefused(f"to {shown(location)}: not a URL") from None
    if (parts.scheme, parts.netloc.lower()) != origin:
        raise RedirectRefused("off the configured host")
    return target


async def read_bounded(resp: aiohttp.ClientResponse, max_bytes: int) -> bytes | None:
    """The body, or None as soon as it is known to exceed ``max_bytes``.

    A declared length over the limit is refused unread; a chunked body is
    abandoned at the first chunk past it, so memory stays bounded either way.
    """
    if resp.content_length is not None and resp.content_length > max_bytes:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(_CHUNK):
        size += len(chunk)
        if size > max_bytes:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
