"""Keccak-256, the chain's hash, straight from eth_hash.

eth_utils wraps the same function, but importing it brings pydantic and the
rest of its toolkit, a tenth of a second of every command's start-up
(bench/README.md); nothing in the daemon needs more than bytes in, bytes out.
"""

from __future__ import annotations

from eth_hash.auto import keccak as _keccak256

__all__ = ["keccak"]


def keccak(data: bytes = b"", *, text: str | None = None) -> bytes:
    """The 32-byte Keccak-256 of ``data``, or of ``text`` as UTF-8."""
    return bytes(_keccak256(data if text is None else text.encode("utf-8")))
