"""GitHubEval re-run: read what the checks need from GitHub, then decide (``github_checks``).

Reads, in order, the repository (its default branch), the pull request, the
check runs and combined status of the PR's last commit, and the issue when
the job names one. The first read that GitHub cannot answer now (rate limit,
timeout, server error) makes the verdict ``unavailable``, which the
verifier retries; a repository GitHub does not show (deleted, or private to
the token) makes it ``not_reproducible``.
"""

from __future__ import annotations

from urllib.parse import quote

from keeper.verify import github_checks as gh
from keeper.verify.canonical import JsonValue
from keeper.verify.failures import Failure, FailureCode
from keeper.verify.github_api import GitHubClient, NotFound, Unavailable
from keeper.verify.github_checks import Target

__all__ = ["Target", "read_facts", "rerun"]

MAX_PAGES = 10  # 1000 check runs or statuses on one commit is already far beyond any CI


class _Stop(Exception):
    def __init__(self, failure: Failure) -> None:
        self.failure = failure


async def rerun(client: GitHubClient, target: Target, verdict_time: int | None) -> list[Failure]:
    """The verdict's failures against GitHub now (none when the re-run agrees)."""
    try:
        facts = await read_facts(client, target)
    except _Stop as stop:
        return [stop.failure]
    return gh.compare(target.esito, gh.evaluate(target.block, facts), verdict_time)


async def read_facts(client: GitHubClient, target: Target) -> gh.Facts:
    repo = f"/repos/{quote(target.owner, safe='')}/{quote(target.name, safe='')}"
    repository = await _get(client, repo)
    if isinstance(repository, NotFound):
        raise _Stop(
            Failure(
                FailureCode.NOT_REPRODUCIBLE,
                "/esito",
                f"GitHub shows no repository {target.owner}/{target.name} (deleted or private)",
                check="repo",
            )
        )
    default_branch = repository.get("default_branch") if isinstance(repository, dict) else None
    raw_pull = await _get(client, f"{repo}/pulls/{target.number}")
    if isinstance(raw_pull, NotFound):
        return gh.Facts(str(default_branch or ""), None, (), None)
    pull = gh.parse_pull(raw_pull)
    checks: tuple[gh.Check, ...] = ()
    if target.block.get("ci", True) is not False and pull.head_sha:
        commit = f"{repo}/commits/{quote(pull.head_sha, safe='')}"
        runs = await _pages(client, f"{commit}/check-runs", "check_runs")
        statuses = await _pages(client, f"{commit}/status", "statuses")
        checks = gh.parse_checks(runs, statuses)
    issue: gh.Issue | None = None
    number = target.block.get("issue")
    if isinstance(number, int) and not isinstance(number, bool):
        raw_issue = await _get(client, f"{repo}/issues/{number}")
        issue = None if isinstance(raw_issue, NotFound) else gh.parse_issue(raw_issue)
    return gh.Facts(str(default_branch or ""), pull, checks, issue)


async def _get(client: GitHubClient, path: str) -> JsonValue | NotFound:
    answer = await client.get(path)
    if isinstance(answer, Unavailable):
        raise _Stop(Failure(FailureCode.UNAVAILABLE, "/esito", answer.reason, check="github"))
    return answer


async def _pages(client: GitHubClient, path: str, key: str) -> list[JsonValue]:
    """Every item of a paginated list (``per_page=100``), up to ``MAX_PAGES`` pages."""
    items: list[JsonValue] = []
    for page in range(1, MAX_PAGES + 1):
        answer = await _get(client, f"{path}?per_page=100&page={page}")
        if isinstance(answer, NotFound) or not isinstance(answer, dict):
            break
        chunk = answer.get(key)
        if not isinstance(chunk, list):
            break
        items.extend(chunk)
        total = answer.get("total_count")
        if len(chunk) < 100 or (isinstance(total, int) and len(items) >= total):
            break
    return items
