"""The keeper on the ERC8183 dialect, indexed and kept end to end on anvil.

claimRefund(uint256,bytes) at expiry; refunds of budget - settled; no send while a claim
is pending or the escrow is paused (and no simulation either), the refund once that ends;
a hook that reverts the refund reported once and left alone until detached; a Submitted
job untouched until expiredAt + 1 h.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from erc8183_flows import CLAIM_REFUND, Flows
from keeper_harness import CLIENT, DEPLOYER, PROVIDER, Escrows, MakeKeeper, address_of
from support import keeper_books

from keeper.api.reads import ApiReads
from keeper.app import run_status
from keeper.domain.planner import EVALUATION_GRACE_PERIOD, ReportKind
from keeper.obs.metrics import Metrics
from keeper.rpc.client import RpcClient

EXPIRED = 5


@pytest.fixture
async def flows(escrows: Escrows, tmp_path: Path) -> AsyncIterator[Flows]:
    f = Flows(escrows, tmp_path)
    yield f
    await f.index.close()


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


async def test_partly_settled_job_refunded_with_the_bytes_call(
    flows: Flows, make_keeper: MakeKeeper, rpc: RpcClient
) -> None:
    """Every field indexed; at expiry the keeper sends claimRefund(uint256,bytes) and the
    client gets budget - settled back, as the API said it would."""
    job = flows.job(600, receiver=True)
    flows.approve(flows.submit_claim(job, 300))
    (state,) = await flows.jobs()
    assert (state.client, state.provider) == (address_of(CLIENT), address_of(PROVIDER))
    assert (state.budget, state.settled_amount, state.token) == (900, 300, flows.e.d.usdc)
    assert (state.payout_receiver, state.pending_claim_amount, state.dialect) == (
        "0x" + "5e" * 20, None, "erc8183",
    )  # fmt: skip
    assert state.description == '{"brief":"erc8183"}' and state.expired_at > 0
    api = ApiReads(flows.db, 31337)
    shown = api.job(flows.c, str(job))
    assert shown is not None
    assert (shown["refundable_amount"], shown["settled_amount"]) == ("600", "300")
    assert shown["contract_paused"] is False
    flows.e.control.mine_at(state.expired_at)
    keeper = make_keeper(db=flows.db)
    before = flows.balance(address_of(CLIENT))
    await flows.tick(keeper, rpc)
    flows.e.control.mine()
    await flows.tick(keeper, rpc)
    [attempt] = keeper_books.all_attempts(keeper.store)
    assert bytes.fromhex(CLAIM_REFUND) in attempt.data and attempt.status == "confirmed"
    assert flows.status(job) == EXPIRED
    assert flows.balance(address_of(CLIENT)) - before == 600
    await flows.jobs()
    after = api.job(flows.c, str(job))
    assert after is not None and after["refunded_amount"] == "600"
    api.close()


async def test_pending_claim_waits_visibly_then_refund(
    flows: Flows, make_keeper: MakeKeeper, rpc: RpcClient
) -> None:
    """A claim pending past expiry: a report and no intent; rejected, the refund follows."""
    job = flows.job(600)
    claim = flows.submit_claim(job, 400)
    (state,) = await flows.jobs()
    flows.e.control.mine_at(state.expired_at + 10)
    keeper = make_keeper(db=flows.db)
    summary = await flows.tick(keeper, rpc)
    assert [r.kind for r in summary.reports] == [ReportKind.CLAIM_PENDING_PAST_EXPIRY]
    assert summary.simulated == [] and keeper_books.all_intents(keeper.store) == []
    flows.reject(claim)
    await flows.tick(keeper, rpc)
    flows.e.control.mine()
    await flows.tick(keeper, rpc)
    assert [i.outcome for i in keeper_books.all_intents(keeper.store)] == ["confirmed"]
    assert flows.status(job) == EXPIRED


async def test_paused_escrow_gets_no_send_and_no_simulation(
    flows: Flows, make_keeper: MakeKeeper, rpc: RpcClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """Paused: one gauge, nothing planned or simulated for blocks on end; unpaused: refund."""
    job = flows.job(600)
    flows.admin("pause()")
    (state,) = await flows.jobs()
    flows.e.control.mine_at(state.expired_at + 10)
    metrics = Metrics(contract_names={flows.c: "erc8183"})
    keeper = make_keeper(db=flows.db, metrics=metrics)
    for _ in range(8):
        summary = await flows.tick(keeper, rpc)
        assert summary.simulated == [] and list(summary.paused) == [flows.c]
        flows.e.control.mine()
    assert keeper_books.all_intents(keeper.store) == []
    assert sample(metrics, "keeper_contract_paused", contract="erc8183") == 1.0
    # one status line, in `keeper status` and /v1/status's read model
    assert run_status(str(flows.config), as_json=False) == 0
    assert "paused erc8183: since block" in capsys.readouterr().out
    api = ApiReads(flows.db, 31337)
    assert list(api.status()["paused"]) == [flows.c]
    api.close()
    flows.admin("unpause()")
    await flows.tick(keeper, rpc)
    flows.e.control.mine()
    await flows.tick(keeper, rpc)
    assert sample(metrics, "keeper_contract_paused", contract="erc8183") == 0.0
    assert [i.outcome for i in keeper_books.all_intents(keeper.store)] == ["confirmed"]
    assert flows.status(job) == EXPIRED


async def test_reverting_hook_reported_once_until_detached(
    flows: Flows, make_keeper: MakeKeeper, rpc: RpcClient
) -> None:
    """The hook reverts claimRefund: hook_blocked once, not simulated again every few
    blocks; after batchDetachHook the refund goes through."""
    hook = flows.e.d.erc8183_hook
    flows.e.call(DEPLOYER, hook, "setBlocking(bytes4,bool)", bytes.fromhex(CLAIM_REFUND), True)
    job = flows.job(600, hook=hook)
    (state,) = await flows.jobs()
    flows.e.control.mine_at(state.expired_at + 10)
    metrics = Metrics(contract_names={flows.c: "erc8183"})
    keeper = make_keeper(db=flows.db, metrics=metrics)
    await flows.tick(keeper, rpc)
    [intent] = keeper_books.all_intents(keeper.store)
    assert intent.outcome == "reverted_in_simulation"
    assert intent.detail is not None and intent.detail.startswith("hook_blocked")
    blocked = {"contract": "erc8183", "action": "claimRefund", "outcome": "hook_blocked"}
    for _ in range(keeper.settings.redecide_after_blocks + 3):
        flows.e.control.mine()
        summary = await flows.tick(keeper, rpc)
        assert summary.simulated == []
        assert [r.kind for r in summary.reports] == [ReportKind.HOOK_BLOCKED]
    assert sample(metrics, "keeper_actions_total", **blocked) == 1.0
    flows.admin("batchDetachHook(uint256[])", [job])
    await flows.tick(keeper, rpc)
    flows.e.control.mine()
    await flows.tick(keeper, rpc)
    assert [i.outcome for i in keeper_books.all_intents(keeper.store)] == ["confirmed"]
    assert flows.status(job) == EXPIRED
    assert sample(metrics, "keeper_actions_total", **blocked) == 1.0


async def test_submitted_job_untouched_until_expiry_plus_grace(
    flows: Flows, make_keeper: MakeKeeper, rpc: RpcClient
) -> None:
    """Submitted early, the job still waits for expiredAt + 1 h (not submittedAt + 1 h)."""
    job = flows.job(700)
    flows.submit(job)
    (state,) = await flows.jobs()
    keeper = make_keeper(db=flows.db)
    flows.e.control.mine_at(state.expired_at + EVALUATION_GRACE_PERIOD - 1)
    summary = await flows.tick(keeper, rpc)
    assert summary.planned == 0 and keeper_books.all_intents(keeper.store) == []
    flows.e.control.mine_at(state.expired_at + EVALUATION_GRACE_PERIOD)
    await flows.tick(keeper, rpc)
    flows.e.control.mine()
    await flows.tick(keeper, rpc)
    assert [i.outcome for i in keeper_books.all_intents(keeper.store)] == ["confirmed"]
    assert flows.status(job) == EXPIRED
