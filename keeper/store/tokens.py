"""Token metadata (``token_meta``): which tokens the index has seen and what they said.

One row per token once read, answered or not (NULL decimals and symbol: the
token did not answer, its amounts stay in base units). Tokens are read once;
nothing here refreshes a row, because ``decimals()`` is fixed for an ERC-20's
life and a symbol change does not change any amount.
"""

from __future__ import annotations

from keeper.domain.tokens import TokenMeta
from keeper.store.db import Db, write_transaction

__all__ = ["TokenMeta", "save_token_meta", "token_meta", "tokens_to_read"]

_ZERO = "0x" + "00" * 20


def tokens_to_read(conn: Db, chain_id: int, limit: int = 20) -> list[str]:
    """Job tokens with no metadata row yet (the zero address is no token)."""
    rows = conn.execute(
        "SELECT DISTINCT token FROM jobs WHERE chain_id = ? AND token NOT IN ('', ?) "
        "AND NOT EXISTS (SELECT 1 FROM token_meta m WHERE m.chain_id = jobs.chain_id "
        "AND m.token = jobs.token) LIMIT ?",
        (chain_id, _ZERO, limit),
    ).fetchall()
    return sorted(str(r[0]) for r in rows)


def save_token_meta(conn: Db, chain_id: int, meta: TokenMeta, read_block: int) -> None:
    """Record one token's answer (its own short transaction; a repeat is ignored)."""
    with write_transaction(conn):
        conn.execute(
            "INSERT INTO token_meta (chain_id, token, decimals, symbol, read_block) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (chain_id, token) DO NOTHING",
            (chain_id, meta.token, meta.decimals, meta.symbol, read_block),
        )


def token_meta(conn: Db, chain_id: int | None) -> dict[str, TokenMeta]:
    """Every known token's metadata, by address (a few rows: one per token)."""
    where, params = ("WHERE chain_id = ?", (chain_id,)) if chain_id is not None else ("", ())
    rows = conn.execute(f"SELECT token, decimals, symbol FROM token_meta {where}", params)
    return {
        str(r[0]): TokenMeta(str(r[0]), None if r[1] is None else int(r[1]), r[2]) for r in rows
    }
