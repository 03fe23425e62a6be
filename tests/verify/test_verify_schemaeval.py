"""SchemaEval re-execution details: motivi parsing, schema features, refusal to fetch."""

from __future__ import annotations

import json
from typing import Any

import pytest
from verify_helpers import COMPLETE, DESCRIPTION, TOO_FEW

from keeper.verify.canonical import keccak_hex
from keeper.verify.document import DocumentLimits
from keeper.verify.failures import Failure, FailureCode
from keeper.verify.schemaeval import Rederived, compare, motivi_pointers, rerun

LIMITS = DocumentLimits()


def _rerun(schema: Any, content: bytes) -> Rederived | Failure:
    return rerun(schema, content, keccak_hex(content), LIMITS)


class TestMotivi:
    def test_pointers_not_prose(self) -> None:
        """Only the '<pointer>: ' prefix counts; prose entries name no location."""
        motivi = [
            "/a/0/b: whatever",
            "#/c: uri fragment form",
            ": root problem",
            "hash mismatch",
            5,
        ]
        assert motivi_pointers(motivi) == frozenset({"/a/0/b", "/c", ""})

    def test_not_a_list(self) -> None:
        """motivi that is not a list gives no set at all."""
        assert motivi_pointers("/a: x") is None

    def test_rewording_does_not_matter(self) -> None:
        """Two verdicts that differ only in message wording compare the same."""
        derived = Rederived("reject", frozenset({"/fornitori"}), "")
        assert (
            compare({"esito": "reject", "motivi": ["/fornitori: Array has too few items"]}, derived)
            == []
        )
        assert (
            compare(
                {"esito": "reject", "motivi": ["/fornitori: must NOT have fewer than 3"]}, derived
            )
            == []
        )


class TestSchemas:
    def test_local_refs_resolve(self) -> None:
        """$ref into the schema's own $defs works offline."""
        schema = {
            "$defs": {"piva": {"type": "string", "pattern": "^[0-9]{11}$"}},
            "properties": {"p": {"$ref": "#/$defs/piva"}},
        }
        assert _rerun(schema, b'{"p":"123"}') == Rederived(
            "reject", frozenset({"/p"}), "content does not match the schema"
        )
        assert isinstance(_rerun(schema, b'{"p":"12345678901"}'), Rederived)

    def test_metaschema_ref_is_bundled(self) -> None:
        """A $ref to the 2020-12 meta-schema resolves from the bundled copy, not the network."""
        schema = {"properties": {"s": {"$ref": "https://json-schema.org/draft/2020-12/schema"}}}
        result = _rerun(schema, b'{"s":{"type":5}}')
        assert isinstance(result, Rederived) and result.esito == "reject"

    def test_remote_ref_is_refused(self) -> None:
        """Any other absolute $ref makes the re-run not_reproducible."""
        schema = {"properties": {"s": {"$ref": "http://127.0.0.1:9/x.json"}}}
        result = _rerun(schema, b'{"s":1}')
        assert isinstance(result, Failure) and result.code is FailureCode.NOT_REPRODUCIBLE

    def test_invalid_schema(self) -> None:
        """A schema that is not a valid 2020-12 schema cannot be re-run."""
        result = _rerun({"type": "no-such-type"}, b"{}")
        assert isinstance(result, Failure) and "invalid job schema" in result.detail

    def test_root_errors_have_the_empty_pointer(self) -> None:
        """A missing required property fails at the root, pointer ""."""
        result = _rerun({"required": ["fornitori"]}, b"{}")
        assert isinstance(result, Rederived) and result.locations == frozenset({""})

    def test_keys_are_escaped(self) -> None:
        """Instance locations escape / and ~ as JSON pointers do."""
        result = _rerun({"properties": {"a/b~": {"type": "string"}}}, b'{"a/b~":1}')
        assert isinstance(result, Rederived) and result.locations == frozenset({"/a~1b~0"})

    @pytest.mark.parametrize("content", [b'{"a":1,"a":2}', b"[" * 100 + b"]" * 100])
    def test_content_beyond_our_limits(self, content: bytes) -> None:
        """JSON we refuse to judge (duplicates, depth) is not_reproducible, not a reject."""
        result = _rerun({}, content)
        assert isinstance(result, Failure) and result.pointer == "/deliverable"

    def test_content_that_is_not_json(self) -> None:
        """Non-JSON content is a reject without locations, like SchemaEval's step 2."""
        result = _rerun({}, b"not json")
        assert isinstance(result, Rederived) and (result.esito, result.locations) == (
            "reject",
            None,
        )

    def test_fixtures(self) -> None:
        """The shared fixtures: complete passes, too-few fails at /fornitori."""
        schema = json.loads(DESCRIPTION)["schema"]
        assert _rerun(schema, COMPLETE) == Rederived(
            "complete", frozenset(), "content matches the schema"
        )
        too_few = _rerun(schema, TOO_FEW)
        assert isinstance(too_few, Rederived) and too_few.locations == frozenset({"/fornitori"})
