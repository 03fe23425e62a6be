"""A job schema whose $ref loops without descending is refused at once, with the loop's pointer."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from sandbox_targets import validate

from keeper.verify.canonical import keccak_hex
from keeper.verify.document import DocumentLimits
from keeper.verify.failures import FailureCode
from keeper.verify.sandbox import Sandbox
from keeper.verify.schema_refs import ref_loop
from keeper.verify.schemaeval import _OFFLINE, Rederived, rerun

# (schema, the pointers the loop may be reported at, an instance that runs into it)
LOOPS: list[tuple[Any, set[str], Any]] = [
    ({"$ref": "#"}, {""}, 1),
    ({"$ref": "#", "type": "object", "required": ["a"]}, {""}, {}),
    ({"allOf": [{"type": "object"}, {"$ref": "#"}]}, {"", "/allOf/1"}, {}),
    ({"anyOf": [{"not": {"$ref": "#"}}]}, {"", "/anyOf/0", "/anyOf/0/not"}, "x"),
    (
        {
            "properties": {"p": {"$ref": "#/$defs/x"}},
            "$defs": {"x": {"$ref": "#/$defs/y"}, "y": {"if": {"$ref": "#/$defs/x"}}},
        },
        {"/$defs/x", "/$defs/y", "/$defs/y/if"},
        {"p": 1},
    ),
    ({"$ref": "#/$defs/a~1b", "$defs": {"a/b": {"$ref": "#/$defs/a~1b"}}}, {"/$defs/a~1b"}, 0),
    ({"items": {"$id": "urn:inner", "allOf": [{"$ref": "#"}]}}, {"/items", "/items/allOf/0"}, [1]),
    ({"dependentSchemas": {"k": {"$ref": "#"}}}, {"", "/dependentSchemas/k"}, {"k": 1}),
]
FINE: list[Any] = [
    True,
    {"type": "object"},
    {"properties": {"next": {"$ref": "#"}}},  # descends: ends with the instance
    {"$defs": {"n": {"items": {"$ref": "#/$defs/n"}}}, "$ref": "#/$defs/n"},
    {"$ref": "#/$defs/missing"},  # unresolvable: the validator says so
    {"$ref": "#named"},  # anchors are left to the validator
    {"allOf": [{"$ref": "#/$defs/a"}], "$defs": {"a": {"type": "string"}}},
    {"$defs": {"x": {"$ref": "#/$defs/y"}, "y": {"$ref": "#/$defs/x"}}},  # never applied
]


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    """Looping schemas are only ever validated here: in-process, the recursion can take the
    resolver's native code past the C stack and kill the test run."""
    box = Sandbox(timeout=30.0)
    yield box
    box.close()


@pytest.mark.parametrize(("schema", "cycle", "instance"), LOOPS)
def test_a_loop_is_found_and_named(
    schema: Any, cycle: set[str], instance: Any, sandbox: Sandbox
) -> None:
    assert ref_loop(schema) in cycle
    with pytest.raises(RecursionError):  # what validating would do
        sandbox.run(validate, schema, instance)


@pytest.mark.parametrize("schema", FINE)
def test_a_schema_without_a_loop_passes(schema: Any) -> None:
    assert ref_loop(schema) is None


def test_rerun_refuses_a_looping_schema_quickly_with_a_code() -> None:
    content = json.dumps({"a": 1}).encode()
    started = time.perf_counter()
    out = rerun({"$ref": "#", "type": "object"}, content, keccak_hex(content), DocumentLimits())
    assert not isinstance(out, Rederived)
    assert out.code is FailureCode.NOT_REPRODUCIBLE and out.pointer == "/esito"
    assert "reaches itself through $ref" in out.detail
    assert time.perf_counter() - started < 5  # not the RecursionError route (a hang guard only)


@pytest.mark.parametrize(
    "schema",
    [
        {"$anchor": "a", "allOf": [{"$ref": "#a"}]},  # a loop through a named anchor
        {"$anchor": "a", "$ref": "#a", "type": "object", "required": ["x", "y"]},
    ],
)
def test_a_loop_the_walk_does_not_follow_still_ends_in_a_coded_failure(
    schema: Any, sandbox: Sandbox
) -> None:
    """The backstop: a recursion the walk cannot see is caught, whichever way it surfaces
    (RecursionError, or a panic of the resolver's native code)."""
    assert ref_loop(schema) is None
    content = json.dumps({"a": 1}).encode()
    out = sandbox.run(rerun, schema, content, keccak_hex(content), DocumentLimits())
    assert not isinstance(out, Rederived)
    assert out.code is FailureCode.NOT_REPRODUCIBLE
    assert out.detail.startswith("schema evaluation failed")


@pytest.mark.parametrize("index", ["9" * 5000, "\u00b2", "\u0663"])
def test_an_item_index_the_walk_cannot_read_as_an_int_names_no_item(index: str) -> None:
    """A $ref item index past int()'s 4,300 digits, or a digit int() does not take (the
    superscript two), names no item; an Arabic-Indic three is item 3, as int() reads it."""
    items = [{"type": "string"}] * 3 + [{"$ref": "#/allOf/0"}]  # a loop through item 3
    schema = {"prefixItems": items, "allOf": [{"$ref": f"#/prefixItems/{index}"}]}
    expected = "/allOf/0" if index == "\u0663" else None
    assert ref_loop(schema) == expected


def test_a_schema_the_validator_cannot_evaluate_is_named_with_what_it_raised() -> None:
    """The catch-all failure says which exception and what it said, clipped."""
    huge = "#/prefixItems/" + "9" * 5000
    schema = {"prefixItems": [{"type": "string"}], "allOf": [{"$ref": huge}]}
    content = json.dumps(["a"]).encode()
    out = rerun(schema, content, keccak_hex(content), DocumentLimits())
    assert not isinstance(out, Rederived)
    assert out.code is FailureCode.NOT_REPRODUCIBLE and out.pointer == "/esito"
    assert out.detail.startswith("schema evaluation failed: ValueError: Exceeds the limit (4300")
    assert len(out.detail) <= 300


def test_a_deep_chain_of_refs_is_walked_without_recursion() -> None:
    """A hostile schema may chain thousands of $refs: the walk itself must not recurse."""
    n = 5000
    defs = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(n)}
    defs[f"d{n}"] = {"$ref": "#/$defs/d0"}
    assert ref_loop({"$ref": "#/$defs/d0", "$defs": defs}) is not None
    defs[f"d{n}"] = {"type": "string"}
    assert ref_loop({"$ref": "#/$defs/d0", "$defs": defs}) is None


local_refs = st.sampled_from(["#", "#/$defs/a", "#/$defs/b", "#/properties/p", "#/nope"])
schemas = st.recursive(
    st.fixed_dictionaries(
        {}, optional={"type": st.sampled_from(["object", "string"]), "$ref": local_refs}
    ),
    lambda inner: st.fixed_dictionaries(
        {},
        optional={
            "$ref": local_refs,
            "allOf": st.lists(inner, max_size=2),
            "not": inner,
            "properties": st.fixed_dictionaries({}, optional={"p": inner}),
            "items": inner,
            "$defs": st.fixed_dictionaries({}, optional={"a": inner, "b": inner}),
        },
    ),
    max_leaves=6,
)
instances = st.recursive(
    st.none() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.fixed_dictionaries({}, optional={"p": inner}),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(schema=schemas, instance=instances)
def test_no_loop_found_means_validation_ends(schema: Any, instance: Any) -> None:
    """Against the validator itself: where ref_loop sees no loop, validation ends."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError:
        return
    if ref_loop(schema) is not None:
        return  # found loops are checked against the validator above, in the sandbox
    validator = Draft202012Validator(schema, registry=_OFFLINE)
    try:
        list(validator.iter_errors(instance))
        recursed = False
    except RecursionError:
        recursed = True
    except Exception:  # an unresolvable $ref: not this module's concern
        return
    assert not recursed, "ref_loop saw no loop, yet validation recursed without end"
