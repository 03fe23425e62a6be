"""eth_abi's encoder and decoder, imported on first use.

The indexer decodes events, view results and Multicall3 answers with its
own readers (keeper.domain.events, view_words, multicall) and reaches
eth_abi only for a shape they decline; the keeper encodes calls with it.
Importing eth_abi brings eth_utils and pydantic, a tenth of a second of
start-up (bench/README.md), which a command that never needs it need not pay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["decode", "encode"]


def decode(types: Sequence[str], data: bytes, *, strict: bool = True) -> tuple[Any, ...]:
    from eth_abi.abi import decode as eth_decode

    return tuple(eth_decode(types, data, strict=strict))


def encode(types: Sequence[str], values: Sequence[Any]) -> bytes:
    from eth_abi.abi import encode as eth_encode

    return bytes(eth_encode(types, values))
