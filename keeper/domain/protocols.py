"""The registry of protocol tables: one ``ProtocolTable`` per protocol, looked up here.

Everything that depends on which revision of a protocol is deployed reads these tables:
the keeper's calldata (``Dialect.encode``), revert classification, dialect detection and
pinning, and the protocol matrix in ``docs/protocols.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from keeper.domain.dialects import Dialect, ErrorClass, ProtocolTable
from keeper.domain.dialects_erc8183 import ERC8183
from keeper.domain.dialects_taskmarket import TASKMARKET
from keeper.domain.model import Protocol

__all__ = ["TABLES", "all_dialects", "classify_error", "dialect_named", "table"]

TABLES: Final[Mapping[Protocol, ProtocolTable]] = {
    Protocol.ERC8183: ERC8183,
    Protocol.TASKMARKET: TASKMARKET,
}


def table(protocol: Protocol) -> ProtocolTable:
    return TABLES[protocol]


def dialect_named(protocol: Protocol, name: str) -> Dialect:
    """The dialect ``name`` of ``protocol``; KeyError naming the known ones otherwise."""
    return TABLES[protocol].dialect(name)


def all_dialects() -> tuple[Dialect, ...]:
    return tuple(d for t in TABLES.values() for d in t.dialects)


def classify_error(
    data: bytes | None, protocol: Protocol | None = None
) -> tuple[ErrorClass, str] | None:
    """Class and name of a known revert: ``protocol``'s table first, then any table."""
    order = [TABLES[protocol]] if protocol is not None else []
    order += [t for p, t in TABLES.items() if p is not protocol]
    for t in order:
        found = t.classify(data)
        if found is not None:
            return found
    return None
