"""GitHubEval's offline part: hash, github block, PR link and repository."""

from __future__ import annotations

from typing import Any

import pytest

from keeper.verify.canonical import keccak_hex
from keeper.verify.failures import FailureCode
from keeper.verify.githubeval import check, github_block_problem, pr_link

DESCRIPTION: dict[str, Any] = {
    "brief": "EURC payments in checkout",
    "github": {
        "repo": "acme/shop",
        "issue": 42,
        "author": "mrossi",
        "base": "main",
        "ci": ["test"],
    },
}
LINK = b"https://github.com/acme/shop/pull/57"


def _check(
    esito: str, content: bytes = LINK, description: dict[str, Any] | None = None
) -> list[tuple[str, str]]:
    failures = check({"esito": esito}, description or DESCRIPTION, content, keccak_hex(content))
    return [(f.code.value, f.pointer) for f in failures]


class TestPrLink:
    @pytest.mark.parametrize(
        "content",
        [
            LINK,
            LINK + b"\n",
            b'{"pr": "https://github.com/acme/shop/pull/57"}',
            b"https://github.com/acme/shop/pull/57/",
        ],
    )
    def test_accepted_forms(self, content: bytes) -> None:
        """A bare link (trailing newline or slash allowed) or {"pr": link} names the PR."""
        assert pr_link(content) == ("acme", "shop", 57)

    @pytest.mark.parametrize(
        "content",
        [
            b"http://github.com/acme/shop/pull/57",
            b"https://github.com.evil/acme/shop/pull/57",
            b"https://github.com/acme/shop/issues/57",
            b"https://github.com/acme/shop/pull/0",
            b"https://github.com/-acme/shop/pull/5",
            b'{"pr": 57}',
            b"[" * 5000,
            b"\xff",
        ],
    )
    def test_rejected_forms(self, content: bytes) -> None:
        """Other hosts, schemes, paths, numbers and garbage are not PR links."""
        assert pr_link(content) is None


class TestGithubBlock:
    @pytest.mark.parametrize(
        "block",
        [{"repo": "acme/shop"}, {"repo": "a/b.c", "ci": True}, {"repo": "acme/shop", "ci": False}],
    )
    def test_well_formed(self, block: dict[str, Any]) -> None:
        """Only repo is required; ci may be a boolean."""
        assert github_block_problem(block) is None

    @pytest.mark.parametrize(
        "block",
        [
            "acme/shop",
            {},
            {"repo": "acme"},
            {"repo": "acme/shop/x"},
            {"repo": "acme/shop", "issue": 0},
            {"repo": "acme/shop", "issue": True},
            {"repo": "acme/shop", "author": "bad name"},
            {"repo": "acme/shop\n"},  # "$" would let a final newline through
            {"repo": "acme/shop", "author": "acme\n"},
            {"repo": "acme/shop", "base": " "},
            {"repo": "acme/shop", "ci": ["test", ""]},
            {"repo": "acme/shop", "ci": "test"},
        ],
    )
    def test_malformed(self, block: Any) -> None:
        """Missing or malformed fields are named."""
        assert github_block_problem(block) is not None


class TestCheck:
    def test_well_formed_complete_is_not_reproducible(self) -> None:
        """What remains (author, merge, CI) needs GitHub: not_reproducible, never a pass."""
        assert _check("complete") == [("not_reproducible", "/esito")]

    def test_well_formed_reject_is_not_reproducible_either(self) -> None:
        """A reject of a well-formed PR may be right (red CI): it cannot be judged offline."""
        assert _check("reject") == [("not_reproducible", "/esito")]

    def test_pr_in_another_repository(self) -> None:
        """A PR outside the job's repository forces reject: complete disagrees, reject verifies."""
        other = b"https://github.com/evil/shop/pull/57"
        assert _check("complete", other) == [("evaluator_disagrees", "/esito")]
        assert _check("reject", other) == []

    def test_repository_names_are_case_insensitive(self) -> None:
        """GitHub treats Acme/Shop and acme/shop as the same repository."""
        assert _check("complete", b"https://github.com/Acme/SHOP/pull/57") == [
            ("not_reproducible", "/esito")
        ]

    def test_content_not_matching_the_deliverable(self) -> None:
        """Bytes that do not hash to the on-chain deliverable force a reject."""
        failures = check({"esito": "complete"}, DESCRIPTION, LINK, keccak_hex(LINK + b"x"))
        assert [f.code for f in failures] == [FailureCode.EVALUATOR_DISAGREES]

    def test_malformed_description(self) -> None:
        """A job without a valid github block can never complete."""
        bad = {"brief": "x", "github": {"repo": "nope"}}
        assert _check("complete", description=bad) == [("evaluator_disagrees", "/esito")]
