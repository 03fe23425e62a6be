"""Reading and checking JSON-RPC replies: bounded bodies, ids, errors, nulls, validators.

Pure apart from reading the body. A reply that is not what was asked for
raises ``BadReply`` with the classified failure; the transport decides what it
costs the endpoint (a whole reply counts against its health, a batch item
only through the batch's first fault).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

import aiohttp

from keeper.domain.rpc_errors import RpcFailure, classify
from keeper.rpc.validate import InvalidResponse

T = TypeVar("T")
Parser = Callable[[Any], T]
# a whole reply's bytes and its request id to the parsed result, or None: parse the
# body the generic way (keeper.rpc.logs_reply)
BodyScanner = Callable[[bytes, int], T | None]

# Error bodies are only read for their message; more than this is noise.
_ERROR_BODY_LIMIT: Final = 2_000


class BadReply(Exception):
    """A reply (or batch item) that carries an error or fails its checks."""

    def __init__(self, failure: RpcFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def reply_result(reply: Any, expected_id: int, nullable: bool, parse: Parser[T] | None) -> Any:
    """The checked (and parsed) result of one reply object to request ``expected_id``."""
    if not isinstance(reply, Mapping) or reply.get("id") != expected_id:
        raise BadReply(RpcFailure("transient", "reply is not a JSON-RPC object for our request id"))
    error = reply.get("error")
    if error is not None:
        raise BadReply(classify(200, error if isinstance(error, Mapping) else str(error)))
    if "result" not in reply:
        raise BadReply(RpcFailure("transient", "reply has no result"))
    result = reply["result"]
    if result is None and not nullable:
        raise BadReply(RpcFailure("transient", "null result"))
    if parse is not None and result is not None:
        try:
            result = parse(result)
        except InvalidResponse as exc:
            raise BadReply(RpcFailure("transient", f"invalid result: {exc}")) from None
    return result


def item_result(item: Mapping[str, Any], nullable: bool, parse: Parser[Any] | None) -> Any:
    """The checked (and parsed) result of one item of a batch reply."""
    error = item.get("error")
    if error is not None:
        raise BadReply(classify(200, error if isinstance(error, Mapping) else str(error)))
    if "result" not in item or (item["result"] is None and not nullable):
        raise BadReply(RpcFailure("transient", "missing or null result"))
    result = item["result"]
    if parse is not None and result is not None:
        try:
            return parse(result)
        except InvalidResponse as exc:
            raise BadReply(RpcFailure("transient", f"invalid result: {exc}")) from None
    return result


async def read_capped(resp: aiohttp.ClientResponse, limit: int) -> bytes | None:
    """The whole body, or None as soon as it exceeds ``limit`` bytes."""
    if resp.content_length is not None and resp.content_length > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def error_member(raw: bytes) -> Mapping[str, Any] | str:
    """The JSON-RPC ``error`` of a non-200 reply if it has one, else a text snippet."""
    text = raw[:_ERROR_BODY_LIMIT].decode("utf-8", errors="replace")
    try:
        decoded = json.loads(raw)
    except (ValueError, RecursionError):
        return text
    if isinstance(decoded, Mapping):
        err = decoded.get("error")
        if isinstance(err, Mapping):
            return err
        if isinstance(err, str):
            return err
    return text
