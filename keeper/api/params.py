"""Query-string parsing for the JSON API: pure, and every failure names its parameter.

Cursors are opaque to clients (base64url JSON) but carry a kind tag, so a
jobs cursor replayed against /v1/tasks is a 400, not a silently wrong page.
Pagination is keyset (``created_block, contract, id`` strictly below the
cursor), so pages stay stable while the indexer appends new rows.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from keeper.domain.digits import UINT256_MAX, at_most
from keeper.domain.text import clipped, shown
from keeper.store.subjects import MAX_LIMIT, SUBJECTS, Kind, PageKey

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "BadParam",
    "Kind",
    "ListQuery",
    "decode_cursor",
    "encode_cursor",
    "parse_job_id",
    "parse_list_query",
    "parse_task_id",
    "resolve_contract",
]

DEFAULT_LIMIT = 50
# a cursor's block is a created_block: the store's integers end here (a crafted cursor
# past it failed the query with a 500)
_MAX_BLOCK = 2**63 - 1

# \Z, not $: "$" also matches before a final newline, which is no part of an address
_ADDRESS_RE = re.compile(r"^0x[0-9a-fA-F]{40}\Z")
_TASK_ID_RE = re.compile(r"^0x[0-9a-fA-F]{64}\Z")
_INTEGER_RE = re.compile(r"^-?[0-9]+\Z")


class BadParam(Exception):
    """A request parameter is invalid; ``param`` is its name as the client sent it."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message


@dataclass(frozen=True, slots=True)
class ListQuery:
    """A validated list request; ``after`` is the decoded cursor's page key."""

    kind: Kind
    contract: str | None = None
    statuses: tuple[str, ...] = ()
    parties: Mapping[str, str] = field(default_factory=dict)
    limit: int = DEFAULT_LIMIT
    after: PageKey | None = None


def encode_cursor(kind: Kind, key: PageKey) -> str:
    """The client's opaque cursor for a page key: the only place one is made."""
    raw = json.dumps([kind[0], *key], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(kind: Kind, token: str) -> PageKey:
    """The key inside ``token``; raises BadParam('cursor') for anything not minted by us."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        tag, block, contract, subject = json.loads(raw)
    except (binascii.Error, ValueError, TypeError, RecursionError):
        raise BadParam("cursor", "not a cursor returned by this API") from None
    if (
        tag != kind[0]
        or isinstance(block, bool)
        or not isinstance(block, int)
        or not 0 <= block <= _MAX_BLOCK
        or not isinstance(contract, str)
        or not isinstance(subject, str)
    ):
        raise BadParam("cursor", f"not a cursor for /v1/{kind}")
    return block, contract, subject


def resolve_contract(value: str, contracts: Mapping[str, str], param: str = "contract") -> str:
    """A configured contract name or any address, as a lowercase address."""
    if value in contracts:
        return contracts[value]
    if _ADDRESS_RE.match(value):
        return value.lower()
    known = ", ".join(sorted(contracts)) or "none configured"
    raise BadParam(param, f"unknown contract {shown(value)} (names: {known}; or a 0x address)")


def parse_job_id(value: str, param: str = "jobId") -> str:
    """Job ids are canonical decimal strings, the form they are stored in."""
    if not value.isascii() or not value.isdigit() or (len(value) > 1 and value[0] == "0"):
        raise BadParam(param, f"not a job id (a decimal integer): {shown(value)}")
    if at_most(value, UINT256_MAX) is None:
        raise BadParam(param, "out of the uint256 range")
    return value


def parse_task_id(value: str, param: str = "taskId") -> str:
    if not _TASK_ID_RE.match(value):
        raise BadParam(param, f"not a task id (0x + 64 hex): {shown(value)}")
    return value.lower()


def _single(query: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = query.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise BadParam(name, "given more than once")
    return values[0]


def parse_list_query(
    kind: Kind, query: Mapping[str, Sequence[str]], contracts: Mapping[str, str]
) -> ListQuery:
    """Validate a list request's query string (each name mapped to all its values).

    The one validation of statuses, parties and cursors: the store trusts what passes.
    """
    spec = SUBJECTS[kind]
    allowed = {"contract", "status", "limit", "cursor", *spec.parties}
    for name in query:
        if name not in allowed:
            names = ", ".join(sorted(allowed))
            raise BadParam(clipped(name, 80), f"unknown parameter (allowed: {names})")

    contract_text = _single(query, "contract")
    contract = resolve_contract(contract_text, contracts) if contract_text is not None else None

    statuses: tuple[str, ...] = ()
    status_text = _single(query, "status")
    if status_text is not None:
        statuses = tuple(s.strip() for s in status_text.split(",") if s.strip())
        bad = [s for s in statuses if s not in spec.statuses]
        if bad or not statuses:
            raise BadParam(
                "status",
                f"unknown status {', '.join(map(shown, bad)) or shown(status_text)} "
                f"(one or more of: {', '.join(spec.statuses)})",
            )

    parties: dict[str, str] = {}
    for name in spec.parties:
        value = _single(query, name)
        if value is not None:
            if not _ADDRESS_RE.match(value):
                raise BadParam(name, f"not an address: {shown(value)}")
            parties[name] = value.lower()

    limit = DEFAULT_LIMIT
    limit_text = _single(query, "limit")
    if limit_text is not None:
        if not _INTEGER_RE.match(limit_text):
            raise BadParam("limit", f"not an integer: {shown(limit_text)}")
        found = None if limit_text.startswith("-") else at_most(limit_text, MAX_LIMIT)
        if found is None or found < 1:
            raise BadParam(
                "limit", f"must be between 1 and {MAX_LIMIT}, got {clipped(limit_text, 80)}"
            )
        limit = found

    cursor_text = _single(query, "cursor")
    after = decode_cursor(kind, cursor_text) if cursor_text is not None else None
    return ListQuery(kind, contract, statuses, parties, limit, after)
