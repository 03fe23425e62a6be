"""The GitHub client against a real local server: ETag cache, rate limits, limits, token."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from github_server import TOKEN, GitHubServer, github  # noqa: F401 -- fixture

from keeper.config import GitHubConfig
from keeper.errors import ConfigError
from keeper.verify.failures import FailureCode
from keeper.verify.github_api import GitHubClient, NotFound, Unavailable, read_token
from keeper.verify.github_checks import Target
from keeper.verify.github_rerun import rerun

REPO = "/repos/acme/shop"


def _client(server: GitHubServer, **kw: object) -> GitHubClient:
    return GitHubClient(server.url, TOKEN, **kw)  # type: ignore[arg-type]


async def test_conditional_requests_are_served_from_the_cache(
    github: GitHubServer,  # noqa: F811
) -> None:
    """The second read sends If-None-Match, gets a 304 (not counted) and the cached answer."""
    github.repo("acme/shop", default_branch="trunk")
    client = _client(github)
    first = await client.get(REPO)
    remaining = github.remaining
    second = await client.get(REPO)
    assert first == second and isinstance(second, dict) and second["default_branch"] == "trunk"
    assert [(s.status, s.conditional) for s in github.seen] == [(200, False), (304, True)]
    assert github.remaining == remaining  # a 304 costs nothing
    github.repo("acme/shop", default_branch="main")  # changed: a new ETag, a full answer
    third = await client.get(REPO)
    assert isinstance(third, dict) and third["default_branch"] == "main"
    assert github.seen[-1].status == 200 and all(s.authorized for s in github.seen)


async def test_secondary_rate_limit_blocks_until_retry_after(
    github: GitHubServer,  # noqa: F811
) -> None:
    """A 403 secondary limit is unavailable with its wait; nothing is asked until it passes."""
    github.repo("acme/shop")
    github.refusals, github.retry_after = 1, 30
    now = [1000.0]
    client = _client(github, clock=lambda: now[0])
    refused = await client.get(REPO)
    assert isinstance(refused, Unavailable) and refused.retry_after == 30
    assert "rate limit" in refused.reason
    blocked = await client.get(REPO)
    assert isinstance(blocked, Unavailable) and len(github.seen) == 1
    now[0] += 31
    assert isinstance(await client.get(REPO), dict) and len(github.seen) == 2


async def test_secondary_limit_without_retry_after_waits_a_minute(
    github: GitHubServer,  # noqa: F811
) -> None:
    github.repo("acme/shop")
    github.refusals, github.retry_after = 1, 0
    now = [1000.0]
    client = _client(github, clock=lambda: now[0])
    refused = await client.get(REPO)
    assert isinstance(refused, Unavailable) and refused.retry_after == 60


async def test_exhausted_primary_limit_waits_for_the_reset(
    github: GitHubServer,  # noqa: F811
) -> None:
    """An answer saying X-RateLimit-Remaining: 0 stops requests until X-RateLimit-Reset."""
    github.repo("acme/shop")
    github.remaining = 0
    github.reset = int(time.time()) + 120
    client = _client(github)
    assert isinstance(await client.get(REPO), dict)
    blocked = await client.get(f"{REPO}/pulls/1")
    assert isinstance(blocked, Unavailable) and blocked.retry_after is not None
    assert 100 < blocked.retry_after <= 121 and len(github.seen) == 1


@pytest.mark.parametrize("wait", [10**400, 10**9, -5], ids=["past a float", "years", "negative"])
@pytest.mark.parametrize("header", ["Retry-After", "X-RateLimit-Reset"])
async def test_a_wait_past_the_hour_is_an_hour(
    github: GitHubServer,  # noqa: F811
    header: str,
    wait: int,
) -> None:
    """A rate-limit header asking for more than GitHub's hour-long window (or a number no
    float holds, which raised OverflowError) blocks for an hour at most."""
    github.repo("acme/shop")
    now = [1000.0]
    client = _client(github, clock=lambda: now[0])
    github.refusals = 1
    if header == "Retry-After":
        github.retry_after = wait
    else:
        github.retry_after, github.remaining, github.reset = 0, 0, wait
    refused = await client.get(REPO)
    assert isinstance(refused, Unavailable) and refused.retry_after is not None
    assert 0 <= refused.retry_after <= 3600
    now[0] += 3601
    assert isinstance(await client.get(REPO), dict) and len(github.seen) == 2


async def test_refusals_missing_and_oversized(github: GitHubServer) -> None:  # noqa: F811
    github.repo("acme/shop")
    github.pull("acme/shop", 7, author="x", body="y" * 5000)
    client = _client(github, max_bytes=2048)
    assert await client.get("/repos/acme/gone") == NotFound("/repos/acme/gone")
    too_big = await client.get(f"{REPO}/pulls/7")
    assert isinstance(too_big, Unavailable) and "exceeds 2048 bytes" in too_big.reason
    github.redirects["/repos/acme/old"] = "http://example.invalid/repos/acme/shop"
    moved = await client.get("/repos/acme/old")
    assert isinstance(moved, Unavailable) and "off the configured host" in moved.reason
    github.redirects["/repos/acme/odd"] = "http://[::1/repos"
    odd = await client.get("/repos/acme/odd")
    assert odd == Unavailable("GitHub redirect to 'http://[::1/repos': not a URL")
    github.redirects["/repos/acme/renamed"] = github.url + REPO
    assert isinstance(await client.get("/repos/acme/renamed"), dict)
    assert TOKEN not in repr(client)


@pytest.mark.parametrize(
    "body",
    [b"{not json", b'{"id": ' + b"9" * 5000 + b"}", b"[" * 100_000, b'{"a": "\xff"}'],
    ids=["syntax", "integer past int()'s 4,300 digits", "nesting", "not UTF-8"],
)
async def test_an_answer_that_is_not_json_is_unavailable(
    github: GitHubServer,  # noqa: F811
    body: bytes,
) -> None:
    """Whatever the body, the answer is Unavailable with the reason, never an exception."""
    github.bodies[REPO] = body
    answer = await _client(github, max_bytes=1 << 20).get(REPO)
    assert answer == Unavailable("answer is not JSON")


def test_token_by_reference(tmp_path: Path) -> None:
    """The token comes from the named env var or file; errors name the reference only."""
    assert read_token(GitHubConfig(), {}) is None
    assert read_token(GitHubConfig(token_env="GH"), {"GH": f" {TOKEN}\n"}) == TOKEN
    with pytest.raises(ConfigError, match=r"\$GH is not set"):
        read_token(GitHubConfig(token_env="GH"), {})
    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\n")
    assert read_token(GitHubConfig(token_file=str(secret)), {}) == TOKEN
    with pytest.raises(ConfigError, match="cannot read") as missing:
        read_token(GitHubConfig(token_file=str(tmp_path / "none")), {})
    assert TOKEN not in str(missing.value)


async def test_rerun_reads_what_the_checks_need(github: GitHubServer) -> None:  # noqa: F811
    """The re-run reads repo, pull, check runs, status and issue; a hidden repo is undecidable."""
    github.repo("acme/shop", default_branch="trunk")
    github.pull("acme/shop", 9, author="dev", base="trunk", merged_at=100, body="closes #3")
    github.check_run("a" * 40, "test", "success", 90)
    github.status("a" * 40, "lint", "success", 95)
    github.issue("acme/shop", 3, closed_at=101, updated_at=101)
    block = {"repo": "acme/shop", "issue": 3, "ci": ["test", "lint"]}
    client = _client(github)
    assert await rerun(client, Target("acme", "shop", 9, block, "complete"), 1000) == []
    paths = sorted({s.path for s in github.seen})
    assert paths == [
        "/repos/acme/shop",
        "/repos/acme/shop/commits/" + "a" * 40 + "/check-runs",
        "/repos/acme/shop/commits/" + "a" * 40 + "/status",
        "/repos/acme/shop/issues/3",
        "/repos/acme/shop/pulls/9",
    ]
    hidden = await rerun(
        client, Target("acme", "secret", 1, {"repo": "acme/secret"}, "complete"), 0
    )
    assert [(f.code, f.check) for f in hidden] == [(FailureCode.NOT_REPRODUCIBLE, "repo")]
    github.refusals = 1
    limited = await rerun(_client(github), Target("acme", "shop", 9, block, "complete"), 1000)
    assert [(f.code, f.check) for f in limited] == [(FailureCode.UNAVAILABLE, "github")]
