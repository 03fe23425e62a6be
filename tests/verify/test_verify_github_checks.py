"""GitHubEval's online decision and its comparison with the verdict (pure)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from keeper.verify import github_checks as gh
from keeper.verify.failures import Failure, FailureCode

T = 1_800_000_000  # the verdict's block time
BEFORE, AFTER = T - 1000, T + 1000

PULL = gh.Pull(
    author="mrossi",
    base="main",
    state="closed",
    merged=True,
    merged_at=BEFORE,
    closed_at=BEFORE,
    created_at=BEFORE - 500,
    updated_at=BEFORE,
    text="EURC payments\nThis fixes #42.",
    head_sha="a" * 40,
)
GREEN = (gh.Check("lint", "complete", BEFORE), gh.Check("test", "complete", BEFORE))
CLOSED = gh.Issue("closed", BEFORE, BEFORE, is_pull=False)
FACTS = gh.Facts("main", PULL, GREEN, CLOSED)
BLOCK: dict[str, Any] = {"repo": "acme/shop", "issue": 42, "author": "mrossi", "ci": True}


def run(block: dict[str, Any], facts: gh.Facts, esito: str) -> list[tuple[str, str]]:
    failures = gh.compare(esito, gh.evaluate(block, facts), T)
    return [(f.code.value, f.check) for f in failures]


def test_everything_checks_out() -> None:
    assert gh.outcome(gh.evaluate(BLOCK, FACTS)) == "complete"
    assert run(BLOCK, FACTS, "complete") == []
    assert run(BLOCK, FACTS, "reject") == [("evaluator_disagrees", "all")]


@pytest.mark.parametrize(
    ("change", "check", "outcome"),
    [
        ({"pull": replace(PULL, author="intruder")}, "author", "reject"),
        ({"pull": replace(PULL, base="dev")}, "base", "reject"),
        ({"pull": replace(PULL, merged=False, merged_at=None)}, "merged", "reject"),
        ({"pull": replace(PULL, state="open", merged=False, merged_at=None)}, "merged", "pending"),
        ({"pull": replace(PULL, text="unrelated")}, "issue", "reject"),
        ({"issue": gh.Issue("open", None, BEFORE, False)}, "issue", "pending"),
        ({"issue": gh.Issue("closed", BEFORE, BEFORE, True)}, "issue", "reject"),
        ({"checks": (gh.Check("test", "reject", BEFORE),)}, "ci:test", "reject"),
        ({"checks": (gh.Check("test", "pending", BEFORE),)}, "ci:test", "pending"),
        ({"pull": None}, "pull", "reject"),
    ],
)
def test_a_failing_step_decides(change: dict[str, Any], check: str, outcome: str) -> None:
    """Each step on its own: the outcome, and a completing verdict named as wrong there."""
    facts = replace(FACTS, **change)
    assert gh.outcome(gh.evaluate(BLOCK, facts)) == outcome
    assert run(BLOCK, facts, "complete") == [("evaluator_disagrees", check)]
    if outcome == "reject":
        assert run(BLOCK, facts, "reject") == []


def test_base_defaults_to_the_repository_default_branch() -> None:
    facts = replace(FACTS, default_branch="trunk")
    assert run(BLOCK, facts, "complete") == [("evaluator_disagrees", "base")]
    assert run({**BLOCK, "base": "main"}, facts, "complete") == []


def test_ci_list_false_and_empty() -> None:
    failing = replace(FACTS, checks=(*GREEN, gh.Check("flaky", "reject", BEFORE)))
    assert run({**BLOCK, "ci": ["test", "lint"]}, failing, "complete") == []
    assert run({**BLOCK, "ci": False}, failing, "complete") == []
    assert run({**BLOCK, "ci": True}, failing, "complete") == [("evaluator_disagrees", "ci:flaky")]
    assert run({**BLOCK, "ci": True}, replace(FACTS, checks=()), "complete") == []


def test_missing_required_check() -> None:
    """Missing at re-run: a reject agrees; a complete cannot be judged (it may be deleted)."""
    block = {**BLOCK, "ci": ["test", "e2e"]}
    assert run(block, FACTS, "reject") == []
    assert run(block, FACTS, "complete") == [("not_reproducible", "ci:e2e")]
    broken = replace(FACTS, checks=(gh.Check("test", "reject", BEFORE),))
    assert run(block, broken, "complete") == [("evaluator_disagrees", "ci:test")]


def test_changes_after_the_verdict_are_not_disagreements() -> None:
    rerun_red = replace(FACTS, checks=(gh.Check("test", "reject", AFTER), GREEN[0]))
    assert run(BLOCK, rerun_red, "complete") == [("changed_since_verdict", "ci:test")]
    reopened = replace(FACTS, issue=gh.Issue("open", None, AFTER, False))
    assert run(BLOCK, reopened, "complete") == [("changed_since_verdict", "issue")]
    merged_later = replace(FACTS, pull=replace(PULL, merged_at=AFTER, closed_at=AFTER))
    assert run(BLOCK, merged_later, "reject") == [("changed_since_verdict", "merged")]
    reran_green = replace(FACTS, checks=(gh.Check("test", "complete", AFTER), GREEN[0]))
    assert run(BLOCK, reran_green, "reject") == [("changed_since_verdict", "ci:test")]
    # one contradiction that held at the verdict outweighs those that came later
    both = replace(
        FACTS,
        checks=(gh.Check("test", "reject", AFTER), gh.Check("lint", "reject", BEFORE)),
    )
    assert run(BLOCK, both, "complete") == [("evaluator_disagrees", "ci:lint")]


def test_a_body_edited_after_the_verdict_is_a_change() -> None:
    """Title and body stay editable after the merge: an edit later is not the evaluator's."""
    edited = replace(FACTS, pull=replace(PULL, text="no keyword", updated_at=AFTER))
    assert run(BLOCK, edited, "complete") == [("changed_since_verdict", "issue")]


def test_reject_of_a_pending_pull() -> None:
    still_open = replace(FACTS, pull=replace(PULL, state="open", merged=False, merged_at=None))
    assert run(BLOCK, still_open, "reject") == [("evaluator_disagrees", "merged")]
    reopened = replace(still_open, pull=replace(still_open.pull, updated_at=AFTER))  # type: ignore[type-var]
    assert run(BLOCK, reopened, "reject") == [("changed_since_verdict", "merged")]


def test_failures_name_the_check_and_point_at_esito() -> None:
    failures = gh.compare("complete", gh.evaluate(BLOCK, replace(FACTS, pull=None)), T)
    assert failures == [
        Failure(
            FailureCode.EVALUATOR_DISAGREES,
            "/esito",
            "pull: the pull request does not exist; verdict says complete (re-run says reject)",
            check="pull",
        )
    ]


def test_closing_keywords() -> None:
    assert gh.closes_issue("Fixes #42", 42) and gh.closes_issue("resolved: #42", 42)
    assert gh.closes_issue("closes #42.", 42) and gh.closes_issue("CLOSE #42", 42)
    assert not gh.closes_issue("closes #420", 42) and not gh.closes_issue("see #42", 42)
    assert not gh.closes_issue("prefixes #42", 42)


def test_parsing_github_answers() -> None:
    runs = [
        {"name": "test", "status": "completed", "conclusion": "failure",
         "started_at": "2026-01-01T00:00:00Z", "completed_at": "2026-01-01T00:01:00Z"},
        {"name": "test", "status": "completed", "conclusion": "success",
         "started_at": "2026-01-01T01:00:00Z", "completed_at": "2026-01-01T01:01:00Z"},
        {"name": "build", "status": "in_progress", "conclusion": None,
         "started_at": "2026-01-01T00:00:00Z", "completed_at": None},
        {"name": "docs", "status": "completed", "conclusion": "skipped",
         "started_at": None, "completed_at": None},
    ]  # fmt: skip
    statuses = [
        {"context": "ci/legacy", "state": "error", "updated_at": "2026-01-01T00:00:00Z"},
        {"context": "test", "state": "failure", "updated_at": "2026-01-01T00:00:00Z"},
    ]
    checks = {c.name: c.state for c in gh.parse_checks(runs, statuses)}
    assert checks == {
        "build": "pending",
        "ci/legacy": "reject",
        "docs": "complete",
        "test": "complete",  # the latest run of a name counts; a same-named status does not
    }
    pull = gh.parse_pull(
        {
            "user": {"login": "mrossi"},
            "base": {"ref": "main"},
            "state": "closed",
            "merged": True,
            "merged_at": "2026-01-01T00:00:00Z",
            "title": "t",
            "body": None,
            "head": {"sha": "b" * 40},
        }
    )
    assert pull.merged and pull.merged_at == 1767225600 and pull.text == "t\n"
    assert gh.parse_issue({"state": "open", "pull_request": {}}).is_pull


def test_a_pull_is_merged_by_either_field() -> None:
    """GitHub's list answers carry ``merged_at`` without ``merged``; a detail answer may
    say ``merged`` before its ``merged_at`` is filled."""
    by_time = gh.parse_pull({"state": "closed", "merged_at": "2026-01-01T00:00:00Z"})
    by_flag = gh.parse_pull({"state": "closed", "merged": True, "merged_at": None})
    neither = gh.parse_pull({"state": "closed", "merged": False, "merged_at": None})
    assert (by_time.merged, by_flag.merged, neither.merged) == (True, True, False)


def test_a_check_run_counts_when_completed_with_a_conclusion_at_its_latest_time() -> None:
    """Completed without a conclusion, or a conclusion on a run still in progress, is
    pending; a run's time is its completion, else its start; among runs of one name with
    no start time the last listed wins."""
    runs = [
        {"name": "a", "status": "completed", "conclusion": None,
         "started_at": "2026-01-01T00:00:00Z", "completed_at": "2026-01-01T00:02:00Z"},
        {"name": "b", "status": "in_progress", "conclusion": "success",
         "started_at": "2026-01-01T00:00:00Z", "completed_at": None},
        {"name": "c", "status": "completed", "conclusion": "failure",
         "started_at": None, "completed_at": None},
        {"name": "c", "status": "completed", "conclusion": "success",
         "started_at": None, "completed_at": None},
    ]  # fmt: skip
    checks = {c.name: c for c in gh.parse_checks(runs, [])}
    assert (checks["a"].state, checks["a"].at) == ("pending", 1767225720)
    assert (checks["b"].state, checks["b"].at) == ("pending", 1767225600)
    assert checks["c"].state == "complete"


def test_a_closed_pull_s_base_is_dated_by_its_close() -> None:
    """Closed unmerged after the verdict: a base that differs now may have been changed
    after the verdict (a closed pull's base is final only from its close)."""
    closed_later = replace(PULL, merged=False, merged_at=None, closed_at=AFTER, base="dev")
    assert ("changed_since_verdict", "base") in run(
        BLOCK, replace(FACTS, pull=closed_later), "complete"
    )


def test_an_issue_that_is_no_integer_asks_for_no_issue_check() -> None:
    for issue in (True, "42", None):
        findings = gh.evaluate({**BLOCK, "issue": issue}, FACTS)
        assert not [f for f in findings if f.check == "issue"], issue


def test_a_change_at_the_verdict_s_own_second_held_at_the_verdict() -> None:
    """Only a change strictly after the verdict's block time excuses the evaluator."""
    red_then = replace(FACTS, checks=(gh.Check("test", "reject", T), GREEN[0]))
    assert run(BLOCK, red_then, "complete") == [("evaluator_disagrees", "ci:test")]
