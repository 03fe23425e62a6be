"""The daemon's configuration: one TOML file, every key overridable from the environment.

Why a hand-rolled schema instead of a settings library: operators need errors
that name the exact key path (``contracts[1].address``) and suggest the key
they meant, secrets must stay references (an env var name, a keystore path)
so the effective config can always be printed, and the result is a tree of
frozen dataclasses that the pure core can take as an argument.

Environment overrides are ``KEEPER_<SECTION>__<KEY>`` (``KEEPER_CHAIN__POLL_INTERVAL=1.5``),
``KEEPER_CONTRACTS__<INDEX>__<KEY>`` for one contract entry (an index equal to the
current length appends one), and JSON for list-of-table or table keys
(``KEEPER_VERDICTS__SOURCES='[{"kind": "directory", "path": "v"}]'``). Lists of
strings take JSON or a comma separated value.

All problems found are reported together, one line each, in a single
:class:`~keeper.errors.ConfigError`.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, TypeAlias
from urllib.parse import urlsplit, urlunsplit

from keeper import config_values as v
from keeper.domain.model import Protocol
from keeper.domain.protocols import dialect_named
from keeper.errors import ConfigError
from keeper.rpc.config import redact_url

__all__ = [
    "ApiConfig",
    "ChainConfig",
    "Config",
    "ContractConfig",
    "DatabaseConfig",
    "DirectorySourceConfig",
    "HttpSourceConfig",
    "KeeperConfig",
    "LogConfig",
    "SourceConfig",
    "VerdictsConfig",
    "load_config",
    "parse_config",
    "redact_url",
    "redacted",
]

ENV_PREFIX = "KEEPER_"


# --------------------------------------------------------------------------- dataclasses


@dataclass(frozen=True, slots=True)
class ChainConfig:
    """Where the chain is and how hard we may lean on its RPC endpoints."""

    chain_id: int
    rpc_urls: tuple[str, ...]
    rpc_names: tuple[str, ...]
    confirmations: int = 12
    finality: Literal["tag", "confirmations"] = "tag"
    poll_interval: float = 2.0
    window: int = 128
    requests_per_second: float = 25.0
    request_timeout: float = 10.0
    max_range: int = 2000
    min_range: int = 1

    def endpoints(self) -> tuple[tuple[str, str], ...]:
        """(name, url) pairs: the name is what metrics and logs show, never the URL."""
        return tuple(zip(self.rpc_names, self.rpc_urls, strict=True))


@dataclass(frozen=True, slots=True)
class DatabaseConfig:
    path: str = "data/keeper.db"


@dataclass(frozen=True, slots=True)
class ContractConfig:
    name: str
    protocol: Protocol
    address: str
    start_block: int = 0
    # pin the contract's dialect (keeper.domain.dialects_*); "" detects it at start-up
    dialect: str = ""


@dataclass(frozen=True, slots=True)
class HttpSourceConfig:
    """A verdict source queried at a configured URL template (``{jobId}``, ``{contract}``)."""

    url: str
    pointer: str = ""
    timeout: float = 10.0
    max_bytes: int = 1_048_576
    kind: Literal["http"] = "http"


@dataclass(frozen=True, slots=True)
class DirectorySourceConfig:
    """A local directory of verdict documents."""

    path: str
    kind: Literal["directory"] = "directory"


SourceConfig: TypeAlias = HttpSourceConfig | DirectorySourceConfig


@dataclass(frozen=True, slots=True)
class VerdictsConfig:
    sources: tuple[SourceConfig, ...] = ()
    content_sources: tuple[SourceConfig, ...] = ()
    retry_horizon: int = 86_400
    evaluators: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class KeeperConfig:
    """The transaction-sending part; secrets appear only as references."""

    enabled: bool = False
    dry_run: bool = False
    private_key_env: str = ""
    keystore: str = ""
    keystore_password_file: str = ""
    max_fee_gwei: Decimal = Decimal(100)
    min_balance_wei: int = 10**16
    confirmations: int = 2
    batch_size: int = 50
    shard: int = 0
    shards: int = 1
    shard_fallback_seconds: int = 300
    gas_margin: float = 1.2
    multicall: str = ""

    @property
    def max_fee_wei(self) -> int:
        """The fee cap in wei; the config check guarantees it is a whole number."""
        return int(self.max_fee_gwei * 10**9)


@dataclass(frozen=True, slots=True)
class ApiConfig:
    listen: str = "127.0.0.1:9464"
    enabled: bool = True

    @property
    def host(self) -> str:
        return self.listen.rsplit(":", 1)[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rsplit(":", 1)[1])


@dataclass(frozen=True, slots=True)
class LogConfig:
    format: Literal["auto", "json", "console"] = "auto"
    level: Literal["debug", "info", "warning", "error", "critical"] = "info"


@dataclass(frozen=True, slots=True)
class Config:
    chain: ChainConfig
    contracts: tuple[ContractConfig, ...]
    database: DatabaseConfig = DatabaseConfig()
    verdicts: VerdictsConfig = VerdictsConfig()
    keeper: KeeperConfig = KeeperConfig()
    api: ApiConfig = ApiConfig()
    log: LogConfig = LogConfig()


# --------------------------------------------------------------------------- schema


@dataclass(frozen=True, slots=True)
class _Key:
    check: Callable[[object], object]
    default: object = v.REQUIRED
    env: Callable[[str], object] = v.env_scalar


_CHAIN: dict[str, _Key] = {
    "chain_id": _Key(v.pos_int),
    "rpc_urls": _Key(v.str_list(v.url(v.RPC_SCHEMES, secret=True)), env=v.env_list),
    "rpc_names": _Key(v.str_list(v.name), (), env=v.env_list),
    "confirmations": _Key(v.nonneg_int, 12),
    "finality": _Key(v.choice("tag", "confirmations"), "tag", env=v.env_str),
    "poll_interval": _Key(v.pos_float, 2.0),
    "window": _Key(v.pos_int, 128),
    "requests_per_second": _Key(v.pos_float, 25.0),
    "request_timeout": _Key(v.pos_float, 10.0),
    "max_range": _Key(v.pos_int, 2000),
    "min_range": _Key(v.pos_int, 1),
}
_DATABASE: dict[str, _Key] = {"path": _Key(v.nonempty_str, "data/keeper.db", env=v.env_str)}
_CONTRACT: dict[str, _Key] = {
    "name": _Key(v.name, env=v.env_str),
    "protocol": _Key(v.choice(*(p.value for p in Protocol)), env=v.env_str),
    "address": _Key(v.address, env=v.env_str),
    "start_block": _Key(v.nonneg_int, 0),
    "dialect": _Key(v.string, "", env=v.env_str),
}
_HTTP_SOURCE: dict[str, _Key] = {
    "kind": _Key(v.string),
    "url": _Key(v.url(v.HTTP_SCHEMES, secret=True)),
    "pointer": _Key(v.pointer, ""),
    "timeout": _Key(v.pos_float, 10.0),
    "max_bytes": _Key(v.pos_int, 1_048_576),
}
_DIRECTORY_SOURCE: dict[str, _Key] = {"kind": _Key(v.string), "path": _Key(v.nonempty_str)}
_VERDICTS: dict[str, _Key] = {
    "sources": _Key(lambda v: v, [], env=v.env_json),  # checked by _sources
    "content_sources": _Key(lambda v: v, [], env=v.env_json),
    "retry_horizon": _Key(v.nonneg_int, 86_400),
    "evaluators": _Key(lambda v: v, {}, env=v.env_evaluators),  # checked by _evaluators
}
_KEEPER: dict[str, _Key] = {
    "enabled": _Key(v.boolean, False),
    "dry_run": _Key(v.boolean, False),
    "private_key_env": _Key(v.string, "", env=v.env_str),
    "keystore": _Key(v.string, "", env=v.env_str),
    "keystore_password_file": _Key(v.string, "", env=v.env_str),
    "max_fee_gwei": _Key(v.gwei, Decimal(100)),
    "min_balance_wei": _Key(v.big_int, 10**16),
    "confirmations": _Key(v.nonneg_int, 2),
    "batch_size": _Key(v.pos_int, 50),
    "shard": _Key(v.nonneg_int, 0),
    "shards": _Key(v.pos_int, 1),
    "shard_fallback_seconds": _Key(v.nonneg_int, 300),
    "gas_margin": _Key(v.gas_margin, 1.2),
    "multicall": _Key(v.optional_address, "", env=v.env_str),
}
_API: dict[str, _Key] = {
    "listen": _Key(v.listen, "127.0.0.1:9464", env=v.env_str),
    "enabled": _Key(v.boolean, True),
}
_LOG: dict[str, _Key] = {
    "format": _Key(v.choice("auto", "json", "console"), "auto", env=v.env_str),
    "level": _Key(v.choice("debug", "info", "warning", "error", "critical"), "info", env=v.env_str),
}
_TABLES: dict[str, dict[str, _Key]] = {
    "chain": _CHAIN,
    "database": _DATABASE,
    "verdicts": _VERDICTS,
    "keeper": _KEEPER,
    "api": _API,
    "log": _LOG,
}
_SECTIONS: tuple[str, ...] = (*_TABLES, "contracts")


_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_.\-]+$")


def _key_text(key: str) -> str:
    """A key as it appears in an error path: quoted when empty or unusual.

    Every problem line must start with a visible path; an empty key, or one
    holding a newline or a colon, would otherwise blur or split that line.
    """
    if _PLAIN_KEY.match(key):
        return key
    return json.dumps(key).replace(":", "\\u003a")


def _unknown(path: str, key: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=3, cutoff=0.6)
    hint = f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""
    return f"{path}: unknown key{hint}"


class _Problems:
    """Collects every problem so one run of ``config check`` shows them all."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.lines.append(f"{path}: {message}")

    def raise_if_any(self, source: str) -> None:
        if self.lines:
            head = f"invalid configuration{f' in {source}' if source else ''}:"
            raise ConfigError("\n".join([head, *(f"  {line}" for line in self.lines)]))


def _table(
    raw: object, path: str, schema: Mapping[str, _Key], problems: _Problems
) -> dict[str, Any]:
    """Check one table against its schema; return values (defaults filled) for good keys."""
    if not isinstance(raw, dict):
        problems.add(path, f"expected a table, got {v.show(raw)}")
        return {}
    out: dict[str, Any] = {}
    for key in raw:
        if key not in schema:
            problems.lines.append(_unknown(f"{path}.{_key_text(key)}", key, schema))
    for key, spec in schema.items():
        if key not in raw:
            if spec.default is v.REQUIRED:
                problems.add(f"{path}.{key}", "required key is missing")
            else:
                out[key] = spec.default
            continue
        try:
            out[key] = spec.check(raw[key])
        except v.BadValue as exc:
            problems.add(f"{path}.{key}", str(exc))
    return out


def _sources(raw: object, path: str, problems: _Problems) -> tuple[SourceConfig, ...]:
    if not isinstance(raw, list):
        # the type, never the value: a source given as a string may be a secret URL
        problems.add(path, f"expected a list of tables, got a {v.type_name(raw)}")
        return ()
    out: list[SourceConfig] = []
    for index, entry in enumerate(raw):
        where = f"{path}[{index}]"
        kind = entry.get("kind") if isinstance(entry, dict) else None
        if kind == "http":
            values = _table(entry, where, _HTTP_SOURCE, problems)
            if len(values) == len(_HTTP_SOURCE):
                values.pop("kind")
                out.append(HttpSourceConfig(**values))
        elif kind == "directory":
            values = _table(entry, where, _DIRECTORY_SOURCE, problems)
            if len(values) == len(_DIRECTORY_SOURCE):
                out.append(DirectorySourceConfig(path=values["path"]))
        elif isinstance(entry, dict):
            problems.add(f"{where}.kind", f"must be 'http' or 'directory', got {v.show(kind)}")
        else:
            problems.add(where, f"expected a table, got {v.show(entry)}")
    return tuple(out)


def _evaluators(raw: object, path: str, problems: _Problems) -> dict[str, str]:
    if not isinstance(raw, dict):
        problems.add(path, f"expected a table of name = address, got {v.show(raw)}")
        return {}
    out: dict[str, str] = {}
    for name, value in raw.items():
        try:
            out[v.name(name)] = v.address(value)
        except v.BadValue as exc:
            problems.add(f"{path}.{name}", str(exc))
    return out


def _contracts(raw: object, problems: _Problems) -> tuple[ContractConfig, ...]:
    if not isinstance(raw, list):
        problems.add("contracts", f"expected a list of tables ([[contracts]]), got {v.show(raw)}")
        return ()
    out: list[ContractConfig] = []
    seen_names: dict[str, int] = {}
    seen_addresses: dict[str, int] = {}
    for index, entry in enumerate(raw):
        where = f"contracts[{index}]"
        values = _table(entry, where, _CONTRACT, problems)
        if len(values) != len(_CONTRACT):
            continue
        contract = ContractConfig(
            name=values["name"],
            protocol=Protocol(values["protocol"]),
            address=values["address"],
            start_block=values["start_block"],
            dialect=values["dialect"],
        )
        if contract.dialect:
            try:
                dialect_named(contract.protocol, contract.dialect)
            except KeyError as exc:
                problems.add(f"{where}.dialect", str(exc.args[0]))
        if contract.name in seen_names:
            problems.add(
                f"{where}.name",
                f"duplicate name {contract.name!r} (also contracts[{seen_names[contract.name]}])",
            )
        if contract.address in seen_addresses:
            problems.add(
                f"{where}.address",
                f"duplicate address {contract.address} "
                f"(also contracts[{seen_addresses[contract.address]}])",
            )
        seen_names.setdefault(contract.name, index)
        seen_addresses.setdefault(contract.address, index)
        out.append(contract)
    return tuple(out)


# --------------------------------------------------------------------------- env overlay


def _overlay_env(raw: dict[str, Any], env: Mapping[str, str], problems: _Problems) -> None:
    """Write ``KEEPER_<SECTION>__<KEY>`` values into the raw TOML tree before checking.

    Only names with a double underscore are overrides, so a secret held in an
    env var such as ``KEEPER_PRIVATE_KEY`` is never mistaken for one.
    """
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        parts = name[len(ENV_PREFIX) :].lower().split("__")
        section = parts[0]
        if section not in _SECTIONS:
            problems.lines.append(_unknown(f"{name} -> {section}", section, _SECTIONS))
            continue
        try:
            if section == "contracts":
                _overlay_contract(raw, parts, name, env[name], problems)
            elif len(parts) != 2:
                problems.add(name, f"expected {ENV_PREFIX}{section.upper()}__<KEY>")
            elif parts[1] not in _TABLES[section]:
                problems.lines.append(
                    _unknown(
                        f"{name} -> {section}.{_key_text(parts[1])}", parts[1], _TABLES[section]
                    )
                )
            else:
                table = raw.setdefault(section, {})
                if isinstance(table, dict):
                    table[parts[1]] = _TABLES[section][parts[1]].env(env[name])
        except v.BadValue as exc:
            problems.add(f"{name} -> {'.'.join(parts)}", str(exc))


def _overlay_contract(
    raw: dict[str, Any], parts: list[str], name: str, value: str, problems: _Problems
) -> None:
    if len(parts) != 3 or not parts[1].isdigit():
        problems.add(name, f"expected {ENV_PREFIX}CONTRACTS__<INDEX>__<KEY>")
        return
    index, key = int(parts[1]), parts[2]
    contracts = raw.setdefault("contracts", [])
    if not isinstance(contracts, list):
        return
    if index > len(contracts):
        problems.add(name, f"index {index} skips entries: there are {len(contracts)} contracts")
        return
    if key not in _CONTRACT:
        problems.lines.append(
            _unknown(f"{name} -> contracts[{index}].{_key_text(key)}", key, _CONTRACT)
        )
        return
    if index == len(contracts):
        contracts.append({})
    if isinstance(contracts[index], dict):
        contracts[index][key] = _CONTRACT[key].env(value)


# --------------------------------------------------------------------------- assembly


def parse_config(
    raw: Mapping[str, Any], env: Mapping[str, str] | None = None, *, source: str = ""
) -> Config:
    """Build a :class:`Config` from a parsed TOML tree plus environment overrides."""
    tree: dict[str, Any] = copy.deepcopy(dict(raw))  # the env overlay writes into it
    problems = _Problems()
    _overlay_env(tree, os.environ if env is None else env, problems)
    for key in tree:
        if key not in _SECTIONS:
            problems.lines.append(_unknown(_key_text(key), key, _SECTIONS))

    values = {
        section: _table(tree.get(section, {}), section, schema, problems)
        for section, schema in _TABLES.items()
    }
    contracts = _contracts(tree.get("contracts", []), problems)
    verdicts = values["verdicts"]
    verdict_values = {
        "sources": _sources(verdicts.get("sources", []), "verdicts.sources", problems),
        "content_sources": _sources(
            verdicts.get("content_sources", []), "verdicts.content_sources", problems
        ),
        "retry_horizon": verdicts.get("retry_horizon", 86_400),
        "evaluators": _evaluators(verdicts.get("evaluators", {}), "verdicts.evaluators", problems),
    }
    chain = _chain(values["chain"], problems)
    _check_keeper(values["keeper"], problems)
    problems.raise_if_any(source)
    assert chain is not None  # no problems means every chain key checked out
    return Config(
        chain=chain,
        contracts=contracts,
        database=DatabaseConfig(**values["database"]),
        verdicts=VerdictsConfig(**verdict_values),
        keeper=KeeperConfig(**values["keeper"]),
        api=ApiConfig(**values["api"]),
        log=LogConfig(**values["log"]),
    )


def _chain(values: dict[str, Any], problems: _Problems) -> ChainConfig | None:
    if len(values) != len(_CHAIN):
        return None
    urls: tuple[str, ...] = values["rpc_urls"]
    names: tuple[str, ...] = values["rpc_names"] or tuple(f"rpc{i}" for i in range(len(urls)))
    values["rpc_names"] = names
    if not urls:
        problems.add("chain.rpc_urls", "at least one RPC URL is required")
    if len(names) != len(urls):
        problems.add(
            "chain.rpc_names", f"has {len(names)} names for {len(urls)} rpc_urls: give one each"
        )
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        problems.add("chain.rpc_names", f"duplicate names: {', '.join(duplicates)}")
    if values["min_range"] > values["max_range"]:
        problems.add(
            "chain.min_range",
            f"{values['min_range']} is above chain.max_range ({values['max_range']})",
        )
    if len(names) != len(urls) or duplicates or not urls:
        return None
    return ChainConfig(**values)


def _check_keeper(values: dict[str, Any], problems: _Problems) -> None:
    if {"shard", "shards"} <= values.keys() and values["shard"] >= values["shards"]:
        problems.add(
            "keeper.shard", f"{values['shard']} must be below keeper.shards ({values['shards']})"
        )
    if values.get("private_key_env") and values.get("keystore"):
        problems.add("keeper.keystore", "set either keeper.private_key_env or keeper.keystore")
    signer = values.get("private_key_env") or values.get("keystore")
    if values.get("enabled") and not values.get("dry_run") and not signer:
        problems.add(
            "keeper.enabled",
            "an enabled keeper needs keeper.private_key_env or keeper.keystore "
            "(or keeper.dry_run = true)",
        )
    if values.get("keystore") and not values.get("keystore_password_file"):
        problems.add("keeper.keystore_password_file", "required when keeper.keystore is set")


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> Config:
    """Read one TOML file and apply ``KEEPER_*`` overrides from ``env`` (default: os.environ)."""
    source = str(path)
    try:
        with open(path, "rb") as handle:
            raw = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"configuration file not found: {source}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{source}: not UTF-8 text (byte {exc.start}); TOML files must be UTF-8"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{source}: cannot be read: {exc.strerror or exc}") from None
    return parse_config(raw, env, source=source)


# --------------------------------------------------------------------------- redaction


def _redact_template(url: str) -> str:
    """Verdict source templates keep their path (it carries ``{jobId}``) but lose credentials."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    if "@" in parts.netloc:
        netloc = f"***@{netloc}"
    query = "***" if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def redacted(config: Config) -> dict[str, Any]:
    """The effective configuration as plain JSON-able data, safe to print or serve.

    RPC URLs keep only scheme and host, verdict source URLs lose userinfo and
    query; secrets are references already, and the references are shown so an
    operator can see which env var or file is read. Big amounts become strings.
    """
    out: dict[str, Any] = asdict(config)
    out["contracts"] = [{**c, "protocol": c["protocol"].value} for c in out["contracts"]]
    out["chain"]["rpc_urls"] = [redact_url(u, marks=True) for u in config.chain.rpc_urls]
    out["chain"]["rpc_names"] = list(config.chain.rpc_names)
    for key in ("sources", "content_sources"):
        sources: tuple[SourceConfig, ...] = getattr(config.verdicts, key)
        out["verdicts"][key] = [
            {**asdict(s), "url": _redact_template(s.url)}
            if isinstance(s, HttpSourceConfig)
            else asdict(s)
            for s in sources
        ]
    out["verdicts"]["evaluators"] = dict(config.verdicts.evaluators)
    out["keeper"]["max_fee_gwei"] = str(config.keeper.max_fee_gwei)
    out["keeper"]["min_balance_wei"] = str(config.keeper.min_balance_wei)
    return out
