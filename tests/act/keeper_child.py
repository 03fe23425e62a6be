"""A keeper in its own process, for SIGKILL tests: one tick, then it prints "done".

Usage: ``python keeper_child.py '<json spec>'`` with the key in $KEEPER_PRIVATE_KEY.
The spec names the database, the RPC URL, the contracts and the jobs (JobState fields).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from keeper.act import Keeper, KeeperSettings, load_signer
from keeper.config import ContractConfig
from keeper.domain.model import JobState, JobStatus, Protocol
from keeper.rpc.client import RpcClient
from keeper.rpc.config import EndpointConfig
from keeper.store.db import connect
from keeper.store.migrations import migrate


async def main(spec: dict[str, Any]) -> None:
    conn = connect(str(spec["db"]))
    migrate(conn)
    endpoint = EndpointConfig.from_url(str(spec["url"]), name="node", rate=10_000)
    jobs = [JobState(**{**j, "status": JobStatus(j["status"])}) for j in spec["jobs"]]
    async with RpcClient([endpoint], timeout=120.0, max_attempts=1, deadline=300.0) as rpc:
        keeper = Keeper(
            settings=KeeperSettings(
                max_fee_cap=100 * 10**9, confirmations=1, multicall=str(spec["multicall"])
            ),
            chain_id=31337,
            rpc=rpc,
            db=conn,
            signer=load_signer(private_key_env="KEEPER_PRIVATE_KEY"),
            contracts=[ContractConfig(n, Protocol(p), a) for n, p, a in spec["contracts"]],
        )
        head = await rpc.get_block("latest")
        assert head is not None
        await keeper.tick(head, jobs, [])
    print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
