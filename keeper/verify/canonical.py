"""Canonical bytes and digests of JSON documents (RFC 8785, JCS).

The evaluator hashes its verdict in canonical form, so the digest must not
depend on how a document happens to be written: key order, whitespace and
number spelling (``1.0`` and ``1`` are the same IEEE double) are erased, while
string contents are kept exactly. ``json.dumps`` tricks get floats, unicode
key order (UTF-16 code units) and escapes wrong, hence the maintained library.
"""

from __future__ import annotations

from typing import TypeAlias

import rfc8785

from keeper.domain.hashing import keccak

JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None


class NotCanonicalizable(ValueError):
    """The value has no JCS form (a non-finite float, an integer beyond 2**53, a non-JSON type)."""


def canonical_bytes(doc: JsonValue) -> bytes:
    """The RFC 8785 serialization of ``doc`` (UTF-8, no insignificant whitespace)."""
    try:
        return bytes(rfc8785.dumps(doc))
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise NotCanonicalizable(str(exc)) from exc


def keccak_hex(data: bytes) -> str:
    """keccak256 of raw bytes as lowercase ``0x`` hex, the form hashes take everywhere."""
    return "0x" + bytes(keccak(data)).hex()


def digest(doc: JsonValue) -> str:
    """keccak256 of the canonical bytes: what an evaluator puts on chain as ``reason``."""
    return keccak_hex(canonical_bytes(doc))
