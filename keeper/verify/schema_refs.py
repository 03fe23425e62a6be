"""Find a JSON Schema whose ``$ref`` comes back to itself before looking at the instance.

``{"$ref": "#", "type": "object"}`` is a valid schema, yet validating anything
against it recurses until the interpreter gives up: the reference applies the
root again at the same instance location, forever. A job author controls the
schema, so the verifier refuses such a schema at once, with a pointer to the
loop, instead of spending its sandbox time on a RecursionError.

Only keywords that apply a subschema at the *same* instance location can close
such a loop (``allOf``, ``not``, ``if`` ... and ``$ref`` itself); ``properties``,
``items`` and the like descend into the instance, which is finite, so a cycle
through them ends. References are followed when they are fragments of the
enclosing resource (``#`` or ``#/json/pointer``); anything else (anchors,
other URIs) is left to the validator, which refuses remote ones offline.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from keeper.domain.digits import at_most
from keeper.verify.document import escape_token

__all__ = ["ref_loop"]

_SAME_PLACE_ONE = ("not", "if", "then", "else")
_SAME_PLACE_LIST = ("allOf", "anyOf", "oneOf")
_SAME_PLACE_MAP = ("dependentSchemas",)
_REFS = ("$ref", "$dynamicRef")
_DESCEND_ONE = (
    "items",
    "additionalProperties",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
)
_DESCEND_LIST = ("prefixItems",)
_DESCEND_MAP = ("properties", "patternProperties")

Path = tuple[str, ...]


def ref_loop(schema: Any) -> str | None:
    """The JSON pointer of a subschema that reaches itself without descending; None if none."""
    state: dict[Path, int] = {}  # 1: on the current walk, 2: finished
    for start in _reachable(schema):
        found = _walk(schema, start, state)
        if found is not None:
            return "".join(f"/{escape_token(p)}" for p in found)
    return None


def _walk(root: Any, start: Path, state: dict[Path, int]) -> Path | None:
    """Depth-first over same-place edges, iteratively (the loop may be deep)."""
    if state.get(start):
        return None
    stack: list[tuple[Path, Iterator[Path]]] = [(start, _same_place(root, start))]
    state[start] = 1
    while stack:
        path, edges = stack[-1]
        nxt = next(edges, None)
        if nxt is None:
            state[path] = 2
            stack.pop()
            continue
        seen = state.get(nxt)
        if seen == 1:
            return nxt
        if seen is None:
            state[nxt] = 1
            stack.append((nxt, _same_place(root, nxt)))
    return None


def _same_place(root: Any, path: Path) -> Iterator[Path]:
    """Subschemas applied at the same instance location as the one at ``path``."""
    yield from _keyword_children(root, path, _SAME_PLACE_ONE, _SAME_PLACE_LIST, _SAME_PLACE_MAP)
    node = _at(root, path)
    if isinstance(node, dict):
        for key in _REFS:
            target = _resolve(root, path, node.get(key))
            if target is not None:
                yield target


def _descending(root: Any, path: Path) -> Iterator[Path]:
    """Subschemas applied to a part of the instance (a member or an item)."""
    yield from _keyword_children(root, path, _DESCEND_ONE, _DESCEND_LIST, _DESCEND_MAP)


def _keyword_children(
    root: Any, path: Path, one: tuple[str, ...], lists: tuple[str, ...], maps: tuple[str, ...]
) -> Iterator[Path]:
    """The subschemas under the given keywords: a schema, a list of them, or a map of them."""
    node = _at(root, path)
    if not isinstance(node, dict):
        return
    for key in one:
        if key in node:
            yield (*path, key)
    for key in lists:
        if isinstance(node.get(key), list):
            yield from ((*path, key, str(i)) for i in range(len(node[key])))
    for key in maps:
        if isinstance(node.get(key), dict):
            yield from ((*path, key, k) for k in node[key])


def _resolve(root: Any, path: Path, ref: Any) -> Path | None:
    """A fragment reference as a path from the document root, when it names one."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        return None
    fragment = ref[1:]
    if fragment and not fragment.startswith("/"):
        return None  # a named anchor: not followed
    base = _resource_root(root, path)
    parts = tuple(
        p.replace("~1", "/").replace("~0", "~") for p in fragment.split("/")[1:]
    )  # unescape per RFC 6901 (no percent-decoding: a fragment here is already decoded)
    target = (*base, *parts)
    return target if _at(root, target) is not _MISSING else None


def _resource_root(root: Any, path: Path) -> Path:
    """The nearest enclosing subschema with its own ``$id`` (fragments are relative to it)."""
    base: Path = ()
    node = root
    for i, part in enumerate(path):
        node = _child(node, part)
        if isinstance(node, dict) and "$id" in node:
            base = path[: i + 1]
    return base


def _reachable(root: Any) -> list[Path]:
    """Subschemas validation can apply, at any instance location, starting from the root.

    A loop in a ``$defs`` entry nothing refers to never runs, so it is no reason
    to refuse the schema.
    """
    seen: set[Path] = {()}
    order: list[Path] = []
    stack: list[Path] = [()]
    while stack:
        path = stack.pop()
        order.append(path)
        for nxt in (*_same_place(root, path), *_descending(root, path)):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return order


_MISSING = object()


def _child(node: Any, part: str) -> Any:
    if isinstance(node, dict):
        return node.get(part, _MISSING)
    if isinstance(node, list) and part.isdecimal():
        # the validator's resolver reads the index as int() does; past its 4,300 digits
        # that raises, which the re-run reports: here it only names no item (as does an
        # index led by another script's zeros, at_most's safe side: a loop through it is
        # left to the re-run's recursion backstop)
        index = at_most(part, len(node) - 1)
        return _MISSING if index is None else node[index]
    return _MISSING


def _at(root: Any, path: Path) -> Any:
    """The node at ``path``, or ``_MISSING``."""
    node = root
    for part in path:
        node = _child(node, part)
        if node is _MISSING:
            break
    return node
