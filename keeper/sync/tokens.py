"""Reading a token's ``decimals()`` and ``symbol()``, beside indexing.

The daemon asks in its own loop (``keeper.indexing.read_new_tokens``, which
also stores the answers): indexing never waits for a token (a slow or hostile
token contract delays only its own label), and the reads share the indexer's
RPC client and its rate limits. A token that reverts, has no code, or returns
garbage reads as not answering; an RPC failure (rate limit, timeout, node
down) propagates, so nothing is recorded and the token is asked again.
"""

from __future__ import annotations

from typing import Protocol

from keeper.domain.tokens import (
    DECIMALS_CALL,
    SYMBOL_CALL,
    TokenMeta,
    decode_decimals,
    decode_symbol,
)
from keeper.rpc.errors import ExecutionRevertedError

__all__ = ["Caller", "read_token"]


class Caller(Protocol):
    async def call(self, to: str, calldata: bytes, block: int | str = "latest") -> bytes: ...


async def _answer(rpc: Caller, token: str, calldata: bytes, block: int) -> bytes:
    try:
        return await rpc.call(token, calldata, block)
    except ExecutionRevertedError:
        return b""


async def read_token(rpc: Caller, token: str, block: int) -> TokenMeta:
    """One token's metadata at ``block``; RPC failures other than a revert propagate."""
    decimals = decode_decimals(await _answer(rpc, token, DECIMALS_CALL, block))
    symbol = decode_symbol(await _answer(rpc, token, SYMBOL_CALL, block))
    return TokenMeta(token, decimals, symbol)
