"""The slice of the RPC client the transaction manager uses, as a structural type.

Declared here so the manager states exactly what it needs from the chain, and
so the dependency points at a shape rather than at one client class.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from keeper.domain.model import BlockHeader
from keeper.rpc.client import Sighting
from keeper.rpc.errors import RpcError

__all__ = ["ChainRpc", "failure_kind", "revert_data"]


class ChainRpc(Protocol):
    """What the manager calls (``keeper.rpc.client.RpcClient`` satisfies it).

    ``call`` has no ``from``: simulations run as the zero address, which is
    right for the permissionless actions and gives the same permission revert
    as our own key on a requester-only ``evaluatorTimeout`` (the keeper is
    never the requester of the tasks it keeps).
    """

    async def call(self, to: str, calldata: bytes, block: int | str = ..., /) -> bytes: ...

    async def get_code(self, address: str, block: int | str = ..., /) -> bytes: ...

    async def estimate_gas(self, tx: Mapping[str, Any], block: int | str, /) -> int: ...

    async def send_raw_transaction(self, raw: bytes, /) -> str: ...

    async def get_transaction_receipt(self, tx_hash: str, /) -> Mapping[str, Any] | None: ...

    async def get_transaction_by_hash(self, tx_hash: str, /) -> Mapping[str, Any] | None: ...

    async def seen_anywhere(self, tx_hashes: Sequence[str], /) -> Sighting: ...

    async def get_transaction_count(self, address: str, block: int | str = ..., /) -> int: ...

    async def get_balance(self, address: str, block: int | str = ..., /) -> int: ...

    async def fee_history(
        self, blocks: int, newest: int | str, percentiles: Sequence[float], /
    ) -> Mapping[str, Any]: ...

    async def get_block(self, ref: int | str, /) -> BlockHeader | None: ...


def failure_kind(exc: BaseException) -> str | None:
    """The classified kind of an RPC failure, or None for anything else."""
    return exc.failure.kind if isinstance(exc, RpcError) else None


def revert_data(exc: BaseException) -> bytes | None:
    """Revert bytes carried by an ``execution_reverted`` failure, if the node sent them."""
    if not isinstance(exc, RpcError) or exc.failure.kind != "execution_reverted":
        return None
    data = exc.failure.data
    if not data or not data.startswith("0x"):
        return None
    try:
        return bytes.fromhex(data[2:])
    except ValueError:
        return None
