"""The text columns the index stores for an event and a view read, built where CPU is free.

Each event is stored with its decoded arguments, topics and data as text, and each read
with its result as JSON. On a dense backfill, building those strings is about a tenth of
the committing process's work, while the fetch process (keeper.sync.fetch_process) has
CPU to spare: it builds them once and they travel with the event (``Event.stored``) and
the read (``ChainRead.stored``). The functions live in the domain so that both processes
build them with the same code; the store builds whatever came without them.

uint256 values are decimal strings in the JSON, which every JSON reader keeps exact.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from keeper.domain.model import ArgValue, ChainRead, Event

__all__ = ["decoded_args_json", "encode_args", "event_texts", "read_text"]


def _jsonable(value: object) -> Any:
    """ints as decimal strings (uint256 must survive any JSON reader), tuples as lists.

    Read results come from the sync layer's ABI decoding; anything outside
    ArgValue (None, bytes) is stored as its string form rather than failing
    the whole batch.
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return str(value)


def encode_args(args: Any) -> str:
    """Compact JSON of an args/result mapping, keys in their given order."""
    return json.dumps({k: _jsonable(v) for k, v in args.items()}, separators=(",", ":"))


def decoded_args_json(args: Mapping[str, ArgValue]) -> str:
    """encode_args for decode_log output, without json.dumps (hot path, ~4x faster).

    Safe only because decode_log emits identifier keys and hex/int/bool values,
    none of which needs escaping; it gives the same bytes as encode_args.
    """
    parts = []
    for k, v in args.items():
        if v is True or v is False:
            parts.append(f'"{k}":{"true" if v else "false"}')
        else:
            parts.append(f'"{k}":"{v}"')
    return "{" + ",".join(parts) + "}"


def event_texts(e: Event) -> tuple[str, str, str]:
    """(args JSON, topics JSON, data hex) of an event, as its stored row holds them."""
    if e.stored is not None:
        return e.stored
    log = e.log
    if e.name is None:
        args, topics = "{}", json.dumps(list(log.topics), separators=(",", ":"))
    else:  # decoded: the topics are checked hashes and the args need no escaping
        args, topics = decoded_args_json(e.args), '["' + '","'.join(log.topics) + '"]'
    return args, topics, "0x" + log.data.hex()


def read_text(r: ChainRead) -> str:
    """A read's result as its stored row holds it."""
    return r.stored if r.stored is not None else encode_args(r.result)
