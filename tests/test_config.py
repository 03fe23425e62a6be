"""Tests for keeper.config: TOML loading, env overrides, error messages, redaction."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from keeper.config import (
    Config,
    DirectorySourceConfig,
    GitHubConfig,
    HttpSourceConfig,
    load_config,
    parse_config,
    redact_url,
    redacted,
)
from keeper.domain.model import Protocol
from keeper.errors import ConfigError

CONFIG_DIR = Path(__file__).resolve().parents[1] / "config"
SECRET_URL = "https://user:hunter22@eth.example.com/v2/abcdef0123456789abcdef?key=zzsecretzz"
ADDR = "0xAbCdEf0123456789aBcDeF0123456789AbCdEf01"


def minimal(**sections: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {"chain": {"chain_id": 31337, "rpc_urls": ["http://127.0.0.1:8545"]}}
    raw.update(sections)
    return raw


def problems(raw: dict[str, Any], env: dict[str, str] | None = None) -> list[str]:
    """The problem lines of the ConfigError raised for ``raw`` (fails if none is raised)."""
    with pytest.raises(ConfigError) as info:
        parse_config(raw, env or {})
    return [line.strip() for line in str(info.value).splitlines()[1:]]


class TestDefaults:
    def test_minimal_config_gets_documented_defaults(self) -> None:
        """A file with only the required keys gets every default from the brief."""
        config = parse_config(minimal(), {})
        assert config.chain.rpc_names == ("rpc0",)
        assert (config.chain.confirmations, config.chain.finality) == (12, "tag")
        assert (config.chain.window, config.chain.max_range, config.chain.min_range) == (
            128,
            2000,
            1,
        )
        assert config.database.path == "data/keeper.db"
        assert config.contracts == ()
        assert config.keeper.min_balance_wei == 10**16
        assert config.keeper.max_fee_wei == 100 * 10**9
        assert (config.api.host, config.api.port, config.api.enabled) == ("127.0.0.1", 9464, True)
        assert (config.log.format, config.log.level) == ("auto", "info")
        assert config.verdicts.retry_horizon == 86_400

    def test_addresses_are_normalised_to_lowercase(self) -> None:
        """Mixed-case (checksummed) addresses are stored lowercase everywhere."""
        raw = minimal(
            contracts=[{"name": "acp", "protocol": "erc8183", "address": ADDR}],
            verdicts={"evaluators": {"SchemaEval": ADDR}},
        )
        config = parse_config(raw, {})
        assert config.contracts[0].address == ADDR.lower()
        assert config.contracts[0].protocol is Protocol.ERC8183
        assert config.verdicts.evaluators == {"SchemaEval": ADDR.lower()}

    def test_fractional_gwei_fee_cap_converts_to_exact_wei(self) -> None:
        """A sub-gwei cap (common on L2s) becomes an exact integer of wei."""
        config = parse_config(minimal(keeper={"max_fee_gwei": 0.05}), {})
        assert config.keeper.max_fee_gwei == Decimal("0.05")
        assert config.keeper.max_fee_wei == 50_000_000

    def test_min_balance_beyond_64_bits_accepted_as_digit_string(self) -> None:
        """Amounts larger than TOML integers allow can be written as digit strings."""
        config = parse_config(minimal(keeper={"min_balance_wei": "100000000000000000000000"}), {})
        assert config.keeper.min_balance_wei == 10**23

    def test_verdict_sources_are_typed_by_kind(self) -> None:
        """Each source table becomes the dataclass of its kind with defaults filled."""
        raw = minimal(
            verdicts={
                "sources": [
                    {"kind": "http", "url": "https://ev.example/v1/jobs/{jobId}", "pointer": "/v"},
                    {"kind": "directory", "path": "verdicts"},
                ]
            }
        )
        sources = parse_config(raw, {}).verdicts.sources
        assert sources == (
            HttpSourceConfig(url="https://ev.example/v1/jobs/{jobId}", pointer="/v"),
            DirectorySourceConfig(path="verdicts"),
        )
        assert isinstance(sources[0], HttpSourceConfig) and sources[0].max_bytes == 1_048_576


class TestErrors:
    def test_bad_contract_address_names_index_and_value(self) -> None:
        """A short address is reported with its list index and the value as written."""
        raw = minimal(
            contracts=[
                {"name": "a", "protocol": "erc8183", "address": ADDR},
                {"name": "b", "protocol": "taskmarket", "address": "0x12"},
            ]
        )
        assert problems(raw) == ["contracts[1].address: not an address: '0x12'"]

    def test_a_final_newline_is_no_part_of_an_address_or_a_name(self) -> None:
        """An environment variable set from a file keeps its newline: refused, not stored."""
        raw = minimal(contracts=[{"name": "a\n", "protocol": "erc8183", "address": ADDR + "\n"}])
        assert problems(raw) == [
            "contracts[0].name: not a valid name (letters, digits, '_', '.', '-'; 1-64 chars): "
            "'a\\n'",
            f"contracts[0].address: not an address: '{ADDR}\\n'",
        ]

    def test_typo_in_key_suggests_close_match(self) -> None:
        """An unknown key is an error that names the key path and the likely intended key."""
        raw = minimal()
        raw["chain"]["poll_intervall"] = 1
        assert problems(raw) == [
            "chain.poll_intervall: unknown key (did you mean 'poll_interval'?)"
        ]

    def test_unknown_section_suggests_close_match(self) -> None:
        """A misspelt section is caught at the top level too."""
        assert problems(minimal(kepeer={})) == ["kepeer: unknown key (did you mean 'keeper'?)"]

    def test_unknown_key_without_close_match_has_no_hint(self) -> None:
        """No suggestion is invented when nothing is close."""
        assert problems(minimal(api={"zzz": 1})) == ["api.zzz: unknown key"]

    def test_missing_required_keys_are_listed(self) -> None:
        """Without a chain section both required chain keys are named."""
        assert problems({}) == [
            "chain.chain_id: required key is missing",
            "chain.rpc_urls: required key is missing",
        ]

    @pytest.mark.parametrize(
        ("section", "key", "value", "message"),
        [
            ("chain", "confirmations", "12", "expected an integer, got '12'"),
            ("chain", "confirmations", True, "expected an integer, got True"),
            ("chain", "confirmations", -1, "must be >= 0, got -1"),
            ("chain", "window", 0, "must be >= 1, got 0"),
            ("chain", "poll_interval", "fast", "expected a number, got 'fast'"),
            ("chain", "poll_interval", 0, "must be a positive number, got 0"),
            ("chain", "finality", "safe", "must be one of 'tag', 'confirmations', got 'safe'"),
            ("chain", "fetch_process_busy", 1.5, "must be from 0 to 1, got 1.5"),
            ("chain", "fetch_process_busy", "most", "expected a number from 0 to 1, got 'most'"),
            ("chain", "fetch_process_busy", float("nan"), "must be from 0 to 1, got nan"),
            ("keeper", "enabled", "yes", "expected true or false, got 'yes'"),
            ("keeper", "gas_margin", 0.9, "must be >= 1.0 (a margin below the estimate fails)"),
            ("keeper", "gas_margin", 1e6, "must be <= 100 (a larger one is a typo"),
            ("chain", "window", 2**70, "past TOML's 64-bit integers, got 1180591620717411303424"),
            ("chain", "chain_id", -(2**63) - 1, "past TOML's 64-bit integers"),
            ("keeper", "max_fee_gwei", 0.0000000001, "must be a whole number of wei"),
            ("keeper", "max_fee_gwei", -1, "must be a positive number of gwei, got -1"),
            ("api", "listen", "9464", "expected host:port, got '9464'"),
            ("api", "listen", "localhost:99999", "expected host:port, got 'localhost:99999'"),
            ("api", "listen", "h:" + "9" * 5000, "expected host:port, got 'h:999"),
            ("api", "listen", "h:\u0668\u0660", "expected host:port, got 'h:"),  # Arabic-Indic
            ("keeper", "min_balance_wei", "9" * 79, "past any uint256 (2**256 - 1), got '999"),
            ("keeper", "min_balance_wei", "9" * 5000, "past any uint256 (2**256 - 1), got '999"),
            ("keeper", "min_balance_wei", str(2**256), "past any uint256 (2**256 - 1)"),
            ("chain", "window", 2**63, "past TOML's 64-bit integers"),
            ("keeper", "max_fee_gwei", 0, "must be a positive number of gwei, got 0"),
            ("api", "listen", ":9464", "expected host:port, got ':9464'"),
            ("api", "listen", "localhost:0", "expected host:port, got 'localhost:0'"),
            ("api", "listen", "localhost:065535", "expected host:port"),  # six digits
            ("log", "level", "verbose", "must be one of 'debug', 'info', 'warning', 'error'"),
            ("database", "path", "", "must not be empty"),
        ],
    )
    def test_wrong_value_names_key_and_reason(
        self, section: str, key: str, value: object, message: str
    ) -> None:
        """Each type or range error names ``section.key`` and says what was wrong."""
        raw = minimal()
        raw.setdefault(section, {})[key] = value
        (line,) = problems(raw)
        assert line.startswith(f"{section}.{key}: {message}")

    @pytest.mark.parametrize(
        ("section", "key", "value"),
        [
            ("keeper", "min_balance_wei", str(2**256 - 1)),  # 78 digits, the largest uint256
            ("keeper", "min_balance_wei", "0" * 100 + "5"),  # leading zeros are no magnitude
            ("chain", "chain_id", 2**63 - 1),
            ("chain", "fetch_process_busy", 0.0),
            ("chain", "fetch_process_busy", 1),
            ("keeper", "gas_margin", 1.0),
            ("keeper", "gas_margin", 100),
            ("api", "listen", "localhost:65535"),
            ("api", "listen", "localhost:1"),
        ],
    )
    def test_a_value_at_its_bound_is_taken(self, section: str, key: str, value: object) -> None:
        """Each range is inclusive where its message says so."""
        raw = minimal()
        raw.setdefault(section, {})[key] = value
        config = parse_config(raw, {})
        if key == "listen":
            assert str(config.api.port) == str(value).rpartition(":")[2]
        else:
            assert getattr(getattr(config, section), key) == (
                int(value) if isinstance(value, str) else value
            )

    def test_bad_rpc_url_is_reported_without_its_secret_parts(self) -> None:
        """A malformed RPC URL is named by index but its credentials never reach the message."""
        raw = minimal()
        raw["chain"]["rpc_urls"] = ["http://127.0.0.1:8545", "ftp://u:hunter22@h.example/KEY123"]
        (line,) = problems(raw)
        assert line.startswith("chain.rpc_urls: [1]: not a valid http/https/ws/wss URL")
        assert "hunter22" not in line and "KEY123" not in line

    def test_url_without_host_is_rejected(self) -> None:
        """A URL with a scheme but no host cannot be dialled."""
        raw = minimal()
        raw["chain"]["rpc_urls"] = ["http://"]
        assert problems(raw)[0].startswith("chain.rpc_urls: [0]: not a valid")

    def test_rpc_names_must_match_urls(self) -> None:
        """One name per URL, and names are unique."""
        raw = minimal()
        raw["chain"]["rpc_names"] = ["a", "b"]
        assert problems(raw) == ["chain.rpc_names: has 2 names for 1 rpc_urls: give one each"]
        raw["chain"]["rpc_urls"] = ["http://a.example", "http://b.example"]
        raw["chain"]["rpc_names"] = ["a", "a"]
        assert problems(raw) == ["chain.rpc_names: duplicate names: a"]

    def test_empty_rpc_list_rejected(self) -> None:
        """A chain with no RPC URL cannot be followed."""
        raw = minimal()
        raw["chain"]["rpc_urls"] = []
        assert problems(raw) == ["chain.rpc_urls: at least one RPC URL is required"]

    def test_range_and_shard_relations(self) -> None:
        """Cross-key rules name the key that has to change."""
        raw = minimal(keeper={"shard": 2, "shards": 2})
        raw["chain"].update(min_range=10, max_range=5)
        assert problems(raw) == [
            "chain.min_range: 10 is above chain.max_range (5)",
            "keeper.shard: 2 must be below keeper.shards (2)",
        ]

    def test_signer_rules(self) -> None:
        """An enabled keeper needs exactly one signer source, a keystore its password file."""
        assert problems(minimal(keeper={"enabled": True})) == [
            "keeper.enabled: an enabled keeper needs keeper.private_key_env or keeper.keystore "
            "(or keeper.dry_run = true)"
        ]
        assert parse_config(minimal(keeper={"enabled": True, "dry_run": True}), {}).keeper.enabled
        both = {"private_key_env": "K", "keystore": "ks.json", "keystore_password_file": "p"}
        assert problems(minimal(keeper=both)) == [
            "keeper.keystore: set either keeper.private_key_env or keeper.keystore"
        ]
        assert problems(minimal(keeper={"keystore": "ks.json"})) == [
            "keeper.keystore_password_file: required when keeper.keystore is set"
        ]

    def test_contract_entries(self) -> None:
        """Missing keys, bad protocol and duplicates are named per entry."""
        raw = minimal(
            contracts=[
                {"name": "a", "protocol": "erc8183", "address": ADDR},
                {"name": "a", "protocol": "erc8183", "address": ADDR.lower()},
                {"name": "c", "protocol": "erc8195"},
                {"name": "d e", "protocol": "taskmarket", "address": ADDR, "start": 5},
            ]
        )
        assert problems(raw) == [
            "contracts[1].name: duplicate name 'a' (also contracts[0])",
            f"contracts[1].address: duplicate address {ADDR.lower()} (also contracts[0])",
            "contracts[2].protocol: must be one of 'erc8183', 'taskmarket', got 'erc8195'",
            "contracts[2].address: required key is missing",
            "contracts[3].start: unknown key (did you mean 'start_block'?)",
            "contracts[3].name: not a valid name (letters, digits, '_', '.', '-'; 1-64 chars): "
            "'d e'",
        ]

    def test_pinned_dialect_must_be_one_of_its_protocol(self) -> None:
        """A pin names a dialect of the entry's own protocol; a wrong one lists the known."""
        raw = minimal(
            contracts=[
                {"name": "t", "protocol": "taskmarket", "address": ADDR, "dialect": "TaskMarket"},
                {"name": "c", "protocol": "erc8183", "address": ADDR.lower()[:-1] + "2",
                 "dialect": "TaskMarket"},
            ]
        )  # fmt: skip
        lines = problems(raw)
        assert len(lines) == 1 and lines[0].startswith(
            "contracts[1].dialect: unknown erc8183 dialect 'TaskMarket' (known: AgenticCommerce"
        )
        del raw["contracts"][1]
        assert parse_config(raw, {}).contracts[0].dialect == "TaskMarket"

    def test_contracts_must_be_array_of_tables(self) -> None:
        """``[contracts]`` instead of ``[[contracts]]`` is a clear error."""
        assert problems(minimal(contracts={"name": "x"})) == [
            "contracts: expected a list of tables ([[contracts]]), got {'name': 'x'}"
        ]

    def test_verdict_source_errors(self) -> None:
        """Sources are checked per kind, with the key path of each problem."""
        raw = minimal(
            verdicts={
                "sources": [
                    {"kind": "ipfs"},
                    {"kind": "http", "pointer": "verdict"},
                    {"kind": "directory", "path": "d", "url": "http://x"},
                ],
                "content_sources": "nope",
                "evaluators": {"SchemaEval": "0x1"},
            }
        )
        assert problems(raw) == [
            "verdicts.sources[0].kind: must be 'http' or 'directory', got 'ipfs'",
            "verdicts.sources[1].url: required key is missing",
            "verdicts.sources[1].pointer: a JSON pointer is empty or starts with '/', "
            "got 'verdict'",
            "verdicts.sources[2].url: unknown key",
            "verdicts.content_sources: expected a list of tables, got a string",
            "verdicts.evaluators.SchemaEval: not an address: '0x1'",
        ]

    def test_github_table(self) -> None:
        """[verdicts.github]: defaults, a GHES URL, and one token reference at most."""
        assert parse_config(minimal(), {}).verdicts.github is None
        github = parse_config(minimal(verdicts={"github": {}}), {}).verdicts.github
        assert github == GitHubConfig()
        ghes = {"api_url": "https://ghe.example/api/v3/", "token_env": "GH", "timeout": 5}
        cfg = parse_config(minimal(verdicts={"github": ghes}), {}).verdicts.github
        assert cfg is not None and (cfg.api_url, cfg.token_env, cfg.timeout) == (
            "https://ghe.example/api/v3",
            "GH",
            5.0,
        )
        bad = {"api_url": "ftp://x", "token_env": "A", "token_file": "/t", "tokn": "x"}
        assert problems(minimal(verdicts={"github": bad})) == [
            "verdicts.github.tokn: unknown key (did you mean 'token_env'?)",
            "verdicts.github.api_url: not a valid http/https URL: 'ftp://x'",
            "verdicts.github.token_file: set either token_env or token_file",
        ]
        env = {"KEEPER_VERDICTS__GITHUB": '{"token_file": "/run/secrets/gh"}'}
        from_env = parse_config(minimal(), env).verdicts.github
        assert from_env is not None and from_env.token_file == "/run/secrets/gh"

    def test_all_problems_reported_at_once(self) -> None:
        """Several mistakes come back in one error so the operator fixes them in one pass."""
        raw = minimal(api={"listen": "x"}, log={"format": "xml"})
        raw["chain"]["chain_id"] = 0
        assert len(problems(raw)) == 3


class TestEnvOverrides:
    def test_scalar_overrides_are_parsed_to_key_type(self) -> None:
        """Env strings become the key's type: float, int, bool, string."""
        env = {
            "KEEPER_CHAIN__POLL_INTERVAL": "1.5",
            "KEEPER_CHAIN__CONFIRMATIONS": "3",
            "KEEPER_KEEPER__DRY_RUN": "True",
            "KEEPER_LOG__FORMAT": "json",
            "KEEPER_DATABASE__PATH": "/var/lib/keeper/k.db",
        }
        config = parse_config(minimal(), env)
        assert config.chain.poll_interval == 1.5
        assert config.chain.confirmations == 3
        assert config.keeper.dry_run is True
        assert config.log.format == "json"
        assert config.database.path == "/var/lib/keeper/k.db"

    @pytest.mark.parametrize(
        "value", ['["http://a.example", "wss://b.example"]', "http://a.example, wss://b.example"]
    )
    def test_rpc_urls_from_json_or_commas(self, value: str) -> None:
        """A URL list may be given as a JSON list or comma separated."""
        config = parse_config(minimal(), {"KEEPER_CHAIN__RPC_URLS": value})
        assert config.chain.rpc_urls == ("http://a.example", "wss://b.example")
        assert config.chain.rpc_names == ("rpc0", "rpc1")

    def test_override_wins_over_file_and_can_supply_required_keys(self) -> None:
        """Env values replace file values; a file may leave the chain id to the environment."""
        raw = {"chain": {"rpc_urls": ["http://x.example"]}}
        config = parse_config(raw, {"KEEPER_CHAIN__CHAIN_ID": "84532"})
        assert config.chain.chain_id == 84532

    def test_contract_fields_and_append(self) -> None:
        """``KEEPER_CONTRACTS__<i>__<KEY>`` edits entry i; i == len appends an entry."""
        raw = minimal(contracts=[{"name": "a", "protocol": "erc8183", "address": ADDR}])
        other = "0x" + "11" * 20
        env = {
            "KEEPER_CONTRACTS__0__START_BLOCK": "100",
            "KEEPER_CONTRACTS__1__NAME": "tm",
            "KEEPER_CONTRACTS__1__PROTOCOL": "taskmarket",
            "KEEPER_CONTRACTS__1__ADDRESS": other,
        }
        contracts = parse_config(raw, env).contracts
        assert contracts[0].start_block == 100
        assert (contracts[1].name, contracts[1].address) == ("tm", other)

    def test_contract_index_gap_rejected(self) -> None:
        """An override that would leave a hole in the list is an error naming the variable."""
        assert problems(minimal(), {"KEEPER_CONTRACTS__2__NAME": "x"}) == [
            "KEEPER_CONTRACTS__2__NAME: index 2 skips entries: there are 0 contracts"
        ]

    def test_json_tables_and_evaluator_pairs(self) -> None:
        """Table-valued keys take JSON; evaluators also take name=address pairs."""
        env = {
            "KEEPER_VERDICTS__SOURCES": '[{"kind": "directory", "path": "v"}]',
            "KEEPER_VERDICTS__EVALUATORS": f"SchemaEval={ADDR}, GitHubEval=0x{'22' * 20}",
        }
        verdicts = parse_config(minimal(), env).verdicts
        assert verdicts.sources == (DirectorySourceConfig(path="v"),)
        assert verdicts.evaluators == {"SchemaEval": ADDR.lower(), "GitHubEval": "0x" + "22" * 20}

    def test_env_errors_name_the_variable(self) -> None:
        """Unknown or unparsable overrides say which variable and which key they meant."""
        env = {
            "KEEPER_CHAIN__POLL_INTERVALL": "1",
            "KEEPER_CHIAN__CHAIN_ID": "1",
            "KEEPER_VERDICTS__SOURCES": "[{",
            "KEEPER_CHAIN__CONFIRMATIONS": "many",
        }
        assert problems(minimal(), env) == [
            "KEEPER_CHAIN__POLL_INTERVALL -> chain.poll_intervall: unknown key "
            "(did you mean 'poll_interval'?)",
            "KEEPER_CHIAN__CHAIN_ID -> chian: unknown key (did you mean 'chain'?)",
            "KEEPER_VERDICTS__SOURCES -> verdicts.sources: not valid JSON: Expecting property "
            "name enclosed in double quotes",
            "chain.confirmations: expected an integer, got 'many'",
        ]

    def test_an_integer_past_4300_digits_is_a_problem_not_a_crash(self) -> None:
        """int() refuses more than 4,300 digits with a bare ValueError, in TOML and JSON
        parsers alike: each override is still a problem naming its variable."""
        many = "9" * 5000
        env = {
            "KEEPER_CHAIN__CONFIRMATIONS": many,
            "KEEPER_CHAIN__RPC_URLS": f"[{many}]",
            "KEEPER_VERDICTS__GITHUB": f'{{"max_bytes": {many}}}',
            f"KEEPER_CONTRACTS__{many}__NAME": "x",
        }
        assert problems(minimal(), env) == [
            "KEEPER_CHAIN__RPC_URLS -> chain.rpc_urls: not a JSON list: an integer of more "
            "than 4300 digits",
            f"KEEPER_CONTRACTS__{many}__NAME: index {many[:20]}... skips entries: there are 0 "
            "contracts",
            "KEEPER_VERDICTS__GITHUB -> verdicts.github: not valid JSON: an integer of more "
            "than 4300 digits",
            f"chain.confirmations: expected an integer, got '{many[:76]}...",
        ]

    def test_plain_keeper_variables_are_not_overrides(self) -> None:
        """Variables without ``__`` (such as the one holding the key) are left alone."""
        env = {"KEEPER_PRIVATE_KEY": "0x" + "ab" * 32, "KEEPER_CHAIN": "x"}
        assert isinstance(parse_config(minimal(), env), Config)


class TestFiles:
    def test_missing_file(self, tmp_path: Path) -> None:
        """A missing file is a ConfigError naming the path."""
        with pytest.raises(ConfigError, match=r"configuration file not found: .*nope\.toml"):
            load_config(tmp_path / "nope.toml", {})

    def test_invalid_toml(self, tmp_path: Path) -> None:
        """A syntax error is a ConfigError naming the file."""
        path = tmp_path / "bad.toml"
        path.write_text("[chain\n")
        with pytest.raises(ConfigError, match=r"bad.toml: not valid TOML"):
            load_config(path, {})

    def test_an_integer_past_4300_digits_in_the_file(self, tmp_path: Path) -> None:
        """tomllib raises a bare ValueError for it: still a ConfigError naming the file."""
        path = tmp_path / "big.toml"
        path.write_text(f'[chain]\nchain_id = {"9" * 5000}\nrpc_urls = ["http://a.example"]\n')
        with pytest.raises(ConfigError) as info:
            load_config(path, {})
        assert str(info.value) == f"{path}: not valid TOML: an integer of more than 4300 digits"

    def test_errors_name_the_file(self, tmp_path: Path) -> None:
        """The error's first line says which file is wrong."""
        path = tmp_path / "k.toml"
        path.write_text('[chain]\nchain_id = 1\nrpc_urls = ["http://a.example"]\n[api]\nx = 1\n')
        with pytest.raises(ConfigError, match=r"invalid configuration in .*k.toml:\n  api.x"):
            load_config(path, {})

    @pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.toml")), ids=lambda p: p.name)
    def test_every_shipped_config_loads(self, path: Path) -> None:
        """Each config file shipped in config/ is valid as written."""
        config = load_config(path, {})
        assert config.chain.rpc_urls

    def test_shipped_configs_exist(self) -> None:
        """The three documented files are present (so the parametrised test is not empty)."""
        names = {p.name for p in CONFIG_DIR.glob("*.toml")}
        assert {"keeper.example.toml", "devnet.toml", "base-sepolia.toml"} <= names

    def test_example_documents_every_key(self) -> None:
        """Every key the loader knows appears in the example file, so the docs cannot drift."""
        text = (CONFIG_DIR / "keeper.example.toml").read_text()
        example = load_config(CONFIG_DIR / "keeper.example.toml", {})
        for section, values in redacted(example).items():
            if section == "contracts":
                keys = {"name", "protocol", "address", "start_block"}
            elif isinstance(values, dict):
                keys = set(values) - {"sources", "content_sources", "evaluators", "github"}
                keys |= set(values.get("github") or {})  # [verdicts.github]
            for key in keys:
                assert f"{key} =" in text, f"{section}.{key} not documented"


class TestRedaction:
    @pytest.mark.parametrize(
        ("url", "shown"),
        [
            ("http://127.0.0.1:8545", "http://127.0.0.1:8545"),
            ("https://eth-mainnet.g.alchemy.com/v2/KEY", "https://eth-mainnet.g.alchemy.com/…"),
            ("wss://u:p@node.example:8546/ws?token=1", "wss://***@node.example:8546/…"),
            ("http://[::1]:8545/", "http://[::1]:8545"),
            ("not a url", "<redacted>"),
        ],
    )
    def test_redact_url(self, url: str, shown: str) -> None:
        """Only scheme, host and port survive; path, query and userinfo are masked."""
        assert redact_url(url, marks=True) == shown

    def test_redacted_config_holds_no_secret(self) -> None:
        """The printable config contains no credential, key path or query of any URL."""
        raw = minimal(
            keeper={"enabled": True, "private_key_env": "KEEPER_KEY", "max_fee_gwei": 1.5},
            verdicts={
                "sources": [{"kind": "http", "url": "https://a:pw9@ev.example/j/{jobId}?k=s3"}]
            },
        )
        raw["chain"]["rpc_urls"] = [SECRET_URL]
        out = redacted(parse_config(raw, {}))
        text = json.dumps(out)
        for secret in ("hunter22", "abcdef0123456789abcdef", "zzsecretzz", "pw9", "s3"):
            assert secret not in text
        assert out["chain"]["rpc_urls"] == ["https://***@eth.example.com/…"]
        assert out["verdicts"]["sources"][0]["url"] == "https://***@ev.example/j/{jobId}?***"
        assert out["keeper"]["private_key_env"] == "KEEPER_KEY"
        assert out["keeper"]["max_fee_gwei"] == "1.5"

    def test_read_urls_are_secrets_shown_redacted(self) -> None:
        """``[database] read_urls``: validated like ``url``, redacted each, from env too."""
        raw = minimal(database={"url": "postgresql://k:pw1@db:5432/keeper"})
        env = {
            "KEEPER_DATABASE__READ_URLS": "postgresql://k:pw2@r0:5432/keeper,"
            "postgres://k:pw3@r1/keeper?sslmode=require"
        }
        cfg = parse_config(raw, env)
        assert cfg.database.read_urls == (
            "postgresql://k:pw2@r0:5432/keeper",
            "postgres://k:pw3@r1/keeper?sslmode=require",
        )
        text = json.dumps(redacted(cfg))
        for secret in ("pw1", "pw2", "pw3"):
            assert secret not in text
        assert redacted(cfg)["database"]["read_urls"][0].startswith("postgresql://***@r0")
        wrong = r"database\.read_urls: \[0\]: not a valid postgresql"
        with pytest.raises(ConfigError, match=wrong) as bad:
            parse_config(raw, {"KEEPER_DATABASE__READ_URLS": "https://k:pw4@r0/keeper"})
        assert "pw4" not in str(bad.value)
