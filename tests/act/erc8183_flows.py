"""ERC8183 jobs on a real anvil, indexed by the real indexer, kept by a real keeper.

The keeper reads its jobs the daemon's way (``due_jobs`` over the indexed database) and
the contract's pause state from the indexed Paused/Unpaused events, so these flows take
the daemon's code paths end to end.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from eth_abi.abi import decode
from keeper_harness import CLIENT, DEPLOYER, EVALUATOR, PROVIDER, Escrows, address_of, calldata

from keeper.act.manager import Keeper, TickSummary
from keeper.config import ContractConfig, load_config
from keeper.domain.model import BlockHeader, JobState
from keeper.rpc.client import RpcClient
from keeper.store.states import due_jobs, job_from_row

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sync"))
from sync_support import Harness, write_config

ZERO = "0x" + "00" * 20
RECEIVER = "0x" + "5e" * 20
CLAIM_REFUND = "d2fd101b"  # claimRefund(uint256,bytes)
DELIVERABLE = b"\x0d" * 32
BLOCK_CLAIM_REFUND = bytes.fromhex(CLAIM_REFUND)


def indexer(db: Path, escrows: Escrows, contracts: list[ContractConfig]) -> Harness:
    """The daemon's indexer over ``contracts`` into ``db`` (the keeper's database too),
    every block final at once."""
    config = db.with_suffix(".toml")
    config.write_text(
        f'[chain]\nchain_id = 31337\nrpc_urls = ["{escrows.url}"]\nfinality = "confirmations"\n'
        f'confirmations = 0\n\n[database]\npath = "{db}"\n\n[api]\nenabled = false\n\n'
        + "".join(
            f'[[contracts]]\nname = "{c.name}"\nprotocol = "{c.protocol.value}"\n'
            f'address = "{c.address}"\nstart_block = {escrows.d.start_block}\n\n'
            for c in contracts
        )
    )
    return Harness(load_config(config))


@dataclass
class Claim:
    job: int
    cumulative: int
    opt: bytes = b"\x01"


class Flows:
    """Drives the ERC8183 escrow of one deployment and indexes it into ``db``."""

    def __init__(self, escrows: Escrows, tmp: Path) -> None:
        self.e = escrows
        self.c = escrows.d.erc8183
        cfg = write_config(
            tmp, "index", [escrows.url], escrows.d, finality="confirmations", confirmations=0
        )
        self.db = Path(cfg.database.path)
        self.config = tmp / "index.toml"
        self.index = Harness(cfg)

    # ----- the parties -----

    def job(
        self, expires_in: int, *, budget: int = 900, fund: bool = True, hook: str = ZERO,
        receiver: bool = False,
    ) -> int:  # fmt: skip
        e, c = self.e, self.c
        (counter,) = decode(["uint256"], e.view(c, calldata("jobCounter()")))
        job = int(counter) + 1
        e.call(
            CLIENT, c, "createJob(address,address,uint48,string,address,uint256,bytes)",
            ZERO, address_of(EVALUATOR), e.now() + expires_in, '{"brief":"erc8183"}', hook, 0,
            b"",
        )  # fmt: skip
        e.call(CLIENT, c, "setProvider(uint256,address,uint256,bytes)", job,
               address_of(PROVIDER), 77, b"")  # fmt: skip
        if receiver:
            e.call(PROVIDER, c, "setPayoutReceiver(uint256,address,bytes)", job, RECEIVER, b"")
        e.call(PROVIDER, c, "setBudget(uint256,address,uint256,bytes)", job, e.d.usdc, budget,
               b"")  # fmt: skip
        if fund:
            e.call(DEPLOYER, e.d.usdc, "mint(address,uint256)", address_of(CLIENT), budget)
            e.call(CLIENT, e.d.usdc, "approve(address,uint256)", c, budget)
            e.call(CLIENT, c, "fund(uint256,address,uint256,bytes)", job, e.d.usdc, budget, b"")
        return job

    def submit_claim(self, job: int, cumulative: int) -> Claim:
        claim = Claim(job, cumulative)
        self.e.call(PROVIDER, self.c, "submitClaim(uint256,uint256,bytes32,bytes)", job,
                    cumulative, DELIVERABLE, claim.opt)  # fmt: skip
        return claim

    def approve(self, claim: Claim) -> None:
        self.e.call(CLIENT, self.c, "approveClaim(uint256,uint256,bytes32,bytes)", claim.job,
                    claim.cumulative, DELIVERABLE, claim.opt)  # fmt: skip

    def reject(self, claim: Claim) -> None:
        self.e.call(CLIENT, self.c, "rejectClaim(uint256,uint256,bytes32,bytes32,bytes)",
                    claim.job, claim.cumulative, DELIVERABLE, b"\x00" * 32, claim.opt)  # fmt: skip

    def submit(self, job: int) -> None:
        self.e.call(PROVIDER, self.c, "submit(uint256,bytes32,bytes)", job, DELIVERABLE, b"")

    def admin(self, signature: str, *args: object) -> None:
        self.e.call(DEPLOYER, self.c, signature, *args)

    def status(self, job: int) -> int:
        raw = self.e.view(self.c, calldata("getJob(uint256)", job))
        return int.from_bytes(raw[32 * 2 : 32 * 3], "big")  # the 2nd of 13 fields

    def balance(self, who: str) -> int:
        raw = self.e.view(self.e.d.usdc, calldata("balanceOf(address)", who))
        return int.from_bytes(raw, "big")

    # ----- the daemon's side -----

    async def jobs(self) -> list[JobState]:
        """Index to head, then every job of the ERC8183 escrow as indexed, due or not."""
        await self.index.to_head()
        rows = self.index.conn.execute("SELECT * FROM jobs WHERE contract = ?", (self.c,))
        return [job_from_row(r) for r in rows.fetchall()]

    async def tick(self, keeper: Keeper, rpc: RpcClient) -> TickSummary:
        """Index to head, then a keeper tick on the escrow's jobs the daemon would hand it."""
        await self.index.to_head()
        head = await self.head(rpc)
        due = due_jobs(self.index.conn, 31337, head.timestamp)
        return await keeper.tick(head, [j for j in due if j.contract == self.c], [])

    async def head(self, rpc: RpcClient) -> BlockHeader:
        block = await rpc.get_block("latest")
        assert block is not None
        return block
