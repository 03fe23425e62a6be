"""Classify a failed JSON-RPC exchange into what the caller should do next.

Providers disagree on codes (Infura answers a too-large log query with
-32005, the EIP-1474 code for rate limits; Erigon with -32602, "invalid
params"), so the message decides first and the code only breaks ties. Every
pattern below comes from a real node or provider; the tests hold one real
string per row.

Pure: no I/O, no clock. The transport hands in the HTTP status and the
``error`` member (or a transport exception's text) and gets back an
``RpcFailure``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from keeper.domain.text import clipped

FailureKind: TypeAlias = Literal[
    "rate_limited",
    "range_too_large",
    "timeout",
    "transient",
    "unknown_block",
    "state_unavailable",
    "endpoint_rejected",
    "execution_reverted",
    "nonce_too_low",
    "already_known",
    "underpriced",
    "insufficient_funds",
    "invalid_request",
    "method_not_found",
    "parse_error",
    "permanent",
]

# Worth the same call again, possibly on another endpoint. "endpoint_rejected"
# (401/403/404: a bad key or path) is one endpoint's fault, so another may serve.
_RETRYABLE: Final = frozenset(
    {"rate_limited", "timeout", "transient", "unknown_block", "endpoint_rejected"}
)


@dataclass(frozen=True, slots=True)
class RpcFailure:
    """What went wrong, with the hints a provider gave for doing better.

    ``suggested_range`` is the inclusive block range a provider said would work;
    ``max_span`` a hard cap on blocks per query it announced; ``retry_after``
    seconds it asked us to wait. ``message`` is the provider's text, trimmed.
    """

    kind: FailureKind
    message: str = ""
    code: int | None = None
    suggested_range: tuple[int, int] | None = None
    max_span: int | None = None
    retry_after: float | None = None
    data: str | None = None


def retryable(kind: FailureKind) -> bool:
    """Whether repeating the identical call (after a wait or elsewhere) may succeed."""
    return kind in _RETRYABLE


# --- hint parsers -----------------------------------------------------------

_NUM = r"(0x[0-9a-fA-F]+|\d+)"
_RANGE_PATTERNS: Final = (
    # Alchemy: "...this block range should work: [0x0, 0x1f3]"
    # Infura:  "...Try with this block range [0x1, 0x2]."
    re.compile(rf"\[\s*{_NUM}\s*,\s*{_NUM}\s*\]"),
    # reth / drpc / BlastAPI: "...retry with the range 18000000-18000500"
    re.compile(rf"retry with the range\s+{_NUM}\s*-\s*{_NUM}", re.IGNORECASE),
)
_SPAN_PATTERNS: Final = (
    # QuickNode: "eth_getLogs is limited to a 10,000 range"
    re.compile(r"limited to (?:a )?(\d[\d,]*)(?: block)? range", re.IGNORECASE),
    # geth-style: "exceed maximum block range: 5000"; cdk-erigon: "max range: 1000"
    re.compile(r"max(?:imum)?(?: block)? range(?: is)?\s*[:=]?\s*(\d[\d,]*)", re.IGNORECASE),
    # reth: "query exceeds max block range 100000"
    re.compile(r"exceeds max block range\s+(\d[\d,]*)", re.IGNORECASE),
    # erigon: "query block range exceeds server limit, narrow your filter: 1000"
    re.compile(r"block range exceeds server limit[^:]*:\s*(\d[\d,]*)", re.IGNORECASE),
    # Infura (live): "range 1000000 exceeds limit of 10000"
    re.compile(r"range \d+ exceeds limit of (\d[\d,]*)", re.IGNORECASE),
    # Chainstack / Ankr-like: "Max range allowed: 10000", "up to 10000 blocks"
    re.compile(r"max range allowed[:\s]+(\d[\d,]*)", re.IGNORECASE),
    re.compile(r"limit your query to (?:at most )?(\d[\d,]*) blocks", re.IGNORECASE),
)


def _int(text: str) -> int:
    text = text.replace(",", "")
    return int(text, 16) if text.lower().startswith("0x") else int(text)


def parse_suggested_range(message: str, data: object = None) -> tuple[int, int] | None:
    """The inclusive block range a provider suggested, from its message or ``data``.

    Infura also puts ``{"from": "0x..", "to": "0x.."}`` in ``error.data``.
    """
    for pattern in _RANGE_PATTERNS:
        m = pattern.search(message)
        if m:
            lo, hi = _int(m.group(1)), _int(m.group(2))
            if lo <= hi:
                return lo, hi
    if isinstance(data, Mapping):
        lo_raw, hi_raw = data.get("from"), data.get("to")
        if isinstance(lo_raw, str) and isinstance(hi_raw, str):
            try:
                lo, hi = _int(lo_raw), _int(hi_raw)
            except ValueError:
                return None
            if lo <= hi:
                return lo, hi
    return None


def parse_max_span(message: str) -> int | None:
    """A hard blocks-per-query cap announced in the message, if any."""
    for pattern in _SPAN_PATTERNS:
        m = pattern.search(message)
        if m:
            try:
                span = _int(m.group(1))
            except ValueError:
                continue
            if span > 0:
                return span
    return None


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds form only; dates are ignored)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


_MSG_RETRY_AFTER: Final = re.compile(r"(?:try again|retry) (?:in|after) (\d+(?:\.\d+)?)\s*(ms|s)?")


def _retry_after_from_message(lowered: str) -> float | None:
    m = _MSG_RETRY_AFTER.search(lowered)
    if not m:
        return None
    value = float(m.group(1))
    return value / 1000 if m.group(2) == "ms" else value


# --- the message table --------------------------------------------------------
# Ordered: the first matching row wins. Substrings are lowercase.

_MESSAGE_TABLE: Final[tuple[tuple[FailureKind, tuple[str, ...]], ...]] = (
    # First: a revert reason is contract text and may say anything ("rate limit",
    # "insufficient funds"); the node's own prefix is what identifies a revert.
    ("execution_reverted", ("execution reverted",)),
    (
        "range_too_large",
        (
            "log response size exceeded",  # Alchemy
            "this block range should work",  # Alchemy, every plan
            "query returned more than",  # Infura, geth-based providers
            "query exceeds max results",  # reth, drpc, BlastAPI
            "query exceeds max block range",  # reth
            "exceed maximum block range",  # geth-based
            "block range too large",  # cdk-erigon, generic
            "block range exceeds server limit",  # erigon 3.x
            "too many logs",  # erigon "query returns too many logs"
            "query returns too many",
            "is limited to a",  # QuickNode
            "block range is too wide",  # Ankr
            "block range is bigger than",  # scroll geth
            "block range is larger than",
            "block range limit exceeded",  # Chainstack
            "range too large",  # "requested range too large"
            "exceeds limit of",  # Infura live range cap
            "response size exceeded",
            "response is too big",
            "response too large",  # "backend response too large" (Base)
            "requested range exceeds",  # Besu
            "exceeds maximum rpc range",
            "too many blocks",
            "limit your query to",
        ),
    ),
    (
        "rate_limited",
        (
            "compute units",  # Alchemy "exceeded its compute units per second capacity"
            "rate limit",  # Infura "request rate limited", many others
            "request rate exceeded",  # Infura "project ID request rate exceeded"
            "daily request count exceeded",  # Infura
            "too many requests",
            "request limit reached",  # QuickNode
            "capacity exceeded",
            "throughput",
            "credits",
            "exceeded the quota",
        ),
    ),
    (
        "nonce_too_low",
        (
            "nonce too low",  # geth, erigon, reth, anvil, Besu ("Nonce too low")
            "oldnonce",  # Nethermind AcceptTxResult
            "nonce has already been used",
            "invalid nonce",
        ),
    ),
    (
        "already_known",
        (
            "already known",  # geth, erigon
            "already imported",  # anvil "transaction already imported"
            "known transaction",  # Besu, older geth "known transaction: <hash>"
            "alreadyknown",  # Nethermind
            "already exists",
            "existing txn with same hash",  # erigon txpool
        ),
    ),
    (
        "underpriced",
        (
            "replacement transaction underpriced",  # geth, erigon, anvil, Besu
            "replacementnotallowed",  # Nethermind
            "transaction underpriced",  # geth pool minimum tip
            "feetoolow",  # Nethermind FeeTooLow / FeeTooLowToCompete
            "max fee per gas less than block base fee",  # geth
            "fee cap less than block base fee",
            "could not replace existing tx",  # erigon
        ),
    ),
    (
        "insufficient_funds",
        (
            "insufficient funds",  # geth, erigon, reth, anvil
            "insufficientfunds",  # Nethermind
            "upfront cost exceeds account balance",  # Besu
            "sender doesn't have enough funds",
        ),
    ),
    (
        "execution_reverted",
        (
            "revert",  # Nethermind "Reverted", Besu "Execution reverted"
            "invalid opcode",
            "out of gas",
            "vm execution error",  # OpenEthereum / Nethermind -32015
        ),
    ),
    (
        # The node has the block but not its state: a full (non-archive) node asked
        # about history. Deliberate and lasting for this node, so not retried; the
        # caller decides (keeper.sync.view_calls reads immutable fields at a later block).
        "state_unavailable",
        (
            "missing trie node",  # geth hash scheme, erigon 2, Nethermind
            "historical state",  # geth path scheme: "historical state 0x.. is not available"
            "state is not available",
            "state not available",  # "state not available for block", erigon 3
            "no state available",  # Nethermind "No state available for block 0x.."
            "state unavailable",  # Besu "World state unavailable"
            "is pruned",  # reth "state at block #123 is pruned"
            "been pruned",  # "state at block 123 has been pruned"
            "state pruned",
            "archive state",  # Infura "project ID does not have access to archive state"
            "requires an archive node",
        ),
    ),
    (
        "unknown_block",
        (
            "unknown block",  # geth/anvil: a hash we do not (yet) know
            "block not found",
            "header not found",  # geth behind a load balancer: lagging replica
            "block not yet imported",
            "blockoutofrangeerror",  # anvil: "block height is 3 but requested was 5"
            "block number out of range",
            "after last accepted block",  # avalanche
        ),
    ),
    (
        "timeout",
        (
            "timeout",  # "query timeout exceeded" (Alchemy), "request timeout"
            "timed out",
            "deadline exceeded",
        ),
    ),
    (
        "transient",
        (
            "connection reset",
            "connection refused",
            "connection closed",
            "server disconnected",
            "cannot connect",
            "bad gateway",
            "service unavailable",
            "temporarily unavailable",
            "internal server error",
            "try again",
            "overloaded",
            "busy",
        ),
    ),
    (
        "method_not_found",
        (
            "method not found",
            "does not exist/is not available",  # geth "the method x does not exist/..."
            "method not supported",
            "unsupported method",
            "not whitelisted",
        ),
    ),
    (
        "parse_error",
        ("parse error",),
    ),
)

# JSON-RPC codes, consulted only when no message row matched.
_CODE_TABLE: Final[Mapping[int, FailureKind]] = {
    -32700: "parse_error",
    -32600: "invalid_request",
    -32601: "method_not_found",
    -32602: "invalid_request",
    -32603: "transient",  # "internal error": usually a node hiccup
    -32002: "transient",  # EIP-1474 resource unavailable
    -32004: "method_not_found",  # EIP-1474 method not supported
    -32005: "rate_limited",  # EIP-1474 limit exceeded
    -32015: "execution_reverted",  # VM execution error (Nethermind, OpenEthereum)
    3: "execution_reverted",  # geth revert with data
    429: "rate_limited",  # Alchemy puts the HTTP status in error.code
}


# anvil answers a block beyond its head and a block whose state it pruned
# (--prune-history) with the same text; the two numbers tell them apart.
_ANVIL_OUT_OF_RANGE: Final = re.compile(r"block height is (\d+) but requested was (\d+)")


def _message_kind(lowered: str) -> FailureKind | None:
    m = _ANVIL_OUT_OF_RANGE.search(lowered)
    if m and int(m.group(2)) < int(m.group(1)):
        return "state_unavailable"
    for kind, needles in _MESSAGE_TABLE:
        if any(needle in lowered for needle in needles):
            return kind
    return None


def _status_kind(status: int) -> FailureKind | None:
    if status == 429:
        return "rate_limited"
    if status in (408, 504, 524):  # request timeout, gateway timeout, Cloudflare timeout
        return "timeout"
    if status in (401, 403, 404, 405):
        return "endpoint_rejected"
    if 500 <= status <= 599:
        return "transient"
    return None


# Statuses that say more than any body text a gateway wraps around them.
_STATUS_WINS: Final = frozenset({"rate_limited", "timeout", "endpoint_rejected"})


def classify(
    status: int | None,
    error: Mapping[str, Any] | str | None,
    *,
    retry_after_header: str | None = None,
) -> RpcFailure:
    """Classify one failed call.

    ``status`` is the HTTP status (None when no response arrived); ``error`` is
    the JSON-RPC ``error`` object, or the text of a transport exception.
    A 429, a gateway timeout or an auth refusal (401/403/404) wins over the
    body, since gateways put arbitrary text there; otherwise the body decides,
    and a bare 5xx means transient. A transport failure with unrecognised text
    is transient; a deliberate error with unrecognised text is permanent.
    """
    code: int | None = None
    data: object = None
    if isinstance(error, Mapping):
        raw_code = error.get("code")
        code = raw_code if isinstance(raw_code, int) and not isinstance(raw_code, bool) else None
        message = str(error.get("message", ""))
        data = error.get("data")
    else:
        message = error or ""
    message = clipped(message.strip(), 500)
    lowered = message.lower()
    data_text = data if isinstance(data, str) else None
    retry_after = parse_retry_after(retry_after_header)

    status_kind = _status_kind(status) if status is not None else None
    kind: FailureKind | None = None
    if status_kind in _STATUS_WINS:
        kind = status_kind
    if kind is None and code == 3:  # geth/anvil/reth: revert with data, whatever the text
        kind = "execution_reverted"
    if kind is None:
        kind = _message_kind(lowered)
    if kind is None and code is not None:
        kind = _CODE_TABLE.get(code)
    if kind is None:
        kind = status_kind
    if kind is None:
        kind = "transient" if status is None and not isinstance(error, Mapping) else "permanent"

    suggested: tuple[int, int] | None = None
    max_span: int | None = None
    if kind == "range_too_large":
        suggested = parse_suggested_range(message, data)
        max_span = parse_max_span(message)
    if kind == "rate_limited" and retry_after is None:
        retry_after = _retry_after_from_message(lowered)
    return RpcFailure(
        kind=kind,
        message=message,
        code=code,
        suggested_range=suggested,
        max_span=max_span,
        retry_after=retry_after,
        data=data_text,
    )
