"""BulkJobDriver: job lifecycles through the real ERC8183-shaped escrow, for the benchmarks."""

from __future__ import annotations

from escrow_harness import DEPLOYER, STRANGER, Chain
from eth_abi.abi import encode
from eth_utils import keccak
from web3 import Web3
from web3.contract import Contract

from keeper.devnet.deploy import EVALUATOR_FEE_BPS, PLATFORM_FEE_BPS, deploy_contract

LIFECYCLE = [
    "JobCreated",
    "BudgetSet",
    "JobFunded",
    "JobSubmitted",
    "PlatformFeePaid",
    "EvaluatorFeePaid",
    "PaymentReleased",
    "JobCompleted",
]
COMPLETED = 3


def budget(job_id: int) -> int:
    return 1_000_000 + (job_id % 97) * 10_000


def driver(c: Chain) -> Contract:
    escrow, token = (Web3.to_checksum_address(a) for a in (c.d.erc8183, c.d.usdc))
    return c.contract(
        "BulkJobDriver", deploy_contract(c.w3, DEPLOYER, "BulkJobDriver", escrow, token)
    )


def next_id(c: Chain) -> int:
    return int(c.erc8183.functions.jobCounter().call()) + 1


def test_whole_lifecycles_in_one_step(c: Chain) -> None:
    """Jobs given to every stage of the step that creates them go Open -> Completed there,
    with the escrow's own events and getJob answering the description and budget."""
    drv = driver(c)
    first = next_id(c)
    ids = [first, first + 1]
    texts = ['{"brief":"Translate the listing (batch 1)"}', '{"brief":"x","schema":{}}']
    receipt = c.send(DEPLOYER, drv.functions.step(texts, ids, ids, ids, ids))
    events = c.events(receipt, c.erc8183)
    names = [e.name for e in events]
    per_stage = {n: [e.args["jobId"] for e in events if e.name == n] for n in LIFECYCLE}
    assert sorted(names) == sorted(LIFECYCLE * 2)
    assert all(per_stage[n] == ids for n in LIFECYCLE)
    provider = drv.functions.provider().call()
    evaluator = drv.functions.evaluator().call()
    for job_id, text in zip(ids, texts, strict=True):
        job = c.erc8183.functions.getJob(job_id).call()
        assert job[0] == drv.address  # client
        assert job[1] == COMPLETED
        assert (job[2], job[4]) == (provider, evaluator)
        assert job[6] == budget(job_id)
        assert job[10] == text
    deliverable = keccak(encode(["string", "uint256"], ["deliverable", first]))
    submitted = next(e for e in events if e.name == "JobSubmitted")
    assert submitted.args["deliverable"] == deliverable
    total = budget(ids[0]) + budget(ids[1])
    fees = sum(b * (PLATFORM_FEE_BPS + EVALUATOR_FEE_BPS) // 10_000 for b in map(budget, ids))
    assert c.balance(provider) == total - fees
    assert c.balance(c.d.erc8183) == 0


def test_stages_spread_over_steps(c: Chain) -> None:
    """A job moves one stage per step when the steps pass it on; each step only emits its own
    stage's events."""
    drv = driver(c)
    job = next_id(c)
    steps = [
        (["{}"], [], [], [], [], ["JobCreated"]),
        ([], [job], [], [], [], ["BudgetSet"]),
        ([], [], [job], [], [], ["JobFunded"]),
        ([], [], [], [job], [], ["JobSubmitted"]),
        ([], [], [], [], [job], LIFECYCLE[4:]),
    ]
    for *args, expected in steps:
        receipt = c.send(DEPLOYER, drv.functions.step(*args))
        assert c.names(receipt, c.erc8183) == expected
    assert c.erc8183.functions.getJob(job).call()[1] == COMPLETED


def test_only_the_owner_steps_and_only_the_driver_acts(c: Chain) -> None:
    drv = driver(c)
    c.expect_revert(STRANGER, drv.functions.step(["{}"], [], [], [], []), "NotOwner()")
    party = c.contract("BulkJobDriver", drv.functions.provider().call())
    party = c.w3.eth.contract(
        address=party.address,
        abi=[{"type": "function", "name": "submit", "stateMutability": "nonpayable",
              "inputs": [{"name": "jobIds", "type": "uint256[]"}], "outputs": []}],
    )  # fmt: skip
    c.expect_revert(DEPLOYER, party.functions.submit([1]), "NotDriver()")


def test_a_stage_out_of_order_reverts_the_whole_step(c: Chain) -> None:
    """Funding a job whose budget was never set reverts the escrow's call, and the step with
    it: the benchmark's workload cannot silently lose a stage."""
    drv = driver(c)
    job = next_id(c)
    c.send(DEPLOYER, drv.functions.step(["{}"], [], [], [], []))
    c.expect_revert(DEPLOYER, drv.functions.step([], [], [job], [], []), "PaymentTokenMismatch()")
