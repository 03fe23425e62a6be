"""Tests for keeper.api.params and keeper.api.health: pure parsing and readiness rules."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keeper.api.health import ReadinessInputs, readiness_checks
from keeper.api.overview import parse_range
from keeper.api.params import (
    MAX_LIMIT,
    BadParam,
    decode_cursor,
    encode_cursor,
    parse_job_id,
    parse_list_query,
    parse_task_id,
    resolve_contract,
)

ACP = "0x" + "a1" * 20
CONTRACTS = {"acp": ACP}


class TestCursor:
    @given(
        block=st.integers(min_value=0, max_value=2**63 - 1),
        contract=st.text(max_size=50),
        subject=st.text(max_size=80),
    )
    def test_round_trip(self, block: int, contract: str, subject: str) -> None:
        """Any key encodes to a URL-safe token that decodes back to itself."""
        token = encode_cursor("jobs", (block, contract, subject))
        assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        assert decode_cursor("jobs", token) == (block, contract, subject)

    def test_kind_is_checked(self) -> None:
        """A jobs cursor is refused by the tasks list."""
        token = encode_cursor("jobs", (1, ACP, "1"))
        with pytest.raises(BadParam) as info:
            decode_cursor("tasks", token)
        assert info.value.param == "cursor"

    @pytest.mark.parametrize(
        "raw", [b"[" * 5000, b'["j", ' + b"9" * 5000 + b', "a", "1"]'], ids=["deep", "long"]
    )
    def test_a_cursor_past_the_parser_s_limits(self, raw: bytes) -> None:
        """Nested past the recursion limit, or a number past int()'s 4,300 digits: a URL
        has room for either."""
        token = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        with pytest.raises(BadParam, match="cursor: not a cursor returned by this API"):
            decode_cursor("jobs", token)

    @pytest.mark.parametrize(
        "key",
        [
            [True, ACP, "1"],  # a bool is no block
            ["1", ACP, "1"],
            [-1, ACP, "1"],
            [2**63, ACP, "1"],  # past what the store's integers hold
            [1, 7, "1"],
            [1, ACP, 1],
        ],
    )
    def test_each_field_of_a_forged_cursor_is_checked(self, key: list[object]) -> None:
        """A well-formed token whose key has one field of the wrong type or range, alone."""
        raw = json.dumps(["j", *key]).encode()
        token = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        with pytest.raises(BadParam, match="not a cursor for /v1/jobs"):
            decode_cursor("jobs", token)
        assert decode_cursor("jobs", encode_cursor("jobs", (2**63 - 1, ACP, "1")))[0] == 2**63 - 1

    @given(st.text(max_size=60))
    def test_garbage_is_bad_param_never_crash(self, token: str) -> None:
        """Arbitrary text either decodes to a well-typed key or raises BadParam('cursor')."""
        try:
            block, contract, subject = decode_cursor("jobs", token)
        except BadParam as exc:
            assert exc.param == "cursor"
        else:
            assert isinstance(block, int) and isinstance(contract, str)
            assert isinstance(subject, str)


class TestListQuery:
    def test_defaults(self) -> None:
        """No parameters: default page size, no filters."""
        query = parse_list_query("jobs", {}, CONTRACTS)
        assert (query.limit, query.contract, query.statuses, query.after) == (50, None, (), None)

    def test_everything_normalised(self) -> None:
        """Names resolve to addresses, addresses lowercase, statuses split."""
        query = parse_list_query(
            "jobs",
            {
                "contract": ["acp"],
                "status": ["funded, submitted"],
                "client": ["0x" + "AB" * 20],
                "limit": [str(MAX_LIMIT)],
            },
            CONTRACTS,
        )
        assert query.contract == ACP
        assert query.statuses == ("funded", "submitted")
        assert query.parties == {"client": "0x" + "ab" * 20}
        assert query.limit == MAX_LIMIT

    def test_task_statuses_differ_from_job_statuses(self) -> None:
        """'appealing' is a task status, not a job status."""
        assert parse_list_query("tasks", {"status": ["appealing"]}, {}).statuses == ("appealing",)
        with pytest.raises(BadParam, match="status: unknown status 'appealing'"):
            parse_list_query("jobs", {"status": ["appealing"]}, {})

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("-1", "must be between 1 and 500, got -1"),
            ("0", "must be between 1 and 500, got 0"),
            ("501", "must be between 1 and 500, got 501"),
            ("9" * 5000, "must be between 1 and 500, got " + "9" * 77 + "..."),
            ("0" * 5000 + "1", None),
            ("1.5", "not an integer: '1.5'"),
            ("٣", "not an integer: '٣'"),
            ("7\n", "not an integer: '7\\n'"),
        ],
    )
    def test_limit(self, text: str, message: str | None) -> None:
        """A limit is a decimal integer in range, whatever its length; else a BadParam
        naming it (int() alone raises ValueError past 4,300 digits: a 500 before)."""
        if message is None:
            assert parse_list_query("jobs", {"limit": [text]}, {}).limit == 1
            return
        with pytest.raises(BadParam) as info:
            parse_list_query("jobs", {"limit": [text]}, {})
        assert (info.value.param, info.value.message) == ("limit", message)

    @pytest.mark.parametrize("name", ["client", "provider", "evaluator"])
    def test_party_with_a_final_newline_is_refused(self, name: str) -> None:
        with pytest.raises(BadParam, match=f"{name}: not an address"):
            parse_list_query("jobs", {name: ["0x" + "ab" * 20 + "\n"]}, {})


class TestIds:
    @pytest.mark.parametrize("value", ["0", "7", str(2**256 - 1)])
    def test_valid_job_ids(self, value: str) -> None:
        """Canonical decimal uint256 values are accepted as is."""
        assert parse_job_id(value) == value

    @pytest.mark.parametrize(
        "value", ["", "-1", "01", "1e3", "٣", str(2**256), " 7", "7\n", "9" * 5000]
    )
    def test_invalid_job_ids(self, value: str) -> None:
        """Non-canonical or out-of-range ids are refused, naming jobId."""
        with pytest.raises(BadParam) as info:
            parse_job_id(value)
        assert info.value.param == "jobId"

    def test_contract_by_name_or_address(self) -> None:
        """A configured name or any well-formed address resolves; anything else lists names."""
        assert resolve_contract("acp", CONTRACTS) == ACP
        assert resolve_contract("0x" + "CD" * 20, CONTRACTS) == "0x" + "cd" * 20
        with pytest.raises(BadParam, match=r"unknown contract 'acpp' \(names: acp"):
            resolve_contract("acpp", CONTRACTS)
        with pytest.raises(BadParam, match="unknown contract"):
            resolve_contract(ACP + "\n", CONTRACTS)

    @pytest.mark.parametrize(
        ("call", "quoted"),
        [
            (lambda text: resolve_contract(text, CONTRACTS), "unknown contract 'xxx"),
            (lambda text: parse_list_query("jobs", {"status": [text]}, {}), "unknown status 'xxx"),
            (lambda text: parse_list_query("jobs", {"client": [text]}, {}), "not an address: 'xxx"),
            (lambda text: parse_list_query("jobs", {"limit": [text]}, {}), "not an integer: 'xxx"),
            (parse_job_id, "not a job id (a decimal integer): 'xxx"),
            (parse_task_id, "not a task id (0x + 64 hex): 'xxx"),
            (lambda text: parse_range([text]), "must be one of hour, day, week, not 'xxx"),
        ],
    )
    def test_long_values_are_quoted_clipped(
        self, call: Callable[[str], object], quoted: str
    ) -> None:
        """A 5,000-character value is quoted in the message as its first 77 characters of
        repr and "...": a client's megabyte never comes back in the error body."""
        with pytest.raises(BadParam) as info:
            call("x" * 5000)
        message = info.value.message
        assert quoted in message
        assert "'" + "x" * 76 + "..." in message
        assert "x" * 77 not in message and len(message) < 300

    def test_unknown_parameter_named_clipped(self) -> None:
        """An unknown parameter's name is what the error names: clipped like a value."""
        with pytest.raises(BadParam) as info:
            parse_list_query("jobs", {"y" * 5000: ["1"]}, {})
        assert info.value.param == "y" * 77 + "..."
        assert info.value.message.startswith("unknown parameter (allowed: ")


def inputs(**overrides: object) -> ReadinessInputs:
    base: dict[str, object] = {
        "rpc_reachable": True,
        "halted_reason": None,
        "head_block": 1000,
        "indexed_block": 1000,
        "cursor_idle_seconds": 1.0,
        "max_idle_seconds": 30.0,
        "head_tolerance_blocks": 2,
        "keeper_enabled": False,
        "signer_balance_wei": None,
        "min_balance_wei": 10**16,
    }
    base.update(overrides)
    return ReadinessInputs(**base)  # type: ignore[arg-type]


class TestReadiness:
    def test_healthy(self) -> None:
        """At head, RPC up, not halted, keeper off: every check passes, no signer check."""
        checks = readiness_checks(inputs())
        assert set(checks) == {"rpc", "indexing", "cursor"}
        assert all(c.ok for c in checks.values())

    @pytest.mark.parametrize(
        ("overrides", "failed"),
        [
            ({"rpc_reachable": False}, "rpc"),
            ({"halted_reason": "reorg deeper than window"}, "indexing"),
            ({"indexed_block": None}, "cursor"),
            ({"indexed_block": 900, "cursor_idle_seconds": 31.0}, "cursor"),
            ({"keeper_enabled": True, "signer_balance_wei": 10**16 - 1}, "signer"),
            ({"keeper_enabled": True, "signer_balance_wei": None}, "signer"),
        ],
    )
    def test_each_failure(self, overrides: dict[str, object], failed: str) -> None:
        """Each broken promise fails exactly its own check."""
        checks = readiness_checks(inputs(**overrides))
        assert [name for name, c in checks.items() if not c.ok] == [failed]

    @pytest.mark.parametrize(
        ("indexed", "idle", "ok"),
        [(998, 999.0, True), (997, 999.0, False), (500, 29.0, True), (500, 30.0, True)],
    )
    def test_cursor_boundaries(self, indexed: int, idle: float, ok: bool) -> None:
        """Within the head tolerance the cursor is fine; behind it, it must be moving."""
        check = readiness_checks(inputs(indexed_block=indexed, cursor_idle_seconds=idle))["cursor"]
        assert check.ok is ok

    def test_funded_signer_passes_at_minimum(self) -> None:
        """A balance equal to the minimum is enough."""
        check = readiness_checks(inputs(keeper_enabled=True, signer_balance_wei=10**16))["signer"]
        assert check.ok
