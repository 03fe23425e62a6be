"""Reading a token's ``decimals()`` and ``symbol()``, beside indexing.

The daemon asks in its own loop (``keeper.indexing.read_new_tokens``, which
also stores the answers): indexing never waits for a token (a slow or hostile
token contract delays only its own label), and the reads share the indexer's
RPC client and its rate limits. A token that reverts, has no code, or returns
garbage (the same garbage when asked again) reads as not answering; an RPC
failure (rate limit, timeout, node down) or two unreadable answers that differ
propagate, so nothing is recorded and the token is asked again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from keeper.domain.tokens import (
    DECIMALS_CALL,
    SYMBOL_CALL,
    TokenMeta,
    decode_decimals,
    decode_symbol,
)
from keeper.errors import RetryableError
from keeper.rpc.errors import ExecutionRevertedError

__all__ = ["Caller", "read_token"]

T = TypeVar("T")


class Caller(Protocol):
    async def call(self, to: str, calldata: bytes, block: int | str = "latest") -> bytes: ...


async def _answer(rpc: Caller, token: str, calldata: bytes, block: int) -> bytes:
    try:
        return await rpc.call(token, calldata, block)
    except ExecutionRevertedError:
        return b""


async def _settled(
    rpc: Caller, token: str, calldata: bytes, block: int, decode: Callable[[bytes], T | None]
) -> T | None:
    """The token's answer, decoded; an answer that does not decode is asked again.

    Only the answer a node gives twice is the token's own (a contract answers the
    same call at the same block with the same bytes); a garbled one is not given
    twice, and storing it would leave the token unlabelled for good.
    """
    first = await _answer(rpc, token, calldata, block)
    value = decode(first)
    if value is not None:
        return value
    second = await _answer(rpc, token, calldata, block)
    value = decode(second)
    if value is None and second != first:
        raise RetryableError(
            f"token {token} answered 0x{calldata.hex()} at block {block} twice, differently, "
            "neither readable: nothing is stored and the token is asked again"
        )
    return value


async def read_token(rpc: Caller, token: str, block: int) -> TokenMeta:
    """One token's metadata at ``block``; RPC failures other than a revert propagate."""
    decimals = await _settled(rpc, token, DECIMALS_CALL, block, decode_decimals)
    symbol = await _settled(rpc, token, SYMBOL_CALL, block, decode_symbol)
    return TokenMeta(token, decimals, symbol)
