"""GitHubEval's online checks and their comparison with a verdict: pure, given GitHub's answers.

The catalog's steps after the offline ones, in order: the PR is by the job's
``author`` and into its ``base`` (default: the repository's default branch),
it is merged, it closes the job's ``issue`` (``closes|fixes|resolves #N`` in
title or body) and the issue is closed, and the CI checks on its last commit
are green (``ci``: ``true`` all, a list of names that must be present and
green, ``false`` ignored). Each step yields a ``Finding``: ``complete``,
``reject`` (will never check out) or ``pending`` (not yet), with the time
the state it rests on came about. Any reject makes the outcome reject, else
any pending makes it pending, else it is complete.

Comparing with the verdict's ``esito`` uses that time: a finding that
contradicts the verdict but whose state came about after the verdict's block
(a check re-run later, an issue reopened, a PR merged after a reject) says
the world changed, not that the evaluator was wrong (``changed_since_verdict``).
Evidence that is gone (a check run or issue deleted) cannot be dated and is
``not_reproducible``. Anything else that contradicts the verdict is
``evaluator_disagrees``, naming the check.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from keeper.verify.canonical import JsonValue
from keeper.verify.failures import Failure, FailureCode

Outcome = Literal["complete", "reject", "pending"]
GREEN = frozenset({"success", "neutral", "skipped"})
RUNNING = frozenset({"queued", "in_progress", "pending", "waiting", "requested", None})


@dataclass(frozen=True, slots=True)
class Pull:
    author: str
    base: str
    state: str  # "open" | "closed"
    merged: bool
    merged_at: int | None
    closed_at: int | None
    created_at: int | None
    updated_at: int | None
    text: str  # title and body, where "closes #N" is looked for
    head_sha: str


@dataclass(frozen=True, slots=True)
class Check:
    """One CI signal on the PR's last commit: a check run or a commit status context."""

    name: str
    state: Outcome  # complete = green, reject = failed, pending = running
    at: int | None  # completed (or started) / updated time


@dataclass(frozen=True, slots=True)
class Issue:
    state: str
    closed_at: int | None
    updated_at: int | None
    is_pull: bool  # the "issue" is a pull request: nothing to close


@dataclass(frozen=True, slots=True)
class Facts:
    """What GitHub says now; ``pull``/``issue`` None when it answered 404."""

    default_branch: str
    pull: Pull | None
    checks: tuple[Check, ...]
    issue: Issue | None


@dataclass(frozen=True, slots=True)
class Target:
    """The delivered pull request of a job whose offline checks passed."""

    owner: str
    name: str
    number: int
    block: Mapping[str, JsonValue]  # the description's ``github`` block
    esito: JsonValue


@dataclass(frozen=True, slots=True)
class Finding:
    check: str  # "pull", "author", "base", "merged", "issue", "ci", "ci:<name>"
    outcome: Outcome
    detail: str
    at: int | None = None  # when the state this rests on came about (unix seconds)
    gone: bool = False  # the evidence is missing now and may have existed at verdict time


# ---------------------------------------------------------------- GitHub JSON -> facts


def timestamp(value: JsonValue) -> int | None:
    """GitHub's ISO 8601 times (``2026-01-02T03:04:05Z``) as unix seconds."""
    if not isinstance(value, str):
        return None
    try:
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return None


def _obj(value: JsonValue) -> Mapping[str, JsonValue]:
    return value if isinstance(value, dict) else {}


def _str(value: JsonValue) -> str:
    return value if isinstance(value, str) else ""


def parse_pull(raw: JsonValue) -> Pull:
    pull = _obj(raw)
    return Pull(
        author=_str(_obj(pull.get("user")).get("login")),
        base=_str(_obj(pull.get("base")).get("ref")),
        state=_str(pull.get("state")),
        merged=pull.get("merged") is True or pull.get("merged_at") not in (None, ""),
        merged_at=timestamp(pull.get("merged_at")),
        closed_at=timestamp(pull.get("closed_at")),
        created_at=timestamp(pull.get("created_at")),
        updated_at=timestamp(pull.get("updated_at")),
        text=f"{_str(pull.get('title'))}\n{_str(pull.get('body'))}",
        head_sha=_str(_obj(pull.get("head")).get("sha")),
    )


def parse_issue(raw: JsonValue) -> Issue:
    issue = _obj(raw)
    return Issue(
        state=_str(issue.get("state")),
        closed_at=timestamp(issue.get("closed_at")),
        updated_at=timestamp(issue.get("updated_at")),
        is_pull="pull_request" in issue,
    )


def parse_checks(
    check_runs: Sequence[JsonValue], statuses: Sequence[JsonValue]
) -> tuple[Check, ...]:
    """Check runs (the latest per name) and commit statuses (the latest per context)."""
    latest: dict[str, tuple[int, Check]] = {}
    for raw in check_runs:
        run = _obj(raw)
        name = _str(run.get("name"))
        if not name:
            continue
        started = timestamp(run.get("started_at"))
        completed = timestamp(run.get("completed_at"))
        conclusion = run.get("conclusion")
        if run.get("status") != "completed" or conclusion is None:
            state: Outcome = "pending"
        else:
            state = "complete" if conclusion in GREEN else "reject"
        check = Check(name, state, completed or started)
        order = started or 0
        if name not in latest or order >= latest[name][0]:
            latest[name] = (order, check)
    for raw in statuses:
        status = _obj(raw)
        name = _str(status.get("context"))
        if not name or name in latest:
            continue  # a check run of the same name is the richer signal
        value = status.get("state")
        state = "complete" if value == "success" else "pending" if value == "pending" else "reject"
        latest[name] = (0, Check(name, state, timestamp(status.get("updated_at"))))
    return tuple(check for _, check in sorted(latest.values(), key=lambda item: item[1].name))


# ---------------------------------------------------------------- the checks


def closes_issue(text: str, issue: int) -> bool:
    """GitHub's closing keywords followed by ``#issue`` (not ``#issue0``)."""
    pattern = rf"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\s*:?\s+#{issue}(?![0-9])"
    return re.search(pattern, text, re.IGNORECASE) is not None


def evaluate(block: Mapping[str, JsonValue], facts: Facts) -> list[Finding]:
    """Every step's finding, in the catalog's order (the offline steps have passed)."""
    pull = facts.pull
    if pull is None:
        return [Finding("pull", "reject", "the pull request does not exist")]
    # an open PR can still be edited; a closed one's author and base are final
    settled_at = pull.merged_at or pull.closed_at if pull.state == "closed" else pull.updated_at
    out: list[Finding] = []
    author = block.get("author")
    if isinstance(author, str) and pull.author.lower() != author.lower():
        out.append(
            Finding("author", "reject", f"opened by {pull.author}, not {author}", pull.created_at)
        )
    base = block.get("base")
    want = base if isinstance(base, str) else facts.default_branch
    if pull.base != want:
        out.append(Finding("base", "reject", f"into {pull.base}, not {want}", settled_at))
    if pull.merged:
        out.append(Finding("merged", "complete", "merged", pull.merged_at))
    elif pull.state == "closed":
        out.append(Finding("merged", "reject", "closed without merging", pull.closed_at))
    else:
        out.append(Finding("merged", "pending", "still open", pull.updated_at))
    issue = block.get("issue")
    if isinstance(issue, int) and not isinstance(issue, bool):
        out.extend(_issue_findings(issue, pull, facts.issue))
    out.extend(_ci_findings(block.get("ci", True), facts.checks))
    return out


def _issue_findings(number: int, pull: Pull, issue: Issue | None) -> list[Finding]:
    out: list[Finding] = []
    if not closes_issue(pull.text, number):
        # title and body stay editable after a merge: only updated_at bounds an edit
        out.append(
            Finding("issue", "reject", f"title and body do not close #{number}", pull.updated_at)
        )
    if issue is None:
        out.append(Finding("issue", "reject", f"issue #{number} does not exist", gone=True))
    elif issue.is_pull:
        out.append(Finding("issue", "reject", f"#{number} is a pull request, not an issue"))
    elif issue.state == "closed":
        out.append(Finding("issue", "complete", f"issue #{number} closed", issue.closed_at))
    else:
        out.append(Finding("issue", "pending", f"issue #{number} is open", issue.updated_at))
    return out


def _ci_findings(ci: JsonValue, checks: Sequence[Check]) -> list[Finding]:
    if ci is False:
        return []
    by_name = {c.name: c for c in checks}
    if isinstance(ci, list):
        out: list[Finding] = []
        for name in ci:
            check = by_name.get(str(name))
            if check is None:
                out.append(Finding(f"ci:{name}", "reject", "required check missing", gone=True))
            else:
                out.append(Finding(f"ci:{name}", check.state, _ci_detail(check), check.at))
        return out
    if not checks:
        return [Finding("ci", "complete", "no checks on the last commit")]
    return [Finding(f"ci:{c.name}", c.state, _ci_detail(c), c.at) for c in checks]


def _ci_detail(check: Check) -> str:
    return {"complete": "green", "reject": "failed", "pending": "running"}[check.state]


def outcome(findings: Sequence[Finding]) -> Outcome:
    """Any reject decides (it will never check out), else any pending, else complete."""
    states = {f.outcome for f in findings}
    if "reject" in states:
        return "reject"
    return "pending" if "pending" in states else "complete"


# ---------------------------------------------------------------- against the verdict


def compare(
    esito: JsonValue, findings: Sequence[Finding], verdict_time: int | None
) -> list[Failure]:
    """Failures of a verdict against the re-run; none when they agree."""
    rerun = outcome(findings)
    if rerun == esito:
        return []
    if esito == "complete":
        against = [f for f in findings if f.outcome != "complete"]
    else:  # a reject is contradicted by what passes now, or by what is still pending
        against = [f for f in findings if f.outcome == rerun]
    gone = [
        _failure(FailureCode.NOT_REPRODUCIBLE, f, esito, "gone, cannot tell")
        for f in against
        if f.gone
    ]
    datable = [f for f in against if not f.gone]

    def after(f: Finding) -> bool:
        return verdict_time is not None and f.at is not None and f.at > verdict_time

    changed = [
        _failure(FailureCode.CHANGED_SINCE_VERDICT, f, esito, "changed after the verdict")
        for f in datable
        if after(f)
    ]
    held = [f for f in datable if not after(f)]
    if esito != "complete" and rerun == "complete" and changed:
        return changed  # the reject stands unless every step already passed at the verdict
    if held:
        first = (
            held[0]
            if esito == "complete" or rerun == "pending"
            else Finding("all", "complete", "every check passes", None)
        )
        return [_failure(FailureCode.EVALUATOR_DISAGREES, first, esito, f"re-run says {rerun}")]
    return changed + gone


def _failure(code: FailureCode, finding: Finding, esito: JsonValue, why: str) -> Failure:
    detail = f"{finding.check}: {finding.detail}; verdict says {esito} ({why})"
    return Failure(code, "/esito", detail, check=finding.check)
