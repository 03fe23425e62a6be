"""The configuration is declared once: every table and key of the dataclasses is read,
overridable, refused when misspelt, and documented, with nothing listed a second time."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import subprocess
import sys
import tomllib
import typing
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from keeper.config import (
    DEFAULT_DATABASE_PATH,
    ApiConfig,
    ChainConfig,
    ClusterConfig,
    Config,
    ContractConfig,
    DatabaseConfig,
    DirectorySourceConfig,
    GitHubConfig,
    HttpSourceConfig,
    IndexerConfig,
    KeeperConfig,
    LogConfig,
    VerdictsConfig,
    load_config,
    parse_config,
)
from keeper.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "config" / "keeper.example.toml"
DOC = ROOT / "docs" / "configuration.md"

# Every table of the declaration, where it sits in the example file.
TABLES: list[tuple[str, type[Any]]] = [
    ("", Config),
    ("chain", ChainConfig),
    ("contracts[0]", ContractConfig),
    ("database", DatabaseConfig),
    ("verdicts", VerdictsConfig),
    ("verdicts.sources[0]", HttpSourceConfig),
    ("verdicts.sources[1]", DirectorySourceConfig),
    ("verdicts.github", GitHubConfig),
    ("keeper", KeeperConfig),
    ("api", ApiConfig),
    ("indexer", IndexerConfig),
    ("log", LogConfig),
    ("cluster", ClusterConfig),
]
# keys the example leaves out on purpose, with the value the loader gives them: without
# database.path, KEEPER_DATABASE__URL alone switches the example to PostgreSQL
LEFT_OUT: dict[tuple[str, str], object] = {("database", "path"): DEFAULT_DATABASE_PATH}
SECTIONS = [(path, cls) for path, cls in TABLES if path and "." not in path and "[" not in path]


def example() -> dict[str, Any]:
    return tomllib.loads(EXAMPLE.read_text())


def at(tree: dict[str, Any], path: str) -> dict[str, Any]:
    """The table at ``a.b[1].c`` in a raw tree."""
    node: Any = tree
    for part in filter(None, path.split(".")):
        name, _, index = part.partition("[")
        node = node[name]
        if index:
            node = node[int(index.rstrip("]"))]
    assert isinstance(node, dict)
    return node


def keys(cls: type[Any]) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def problems(raw: dict[str, Any], env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(raw, env or {})
    return [line.strip() for line in str(info.value).splitlines()[1:]]


def reachable(cls: type[Any]) -> set[type[Any]]:
    """Every config dataclass reachable from ``cls`` through its field types."""
    found = {cls}
    for hint in typing.get_type_hints(cls).values():
        for name in re.findall(r"\w+Config\b", str(hint)):
            other = globals().get(name)
            if other is not None and other not in found:
                found |= reachable(other)
    return found


def test_the_table_list_covers_the_declaration() -> None:
    """The cases below are generated from TABLES, so TABLES must hold every table declared."""
    declared = reachable(Config)
    assert {cls for _, cls in TABLES} == declared
    assert {SourceClass for SourceClass in declared if "Source" in SourceClass.__name__} == {
        HttpSourceConfig,
        DirectorySourceConfig,
    }


@pytest.mark.parametrize(
    ("path", "key"),
    [(path, key) for path, cls in TABLES for key in keys(cls)],
    ids=lambda x: x or "<root>",
)
def test_a_misspelt_key_anywhere_is_refused_with_a_suggestion(path: str, key: str) -> None:
    """Each declared key, misspelt where it belongs, is one error naming it and the key meant."""
    raw = example()
    at(raw, path)[f"{key}x"] = 1
    (line,) = problems(raw)
    prefix = f"{path}.{key}x" if path else f"{key}x"
    assert line.startswith(f"{prefix}: unknown key (did you mean "), line
    assert repr(key) in line


@pytest.mark.parametrize(
    ("path", "key"),
    [
        (path, key)
        for path, cls in [*SECTIONS, ("contracts[0]", ContractConfig)]
        for key in keys(cls)
    ],
)
def test_a_misspelt_override_is_refused_with_a_suggestion(path: str, key: str) -> None:
    """A misspelt ``KEEPER_…`` names the variable, the key it read and the key meant."""
    variable = f"KEEPER_{path.upper().replace('[', '__').rstrip(']')}__{key.upper()}X"
    (line,) = problems(example(), {variable: "1"})
    assert line.startswith(f"{variable} -> {path}.{key}x: unknown key (did you mean "), line
    assert repr(key) in line


def env_text(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | dict):
        return json.dumps(value)
    return str(value)


@pytest.mark.parametrize(
    ("path", "key"),
    [
        (path, key)
        for path, cls in [*SECTIONS, ("contracts[0]", ContractConfig)]
        for key in keys(cls)
    ],
)
def test_every_key_is_overridable_from_the_environment(path: str, key: str) -> None:
    """An override replaces a bad file value with the example's, giving the example's config."""
    raw = example()
    section, _, index = path.partition("[")
    table = at(raw, path)
    # the example leaves [verdicts.evaluators] empty
    value = table.get(key, LEFT_OUT.get((path, key), {}))
    table[key] = {"not": "valid"}  # refused by every key, so only the override can fix it
    name = f"{section}__{index.rstrip(']')}" if index else section
    config = parse_config(raw, {f"KEEPER_{name.upper()}__{key.upper()}": env_text(value)})
    assert config == load_config(EXAMPLE, {})


def test_defaults_come_from_the_declaration() -> None:
    """What the loader fills in for absent keys is exactly the dataclass defaults."""
    raw = {"chain": {"chain_id": 1, "rpc_urls": ["http://a.example"]}}
    assert parse_config(raw, {}) == Config(
        chain=ChainConfig(1, ("http://a.example",), ("rpc0",)), contracts=()
    )
    sources = {"sources": [{"kind": "http", "url": "http://s.example"}, {"kind": "directory",
                                                                         "path": "d"}]}  # fmt: skip
    verdicts = parse_config({**raw, "verdicts": {**sources, "github": {}}}, {}).verdicts
    assert verdicts.sources == (HttpSourceConfig("http://s.example"), DirectorySourceConfig("d"))
    assert verdicts.github == GitHubConfig()


def test_a_source_kind_of_the_wrong_type_is_named_not_a_crash() -> None:
    """Only "http" and "directory" tell sources apart; anything else (a list, none) is named."""
    raw = {"chain": {"chain_id": 1, "rpc_urls": ["http://a.example"]}}
    sources = [{"kind": ["http"], "url": "http://s.example"}, {"path": "d"}, "http://s.example"]
    assert problems({**raw, "verdicts": {"sources": sources}}) == [
        "verdicts.sources[0].kind: must be 'http' or 'directory', got ['http']",
        "verdicts.sources[1].kind: must be 'http' or 'directory', got None",
        "verdicts.sources[2]: expected a table, got a string",  # a URL may hold a token
    ]


def test_config_objects_are_frozen() -> None:
    """The loaded tree is immutable: the pure core can hold it without copying."""
    config = load_config(EXAMPLE, {})
    for obj, attr in ((config, "chain"), (config.chain, "chain_id"), (config.keeper, "shard")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, attr, None)


def test_config_does_not_import_the_rpc_package() -> None:
    """Redaction lives in keeper.obs.redact, so loading a config pulls in no RPC code."""
    code = "import sys, keeper.config; print(sorted(m for m in sys.modules if 'keeper.rpc' in m))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- the reference doc


def doc_tables() -> dict[str, dict[str, str]]:
    """heading -> {key: default column} for each key table of docs/configuration.md."""
    out: dict[str, dict[str, str]] = {}
    heading = ""
    for line in DOC.read_text().splitlines():
        if line.startswith("#"):
            heading = line.lstrip("# ").strip()
        match = re.match(r"^\| `(\w+)`( \((\w+)\))? \| ([^|]*) \|", line)
        if match:
            name = f"{heading} ({match.group(3)})" if match.group(3) else heading
            out.setdefault(name, {})[match.group(1)] = match.group(4)
    return out


DOCUMENTED: list[tuple[str, type[Any], set[str]]] = [
    ("`[chain]`", ChainConfig, set()),
    ("`[database]`", DatabaseConfig, set()),
    ("`[[contracts]]`", ContractConfig, set()),
    ("`[verdicts]`", VerdictsConfig, {"kind"}),  # the source table's common key sits here
    ("`[verdicts]` (http)", HttpSourceConfig, {"kind"}),
    ("`[verdicts]` (directory)", DirectorySourceConfig, {"kind"}),
    ("`[verdicts.github]`", GitHubConfig, set()),
    ("`[keeper]`", KeeperConfig, set()),
    ("`[api]`", ApiConfig, set()),
    ("`[log]`", LogConfig, set()),
]


def shown(default: object) -> str | None:
    """How a default is written in the doc's default column (None: in words)."""
    if isinstance(default, bool):
        return str(default).lower()
    if isinstance(default, str):
        return json.dumps(default)
    if isinstance(default, int | float | Decimal):
        return str(default)
    return None


@pytest.mark.parametrize(("heading", "cls", "elsewhere"), DOCUMENTED, ids=lambda x: str(x))
def test_the_reference_documents_exactly_the_declared_keys(
    heading: str, cls: type[Any], elsewhere: set[str]
) -> None:
    """Each table of configuration.md lists the declared keys, no more, with their defaults."""
    rows = doc_tables()[heading]
    declared = set(keys(cls)) - elsewhere
    assert set(rows) - {"kind"} == declared - {"kind"}, heading
    for f in dataclasses.fields(cls):
        text = shown(f.default)
        if f.name in rows and text is not None:
            assert text in rows[f.name].replace("_", ""), (heading, f.name, rows[f.name])
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if f.name in rows and required and f.name != "rpc_urls":
            assert rows[f.name].strip() == "required", (heading, f.name)


def test_the_documented_keys_all_load() -> None:
    """A file holding every key the reference documents (with the example's values) loads."""
    raw = copy.deepcopy(example())
    for path, cls in TABLES:
        assert set(at(raw, path)) <= set(keys(cls)) | {"kind"}, path
    documented = {key for table in doc_tables().values() for key in table}
    in_example = {key for path, _ in TABLES for key in at(raw, path)}
    assert documented <= in_example | {"evaluators"}  # the example leaves that table empty
    assert isinstance(parse_config(raw, {}), Config)
