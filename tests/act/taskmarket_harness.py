"""Drive the devnet task market diamond: every requester, worker and evaluator call goes
through the trusted forwarder, as on the deployed diamond; task ids come from TaskCreated.
"""

from __future__ import annotations

from dataclasses import dataclass

from eth_utils.crypto import keccak
from keeper_harness import (
    CLIENT,
    DEPLOYER,
    EVALUATOR,
    RESOLVER,
    WORKER,
    Escrows,
    address_of,
    calldata,
)

from keeper.devnet.anvil import rpc_call
from keeper.domain.model import TaskState, TaskStatus
from keeper.domain.taskmodes import BOUNTY, CLAIM
from keeper.domain.views import decode_view, encode_view

CREATE = (
    "createTask((uint256,uint256,bytes4,uint256,uint256,bytes4),(bool,uint16),(address[],bytes),"
    "(bytes32,string,bytes32[]),(address,uint256,uint16,uint32,uint32,address))"
)
CREATED_TOPIC = (
    "0x" + keccak(text="TaskCreated(bytes32,address,uint256,bytes4,uint256,bool,uint16)").hex()
)
APPEAL_WINDOW = 600
REWARD = 5 * 10**6


def _call(signature: str, *args: object) -> bytes:
    return bytes.fromhex(calldata(signature, *args)[2:])


@dataclass
class Diamond:
    """The diamond at ``escrows.d.taskmarket`` and its forwarder."""

    e: Escrows

    @property
    def address(self) -> str:
        return self.e.d.taskmarket

    def relay(self, key: str, signature: str, *args: object) -> dict[str, object]:
        """Call the diamond through the forwarder as ``key``; return the mined receipt."""
        inner = _call(signature, *args)
        data = _call("forward(address,bytes)", self.address, inner)
        tx = self.e.send(key, self.e.d.taskmarket_forwarder, "0x" + data.hex())
        self.e.wait([tx])
        receipt = rpc_call(self.e.url, "eth_getTransactionReceipt", [tx])
        assert isinstance(receipt, dict)
        return receipt

    def direct(self, key: str, signature: str, *args: object) -> None:
        self.e.call(key, self.address, signature, *args)

    def create(
        self,
        duration: int,
        *,
        mode: str = CLAIM,
        evaluator: bool = False,
        window: int = 300,
        reward: int = REWARD,
    ) -> str:
        """A task created by CLIENT (reward escrowed); returns the id the contract chose."""
        self.e.call(DEPLOYER, self.e.d.usdc, "mint(address,uint256)", address_of(CLIENT), reward)
        self.e.call(CLIENT, self.e.d.usdc, "approve(address,uint256)", self.address, reward)
        zero = "0x" + "00" * 20
        ev = (
            (address_of(EVALUATOR), 0, 100, window, APPEAL_WINDOW, address_of(RESOLVER))
            if evaluator
            else (zero, 0, 0, 0, 0, zero)
        )
        receipt = self.relay(
            CLIENT,
            CREATE,
            (reward, duration, bytes.fromhex(mode[2:]), 0, 0, b"\0" * 4),
            (False, 0),
            ([], b""),
            (b"\0" * 32, "", []),
            ev,
        )
        logs = receipt["logs"]
        assert isinstance(logs, list)
        (created,) = [lg for lg in logs if lg["topics"][0] == CREATED_TOPIC]
        return str(created["topics"][1])

    def review_task(self, duration: int, window: int) -> tuple[str, int]:
        """Created with an evaluator, claimed and submitted; returns (id, evaluation deadline)."""
        task = self.create(duration, evaluator=True, window=window)
        tid = bytes.fromhex(task[2:])
        self.relay(WORKER, "claimTask(bytes32,uint256)", tid, 0)
        self.relay(WORKER, "submitWork(bytes32,bytes32)", tid, b"\x11" * 32)
        return task, self.e.now() + window

    def appealing_task(self, *, award: int = 4 * 10**6) -> tuple[str, int]:
        """Evaluated APPROVE with one award (of 0: finalized without an event, revision
        21); returns (id, appeal deadline)."""
        task, _ = self.review_task(50, window=300)
        self.relay(
            EVALUATOR,
            "evaluate(bytes32,uint8,uint16,uint16,bytes32,(address,uint256,uint16)[])",
            bytes.fromhex(task[2:]),
            0,
            90,
            80,
            b"\x22" * 32,
            [(address_of(WORKER), award, 1)],
        )
        return task, self.e.now() + APPEAL_WINDOW

    def disputed_task(self) -> str:
        """Evaluated (one award), then appealed by the worker: Disputed, with RESOLVER as
        its dispute resolver (TaskAppealed, then TaskDisputed)."""
        task, _ = self.appealing_task()
        self.relay(WORKER, "appeal(bytes32)", bytes.fromhex(task[2:]))
        return task

    def resolve(self, task_id: str, award: int) -> None:
        """RESOLVER resolves the dispute APPROVE with one award to WORKER (of 0: settled
        without an event, revision 21)."""
        self.direct(
            RESOLVER,
            "resolveDispute(bytes32,uint8,(address,uint256,uint16)[])",
            bytes.fromhex(task_id[2:]),
            0,
            [(address_of(WORKER), award, 1)],
        )

    def bounty_with_submission(self, duration: int) -> str:
        task = self.create(duration, mode=BOUNTY)
        self.relay(WORKER, "submitWork(bytes32,bytes32)", bytes.fromhex(task[2:]), b"\x44" * 32)
        return task

    def task(
        self,
        task_id: str,
        evaluation_deadline: int | None = None,
        appeal_deadline: int | None = None,
    ) -> TaskState:
        """Projection of one task from the revision-21 getTask (14 fields), at latest."""
        raw = self.e.view(self.address, "0x" + encode_view("getTask", task_id).hex())
        t = decode_view("getTask", raw)
        return TaskState(
            contract=self.address,
            task_id=task_id,
            requester=str(t["requester"]),
            reward=int(t["reward"]),  # type: ignore[arg-type]
            mode=str(t["mode"]),
            expiry_time=int(t["expiryTime"]),  # type: ignore[arg-type]
            status=TaskStatus(int(t["status"])),  # type: ignore[arg-type]
            evaluation_deadline=evaluation_deadline,
            appeal_deadline=appeal_deadline,
        )
