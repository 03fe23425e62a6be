"""Keccak-256, the chain's hash, straight from pycryptodome.

eth_utils wraps the same function, but importing it brings pydantic and the
rest of its toolkit; eth_hash's ``auto`` backend looks for its backends on
the first call. Both cost every command's start-up (bench/README.md), and
nothing in the daemon needs more than bytes in, bytes out.
"""

from __future__ import annotations

from Crypto.Hash import keccak as _keccak

__all__ = ["keccak"]


def keccak(data: bytes = b"", *, text: str | None = None) -> bytes:
    """The 32-byte Keccak-256 of ``data``, or of ``text`` as UTF-8."""
    return _keccak.new(
        digest_bits=256, data=data if text is None else text.encode("utf-8")
    ).digest()
