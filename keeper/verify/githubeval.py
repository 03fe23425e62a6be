"""The part of GitHubEval that can be checked offline, and the target of the online part.

GitHubEval's first two steps need no GitHub: the content hashes to the
on-chain deliverable, and the delivered pull request (a link, or ``{"pr": link}``)
is in the job's repository. Either failing means "will never check out", so
the evaluator must have rejected. Author, branch, merge state, issue and CI
need GitHub's API (``github_rerun``, when ``[verdicts.github]`` is
configured): without it a verdict that survives the offline steps is
reported as ``not_reproducible``, never as a pass.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from keeper.verify.canonical import JsonValue, keccak_hex
from keeper.verify.failures import Failure, FailureCode
from keeper.verify.github_checks import Target

# GitHub's own rules: owners are alphanumerics and single inner hyphens (<= 39),
# repository names letters, digits, '.', '_' and '-' (<= 100).
_OWNER = r"[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}"
_NAME = r"[A-Za-z0-9._-]{1,100}"
_REPO = re.compile(rf"^(?P<owner>{_OWNER})/(?P<name>{_NAME})\Z")
_PR_URL = re.compile(
    rf"^https://github\.com/(?P<owner>{_OWNER})/(?P<name>{_NAME})/pull/(?P<number>[1-9][0-9]{{0,9}})/?\Z"
)
_AUTHOR = re.compile(rf"^{_OWNER}\Z")
MAX_CONTENT = 4096  # a PR link or {"pr": link}; anything longer is not a deliverable


def is_githubeval(description: JsonValue) -> bool:
    """A GitHubEval job description: ``{"brief": ..., "github": {...}}``."""
    return isinstance(description, dict) and "github" in description


def github_block_problem(block: JsonValue) -> str | None:
    """Why the description's ``github`` block is malformed, or None when it is well-formed."""
    if not isinstance(block, dict):
        return "github is not an object"
    repo = block.get("repo")
    if not isinstance(repo, str) or not _REPO.match(repo) or repo.endswith((".", "/..")):
        return "github.repo is not owner/name"
    issue = block.get("issue")
    if issue is not None and (isinstance(issue, bool) or not isinstance(issue, int) or issue < 1):
        return "github.issue is not a positive integer"
    author = block.get("author")
    if author is not None and (not isinstance(author, str) or not _AUTHOR.match(author)):
        return "github.author is not a GitHub login"
    base = block.get("base")
    if base is not None and (not isinstance(base, str) or not base.strip()):
        return "github.base is not a branch name"
    ci = block.get("ci")
    ci_names = isinstance(ci, list) and all(isinstance(c, str) and c for c in ci)
    if ci is not None and not isinstance(ci, bool) and not ci_names:
        return "github.ci is neither a boolean nor a list of check names"
    return None


def pr_link(content: bytes) -> tuple[str, str, int] | None:
    """(owner, name, number) of the delivered PR, from a bare link or ``{"pr": link}``."""
    if len(content) > MAX_CONTENT:
        return None
    try:
        text = content.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):  # ValueError: JSONDecodeError among others
            return None
        link = parsed.get("pr") if isinstance(parsed, dict) else None
        if not isinstance(link, str):
            return None
        text = link.strip()
    match = _PR_URL.match(text)
    if match is None:
        return None
    return match["owner"], match["name"], int(match["number"])


def check(
    verdict: Mapping[str, JsonValue],
    description: Mapping[str, JsonValue],
    content: bytes,
    deliverable: str,
) -> list[Failure]:
    """Repeat GitHubEval's offline steps; a reject they force must be the verdict's esito."""
    why = _offline_rejection(description, content, deliverable)
    if why is None:
        return [
            Failure(
                FailureCode.NOT_REPRODUCIBLE,
                "/esito",
                "author, branch, merge, issue and CI need GitHub: configure [verdicts.github]",
            )
        ]
    esito = verdict.get("esito")
    if esito != "reject":
        return [
            Failure(
                FailureCode.EVALUATOR_DISAGREES, "/esito", f"must be reject ({why}), is {esito}"
            )
        ]
    return []


def online_target(
    verdict: Mapping[str, JsonValue],
    description: Mapping[str, JsonValue],
    content: bytes,
    deliverable: str,
) -> Target | None:
    """The PR to re-check on GitHub, or None when the offline steps already decide."""
    if _offline_rejection(description, content, deliverable) is not None:
        return None
    block = description["github"]
    pr = pr_link(content)
    assert isinstance(block, dict) and pr is not None  # the offline steps checked both
    return Target(pr[0], pr[1], pr[2], block, verdict.get("esito"))


def _offline_rejection(
    description: Mapping[str, JsonValue], content: bytes, deliverable: str
) -> str | None:
    if keccak_hex(content) != deliverable.lower():
        return "content does not hash to the on-chain deliverable"
    block = description.get("github")
    problem = github_block_problem(block)
    if problem is not None:
        return problem
    assert isinstance(block, dict)  # checked by github_block_problem
    pr = pr_link(content)
    if pr is None:
        return "deliverable is not a GitHub pull request link"
    repo = str(block["repo"])
    if f"{pr[0]}/{pr[1]}".lower() != repo.lower():
        return f"pull request is in {pr[0]}/{pr[1]}, not in {repo}"
    return None
