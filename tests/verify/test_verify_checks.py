"""The pure check pipeline: document checks, field checks, re-execution and status."""

from __future__ import annotations

import json

import pytest
from verify_helpers import (
    BAD_PIVA,
    COMPLETE,
    EVALUATOR,
    NOT_JSON,
    TOO_FEW,
    body,
    facts,
    verdict,
)

from keeper.verify.checks import (
    CheckConfig,
    VerdictFacts,
    check_document,
    github_target,
    needs_content,
    run_checks,
)
from keeper.verify.failures import Failure, FailureCode, Status, derive_status, exit_code

CONFIG = CheckConfig()


def _codes(failures: list[Failure]) -> list[tuple[str, str]]:
    return [(f.code.value, f.pointer) for f in failures]


class TestTamperedDocuments:
    DOC = verdict(7, COMPLETE, "complete")
    FACTS = facts(DOC, COMPLETE)

    def test_valid_verdict_verifies(self) -> None:
        """The evaluator's canonical document over a schema-valid deliverable is verified."""
        _, failures = run_checks(body(self.DOC), self.FACTS, CONFIG, COMPLETE)
        assert failures == [] and derive_status(failures) is Status.VERIFIED

    def test_one_byte_changed_is_a_hash_mismatch(self) -> None:
        """One changed character changes the digest: verdict_hash_mismatch at /reason."""
        tampered = body(self.DOC).replace(b'"7"', b'"8"')
        doc, failures = run_checks(tampered, self.FACTS, CONFIG, COMPLETE)
        assert _codes(failures) == [("verdict_hash_mismatch", "/reason")]
        assert derive_status(failures) is Status.MISMATCH and doc.digest != self.FACTS.reason

    def test_key_order_and_whitespace_do_not_matter(self) -> None:
        """Other key order and indentation keep the canonical form, so the verdict verifies."""
        reordered = json.dumps(dict(reversed(list(self.DOC.items()))), indent=2).encode()
        assert reordered != body(self.DOC)
        doc, failures = run_checks(reordered, self.FACTS, CONFIG, COMPLETE)
        assert failures == [] and doc.digest == self.FACTS.reason

    def test_float_spelling_does_not_matter(self) -> None:
        """version written 1.0 instead of 1 is the same JCS number: the digest still matches."""
        respelled = body(self.DOC).replace(b'"version":1', b'"version":1.0')
        assert b"1.0" in respelled
        _, failures = run_checks(respelled, self.FACTS, CONFIG, COMPLETE)
        assert failures == []

    def test_float_value_changed_is_a_mismatch(self) -> None:
        """version 1.5 instead of 1 is a different number and a different digest."""
        changed = body(self.DOC).replace(b'"version":1', b'"version":1.5')
        _, failures = run_checks(changed, self.FACTS, CONFIG, COMPLETE)
        assert _codes(failures) == [("verdict_hash_mismatch", "/reason")]

    def test_missing_document_is_unavailable(self) -> None:
        """No bytes at all is unavailable, the only retried status."""
        _, failures = run_checks(None, self.FACTS, CONFIG, COMPLETE)
        assert _codes(failures) == [("unavailable", "")]
        assert derive_status(failures) is Status.UNAVAILABLE

    @pytest.mark.parametrize(
        ("raw", "pointer"),
        [(b"[1]", ""), (b'{"a":1,"a":1}', "/a"), (b"\xff", ""), (b'{"n":1e999}', "/n")],
    )
    def test_unreadable_documents_are_invalid(self, raw: bytes, pointer: str) -> None:
        """Non-objects, duplicate keys, bad UTF-8 and out-of-range numbers are invalid_document."""
        _, failures = run_checks(raw, self.FACTS, CONFIG, COMPLETE)
        assert _codes(failures) == [("invalid_document", pointer)]
        assert derive_status(failures) is Status.INVALID_DOCUMENT


class TestFieldChecks:
    def _run(
        self, doc: dict[str, object], chain: VerdictFacts, config: CheckConfig = CONFIG
    ) -> list[tuple[str, str]]:
        return _codes(list(check_document(body(doc), chain, config).failures))  # type: ignore[arg-type]

    def test_wrong_job_id(self) -> None:
        """A genuine document about job 8 does not verify job 7, even with a matching hash."""
        doc = verdict(8, COMPLETE, "complete")
        assert self._run(doc, facts(doc, COMPLETE, job_id=7)) == [("field_mismatch", "/jobId")]

    def test_another_integer_job_id_is_a_mismatch(self) -> None:
        """The number form is accepted only when it is this job's number."""
        doc = verdict(7, COMPLETE, "complete", jobId=8)
        assert self._run(doc, facts(doc, COMPLETE, job_id=7)) == [("field_mismatch", "/jobId")]

    def test_integer_job_id_is_accepted(self) -> None:
        """jobId may be the number itself rather than its decimal string."""
        doc = verdict(7, COMPLETE, "complete", jobId=7)
        assert self._run(doc, facts(doc, COMPLETE, job_id=7)) == []

    def test_wrong_deliverable(self) -> None:
        """A verdict naming another deliverable than the submitted one is a field mismatch."""
        doc = verdict(7, COMPLETE, "complete")
        chain = facts(doc, TOO_FEW)
        assert self._run(doc, chain) == [("field_mismatch", "/deliverable")]

    def test_esito_contradicts_event(self) -> None:
        """A 'complete' document behind a JobRejected event is a mismatch at /esito."""
        doc = verdict(7, COMPLETE, "complete")
        assert self._run(doc, facts(doc, COMPLETE, event="JobRejected")) == [
            ("field_mismatch", "/esito")
        ]

    def test_configured_evaluator_address(self) -> None:
        """A configured name must map to the job's evaluator; an unconfigured one is not judged."""
        doc = verdict(7, COMPLETE, "complete")
        chain = facts(doc, COMPLETE)
        right = CheckConfig(evaluator_names={"SchemaEval": EVALUATOR.upper().replace("0X", "0x")})
        wrong = CheckConfig(evaluator_names={"SchemaEval": "0x" + "11" * 20})
        assert self._run(doc, chain, right) == []
        assert self._run(doc, chain, wrong) == [("field_mismatch", "/evaluator")]

    def test_evaluator_name_must_fit_the_job_kind(self) -> None:
        """A GitHubEval verdict on a SchemaEval job description is a field mismatch."""
        doc = verdict(7, COMPLETE, "complete", evaluator="GitHubEval")
        assert self._run(doc, facts(doc, COMPLETE)) == [("field_mismatch", "/evaluator")]

    def test_every_bad_field_is_reported(self) -> None:
        """Field checks do not stop at the first disagreement."""
        doc = verdict(9, COMPLETE, "reject", evaluator=5)
        chain = facts(doc, TOO_FEW, job_id=7, event="JobCompleted")
        assert self._run(doc, chain) == [
            ("field_mismatch", "/jobId"),
            ("field_mismatch", "/deliverable"),
            ("field_mismatch", "/evaluator"),
            ("field_mismatch", "/esito"),
        ]


class TestReexecution:
    @pytest.mark.parametrize(
        ("content", "esito", "motivi"),
        [
            (COMPLETE, "complete", []),
            (TOO_FEW, "reject", ["/fornitori: Array has too few items (1 < 3)"]),
            (BAD_PIVA, "reject", ["/fornitori/0/piva: bad", "/fornitori/2/piva: also bad"]),
            (NOT_JSON, "reject", ["content is not JSON"]),
        ],
    )
    def test_correct_verdicts_verify(self, content: bytes, esito: str, motivi: list[str]) -> None:
        """Each fixture with the right esito and locations verifies, whatever the prose."""
        doc = verdict(7, content, esito, motivi)
        _, failures = run_checks(body(doc), facts(doc, content), CONFIG, content)
        assert failures == []

    def test_esito_contradicting_the_schema(self) -> None:
        """Completing a deliverable with too few items is evaluator_disagrees at /esito."""
        doc = verdict(7, TOO_FEW, "complete")
        _, failures = run_checks(body(doc), facts(doc, TOO_FEW), CONFIG, TOO_FEW)
        assert _codes(failures) == [("evaluator_disagrees", "/esito")]
        assert (
            derive_status(failures) is Status.EVALUATOR_DISAGREES
            and exit_code(Status.EVALUATOR_DISAGREES) == 1
        )

    def test_wrong_locations(self) -> None:
        """Rejecting at /fornitori/1/piva when 0 and 2 fail disagrees at /motivi."""
        doc = verdict(7, BAD_PIVA, "reject", ["/fornitori/0/piva: x", "/fornitori/1/piva: x"])
        _, failures = run_checks(body(doc), facts(doc, BAD_PIVA), CONFIG, BAD_PIVA)
        assert _codes(failures) == [("evaluator_disagrees", "/motivi")]
        assert "/fornitori/2/piva" in failures[0].detail

    def test_content_not_hashing_to_deliverable(self) -> None:
        """Content not hashing to the on-chain deliverable forces reject: complete disagrees."""
        doc = verdict(7, COMPLETE, "complete")
        _, failures = run_checks(body(doc), facts(doc, COMPLETE), CONFIG, COMPLETE + b" ")
        assert _codes(failures) == [("evaluator_disagrees", "/esito")]
        assert "hash" in failures[0].detail

    def test_missing_content_is_unavailable(self) -> None:
        """Without the deliverable's content the re-run waits: unavailable at /deliverable."""
        doc = verdict(7, COMPLETE, "complete")
        _, failures = run_checks(body(doc), facts(doc, COMPLETE), CONFIG, None)
        assert _codes(failures) == [("unavailable", "/deliverable")]

    def test_unknown_description_is_not_reproducible(self) -> None:
        """An authentic verdict on a free-text job cannot be re-run: not_reproducible, exit 3."""
        doc = verdict(7, COMPLETE, "complete")
        chain = facts(doc, COMPLETE, description="write me a poem")
        _, failures = run_checks(body(doc), chain, CONFIG, COMPLETE)
        assert _codes(failures) == [("not_reproducible", "/esito")]
        assert exit_code(derive_status(failures)) == 3

    def test_a_json_description_of_no_known_evaluator_is_not_reproducible(self) -> None:
        """A JSON object that is neither SchemaEval's nor GitHubEval's: nothing to re-run,
        its content not even wanted, and no pull request to read."""
        doc = verdict(7, COMPLETE, "complete")
        chain = facts(doc, COMPLETE, description='{"brief": "write me a poem"}')
        _, failures = run_checks(body(doc), chain, CONFIG, COMPLETE)
        assert _codes(failures) == [("not_reproducible", "/esito")]
        assert not needs_content(chain, CONFIG)
        assert github_target(doc, chain, CONFIG, COMPLETE) is None
        schema_job = facts(doc, COMPLETE)  # SchemaEval's: content wanted, no pull request
        assert needs_content(schema_job, CONFIG)
        assert github_target(doc, schema_job, CONFIG, COMPLETE) is None

    def test_unsubmitted_job(self) -> None:
        """A rejection before any submission names no deliverable and cannot be re-run."""
        doc = verdict(7, COMPLETE, "reject", deliverable=None)
        chain = VerdictFacts(7, "JobRejected", facts(doc, COMPLETE).reason, None, EVALUATOR, None)
        _, failures = run_checks(body(doc), chain, CONFIG, None)
        assert _codes(failures) == [("not_reproducible", "/esito")]


class TestStatus:
    def test_precedence(self) -> None:
        """The worst code decides: unavailable, invalid, mismatch, disagrees, not reproducible."""
        f = {code: Failure(code, "") for code in FailureCode}
        assert (
            derive_status([f[FailureCode.NOT_REPRODUCIBLE], f[FailureCode.FIELD_MISMATCH]])
            is Status.MISMATCH
        )
        assert derive_status(
            [f[FailureCode.EVALUATOR_DISAGREES], f[FailureCode.NOT_REPRODUCIBLE]]
        ) is (Status.EVALUATOR_DISAGREES)
        assert (
            derive_status([f[FailureCode.UNAVAILABLE], f[FailureCode.INVALID_DOCUMENT]])
            is Status.UNAVAILABLE
        )

    @pytest.mark.parametrize(
        ("status", "code"),
        [
            (Status.VERIFIED, 0),
            (Status.MISMATCH, 1),
            (Status.INVALID_DOCUMENT, 1),
            (Status.EVALUATOR_DISAGREES, 1),
            (Status.UNAVAILABLE, 3),
            (Status.NOT_REPRODUCIBLE, 3),
        ],
    )
    def test_exit_codes(self, status: Status, code: int) -> None:
        """keeper verify exits 0 verified, 1 failed, 3 undetermined."""
        assert exit_code(status) == code
