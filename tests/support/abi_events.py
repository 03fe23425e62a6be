"""ABI-encode events with eth_abi, independently of the decoder under test.

Every test that builds logs from the event catalog encodes them here, so the
decoder is always checked against one reference encoding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eth_abi.abi import encode

from keeper.domain.event_catalog import EventSpec


def encode_event(spec: EventSpec, values: Mapping[str, Any]) -> tuple[tuple[str, ...], bytes]:
    """The log's topics (topic0 then the indexed arguments) and data (the rest, ABI-encoded).

    Fixed-size byte arguments may be given as ``0x`` hex strings.
    """
    topics = [spec.topic0]
    types: list[str] = []
    plain: list[Any] = []
    for arg, typ, indexed in spec.inputs:
        value = values[arg]
        if typ in ("bytes32", "bytes4") and isinstance(value, str):
            value = bytes.fromhex(value[2:])
        if indexed:
            topics.append("0x" + encode([typ], [value]).hex())
        else:
            types.append(typ)
            plain.append(value)
    return tuple(topics), encode(types, plain)
