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
import math
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal, TypeAlias
from urllib.parse import urlsplit, urlunsplit

from keeper.domain.model import Protocol
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

_ADDRESS_RE = re.compile(r"^0x[0-9a-fA-F]{40}$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_RPC_SCHEMES = ("http", "https", "ws", "wss")
_HTTP_SCHEMES = ("http", "https")


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


# --------------------------------------------------------------------------- value checks

_REQUIRED: Any = object()


class _Bad(Exception):
    """One problem with one value; the caller prefixes the key path."""


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"expected an integer, got {_show(value)}")
    return value


def _nonneg_int(value: object) -> int:
    number = _int(value)
    if number < 0:
        raise _Bad(f"must be >= 0, got {number}")
    return number


def _pos_int(value: object) -> int:
    number = _int(value)
    if number < 1:
        raise _Bad(f"must be >= 1, got {number}")
    return number


def _big_int(value: object) -> int:
    """A non-negative integer that may exceed TOML's 64-bit range, so a digit string is allowed."""
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return _nonneg_int(value)


def _pos_float(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Bad(f"expected a number, got {_show(value)}")
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise _Bad(f"must be a positive number, got {_show(value)}")
    return number


def _gas_margin(value: object) -> float:
    number = _pos_float(value)
    if number < 1.0:
        raise _Bad(f"must be >= 1.0 (a margin below the estimate fails), got {_show(value)}")
    return number


def _gwei(value: object) -> Decimal:
    """Fees below 1 gwei are common on L2s, so decimals are allowed, but never below 1 wei."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _Bad(f"expected a number of gwei, got {_show(value)}")
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        raise _Bad(f"expected a number of gwei, got {_show(value)}") from None
    if not amount.is_finite() or amount <= 0:
        raise _Bad(f"must be a positive number of gwei, got {_show(value)}")
    if amount * 10**9 != int(amount * 10**9):
        raise _Bad(f"must be a whole number of wei, got {_show(value)} gwei")
    return amount


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise _Bad(f"expected true or false, got {_show(value)}")
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise _Bad(f"expected a string, got {_show(value)}")
    return value


def _nonempty_str(value: object) -> str:
    text = _str(value)
    if not text:
        raise _Bad("must not be empty")
    return text


def _name(value: object) -> str:
    text = _str(value)
    if not _NAME_RE.match(text):
        raise _Bad(f"not a valid name (letters, digits, '_', '.', '-'; 1-64 chars): {_show(text)}")
    return text


def _address(value: object) -> str:
    text = _str(value)
    if not _ADDRESS_RE.match(text):
        raise _Bad(f"not an address: {_show(text)}")
    return text.lower()


def _optional_address(value: object) -> str:
    """An address, or "" for none."""
    return "" if _str(value) == "" else _address(value)


def _choice(*choices: str) -> Callable[[object], str]:
    def check(value: object) -> str:
        text = _str(value)
        if text not in choices:
            raise _Bad(f"must be one of {', '.join(repr(c) for c in choices)}, got {_show(text)}")
        return text

    return check


def _url(schemes: tuple[str, ...], *, secret: bool) -> Callable[[object], str]:
    def check(value: object) -> str:
        text = _str(value)
        shown = redact_url(text, marks=True) if secret else text
        try:
            parts = urlsplit(text)
            parts.port  # noqa: B018 -- raises ValueError on a bad port
        except ValueError:
            raise _Bad(f"not a valid URL: {_show(shown)}") from None
        if parts.scheme not in schemes or not parts.hostname:
            raise _Bad(f"not a valid {'/'.join(schemes)} URL: {_show(shown)}")
        return text

    return check


def _listen(value: object) -> str:
    text = _str(value)
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise _Bad(f"expected host:port, got {_show(text)}")
    return text


def _pointer(value: object) -> str:
    text = _str(value)
    if text and not text.startswith("/"):
        raise _Bad(f"a JSON pointer is empty or starts with '/', got {_show(text)}")
    return text


def _type_name(value: object) -> str:
    names = {str: "string", int: "number", float: "number", bool: "boolean", dict: "table"}
    return names.get(type(value), type(value).__name__)


def _str_list(item: Callable[[object], str]) -> Callable[[object], tuple[str, ...]]:
    def check(value: object) -> tuple[str, ...]:
        if not isinstance(value, list):
            # the type only, never the value: a single RPC URL given as a string
            # carries its credentials
            raise _Bad(f"expected a list, got a {_type_name(value)}")
        out: list[str] = []
        for index, element in enumerate(value):
            try:
                out.append(item(element))
            except _Bad as exc:
                raise _Bad(f"[{index}]: {exc}") from None
        return tuple(out)

    return check


# --------------------------------------------------------------------------- env parsing


def _env_scalar(text: str) -> object:
    """Read an env string as TOML would read the literal, falling back to the plain string.

    So ``12`` becomes an int, ``1.5`` a float, ``true`` a bool, ``"x"`` a string;
    anything unparseable stays a string, and the key's own check then reports it.
    """
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _env_list(text: str) -> object:
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            return json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise _Bad(f"not a JSON list: {exc.msg}") from None
    return [part.strip() for part in stripped.split(",") if part.strip()]


def _env_json(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _Bad(f"not valid JSON: {exc.msg}") from None


def _env_str(text: str) -> object:
    return text


def _env_evaluators(text: str) -> object:
    """JSON object, or ``name=0x..,name2=0x..`` for shells where JSON quoting hurts."""
    if text.strip().startswith("{"):
        return _env_json(text)
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, address = part.partition("=")
        if not sep:
            raise _Bad(f"expected name=address pairs, got {_show(part)}")
        out[name.strip()] = address.strip()
    return out


# --------------------------------------------------------------------------- schema


@dataclass(frozen=True, slots=True)
class _Key:
    check: Callable[[object], object]
    default: object = _REQUIRED
    env: Callable[[str], object] = _env_scalar


_CHAIN: dict[str, _Key] = {
    "chain_id": _Key(_pos_int),
    "rpc_urls": _Key(_str_list(_url(_RPC_SCHEMES, secret=True)), env=_env_list),
    "rpc_names": _Key(_str_list(_name), (), env=_env_list),
    "confirmations": _Key(_nonneg_int, 12),
    "finality": _Key(_choice("tag", "confirmations"), "tag", env=_env_str),
    "poll_interval": _Key(_pos_float, 2.0),
    "window": _Key(_pos_int, 128),
    "requests_per_second": _Key(_pos_float, 25.0),
    "request_timeout": _Key(_pos_float, 10.0),
    "max_range": _Key(_pos_int, 2000),
    "min_range": _Key(_pos_int, 1),
}
_DATABASE: dict[str, _Key] = {"path": _Key(_nonempty_str, "data/keeper.db", env=_env_str)}
_CONTRACT: dict[str, _Key] = {
    "name": _Key(_name, env=_env_str),
    "protocol": _Key(_choice(*(p.value for p in Protocol)), env=_env_str),
    "address": _Key(_address, env=_env_str),
    "start_block": _Key(_nonneg_int, 0),
}
_HTTP_SOURCE: dict[str, _Key] = {
    "kind": _Key(_str),
    "url": _Key(_url(_HTTP_SCHEMES, secret=True)),
    "pointer": _Key(_pointer, ""),
    "timeout": _Key(_pos_float, 10.0),
    "max_bytes": _Key(_pos_int, 1_048_576),
}
_DIRECTORY_SOURCE: dict[str, _Key] = {"kind": _Key(_str), "path": _Key(_nonempty_str)}
_VERDICTS: dict[str, _Key] = {
    "sources": _Key(lambda v: v, [], env=_env_json),  # checked by _sources
    "content_sources": _Key(lambda v: v, [], env=_env_json),
    "retry_horizon": _Key(_nonneg_int, 86_400),
    "evaluators": _Key(lambda v: v, {}, env=_env_evaluators),  # checked by _evaluators
}
_KEEPER: dict[str, _Key] = {
    "enabled": _Key(_bool, False),
    "dry_run": _Key(_bool, False),
    "private_key_env": _Key(_str, "", env=_env_str),
    "keystore": _Key(_str, "", env=_env_str),
    "keystore_password_file": _Key(_str, "", env=_env_str),
    "max_fee_gwei": _Key(_gwei, Decimal(100)),
    "min_balance_wei": _Key(_big_int, 10**16),
    "confirmations": _Key(_nonneg_int, 2),
    "batch_size": _Key(_pos_int, 50),
    "shard": _Key(_nonneg_int, 0),
    "shards": _Key(_pos_int, 1),
    "shard_fallback_seconds": _Key(_nonneg_int, 300),
    "gas_margin": _Key(_gas_margin, 1.2),
    "multicall": _Key(_optional_address, "", env=_env_str),
}
_API: dict[str, _Key] = {
    "listen": _Key(_listen, "127.0.0.1:9464", env=_env_str),
    "enabled": _Key(_bool, True),
}
_LOG: dict[str, _Key] = {
    "format": _Key(_choice("auto", "json", "console"), "auto", env=_env_str),
    "level": _Key(_choice("debug", "info", "warning", "error", "critical"), "info", env=_env_str),
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
        problems.add(path, f"expected a table, got {_show(raw)}")
        return {}
    out: dict[str, Any] = {}
    for key in raw:
        if key not in schema:
            problems.lines.append(_unknown(f"{path}.{_key_text(key)}", key, schema))
    for key, spec in schema.items():
        if key not in raw:
            if spec.default is _REQUIRED:
                problems.add(f"{path}.{key}", "required key is missing")
            else:
                out[key] = spec.default
            continue
        try:
            out[key] = spec.check(raw[key])
        except _Bad as exc:
            problems.add(f"{path}.{key}", str(exc))
    return out


def _sources(raw: object, path: str, problems: _Problems) -> tuple[SourceConfig, ...]:
    if not isinstance(raw, list):
        problems.add(path, f"expected a list of tables, got a {_type_name(raw)}")  # never the value
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
            problems.add(f"{where}.kind", f"must be 'http' or 'directory', got {_show(kind)}")
        else:
            problems.add(where, f"expected a table, got {_show(entry)}")
    return tuple(out)


def _evaluators(raw: object, path: str, problems: _Problems) -> dict[str, str]:
    if not isinstance(raw, dict):
        problems.add(path, f"expected a table of name = address, got {_show(raw)}")
        return {}
    out: dict[str, str] = {}
    for name, value in raw.items():
        try:
            out[_name(name)] = _address(value)
        except _Bad as exc:
            problems.add(f"{path}.{name}", str(exc))
    return out


def _contracts(raw: object, problems: _Problems) -> tuple[ContractConfig, ...]:
    if not isinstance(raw, list):
        problems.add("contracts", f"expected a list of tables ([[contracts]]), got {_show(raw)}")
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
        )
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
        except _Bad as exc:
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
