"""The keeper's pure guards (keeper.act.guards): each job planned by its contract's
detected dialect, and the hook rule: a claimRefund whose simulation reverted with an
error no protocol table knows, on a job with a hook, was the hook's doing; anything else
is not."""

from __future__ import annotations

from dataclasses import replace

import pytest

from keeper.act.detect import Detection, DialectBook
from keeper.act.guards import apply_job_rules, hook_blocked_detail
from keeper.act.simulate import SimResult
from keeper.domain.dialects import selector
from keeper.domain.model import JobState, Protocol
from keeper.domain.planner import Action, ActionKind

ESCROW, HOOK = "0x" + "e1" * 20, "0x" + "40" * 20
CLAIM = Action(ESCROW, "7", ActionKind.CLAIM_REFUND, 100, Protocol.ERC8183)
HOOKED = JobState(contract=ESCROW, job_id="7", hook=HOOK)
# an error of the hook's own: no protocol table knows its selector
BLOCKED = SimResult(CLAIM, "reverted_in_simulation", "reverted", selector("NoRefunds()"))


def test_an_unknown_revert_of_a_hooked_claim_is_the_hook_s() -> None:
    assert hook_blocked_detail(BLOCKED, HOOKED) == (
        f"hook_blocked: hook {HOOK} reverted claimRefund (reverted)"
    )


@pytest.mark.parametrize(
    ("result", "job"),
    [
        (replace(BLOCKED, verdict="ok"), HOOKED),
        (BLOCKED, None),
        (BLOCKED, replace(HOOKED, hook="")),
        (replace(BLOCKED, action=replace(CLAIM, action=ActionKind.FINALIZE_VERDICT)), HOOKED),
        (replace(BLOCKED, verdict="preempted"), HOOKED),
        (replace(BLOCKED, revert=selector("NotExpired()")), HOOKED),  # the escrow's own
    ],
    ids=["succeeded", "no job", "no hook", "not claimRefund", "not a revert", "known error"],
)
def test_anything_else_is_not(result: SimResult, job: JobState | None) -> None:
    assert hook_blocked_detail(result, job) is None


def _detected(contract: str, protocol: Protocol, dialect: str | None) -> Detection:
    return Detection("c", contract, protocol, dialect, "detected", False, None, "")


def test_each_job_takes_its_contract_s_detected_rules() -> None:
    """A job keeps the rules its own events gave it unless its contract's dialect was
    detected as one with job rules: an undetected contract, or a task market, changes
    nothing."""
    legacy, erc, undetected, market = ("0x" + c * 20 for c in ("a1", "a2", "a3", "a4"))
    book = DialectBook(
        {
            legacy: _detected(legacy, Protocol.ERC8183, "LegacyACP"),
            erc: _detected(erc, Protocol.ERC8183, "ERC8183"),
            undetected: _detected(undetected, Protocol.ERC8183, None),
            market: _detected(market, Protocol.TASKMARKET, "TaskMarket"),
        }
    )
    jobs = [
        JobState(contract=c, job_id="1", dialect="agentic_commerce")
        for c in (legacy, erc, undetected, market, "0x" + "a5" * 20)
    ]
    ruled = apply_job_rules(jobs, book)
    assert [j.dialect for j in ruled] == [
        "legacy",
        "erc8183",
        "agentic_commerce",
        "agentic_commerce",
        "agentic_commerce",
    ]
