"""Canonical bytes (RFC 8785) and keccak256 digests of verdict documents."""

from __future__ import annotations

import json

import pytest

from keeper.verify.canonical import NotCanonicalizable, canonical_bytes, digest, keccak_hex

# RFC 8785 section 3.2.2 / appendix: the specification's own input and output.
RFC_INPUT = (
    '{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],'
    '"string":"\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
    '"literals":[null,true,false]}'
)
RFC_OUTPUT = (
    '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
    '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
)


class TestCanonicalBytes:
    def test_rfc_example(self) -> None:
        """The RFC's sample document canonicalizes to the RFC's published bytes."""
        assert canonical_bytes(json.loads(RFC_INPUT)) == RFC_OUTPUT.encode("utf-8")

    def test_key_order_is_utf16_code_units(self) -> None:
        """Keys sort by UTF-16 code units (RFC 8785 3.2.3), so an emoji sorts before U+FB33."""
        doc = {"\u20ac": 1, "\r": 2, "\ufb33": 3, "1": 4, "\U0001f600": 5, "\u0080": 6, "\u00f6": 7}
        keys = list(json.loads(canonical_bytes(doc)))
        assert keys == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]

    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            (1.0, b"1"),
            (1e21, b"1e+21"),
            (-0.0, b"0"),
            (1e-7, b"1e-7"),
            (0.1, b"0.1"),
            (100.0, b"100"),
        ],
    )
    def test_numbers_are_es6_doubles(self, value: float, expected: bytes) -> None:
        """Floats serialize as ECMAScript would: 1.0 is 1, -0.0 is 0, exponents beyond 1e21."""
        assert canonical_bytes(value) == expected

    def test_spellings_of_one_number_agree(self) -> None:
        """1, 1.0, 1e0 and 10e-1 parse to the same double and so have one canonical form."""
        forms = {canonical_bytes(json.loads(f'{{"x":{n}}}')) for n in ("1", "1.0", "1e0", "10e-1")}
        assert forms == {b'{"x":1}'}

    def test_escapes_are_minimal(self) -> None:
        """Only quote, backslash and control characters are escaped; other unicode stays UTF-8."""
        out = canonical_bytes({"s": 'é"\\\n\x01\x7f\u2028/'})
        assert out == b'{"s":"\xc3\xa9\\"\\\\\\n\\u0001\x7f\xe2\x80\xa8/"}'

    def test_nested_and_whitespace_free(self) -> None:
        """Nested objects are sorted at every level and no whitespace is emitted."""
        assert canonical_bytes({"b": [{"z": 1, "a": {"y": 2, "x": 3}}], "a": None}) == (
            b'{"a":null,"b":[{"a":{"x":3,"y":2},"z":1}]}'
        )

    @pytest.mark.parametrize("value", [float("nan"), float("inf"), 2**53, {"x": object()}])
    def test_values_without_a_canonical_form(self, value: object) -> None:
        """Non-finite floats, integers past 2**53 and non-JSON types have no JCS form."""
        with pytest.raises(NotCanonicalizable):
            canonical_bytes(value)  # type: ignore[arg-type]


class TestDigest:
    def test_keccak_of_empty_input(self) -> None:
        """keccak256 (not SHA3-256) of the empty string, the well-known Ethereum constant."""
        assert keccak_hex(b"") == (
            "0xc5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470"
        )

    def test_digest_hashes_canonical_bytes(self) -> None:
        """A document's digest is keccak256 of its canonical bytes, whatever its key order."""
        doc = {"jobId": "7", "esito": "reject", "evaluator": "SchemaEval"}
        reordered = dict(reversed(list(doc.items())))
        assert digest(doc) == digest(reordered) == keccak_hex(canonical_bytes(doc))
        assert digest(doc) != digest({**doc, "jobId": "8"})
