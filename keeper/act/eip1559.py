"""The bytes of a signed EIP-1559 transaction: RLP, the keccak digest, a recoverable signature.

The keeper signs one kind of transaction. eth_account does the same through
eth_keys, rlp, eth_utils and pydantic, whose import is a large share of a
daemon's memory and start-up (bench/README.md); the signature itself is
libsecp256k1's either way (coincurve, RFC 6979 nonces, low s), so the bytes
are the same ones: tests/act/test_signing_bytes.py checks them against
eth_account.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

from coincurve import PrivateKey

from keeper.domain.hashing import keccak

__all__ = ["TYPE", "address_of", "rlp", "sign_1559"]

TYPE = 2  # EIP-2718 type of an EIP-1559 transaction

# what RLP encodes: a byte string, a non-negative integer (its minimal big-endian
# bytes) or a list of those
RlpItem: TypeAlias = bytes | int | Sequence["RlpItem"]


def _length_prefix(length: int, short: int) -> bytes:
    if length < 56:
        return bytes([short + length])
    size = length.to_bytes((length.bit_length() + 7) // 8, "big")
    return bytes([short + 55 + len(size)]) + size


def rlp(item: RlpItem) -> bytes:
    """Recursive Length Prefix encoding (the yellow paper's appendix B)."""
    if isinstance(item, int):
        if item < 0:
            raise ValueError("RLP encodes non-negative integers only")
        item = item.to_bytes((item.bit_length() + 7) // 8, "big")
    if isinstance(item, bytes):
        if len(item) == 1 and item[0] < 0x80:
            return item
        return _length_prefix(len(item), 0x80) + item
    body = b"".join(rlp(x) for x in item)
    return _length_prefix(len(body), 0xC0) + body


def address_of(key: PrivateKey) -> str:
    """The lowercase 0x address of a key: the last 20 bytes of its public key's keccak."""
    return "0x" + keccak(key.public_key.format(compressed=False)[1:])[-20:].hex()


def sign_1559(
    key: PrivateKey,
    *,
    chain_id: int,
    nonce: int,
    max_priority_fee: int,
    max_fee: int,
    gas: int,
    to: bytes,
    value: int,
    data: bytes,
) -> tuple[bytes, bytes]:
    """(raw transaction, its hash) of the EIP-1559 transaction, with an empty access list."""
    if len(to) != 20:
        raise ValueError("a transaction's 'to' is 20 bytes")
    fields: list[RlpItem] = [chain_id, nonce, max_priority_fee, max_fee, gas, to, value, data, []]
    digest = keccak(bytes([TYPE]) + rlp(fields))
    signature = key.sign_recoverable(digest, hasher=None)  # r (32) | s (32) | recovery id
    r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:64], "big")
    raw = bytes([TYPE]) + rlp([*fields, signature[64], r, s])
    return raw, keccak(raw)
