"""Bulk ERC-8183 traffic from the devnet EventEmitter: thousands of real-shaped events per tx.

One transaction per block (anvil automines each), so the chain looks like a
busy contract on a real network: every block holds a full job lifecycle for a
few hundred jobs (JobCreated, BudgetSet, JobFunded, JobSubmitted, JobCompleted,
PaymentReleased: 6 events per job).

The emitter has no ``getJob``: every read the indexer makes of these jobs
reverts, so this traffic does not take the path real contracts do. Only the
API benchmark uses it (it measures requests while blocks arrive); the backfill
benchmarks use ``bench/escrow_workload.py``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bench.common import Sender, calldata, wait_receipts

EVENTS_PER_JOB = 6
_SIG = "emitJobFlowBatch(uint256,uint256,address,address,address,address,uint256,uint256,uint8)"
_TYPES = ["uint256", "uint256", "address", "address", "address", "address", "uint256", "uint256",
          "uint8"]  # fmt: skip
# about 12,500 gas per job with 3 stages; a transaction may use at most 2**24 gas (Osaka)
GAS_PER_JOB = 13_000
CLIENT = "0x" + "c1" * 20
PROVIDER = "0x" + "b2" * 20
EVALUATOR = "0x" + "e3" * 20
TOKEN = "0x" + "70" * 20


@dataclass(frozen=True)
class Workload:
    events: int
    jobs: int
    first_block: int
    last_block: int
    seconds: float

    @property
    def blocks(self) -> int:
        return self.last_block - self.first_block + 1


def job_flows(
    url: str, emitter: str, events: int, *, jobs_per_block: int = 250, first_id: int = 1
) -> Workload:
    """Emit ``events`` (rounded up to whole jobs) in blocks of ``jobs_per_block`` jobs."""
    jobs = -(-events // EVENTS_PER_JOB)
    sender = Sender(url)
    start = time.monotonic()
    hashes: list[str] = []
    next_id = first_id
    while next_id < first_id + jobs:
        n = min(jobs_per_block, first_id + jobs - next_id)
        data = calldata(
            _SIG, _TYPES,
            [next_id, n, CLIENT, PROVIDER, EVALUATOR, TOKEN, 10**6, 2**40, 3],
        )  # fmt: skip
        hashes.append(sender.send(emitter, data, 60_000 + GAS_PER_JOB * n))
        next_id += n
    blocks: list[int] = []
    logs = 0
    for tx_hash in hashes:  # one at a time: a million logs held at once would cost a GB here
        (receipt,) = wait_receipts(url, [tx_hash], timeout=600)
        blocks.append(int(receipt["blockNumber"], 16))
        logs += len(receipt["logs"])
    if logs != jobs * EVENTS_PER_JOB:
        raise RuntimeError(f"workload emitted {logs} logs, expected {jobs * EVENTS_PER_JOB}")
    return Workload(logs, jobs, min(blocks), max(blocks), time.monotonic() - start)
