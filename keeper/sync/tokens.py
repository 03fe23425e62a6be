"""Reading each token's ``decimals()`` and ``symbol()`` once, beside indexing.

The daemon runs :func:`read_new_tokens` in its own loop: indexing never waits
for a token (a slow or hostile token contract delays only its own label), and
the reads share the indexer's RPC client and its rate limits. A token that
reverts, has no code, or returns garbage is recorded as not answering; an RPC
failure (rate limit, timeout, node down) records nothing, so the token is
asked again on the next round.
"""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Protocol

from keeper.domain.tokens import DECIMALS_CALL, SYMBOL_CALL, decode_decimals, decode_symbol
from keeper.obs.logging import get_logger
from keeper.rpc.errors import ExecutionRevertedError
from keeper.store.tokens import TokenMeta, save_token_meta, tokens_to_read

__all__ = ["read_new_tokens", "read_token"]

log = get_logger(__name__)


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


async def read_new_tokens(
    conn: sqlite3.Connection,
    rpc: Caller,
    chain_id: int,
    block: int,
    reader: sqlite3.Connection | None = None,
) -> int:
    """Read every job token that has no metadata yet; returns how many were stored.

    Finding them scans the jobs' tokens; with ``reader`` (a read-only connection of
    the same database) that scan runs on a worker thread, so the daemon's event
    loop keeps serving the indexer meanwhile. Writes go through ``conn``.
    """
    if reader is not None:
        todo = await asyncio.to_thread(tokens_to_read, reader, chain_id)
    else:
        todo = tokens_to_read(conn, chain_id)
    stored = 0
    for token in todo:
        meta = await read_token(rpc, token, block)
        save_token_meta(conn, chain_id, meta, block)
        log.info("token_metadata_read", token=token, decimals=meta.decimals, symbol=meta.symbol)
        stored += 1
    return stored
