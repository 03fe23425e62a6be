"""The running daemon: posted documents verified without a restart, GitHubEval re-run on GitHub.

A real anvil with our contracts, a real GitHub-shaped HTTP server, and
``python -m keeper run`` as an operator starts it; everything is read back
through the daemon's own API.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
from github_daemon import TOKEN_ENV, GitHubJobs, KeeperRun, write_config
from github_server import TOKEN, GitHubServer, github  # noqa: F401 -- fixture

from keeper.devnet.anvil import AnvilProcess
from keeper.devnet.deploy import Deployment, deploy_all
from keeper.verify.canonical import canonical_bytes
from keeper.verify.command import main

REPO = "acme/shop"
PR = "https://github.com/acme/shop/pull/{}"
FINAL = {"verified", "mismatch", "evaluator_disagrees", "changed_since_verdict", "not_reproducible"}


@pytest.fixture(scope="module")
def deployment(module_anvil: AnvilProcess) -> Deployment:
    return deploy_all(module_anvil.url)


@pytest.fixture
def jobs(module_anvil: AnvilProcess, deployment: Deployment, tmp_path: Path) -> GitHubJobs:
    return GitHubJobs(module_anvil.url, deployment, tmp_path)


@pytest.fixture
async def daemon(
    module_anvil: AnvilProcess,
    deployment: Deployment,
    jobs: GitHubJobs,
    github: GitHubServer,  # noqa: F811
    tmp_path: Path,
) -> AsyncIterator[KeeperRun]:
    github.repo(REPO)
    # this test's jobs only: earlier tests' verdicts on the shared chain are not its business
    start = jobs.w3.eth.block_number + 1
    config = write_config(
        tmp_path / "keeper.toml",
        module_anvil.url,
        replace(deployment, start_block=start),
        jobs,
        github.url,
        tmp_path / "k.db",
    )
    run = KeeperRun(config, tmp_path / "keeper.log", TOKEN)
    yield run
    code = await asyncio.to_thread(run.stop)
    log = run.log.read_text()
    assert TOKEN not in log  # the token is used, never written out
    assert code == 0, log[-3000:]


def _merged_pr(github: GitHubServer, number: int, at: int, *, sha: str) -> None:  # noqa: F811
    github.pull(REPO, number, author="mrossi", merged_at=at, body=f"Fixes #{number + 100}", sha=sha)
    github.issue(REPO, number + 100, closed_at=at + 5, updated_at=at + 5)


async def test_github_outcomes_through_the_daemon(
    daemon: KeeperRun,
    jobs: GitHubJobs,
    github: GitHubServer,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Complete, reject, disagreement and changed-since-verdict, read back from the API."""
    commerce = jobs.d.commerce
    past = jobs.now() - 2000
    later = jobs.now() + 10_000
    strict = {"repo": REPO, "author": "mrossi", "ci": ["test", "lint"]}

    _merged_pr(github, 57, past, sha="5" * 40)
    github.check_run("5" * 40, "test", "success", past + 60)
    github.status("5" * 40, "lint", "success", past + 70)
    complete = jobs.judge({**strict, "issue": 157}, PR.format(57), "complete")

    github.pull(REPO, 58, author="intruder", closed_at=past, sha="8" * 40)
    reject = jobs.judge(strict, PR.format(58), "reject")

    _merged_pr(github, 59, past, sha="9" * 40)
    github.check_run("9" * 40, "test", "failure", past + 60)
    disagree = jobs.judge({"repo": REPO}, PR.format(59), "complete")

    _merged_pr(github, 60, past, sha="6" * 40)
    github.check_run("6" * 40, "test", "failure", later)  # re-run long after the verdict
    changed = jobs.judge({"repo": REPO, "ci": ["test"]}, PR.format(60), "complete")

    got = {
        name: await daemon.wait_status(commerce, j.job_id, FINAL)
        for name, j in {
            "complete": complete,
            "reject": reject,
            "disagree": disagree,
            "changed": changed,
        }.items()
    }
    assert got["complete"]["status"] == "verified", got["complete"]
    assert got["reject"]["status"] == "verified", got["reject"]
    assert got["disagree"]["status"] == "evaluator_disagrees"
    assert got["disagree"]["report"]["failures"] == [
        {"code": "evaluator_disagrees", "pointer": "/esito", "check": "ci:test"}
    ]
    assert got["changed"]["status"] == "changed_since_verdict"
    assert got["changed"]["report"]["failures"][0]["check"] == "ci:test"
    assert {g["report"]["documentSource"] for g in got.values()} == {"directory:documents"}
    assert github.seen and all(s.authorized for s in github.seen)
    metrics = await asyncio.to_thread(daemon.request, "GET", "/metrics")
    config = await asyncio.to_thread(daemon.request, "GET", "/v1/status")
    assert TOKEN not in json.dumps(got) + metrics[1].decode() + config[1].decode()
    ok = await daemon.metric("keeper_github_requests_total", outcome="ok")
    assert ok == len([s for s in github.seen if s.status == 200])

    # `keeper verify` re-runs GitHubEval the same way, standalone: the very same reports
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    for name, judged in (("complete", complete), ("disagree", disagree), ("changed", changed)):
        out = io.StringIO()
        argv = ["--config", str(tmp_path / "keeper.toml"), "--contract", commerce]
        code = await asyncio.to_thread(main, [*argv, "--id", str(judged.job_id), "--json"], out)
        assert json.loads(out.getvalue()) == got[name]["report"], name
        assert code == {"complete": 0, "disagree": 1, "changed": 3}[name]


async def test_rate_limit_backs_off_and_retries(
    daemon: KeeperRun,
    jobs: GitHubJobs,
    github: GitHubServer,  # noqa: F811
) -> None:
    """A secondary rate limit makes the verdict unavailable; a later retry verifies it."""
    commerce = jobs.d.commerce
    past = jobs.now() - 2000
    _merged_pr(github, 61, past, sha="1" * 40)
    github.check_run("1" * 40, "test", "success", past + 60)
    github.retry_after = 2
    github.refusals = 1
    judged = jobs.judge({"repo": REPO, "issue": 161}, PR.format(61), "complete")
    first = await daemon.wait_status(commerce, judged.job_id, {"unavailable", *FINAL})
    assert first["status"] == "unavailable"
    assert [s.status for s in github.seen] == [403]  # nothing more asked while blocked
    await asyncio.sleep(github.retry_after)
    jobs.control.increase_time(600)  # the retry falls due on chain time
    verified = await daemon.wait_status(commerce, judged.job_id, FINAL)
    assert verified["status"] == "verified", verified
    assert verified["history"][0]["status"] == "unavailable"
    assert await daemon.metric("keeper_github_requests_total", outcome="rate_limited") == 1


async def test_posted_document_is_verified_without_restart(
    daemon: KeeperRun,
    jobs: GitHubJobs,
    github: GitHubServer,  # noqa: F811
) -> None:
    """Unavailable until the document is posted to the API, then verified from it."""
    commerce = jobs.d.commerce
    past = jobs.now() - 2000
    _merged_pr(github, 62, past, sha="2" * 40)
    judged = jobs.judge({"repo": REPO}, PR.format(62), "complete", publish=False)
    first = await daemon.wait_status(commerce, judged.job_id, {"unavailable", *FINAL})
    assert first["status"] == "unavailable" and first["report"]["documentSource"] is None
    wrong = {**judged.document, "esito": "reject"}
    refused = await asyncio.to_thread(
        daemon.request, "POST", "/v1/verdicts", canonical_bytes(wrong)
    )
    assert refused[0] == 422
    status, _ = await asyncio.to_thread(
        daemon.request, "POST", "/v1/verdicts", canonical_bytes(judged.document)
    )
    assert status == 202
    verified = await daemon.wait_status(commerce, judged.job_id, FINAL, within=20)
    assert verified["status"] == "verified", verified
    assert verified["report"]["documentSource"] == "api"
    assert verified["document"] == judged.document
