"""The classifier maps real provider and node error strings to the right action."""

from __future__ import annotations

from typing import Any

import pytest

from keeper.domain.rpc_errors import (
    FailureKind,
    classify,
    parse_max_span,
    parse_retry_after,
    parse_suggested_range,
    retryable,
)

ALCHEMY_RANGE = (
    "Log response size exceeded. You can make eth_getLogs requests with up to a 2K block range "
    "and no limit on the response size, or you can request any block range with a cap of 10K "
    "logs in the response. Based on your parameters, this block range should work: [0x0, 0x1f3]"
)
ALCHEMY_FREE = (
    "Under the Free tier plan, you can make eth_getLogs requests with up to a 10 block range. "
    "Based on your parameters, this block range should work: [0x1312d00, 0x1312d09]"
)
INFURA_RANGE = "query returned more than 10000 results. Try with this block range [0x1, 0xa]."
ALCHEMY_429 = (
    "Your app has exceeded its compute units per second capacity. If you have retries enabled, "
    "you can safely ignore this message. If not, check out "
    "https://docs.alchemy.com/reference/throughput"
)


def err(code: int, message: str, data: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        out["data"] = data
    return out


# (status, error, expected kind) -- every string below was observed from a real node/provider.
TABLE: list[tuple[int | None, dict[str, Any] | str | None, FailureKind]] = [
    # log range refusals
    (200, err(-32602, ALCHEMY_RANGE), "range_too_large"),
    (200, err(-32600, ALCHEMY_FREE), "range_too_large"),
    (200, err(-32005, INFURA_RANGE), "range_too_large"),
    (200, err(-32602, "range 1000000 exceeds limit of 10000"), "range_too_large"),
    (200, err(-32602, "eth_getLogs is limited to a 10,000 range"), "range_too_large"),
    (200, err(-32000, "exceed maximum block range: 5000"), "range_too_large"),
    (200, err(-32000, "block range too large"), "range_too_large"),
    (200, err(-32005, "block range too large, max range: 1000"), "range_too_large"),
    (
        200,
        err(-32602, "query block range exceeds server limit, narrow your filter: 1000"),
        "range_too_large",
    ),
    (200, err(-32000, "query returns too many logs, narrow your filter: 20000"), "range_too_large"),
    (
        200,
        err(-32602, "query exceeds max results 20000, retry with the range 50784086-50785570"),
        "range_too_large",
    ),
    (200, err(-32602, "query exceeds max block range 100000"), "range_too_large"),
    (200, err(-32000, "block range is bigger than maxBlockRange"), "range_too_large"),
    (200, err(-32012, "requested range too large"), "range_too_large"),
    (200, err(-32020, "backend response too large"), "range_too_large"),
    (200, err(-32000, "response size exceeded"), "range_too_large"),
    (200, err(-32062, "Block range is too wide"), "range_too_large"),
    (200, err(-32005, "Requested range exceeds maximum RPC range limit"), "range_too_large"),
    # rate limits
    (429, err(429, ALCHEMY_429), "rate_limited"),
    (429, "Too Many Requests", "rate_limited"),
    (429, None, "rate_limited"),
    (200, err(-32005, "daily request count exceeded, request rate limited"), "rate_limited"),
    (200, err(-32005, "project ID request rate exceeded"), "rate_limited"),
    (
        200,
        err(-32007, "request limit reached - reduce calls per second or upgrade"),
        "rate_limited",
    ),
    (200, err(-32005, "limit exceeded"), "rate_limited"),
    # timeouts
    (504, "Gateway Time-out", "timeout"),
    (408, None, "timeout"),
    (None, "TimeoutError: request timed out", "timeout"),
    (200, err(-32000, "query timeout exceeded"), "timeout"),
    (200, err(-32000, "request timed out"), "timeout"),
    # transient / lagging replicas
    (502, "<html>Bad Gateway</html>", "transient"),
    (503, None, "transient"),
    (None, "Connection reset by peer", "transient"),
    (None, "Cannot connect to host 127.0.0.1:1", "transient"),
    (200, err(-32603, "internal error"), "transient"),
    (200, err(-32000, "header not found"), "unknown_block"),
    (200, err(-32000, "unknown block"), "unknown_block"),
    (
        200,
        err(-32602, "BlockOutOfRangeError: block height is 3 but requested was 5"),
        "unknown_block",
    ),
    # state a full (non-archive) node no longer keeps: geth hash and path schemes,
    # anvil --prune-history (same text as a block beyond its head, numbers reversed),
    # reth, Nethermind, Besu, erigon, a provider plan without archive access
    (
        200,
        err(-32000, "missing trie node 8f2a0e (path ) state 0x8f2a0e is not available"),
        "state_unavailable",
    ),
    (200, err(-32000, "historical state 0x9a1c is not available"), "state_unavailable"),
    (
        200,
        err(-32602, "BlockOutOfRangeError: block height is 33 but requested was 16"),
        "state_unavailable",
    ),
    (200, err(-32000, "state at block #1200 is pruned"), "state_unavailable"),
    (200, err(-32002, "No state available for block 0x8f2a0e"), "state_unavailable"),
    (200, err(-32000, "World state unavailable"), "state_unavailable"),
    (200, err(-32000, "state not available for block 1200"), "state_unavailable"),
    (
        200,
        err(-32002, "project ID does not have access to archive state"),
        "state_unavailable",
    ),
    (200, err(-32014, "block not yet imported"), "unknown_block"),
    # endpoint refusing us
    (401, "Unauthorized", "endpoint_rejected"),
    (403, err(-32002, "rejected due to project ID settings"), "endpoint_rejected"),
    # reverts
    (
        200,
        err(3, "execution reverted: Ownable: caller is not the owner", "0x08c379a0"),
        "execution_reverted",
    ),
    (200, err(-32000, "execution reverted"), "execution_reverted"),
    (200, err(3, "execution reverted: rate limit: insufficient funds", "0x"), "execution_reverted"),
    (200, err(3, "custom error 0x1234abcd", "0x1234abcd"), "execution_reverted"),
    (200, err(-32015, "VM execution error.", "Reverted 0x"), "execution_reverted"),
    (200, err(-32000, "gas required exceeds allowance (30000000)"), "permanent"),
    # transaction pool answers: geth, erigon, reth, anvil, Besu, Nethermind
    (200, err(-32000, "nonce too low: address 0xabc, tx: 5 state: 7"), "nonce_too_low"),
    (200, err(-32003, "nonce too low"), "nonce_too_low"),
    (200, err(-32001, "Nonce too low"), "nonce_too_low"),
    (200, err(-32010, "OldNonce, Current nonce: 7, nonce of rejected tx: 5"), "nonce_too_low"),
    (200, err(-32000, "already known"), "already_known"),
    (200, err(-32003, "transaction already imported"), "already_known"),
    (200, err(-32000, "Known transaction"), "already_known"),
    (200, err(-32010, "AlreadyKnown"), "already_known"),
    (200, err(-32000, "replacement transaction underpriced"), "underpriced"),
    (200, err(-32000, "Replacement transaction underpriced"), "underpriced"),
    (200, err(-32010, "ReplacementNotAllowed"), "underpriced"),
    (200, err(-32000, "transaction underpriced: tip needed 1, tip permitted 0"), "underpriced"),
    (
        200,
        err(-32000, "max fee per gas less than block base fee: address 0xabc, maxFeePerGas: 1"),
        "underpriced",
    ),
    (200, err(-32010, "FeeTooLowToCompete"), "underpriced"),
    # protocol errors
    (200, err(-32601, "Method not found"), "method_not_found"),
    (200, err(-32601, "the method eth_foo does not exist/is not available"), "method_not_found"),
    (200, err(-32004, "Method not supported"), "method_not_found"),
    (200, err(-32700, "Parse error"), "parse_error"),
    (200, err(-32600, "invalid request"), "invalid_request"),
    (200, err(-32602, "Failed to decode transaction"), "invalid_request"),
    (200, err(-32000, "insufficient funds for gas * price + value"), "insufficient_funds"),
    (
        200,
        err(-32010, "InsufficientFunds, Account balance: 0, cumulative cost: 21000"),
        "insufficient_funds",
    ),
    (200, err(-32004, "Upfront cost exceeds account balance"), "insufficient_funds"),
    (400, err(-32000, "something nobody has seen"), "permanent"),
]


@pytest.mark.parametrize(("status", "error", "kind"), TABLE)
def test_real_strings_classify(
    status: int | None, error: dict[str, Any] | str | None, kind: FailureKind
) -> None:
    """Each observed provider string lands in the kind the transport must act on."""
    assert classify(status, error).kind == kind


class TestRetryable:
    @pytest.mark.parametrize(
        ("kind", "expected"),
        [
            ("rate_limited", True),
            ("timeout", True),
            ("transient", True),
            ("unknown_block", True),
            ("endpoint_rejected", True),
            ("range_too_large", False),
            ("execution_reverted", False),
            ("state_unavailable", False),
            ("nonce_too_low", False),
            ("already_known", False),
            ("underpriced", False),
            ("insufficient_funds", False),
            ("invalid_request", False),
            ("method_not_found", False),
            ("parse_error", False),
            ("permanent", False),
        ],
    )
    def test_only_transport_trouble_is_retried(self, kind: FailureKind, expected: bool) -> None:
        """Rate limits, timeouts and flaky replicas retry; protocol and pool answers do not."""
        assert retryable(kind) is expected


class TestHints:
    def test_alchemy_suggested_range_is_parsed_from_hex(self) -> None:
        """Alchemy's bracketed hex range becomes an inclusive int range."""
        assert classify(200, err(-32602, ALCHEMY_RANGE)).suggested_range == (0, 0x1F3)
        assert classify(200, err(-32600, ALCHEMY_FREE)).suggested_range == (0x1312D00, 0x1312D09)

    def test_infura_range_from_message_and_data(self) -> None:
        """Infura's range comes from the message, or from error.data when the text lacks it."""
        assert classify(200, err(-32005, INFURA_RANGE)).suggested_range == (1, 10)
        no_text = err(
            -32005,
            "query returned more than 10000 results",
            {"from": "0x10", "limit": 10000, "to": "0x20"},
        )
        assert classify(200, no_text).suggested_range == (16, 32)

    def test_reth_decimal_range(self) -> None:
        """reth's "retry with the range a-b" is decimal."""
        failure = classify(
            200,
            err(-32602, "query exceeds max results 20000, retry with the range 22382105-22382515"),
        )
        assert failure.suggested_range == (22382105, 22382515)

    @pytest.mark.parametrize(
        ("message", "span"),
        [
            ("eth_getLogs is limited to a 10,000 range", 10_000),
            ("exceed maximum block range: 5000", 5000),
            ("block range too large, max range: 1000", 1000),
            ("query exceeds max block range 100000", 100_000),
            ("query block range exceeds server limit, narrow your filter: 1000", 1000),
            ("range 1000000 exceeds limit of 10000", 10_000),
            (
                "block range is larger than max block range, "
                "block range = 5120, max block range = 5000",
                5000,
            ),
            ("block range too large", None),
        ],
    )
    def test_max_span(self, message: str, span: int | None) -> None:
        """Announced per-query caps are read as a span, whatever the phrasing."""
        assert parse_max_span(message) == span

    def test_no_hint_when_message_has_none(self) -> None:
        """A bare refusal carries neither a range nor a span."""
        failure = classify(200, err(-32000, "block range too large"))
        assert failure.suggested_range is None
        assert failure.max_span is None

    def test_inverted_range_is_ignored(self) -> None:
        """A nonsensical suggestion (from > to) is not trusted."""
        assert parse_suggested_range("this block range should work: [0x10, 0x1]") is None

    def test_a_suggested_range_of_one_block_is_taken(self) -> None:
        """On a dense chain a provider may suggest a single block, in text or in data."""
        assert parse_suggested_range("this block range should work: [0x10, 0x10]") == (16, 16)
        assert parse_suggested_range("too many", {"from": "0x10", "to": "0x10"}) == (16, 16)

    def test_a_data_range_needs_both_ends_as_text(self) -> None:
        """``error.data`` with one end missing or not a string is no suggestion (and no
        exception: the data is the provider's, anything may be there)."""
        for data in ({"from": "0x10", "to": 32}, {"from": 16, "to": "0x20"}, {"from": "0x10"}):
            assert parse_suggested_range("too many", data) is None

    def test_a_cap_of_zero_blocks_is_no_cap(self) -> None:
        assert parse_max_span("exceed maximum block range: 0") is None
        assert parse_max_span("exceed maximum block range: 1") == 1

    def test_retry_after_header_and_message(self) -> None:
        """Retry-After seconds come from the header, else from the provider's text."""
        assert classify(429, None, retry_after_header="2").retry_after == 2.0
        assert classify(429, "rate limited, try again in 250ms").retry_after == 0.25
        assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") is None
        assert parse_retry_after("-1") is None
        assert parse_retry_after("0") == 0.0  # "now" is an answer

    def test_a_bare_http_5xx_is_transient_from_500_to_599(self) -> None:
        """A gateway's 500 with no JSON-RPC body is trouble to retry, not a refusal."""
        for status in (500, 502, 599):
            assert classify(status, None).kind == "transient", status
        assert classify(600, None).kind == "permanent"

    def test_an_unrecognised_deliberate_error_is_permanent_even_without_a_status(self) -> None:
        """The node answered with an error object: unknown text is no reason to retry;
        only a transport failure's unknown text is."""
        assert classify(None, err(-31999, "frobnication refused")).kind == "permanent"
        assert classify(None, "connection frobnicated").kind == "transient"

    def test_a_code_that_is_no_integer_is_no_code(self) -> None:
        """A hostile node's ``code`` (a list, a bool, text) is ignored, never looked up."""
        for code in ([3], True, "3", {"x": 1}):
            failure = classify(200, {"code": code, "message": "frobnication refused"})
            assert failure.kind == "permanent", code

    def test_status_429_wins_over_body_text(self) -> None:
        """A gateway 429 is a rate limit even if its body looks like a range refusal."""
        assert classify(429, err(-32005, INFURA_RANGE)).kind == "rate_limited"

    def test_message_is_trimmed(self) -> None:
        """Huge provider messages are cut so they cannot flood logs."""
        message = classify(200, err(-32000, "x" * 10_000)).message
        assert message == "x" * 497 + "..."
        assert classify(200, err(-32000, "y" * 500)).message == "y" * 500
