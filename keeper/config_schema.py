"""Reading a raw TOML tree, and ``KEEPER_…`` overrides, against the configuration's declaration.

The configuration is declared once, as the frozen dataclasses of
``keeper.config``: a field's name is the key, its type (an ``Annotated`` alias
from ``keeper.config_values``, a ``Literal``, an enum, a nested dataclass, a
tuple of them or a mapping) says how the value is checked and how its
override is parsed, and its default is the default. This module walks that
declaration, so adding a key means adding a field and nothing else.

Why not a validation library: the errors are part of the interface (one line
per problem, the key path first, "did you mean" for misspelt keys, never a
secret's value), and cross-key rules must see the keys of a table that did
check out even when others did not, so one ``config check`` shows everything.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import enum
import functools
import json
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from keeper import config_values as v
from keeper.domain.digits import at_most
from keeper.domain.text import clipped, shown
from keeper.errors import ConfigError

__all__ = ["ENV_PREFIX", "Problems", "Reader", "Rule", "overlay_env"]

ENV_PREFIX = "KEEPER_"

# A cross-key rule of one table: (the values of its good keys, defaults filled;
# whether every key checked out; the complete earlier entries of the same list,
# by path) -> (key, message) problems. A rule may complete ``values`` (rpc_names).
Rule = Callable[[dict[str, Any], bool, Mapping[str, Mapping[str, Any]]], Iterable[tuple[str, str]]]

_BAD: Any = object()  # a value that did not check out (None is a valid value)
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_.\-]+\Z")


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    hint: Any
    default: Callable[[], object] | None  # None: no default declared


@functools.cache
def declared(cls: type) -> dict[str, _Field]:
    """The keys of a config table: its dataclass fields, in declaration order."""
    hints = typing.get_type_hints(cls, include_extras=True)
    out: dict[str, _Field] = {}
    for f in dataclasses.fields(cls):
        default: Callable[[], object] | None = None
        if f.default is not dataclasses.MISSING:
            default = functools.partial(copy.copy, f.default)  # defaults are immutable anyway
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory
        out[f.name] = _Field(hints[f.name], default)
    return out


def _unwrap(hint: Any) -> tuple[Any, tuple[Any, ...]]:
    if typing.get_origin(hint) is typing.Annotated:
        return hint.__origin__, hint.__metadata__
    return hint, ()


def _marker(metadata: tuple[Any, ...], kind: type[Any]) -> Any:
    return next((m for m in metadata if isinstance(m, kind)), None)


def _checked(hint: Any) -> bool:
    return _marker(_unwrap(hint)[1], v.Check) is not None


def _is_union(base: Any) -> bool:
    return typing.get_origin(base) in (typing.Union, types.UnionType)


def _table_class(base: Any) -> type | None:
    """The dataclass a table-valued key holds (``T`` or ``T | None``), else None."""
    if _is_union(base):
        args = [a for a in typing.get_args(base) if a is not type(None)]
        base = args[0] if len(args) == 1 else None
    return base if isinstance(base, type) and dataclasses.is_dataclass(base) else None


def _list_item(base: Any) -> Any:
    """The item type of a list-valued key (``tuple[T, ...]``), else None."""
    return typing.get_args(base)[0] if typing.get_origin(base) is tuple else None


def _choices(base: Any) -> tuple[str, ...] | None:
    if typing.get_origin(base) is Literal:
        return tuple(str(a) for a in typing.get_args(base))
    if isinstance(base, type) and issubclass(base, enum.Enum):
        return tuple(str(m.value) for m in base)
    return None


def env_parser(hint: Any) -> Callable[[str], object]:
    """How a ``KEEPER_…`` string becomes a raw value for this key."""
    base, metadata = _unwrap(hint)
    marker = _marker(metadata, v.Check) or _marker(metadata, v.Shape)
    if marker is not None:
        return marker.env  # type: ignore[no-any-return]
    if _choices(base) is not None:
        return v.env_str
    if _table_class(base) is not None or _list_item(base) is not None:
        return v.env_json
    return v.env_scalar


def key_text(key: str) -> str:
    """A key as it appears in an error path: quoted when empty or unusual.

    Every problem line must start with a visible path; an empty key, or one
    holding a newline or a colon, would otherwise blur or split that line.
    """
    if _PLAIN_KEY.match(key):
        return key
    return json.dumps(key).replace(":", "\\u003a")


def unknown(path: str, key: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=3, cutoff=0.6)
    hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    return f"{path}: unknown key{hint}"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class Problems:
    """Collects every problem so one run of ``config check`` shows them all."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.lines.append(f"{path}: {message}")

    def raise_if_any(self, source: str) -> None:
        if self.lines:
            head = f"invalid configuration{f' in {source}' if source else ''}:"
            raise ConfigError("\n".join([head, *(f"  {line}" for line in self.lines)]))


class Reader:
    """Checks a raw tree against the declaration, building the frozen dataclasses."""

    def __init__(self, rules: Mapping[type, Rule], problems: Problems) -> None:
        self.rules = rules
        self.problems = problems

    def table(
        self,
        cls: type,
        raw: object,
        path: str,
        siblings: dict[str, Mapping[str, Any]] | None = None,
    ) -> Any:
        """One table; the dataclass when every key checked out, else ``_BAD``."""
        if not isinstance(raw, dict):
            self.problems.add(path, f"expected a table, got {shown(raw)}")
            return _BAD
        fields = declared(cls)
        for key in raw:
            if key not in fields:
                self.problems.lines.append(unknown(_join(path, key_text(key)), key, fields))
        values: dict[str, Any] = {}
        for key, spec in fields.items():
            where = _join(path, key)
            if key in raw:
                value = self.value(spec.hint, raw[key], where)
            elif spec.default is not None:
                value = spec.default()
            elif _table_class(_unwrap(spec.hint)[0]) is not None:
                value = self.value(spec.hint, {}, where)  # an absent section: its own keys
            elif _list_item(_unwrap(spec.hint)[0]) is not None and not _checked(spec.hint):
                value = ()  # an absent list of tables
            else:
                self.problems.add(where, "required key is missing")
                continue
            if value is not _BAD:
                values[key] = value
        complete = len(values) == len(fields)
        rule = self.rules.get(cls)
        if rule is not None:
            for key, message in rule(values, complete, siblings or {}):
                self.problems.add(_join(path, key), message)
        if not complete:
            return _BAD
        if siblings is not None:
            siblings[path] = values
        return cls(**values)

    def value(self, hint: Any, raw: object, path: str) -> Any:
        base, metadata = _unwrap(hint)
        check = _marker(metadata, v.Check)
        shape = _marker(metadata, v.Shape)
        choices = _choices(base)
        try:
            if check is not None:
                return check.check(raw)
            if choices is not None:
                text = v.choice(*choices)(raw)
                return base(text) if isinstance(base, type) else text
        except v.BadValue as exc:
            self.problems.add(path, str(exc))
            return _BAD
        table = _table_class(base)
        if table is not None:
            return None if raw is None else self.table(table, raw, path)
        if _is_union(base):
            return self._tagged(typing.get_args(base), raw, path)
        if _list_item(base) is not None:
            return self._list(_list_item(base), shape, raw, path)
        if typing.get_origin(base) in (Mapping, dict):
            return self._mapping(typing.get_args(base), shape, raw, path)
        raise TypeError(f"{path}: no way to read a {hint!r}")  # a declaration mistake

    def _expected(self, shape: v.Shape | None, raw: object, path: str) -> Any:
        expected = shape.expected if shape else "a list"
        given = f"a {v.type_name(raw)}" if shape is None or shape.type_only else shown(raw)
        self.problems.add(path, f"expected {expected}, got {given}")
        return _BAD

    def _list(self, item: Any, shape: v.Shape | None, raw: object, path: str) -> Any:
        if not isinstance(raw, list):
            return self._expected(shape, raw, path)
        siblings: dict[str, Mapping[str, Any]] = {}
        table = _table_class(item)
        out = [
            self.table(table, entry, f"{path}[{i}]", siblings)
            if table is not None
            else self.value(item, entry, f"{path}[{i}]")
            for i, entry in enumerate(raw)
        ]
        return _BAD if any(o is _BAD for o in out) else tuple(out)

    def _mapping(self, args: tuple[Any, ...], shape: v.Shape | None, raw: object, path: str) -> Any:
        if not isinstance(raw, dict):
            return self._expected(shape, raw, path)
        out: dict[Any, Any] = {}
        for key, item in raw.items():
            where = f"{path}.{key}"
            name = self.value(args[0], key, where)
            value = _BAD if name is _BAD else self.value(args[1], item, where)
            if value is not _BAD:
                out[name] = value
        return out if len(out) == len(raw) else _BAD

    def _tagged(self, members: tuple[Any, ...], raw: object, path: str) -> Any:
        """A union of tables told apart by their ``kind`` (a ``Literal`` field)."""
        kinds: dict[object, type] = {
            typing.get_args(declared(m)["kind"].hint)[0]: m for m in members
        }
        if not isinstance(raw, dict):  # the type only: a source given as a string is a URL
            self.problems.add(path, f"expected a table, got a {v.type_name(raw)}")
            return _BAD
        kind = raw.get("kind")
        cls = kinds.get(kind) if isinstance(kind, str) else None  # a list is not hashable
        if cls is None:
            options = " or ".join(repr(k) for k in kinds)
            self.problems.add(f"{path}.kind", f"must be {options}, got {shown(kind)}")
            return _BAD
        return self.table(cls, raw, path)


# --------------------------------------------------------------------------- env overlay


def overlay_env(
    root: type, raw: dict[str, Any], env: Mapping[str, str], problems: Problems
) -> None:
    """Write ``KEEPER_<SECTION>__<KEY>`` values into the raw TOML tree before checking.

    Only names with a double underscore are overrides, so a secret held in an
    env var such as ``KEEPER_PRIVATE_KEY`` is never mistaken for one. A section
    that is a list of tables takes ``KEEPER_<SECTION>__<INDEX>__<KEY>``.
    """
    sections = declared(root)
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        parts = name[len(ENV_PREFIX) :].lower().split("__")
        section = parts[0]
        if section not in sections:
            problems.lines.append(unknown(f"{name} -> {section}", section, sections))
            continue
        base = _unwrap(sections[section].hint)[0]
        try:
            if _list_item(base) is not None:
                _overlay_entry(raw, _list_item(base), parts, name, env[name], problems)
            elif len(parts) != 2:
                problems.add(name, f"expected {ENV_PREFIX}{section.upper()}__<KEY>")
            else:
                keys = declared(base)
                if parts[1] not in keys:
                    where = f"{name} -> {section}.{key_text(parts[1])}"
                    problems.lines.append(unknown(where, parts[1], keys))
                    continue
                table = raw.setdefault(section, {})
                if isinstance(table, dict):
                    table[parts[1]] = env_parser(keys[parts[1]].hint)(env[name])
        except v.BadValue as exc:
            problems.add(f"{name} -> {'.'.join(parts)}", str(exc))


def _overlay_entry(
    raw: dict[str, Any], item: type, parts: list[str], name: str, value: str, problems: Problems
) -> None:
    section = parts[0]
    if len(parts) != 3 or not (parts[1].isascii() and parts[1].isdigit()):
        problems.add(name, f"expected {ENV_PREFIX}{section.upper()}__<INDEX>__<KEY>")
        return
    key = parts[2]
    entries = raw.setdefault(section, [])
    if not isinstance(entries, list):
        return
    index = at_most(parts[1], len(entries))
    if index is None:
        problems.add(
            name, f"index {clipped(parts[1], 23)} skips entries: there are {len(entries)} {section}"
        )
        return
    keys = declared(item)
    if key not in keys:
        problems.lines.append(unknown(f"{name} -> {section}[{index}].{key_text(key)}", key, keys))
        return
    if index == len(entries):
        entries.append({})
    if isinstance(entries[index], dict):
        entries[index][key] = env_parser(keys[key].hint)(value)
