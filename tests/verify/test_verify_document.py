"""Bounded parsing of untrusted documents: every hostile input ends in InvalidDocument, fast."""

from __future__ import annotations

import tracemalloc

import pytest

from keeper.verify.document import (
    ABSENT,
    DocumentLimits,
    InvalidDocument,
    extract_document,
    max_depth,
    parse_json,
    parse_object,
    resolve_pointer,
)


def _invalid(raw: bytes, limits: DocumentLimits | None = None) -> InvalidDocument:
    with pytest.raises(InvalidDocument) as info:
        parse_object(raw, limits)
    return info.value


class TestHostileDocuments:
    def test_oversized_body_is_refused_before_decoding(self) -> None:
        """A 50 MB body is rejected on its length alone: nothing of its size is ever allocated."""
        body = b'{"a":"' + b"x" * (50 * 1024 * 1024) + b'"}'
        tracemalloc.start()
        try:
            err = _invalid(body)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 1024 * 1024
        assert err.pointer == "" and "larger than" in err.detail and not err.syntax

    @pytest.mark.parametrize("opener", [b"[", b'{"a":'])
    def test_ten_thousand_deep_nesting(self, opener: bytes) -> None:
        """10,000 levels of arrays or objects are refused by the pre-scan, not by RecursionError."""
        closer = b"]" if opener == b"[" else b"}"
        err = _invalid(opener * 10_000 + b"1" + closer * 10_000)
        assert "nesting depth" in err.detail

    def test_depth_limit_is_exact(self) -> None:
        """A document exactly at the depth limit parses; one level more does not."""
        limits = DocumentLimits(max_depth=5)
        assert parse_json(b"[[[[[1]]]]]", limits) == [[[[[1]]]]]
        with pytest.raises(InvalidDocument):
            parse_json(b"[[[[[[1]]]]]]", limits)

    def test_brackets_inside_strings_do_not_count(self) -> None:
        """The depth pre-scan skips string contents, escaped quotes included."""
        assert max_depth('{"s":"[[[[\\"[[[[", "t":["]]]"]}') == 2

    @pytest.mark.parametrize(
        "text", ['"' + '\\"' * 300_000, '"' * 1_000_000, '"\\' * 500_000, "[" * 1_000_000]
    )
    @pytest.mark.timeout(60)
    def test_depth_scan_is_linear(self, text: str) -> None:
        """Unterminated strings full of escaped quotes or brackets are refused, not backtracked.

        A quadratic scan of these million-character inputs would not end within the
        timeout; how fast the linear scan is belongs to the benchmarks.
        """
        with pytest.raises(InvalidDocument):
            parse_json(text.encode(), DocumentLimits(max_bytes=2 << 20))

    def test_invalid_utf8(self) -> None:
        """Bytes that are not UTF-8 are a syntax failure naming the offending byte."""
        err = _invalid(b'{"a":"\xc3\x28"}')
        assert err.syntax and "byte 6" in err.detail

    def test_duplicate_keys_point_at_the_duplicate(self) -> None:
        """A repeated key is refused with the pointer of the repeated member, however deep."""
        assert _invalid(b'{"a":1,"a":2}').pointer == "/a"
        assert _invalid(b'{"x":{"b":[0,{"c/d":1,"c/d":1}]}}').pointer == "/x/b/1/c~1d"

    def test_huge_integer_literal_is_refused_without_conversion(self) -> None:
        """A million-digit integer is refused by length before Python's int conversion runs.

        The detail names the length limit: a conversion would have failed on Python's own
        digit limit with another message.
        """
        err = _invalid(b'{"n":' + b"9" * 1_000_000 + b"}")
        assert err.pointer == "/n" and "longer than" in err.detail

    def test_limits_are_inclusive(self) -> None:
        """A body of exactly ``max_bytes`` and a number of exactly ``max_number_chars`` are
        taken; one more of either is not, and a root problem says so."""
        exact = b'{"a":"' + b"x" * 8 + b'"}'  # 16 bytes
        assert parse_object(exact, DocumentLimits(max_bytes=16)) == {"a": "x" * 8}
        err = _invalid(exact, DocumentLimits(max_bytes=15))
        assert str(err) == "(root): document is larger than 15 bytes"
        assert parse_object(b'{"n":1.25}', DocumentLimits(max_number_chars=4)) == {"n": 1.25}
        assert _invalid(b'{"n":1.255}', DocumentLimits(max_number_chars=4)).pointer == "/n"

    def test_integer_beyond_2_53_has_no_canonical_form(self) -> None:
        """2**53 + 1 would round in any JCS implementation, so it is refused at its pointer."""
        assert parse_object(b'{"n":9007199254740991}') == {"n": 9007199254740991}
        assert _invalid(b'{"m":[1,9007199254740993]}').pointer == "/m/1"

    @pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
    def test_non_json_constants(self, literal: bytes) -> None:
        """Python's NaN/Infinity extensions are not JSON."""
        err = _invalid(b'{"v":' + literal + b"}")
        assert err.pointer == "/v" and err.syntax

    def test_float_overflow(self) -> None:
        """A float literal beyond the double range is refused rather than becoming inf."""
        assert _invalid(b'{"v":1e400}').pointer == "/v"

    @pytest.mark.parametrize("raw", [b"[1,2]", b'"doc"', b"7", b"null", b"true"])
    def test_non_object_json(self, raw: bytes) -> None:
        """Valid JSON that is not an object is an invalid verdict at the root."""
        err = _invalid(raw)
        assert err.pointer == "" and "expected a JSON object" in err.detail

    @pytest.mark.parametrize("raw", [b"", b"{", b'{"a":1} x', b"{'a':1}"])
    def test_syntax_errors(self, raw: bytes) -> None:
        """Truncated, trailing or single-quoted input is a syntax failure."""
        assert _invalid(raw).syntax


class TestPointers:
    def test_resolve(self) -> None:
        """RFC 6901 pointers resolve through objects and arrays, unescaping ~1 and ~0."""
        doc = {"a/b": [{"m~n": 5}]}
        assert resolve_pointer(doc, "/a~1b/0/m~0n") == 5
        assert resolve_pointer(doc, "") == doc
        assert resolve_pointer(doc, "/a~1b/1") is ABSENT
        assert resolve_pointer(doc, "/a~1b/01") is ABSENT
        assert resolve_pointer(doc, "/a~1b/\u0660") is ABSENT  # an Arabic-Indic zero
        assert resolve_pointer(doc, "/a~1b/" + "9" * 5000) is ABSENT  # past int()'s 4,300
        assert resolve_pointer(doc, "/missing") is ABSENT

    def test_extract_object_at_pointer(self) -> None:
        """A service response carries the verdict as an object at the configured pointer."""
        body = b'{"job":{"id":7},"verdict":{"esito":"complete"}}'
        assert extract_document(body, "/verdict") == {"esito": "complete"}

    def test_extract_embedded_text(self) -> None:
        """A verdict kept as a JSON string inside the response is parsed with the same limits."""
        assert extract_document(b'{"v":"{\\"a\\":1}"}', "/v") == {"a": 1}
        with pytest.raises(InvalidDocument):
            extract_document(b'{"v":"{\\"a\\":1,\\"a\\":2}"}', "/v")

    @pytest.mark.parametrize("body", [b'{"verdict":null}', b'{"other":1}'])
    def test_absent_verdict_is_not_invalid(self, body: bytes) -> None:
        """A response without a verdict yet means unavailable (None), not a broken document."""
        assert extract_document(body, "/verdict") is None

    def test_wrong_type_at_pointer(self) -> None:
        """A number where the verdict should be is an invalid document."""
        with pytest.raises(InvalidDocument):
            extract_document(b'{"verdict":5}', "/verdict")
