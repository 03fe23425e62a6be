"""A real HTTP server on 127.0.0.1 answering the GitHub REST shapes GitHubEval re-runs read.

It serves repositories, pull requests, check runs, combined statuses and
issues from plain dicts a test edits, with GitHub's conditional-request and
rate-limit behaviour: every answer carries an ``ETag`` and the
``X-RateLimit-*`` headers, ``If-None-Match`` with the current ETag gets a 304
(not counted), and ``refuse`` makes the next requests fail as GitHub's
secondary rate limit does (403, ``Retry-After``, the documented message).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from support.http_server import LoopbackServer

TOKEN = "ghp_test_token_never_logged_0123456789"


def iso(ts: int) -> str:
    import datetime as _dt

    return _dt.datetime.fromtimestamp(ts, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Seen:
    path: str
    status: int
    authorized: bool
    conditional: bool


@dataclass
class GitHubState:
    repos: dict[str, dict[str, Any]] = field(default_factory=dict)
    pulls: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    check_runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    statuses: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    issues: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)


class GitHubServer(LoopbackServer):
    def __init__(self) -> None:
        super().__init__()
        self.state = GitHubState()
        self.seen: list[Seen] = []
        self.refusals = 0  # answer this many next requests with a secondary rate limit
        self.retry_after = 1  # 0: no Retry-After header (GitHub then says "wait a minute")
        self.remaining = 4999
        self.reset = 0  # X-RateLimit-Reset (epoch seconds); 0: an hour from now
        self.redirects: dict[str, str] = {}  # path -> Location answered with a 301
        self.bodies: dict[str, bytes] = {}  # path -> a 200's body as is (not JSON, say)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v3"

    # ---- what a test sets up -------------------------------------------------------

    def repo(self, full: str, default_branch: str = "main") -> None:
        self.state.repos[full] = {"full_name": full, "default_branch": default_branch}

    def pull(
        self,
        full: str,
        number: int,
        *,
        author: str,
        base: str = "main",
        merged_at: int | None = None,
        closed_at: int | None = None,
        created_at: int = 1_700_000_000,
        updated_at: int | None = None,
        body: str = "",
        sha: str = "a" * 40,
    ) -> None:
        closed = closed_at if closed_at is not None else merged_at
        self.state.pulls[(full, number)] = {
            "number": number,
            "state": "closed" if closed is not None else "open",
            "title": f"PR {number}",
            "body": body,
            "user": {"login": author},
            "base": {"ref": base},
            "head": {"sha": sha},
            "merged": merged_at is not None,
            "merged_at": iso(merged_at) if merged_at is not None else None,
            "closed_at": iso(closed) if closed is not None else None,
            "created_at": iso(created_at),
            "updated_at": iso(updated_at or closed or created_at),
        }

    def check_run(self, sha: str, name: str, conclusion: str | None, at: int) -> None:
        self.state.check_runs.setdefault(sha, []).append(
            {
                "name": name,
                "status": "completed" if conclusion else "in_progress",
                "conclusion": conclusion,
                "started_at": iso(at - 30),
                "completed_at": iso(at) if conclusion else None,
            }
        )

    def status(self, sha: str, context: str, state: str, at: int) -> None:
        self.state.statuses.setdefault(sha, []).append(
            {"context": context, "state": state, "updated_at": iso(at)}
        )

    def issue(self, full: str, number: int, *, closed_at: int | None, updated_at: int) -> None:
        self.state.issues[(full, number)] = {
            "number": number,
            "state": "closed" if closed_at is not None else "open",
            "closed_at": iso(closed_at) if closed_at is not None else None,
            "updated_at": iso(updated_at),
        }

    def served(self, fragment: str) -> list[Seen]:
        return [s for s in self.seen if fragment in s.path]

    # ---- serving -------------------------------------------------------------------

    def _resource(self, parts: list[str]) -> Any:
        s = self.state
        if len(parts) < 3 or parts[0] != "repos":
            return None
        full = f"{parts[1]}/{parts[2]}"
        rest = parts[3:]
        if not rest:
            return s.repos.get(full)
        if full not in s.repos:
            return None
        if rest[0] == "pulls" and len(rest) == 2:
            return s.pulls.get((full, int(rest[1])))
        if rest[0] == "issues" and len(rest) == 2:
            return s.issues.get((full, int(rest[1])))
        if rest[0] == "commits" and len(rest) == 3 and rest[2] == "check-runs":
            runs = s.check_runs.get(rest[1], [])
            return {"total_count": len(runs), "check_runs": runs}
        if rest[0] == "commits" and len(rest) == 3 and rest[2] == "status":
            statuses = s.statuses.get(rest[1], [])
            failed = any(x["state"] in ("failure", "error") for x in statuses)
            pending = any(x["state"] == "pending" for x in statuses)
            combined = "failure" if failed else "pending" if pending else "success"
            return {"state": combined, "total_count": len(statuses), "statuses": statuses}
        return None

    async def _handle(self, request: web.Request) -> web.Response:
        authorized = request.headers.get("Authorization") == f"Bearer {TOKEN}"
        conditional = "If-None-Match" in request.headers
        path = request.path.removeprefix("/api/v3")
        reset = self.reset or int(time.time()) + 3600
        limits = {"X-RateLimit-Limit": "5000", "X-RateLimit-Reset": str(reset)}
        if path in self.redirects:
            self.seen.append(Seen(path, 301, authorized, conditional))
            return web.Response(status=301, headers={"Location": self.redirects[path]})
        if self.refusals > 0:
            self.refusals -= 1
            self.seen.append(Seen(path, 403, authorized, conditional))
            return web.json_response(
                {
                    "message": "You have exceeded a secondary rate limit. Please wait a few "
                    "minutes before you try again.",
                    "documentation_url": "https://docs.github.com/rest/overview/rate-limits",
                },
                status=403,
                headers={
                    **limits,
                    "X-RateLimit-Remaining": "0" if self.remaining == 0 else "4000",
                    **({"Retry-After": str(self.retry_after)} if self.retry_after else {}),
                },
            )
        if path in self.bodies:
            self.seen.append(Seen(path, 200, authorized, conditional))
            return web.Response(body=self.bodies[path], content_type="application/json")
        resource = self._resource([p for p in path.split("/") if p])
        if resource is None:
            self.seen.append(Seen(path, 404, authorized, conditional))
            return web.json_response({"message": "Not Found"}, status=404)
        body = json.dumps(resource, sort_keys=True).encode()
        etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
        headers = {**limits, "X-RateLimit-Remaining": str(self.remaining), "ETag": etag}
        if request.headers.get("If-None-Match") == etag:
            self.seen.append(Seen(path, 304, authorized, conditional))
            return web.Response(status=304, headers=headers)
        self.remaining -= 1
        self.seen.append(Seen(path, 200, authorized, conditional))
        return web.Response(body=body, content_type="application/json", headers=headers)


@pytest.fixture
async def github() -> AsyncIterator[GitHubServer]:
    server = GitHubServer()
    await server.start()
    yield server
    await server.stop()
