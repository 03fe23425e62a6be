"""Parse an untrusted JSON document within fixed bounds of size, depth and number length.

Documents come from evaluators and providers we do not trust, so parsing must
end quickly with a clear ``InvalidDocument`` (a JSON pointer and a reason)
whatever the input: a 50 MB body is refused before decoding, deep nesting is
measured by a linear pre-scan before ``json.loads`` could recurse, and number
literals are bounded before Python turns them into ints (whose str conversion
is quadratic and capped by the interpreter). Duplicate keys are an error rather
than "last one wins" because two parsers could then disagree on what a verdict says.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Final

from keeper.domain.digits import at_most
from keeper.verify.canonical import JsonValue

# 2**53 - 1: the largest integer every JCS implementation (IEEE doubles) keeps exactly.
MAX_SAFE_INTEGER = 9_007_199_254_740_991

# A JSON string, or an unterminated one up to the end of the text. Possessive
# quantifiers and the optional closing quote make every match attempt at a quote
# succeed without backtracking, so removing strings is linear even for
# adversarial input like '"\\"\\"\\"...' (a plain pattern is quadratic there).
_STRING = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


@dataclass(frozen=True, slots=True)
class DocumentLimits:
    """Bounds applied to every document and every fetched body."""

    max_bytes: int = 1 << 20  # a verdict is a few hundred bytes; 1 MiB leaves room for content
    max_depth: int = 64  # far beyond any real verdict or deliverable, far below recursion limits
    max_number_chars: int = 40  # a double needs at most 17 significant digits plus exponent


class InvalidDocument(Exception):
    """The bytes are not an acceptable JSON document; ``pointer`` locates the problem."""

    def __init__(self, pointer: str, detail: str, *, syntax: bool = False) -> None:
        super().__init__(f"{pointer or '(root)'}: {detail}")
        self.pointer = pointer
        self.detail = detail
        # True when the bytes are simply not JSON; False when they are JSON we refuse
        # on our own limits (size, depth, duplicates, numbers without a canonical form).
        self.syntax = syntax


class _Rejected:
    """A value the parse hooks refused; found (with its pointer) by the walk after parsing."""

    __slots__ = ("detail", "syntax")

    def __init__(self, detail: str, *, syntax: bool = False) -> None:
        self.detail = detail
        self.syntax = syntax


class _DuplicateKeys(dict[str, Any]):
    """An object in which at least one key appeared twice."""

    duplicate: str = ""


def escape_token(key: str) -> str:
    """One JSON pointer reference token (RFC 6901: ``~`` -> ``~0``, ``/`` -> ``~1``)."""
    return key.replace("~", "~0").replace("/", "~1")


def parse_json(raw: bytes, limits: DocumentLimits | None = None) -> JsonValue:
    """Decode, bound and parse ``raw``; raise ``InvalidDocument`` on anything unacceptable."""
    limits = limits or DocumentLimits()
    if len(raw) > limits.max_bytes:
        raise InvalidDocument("", f"document is larger than {limits.max_bytes} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidDocument("", f"invalid UTF-8 at byte {exc.start}", syntax=True) from None
    depth = max_depth(text)
    if depth > limits.max_depth:
        raise InvalidDocument("", f"nesting depth exceeds {limits.max_depth}")
    try:
        value = json.loads(
            text,
            object_pairs_hook=_object,
            parse_int=lambda s: _number(s, limits, int),
            parse_float=lambda s: _number(s, limits, float),
            parse_constant=lambda s: _Rejected(f"{s} is not JSON", syntax=True),
        )
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise InvalidDocument("", f"not JSON: {exc.msg} at {where}", syntax=True) from None
    except RecursionError:  # defensive: the pre-scan should make this unreachable
        raise InvalidDocument("", "nesting too deep") from None
    _reject_marked(value)
    return value  # type: ignore[no-any-return]


def parse_object(raw: bytes, limits: DocumentLimits | None = None) -> dict[str, JsonValue]:
    """``parse_json`` restricted to a top-level object, which is what verdicts are."""
    value = parse_json(raw, limits)
    if not isinstance(value, dict):
        raise InvalidDocument("", f"expected a JSON object, got {_kind(value)}")
    return value


ABSENT: Final = object()  # what resolve_pointer returns where nothing is


def resolve_pointer(doc: JsonValue, pointer: str) -> JsonValue | object:
    """The value at an RFC 6901 pointer, or ``ABSENT`` when nothing is there."""
    if pointer == "":
        return doc
    if not pointer.startswith("/"):
        raise ValueError(f"JSON pointer must be empty or start with '/': {pointer!r}")
    node: JsonValue = doc
    for raw_token in pointer[1:].split("/"):
        token = raw_token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            if token not in node:
                return ABSENT
            node = node[token]
        elif isinstance(node, list):
            if not _is_array_index(token, len(node)):
                return ABSENT
            index = int(token)
            node = node[index]
        else:
            return ABSENT
    return node


def extract_document(
    body: bytes, pointer: str, limits: DocumentLimits | None = None
) -> dict[str, JsonValue] | None:
    """The verdict document inside a source's response, or None when it is not there yet.

    With an empty pointer the body is the document. Otherwise the body is JSON
    and the pointer names either the document (an object) or its text (a
    string, for services that keep the exact bytes); null or missing means the
    service has no verdict yet, which is "unavailable", not "invalid".
    """
    if pointer == "":
        return parse_object(body, limits)
    outer = parse_json(body, limits)
    found = resolve_pointer(outer, pointer)
    if found is ABSENT or found is None:
        return None
    if isinstance(found, str):
        return parse_object(found.encode("utf-8", "surrogatepass"), limits)
    if isinstance(found, dict):
        return found
    raise InvalidDocument("", f"value at {pointer} is {_kind(found)}, not a document")


def _is_array_index(token: str, length: int) -> bool:
    """An RFC 6901 array index (ASCII digits, no leading zero) below ``length``."""
    canonical = token.isascii() and token.isdigit() and (token == "0" or token[0] != "0")
    return canonical and at_most(token, length - 1) is not None


def max_depth(text: str) -> int:
    """Deepest bracket nesting, in linear time and constant stack (strings are skipped)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(accumulate(_DEPTH_STEP[c] for c in brackets), default=0)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = dict(pairs)
    if len(out) == len(pairs):
        return out
    seen: set[str] = set()
    marked = _DuplicateKeys(out)
    for key, _ in pairs:
        if key in seen:
            marked.duplicate = key
            break
        seen.add(key)
    return marked


def _number(text: str, limits: DocumentLimits, kind: type[int] | type[float]) -> object:
    if len(text) > limits.max_number_chars:
        return _Rejected(f"number literal longer than {limits.max_number_chars} characters")
    if kind is int:
        value = int(text)
        if abs(value) > MAX_SAFE_INTEGER:
            return _Rejected("integer beyond 2**53 - 1 has no exact canonical form")
        return value
    number = float(text)
    if not math.isfinite(number):
        return _Rejected("number out of range for a double")
    return number


def _reject_marked(value: Any) -> None:
    """Find the first refused value or duplicate key, depth-first, and raise with its pointer."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        pointer, node = stack.pop()
        if isinstance(node, _Rejected):
            raise InvalidDocument(pointer, node.detail, syntax=node.syntax)
        if isinstance(node, _DuplicateKeys):
            raise InvalidDocument(f"{pointer}/{escape_token(node.duplicate)}", "duplicate key")
        if isinstance(node, dict):
            stack.extend((f"{pointer}/{escape_token(k)}", v) for k, v in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((f"{pointer}/{i}", v) for i, v in reversed(list(enumerate(node))))


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a number"
