"""The daemon's configuration: one TOML file, every key overridable from the environment.

Declared once, here: each key is a field of a frozen dataclass whose type
carries its check and override parser (``keeper.config_values``) and whose
default is its default; ``keeper.config_schema`` reads a TOML tree against
these classes. What cannot be said per key (one key bounded by another,
exclusive signer sources, unique contract names) is a rule below. Errors
name the exact key path (``contracts[1].address``) and suggest the key meant;
secrets stay references (an env var name, a keystore path) so the effective
config can always be printed, and the frozen result can be handed to the
pure core as an argument.

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
import os
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal, TypeAlias

from keeper import config_values as v
from keeper.config_schema import Problems, Reader, Rule, overlay_env
from keeper.domain.model import Protocol
from keeper.domain.protocols import dialect_named
from keeper.errors import ConfigError
from keeper.obs.redact import redact_template, redact_url

__all__ = [
    "ApiConfig",
    "ChainConfig",
    "ClusterConfig",
    "Config",
    "ContractConfig",
    "DatabaseConfig",
    "DirectorySourceConfig",
    "GitHubConfig",
    "HttpSourceConfig",
    "IndexerConfig",
    "KeeperConfig",
    "LogConfig",
    "SourceConfig",
    "VerdictsConfig",
    "load_config",
    "parse_config",
    "redact_url",
    "redacted",
]


# --------------------------------------------------------------------------- the declaration


@dataclass(frozen=True, slots=True)
class ChainConfig:
    """Where the chain is and how hard we may lean on its RPC endpoints."""

    chain_id: v.PosInt
    rpc_urls: v.RpcUrls
    rpc_names: v.Names = ()  # () names them rpc0, rpc1, ... (the chain rule)
    confirmations: v.NonNegInt = 12
    finality: Literal["tag", "confirmations"] = "tag"
    poll_interval: v.PosFloat = 2.0
    window: v.PosInt = 128
    requests_per_second: v.PosFloat = 25.0
    request_timeout: v.PosFloat = 10.0
    max_range: v.PosInt = 2000
    min_range: v.PosInt = 1
    # a historical batch (one getLogs answer, one commit) stays under these
    batch_events: v.PosInt = 5_000
    batch_bytes: v.PosInt = 4_194_304
    # a backfill range of at least this many blocks is fetched by a second process while
    # this one writes (two cores instead of one), from where the rest of it looks like
    # holding fetch_process_events (0: from its start); 0 blocks: always in process
    fetch_process_blocks: v.NonNegInt = 32
    fetch_process_events: v.NonNegInt = 50_000
    # ... and only while this process is busy on the CPU for at least this share of the
    # time (below it the range waits on the node, and a second process adds only memory)
    fetch_process_busy: v.Share = 0.7

    def endpoints(self) -> tuple[tuple[str, str], ...]:
        """(name, url) pairs: the name is what metrics and logs show, never the URL."""
        return tuple(zip(self.rpc_names, self.rpc_urls, strict=True))


DEFAULT_DATABASE_PATH = "data/keeper.db"
# a standby further behind than this serves no API page (keeper.api.replicas)
DEFAULT_REPLICA_LAG_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class DatabaseConfig:
    """One of: ``path`` (a SQLite file, the default) or ``url`` (PostgreSQL, a secret).

    ``read_urls`` (PostgreSQL standbys of ``url``, secrets too) serve the API's
    pages on a daemon that does not index; the indexer, keeper and verifier
    always work on ``url`` (docs/scaling.md, read replicas). A standby whose replay
    lags more than ``max_replica_lag_seconds`` serves no page until it catches up.
    """

    path: v.NonEmptyStr = DEFAULT_DATABASE_PATH
    url: v.DatabaseUrl = ""
    read_urls: v.DatabaseUrls = ()
    max_replica_lag_seconds: v.PosFloat = DEFAULT_REPLICA_LAG_SECONDS

    @property
    def target(self) -> str:
        """What ``keeper.store.db.connect`` opens: the URL, else the SQLite path."""
        return self.url or self.path

    @property
    def shown(self) -> str:
        """The database as logs and outputs may name it: never the URL's credentials."""
        return redact_url(self.url, marks=True) if self.url else self.target


@dataclass(frozen=True, slots=True)
class ContractConfig:
    name: v.Name
    protocol: Protocol
    address: v.Address
    start_block: v.NonNegInt = 0
    # pin the contract's dialect (keeper.domain.dialects_*); "" detects it at start-up
    dialect: v.Str = ""


@dataclass(frozen=True, slots=True)
class HttpSourceConfig:
    """A verdict source queried at a configured URL template (``{jobId}``, ``{contract}``)."""

    url: v.SourceUrl
    pointer: v.Pointer = ""
    timeout: v.PosFloat = 10.0
    max_bytes: v.PosInt = 1_048_576
    kind: Literal["http"] = "http"


@dataclass(frozen=True, slots=True)
class DirectorySourceConfig:
    """A local directory of verdict documents."""

    path: v.NonEmptyStr
    kind: Literal["directory"] = "directory"


SourceConfig: TypeAlias = HttpSourceConfig | DirectorySourceConfig
# a string here may be a secret URL, so a wrong value is named by its type only
_Sources: TypeAlias = Annotated[
    tuple[SourceConfig, ...], v.Shape("a list of tables", type_only=True)
]


@dataclass(frozen=True, slots=True)
class GitHubConfig:
    """GitHub's REST API for GitHubEval re-runs; the token only by reference (env var or file)."""

    api_url: v.ApiRoot = "https://api.github.com"  # GitHub Enterprise Server: https://HOST/api/v3
    token_env: v.Str = ""
    token_file: v.Str = ""
    timeout: v.PosFloat = 10.0
    max_bytes: v.PosInt = 1_048_576


@dataclass(frozen=True, slots=True)
class VerdictsConfig:
    sources: _Sources = ()
    content_sources: _Sources = ()
    retry_horizon: v.NonNegInt = 86_400
    evaluators: Annotated[
        Mapping[v.Name, v.Address], v.Shape("a table of name = address", v.env_evaluators)
    ] = field(default_factory=dict)
    github: GitHubConfig | None = None  # set by a [verdicts.github] table


@dataclass(frozen=True, slots=True)
class KeeperConfig:
    """The transaction-sending part; secrets appear only as references."""

    enabled: v.Bool = False
    dry_run: v.Bool = False
    private_key_env: v.Str = ""
    keystore: v.Str = ""
    keystore_password_file: v.Str = ""
    max_fee_gwei: v.Gwei = Decimal(100)
    min_balance_wei: v.BigInt = 10**16
    confirmations: v.NonNegInt = 2
    batch_size: v.PosInt = 50
    shard: v.NonNegInt = 0
    shards: v.PosInt = 1
    shard_fallback_seconds: v.NonNegInt = 300
    # keepers sharing a database: seconds an intent's claim lasts without renewal
    claim_seconds: v.PosFloat = 60.0
    gas_margin: v.GasMargin = 1.2
    multicall: v.OptionalAddress = ""

    @property
    def max_fee_wei(self) -> int:
        """The fee cap in wei; the config check guarantees it is a whole number."""
        return int(self.max_fee_gwei * 10**9)


@dataclass(frozen=True, slots=True)
class ApiConfig:
    listen: v.Listen = "127.0.0.1:9464"
    enabled: v.Bool = True

    @property
    def host(self) -> str:
        return self.listen.rsplit(":", 1)[0].strip("[]")

    @property
    def port(self) -> int:
        return int(self.listen.rsplit(":", 1)[1])


@dataclass(frozen=True, slots=True)
class IndexerConfig:
    """``enabled = false`` makes an API-only daemon: it serves (from ``read_urls`` if
    given) while another daemon indexes the same PostgreSQL database."""

    enabled: v.Bool = True


@dataclass(frozen=True, slots=True)
class LogConfig:
    format: Literal["auto", "json", "console"] = "auto"
    level: Literal["debug", "info", "warning", "error", "critical"] = "info"


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Several daemons on one database: one indexes each chain under a lease, the rest stand by."""

    node: v.Str = ""  # this daemon's name among them; "" is the host name
    lease_seconds: v.PosFloat = 10.0
    renew_seconds: v.PosFloat = 1.0


@dataclass(frozen=True, slots=True)
class Config:
    chain: ChainConfig
    contracts: Annotated[tuple[ContractConfig, ...], v.Shape("a list of tables ([[contracts]])")]
    database: DatabaseConfig = DatabaseConfig()
    verdicts: VerdictsConfig = VerdictsConfig()
    keeper: KeeperConfig = KeeperConfig()
    api: ApiConfig = ApiConfig()
    indexer: IndexerConfig = IndexerConfig()
    log: LogConfig = LogConfig()
    cluster: ClusterConfig = ClusterConfig()


# --------------------------------------------------------------------------- cross-key rules

_Siblings: TypeAlias = Mapping[str, Mapping[str, Any]]


def _chain_rules(values: dict[str, Any], complete: bool, _: _Siblings) -> Iterator[tuple[str, str]]:
    if not complete:
        return
    urls: tuple[str, ...] = values["rpc_urls"]
    names: tuple[str, ...] = values["rpc_names"] or tuple(f"rpc{i}" for i in range(len(urls)))
    values["rpc_names"] = names
    if not urls:
        yield "rpc_urls", "at least one RPC URL is required"
    if len(names) != len(urls):
        yield "rpc_names", f"has {len(names)} names for {len(urls)} rpc_urls: give one each"
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        yield "rpc_names", f"duplicate names: {', '.join(duplicates)}"
    if values["min_range"] > values["max_range"]:
        yield "min_range", f"{values['min_range']} is above chain.max_range ({values['max_range']})"


def _contract_rules(
    values: dict[str, Any], complete: bool, earlier: _Siblings
) -> Iterator[tuple[str, str]]:
    if not complete:
        return
    if values["dialect"]:
        try:
            dialect_named(values["protocol"], values["dialect"])
        except KeyError as exc:
            yield "dialect", str(exc.args[0])
    for key, what in (("name", "name"), ("address", "address")):
        other = next((p for p, e in earlier.items() if e[key] == values[key]), None)
        if other is not None:
            shown = repr(values[key]) if key == "name" else values[key]
            yield key, f"duplicate {what} {shown} (also {other})"


def _github_rules(values: dict[str, Any], _: bool, __: _Siblings) -> Iterator[tuple[str, str]]:
    if values.get("token_env") and values.get("token_file"):
        yield "token_file", "set either token_env or token_file"


def _keeper_rules(values: dict[str, Any], _: bool, __: _Siblings) -> Iterator[tuple[str, str]]:
    if {"shard", "shards"} <= values.keys() and values["shard"] >= values["shards"]:
        yield "shard", f"{values['shard']} must be below keeper.shards ({values['shards']})"
    if values.get("private_key_env") and values.get("keystore"):
        yield "keystore", "set either keeper.private_key_env or keeper.keystore"
    signer = values.get("private_key_env") or values.get("keystore")
    if values.get("enabled") and not values.get("dry_run") and not signer:
        yield (
            "enabled",
            "an enabled keeper needs keeper.private_key_env or keeper.keystore "
            "(or keeper.dry_run = true)",
        )
    if values.get("keystore") and not values.get("keystore_password_file"):
        yield "keystore_password_file", "required when keeper.keystore is set"


def _cluster_rules(values: dict[str, Any], _: bool, __: _Siblings) -> Iterator[tuple[str, str]]:
    lease, renew = values.get("lease_seconds"), values.get("renew_seconds")
    if lease is not None and renew is not None and renew * 2 > lease:
        yield "renew_seconds", f"{renew} must be at most half of cluster.lease_seconds ({lease})"


def _database_rules(
    values: dict[str, Any], complete: bool, _: _Siblings
) -> Iterator[tuple[str, str]]:
    if complete and values["read_urls"] and not values["url"]:
        yield "read_urls", "standbys of a PostgreSQL database: set database.url too"


_RULES: dict[type, Rule] = {
    ChainConfig: _chain_rules,
    ClusterConfig: _cluster_rules,
    DatabaseConfig: _database_rules,
    ContractConfig: _contract_rules,
    GitHubConfig: _github_rules,
    KeeperConfig: _keeper_rules,
}


# --------------------------------------------------------------------------- loading


def parse_config(
    raw: Mapping[str, Any], env: Mapping[str, str] | None = None, *, source: str = ""
) -> Config:
    """Build a :class:`Config` from a parsed TOML tree plus environment overrides."""
    tree: dict[str, Any] = copy.deepcopy(dict(raw))  # the env overlay writes into it
    problems = Problems()
    overlay_env(Config, tree, os.environ if env is None else env, problems)
    database = tree.get("database")
    if isinstance(database, dict) and "path" in database and database.get("url", "") != "":
        problems.add(
            "database.url",
            "give either database.path (SQLite) or database.url (PostgreSQL), not both",
        )
    config = Reader(_RULES, problems).table(Config, tree, "")
    if isinstance(config, Config) and config.keeper.enabled and not config.indexer.enabled:
        problems.add(
            "indexer.enabled",
            "the keeper acts on what this daemon indexes: an API-only daemon "
            "(indexer.enabled = false) cannot have keeper.enabled = true",
        )
    problems.raise_if_any(source)
    assert isinstance(config, Config)  # no problems means every key checked out
    return config


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
    except ValueError as exc:  # an integer past int()'s 4,300 digits
        raise ConfigError(f"{source}: not valid TOML: {v.parse_problem(exc)}") from None
    except OSError as exc:
        raise ConfigError(f"{source}: cannot be read: {exc.strerror or exc}") from None
    return parse_config(raw, env, source=source)


# --------------------------------------------------------------------------- redaction


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
    if config.database.url:
        out["database"]["url"] = redact_url(config.database.url, marks=True)
    out["database"]["read_urls"] = [redact_url(u, marks=True) for u in config.database.read_urls]
    for key in ("sources", "content_sources"):
        sources: tuple[SourceConfig, ...] = getattr(config.verdicts, key)
        out["verdicts"][key] = [
            {**asdict(s), "url": redact_template(s.url)}
            if isinstance(s, HttpSourceConfig)
            else asdict(s)
            for s in sources
        ]
    out["verdicts"]["evaluators"] = dict(config.verdicts.evaluators)
    out["keeper"]["max_fee_gwei"] = str(config.keeper.max_fee_gwei)
    out["keeper"]["min_balance_wei"] = str(config.keeper.min_balance_wei)
    return out
