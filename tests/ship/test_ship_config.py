"""`keeper config check` and the shipped example: every key documented, no secret printed."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from ship_support import ROOT, clean_env

from keeper.config import (
    ApiConfig,
    ChainConfig,
    ClusterConfig,
    Config,
    ContractConfig,
    DatabaseConfig,
    IndexerConfig,
    KeeperConfig,
    LogConfig,
    VerdictsConfig,
)
from keeper.devnet.anvil import DEV_KEYS

EXAMPLE = ROOT / "config" / "keeper.example.toml"
SECTIONS: dict[str, type[Any]] = {
    "chain": ChainConfig,
    "database": DatabaseConfig,
    "contracts": ContractConfig,
    "verdicts": VerdictsConfig,
    "keeper": KeeperConfig,
    "api": ApiConfig,
    "indexer": IndexerConfig,
    "log": LogConfig,
    "cluster": ClusterConfig,
}

# Secrets as operators really hold them: provider keys in URL paths, queries and userinfo.
RPC_KEY = "k3yInThePath0123456789"
QUERY_KEY = "qUeRyS3cret"
PASSWORD = "hunter2hunter2"
SOURCE_TOKEN = "t0kenForTheEvaluator"


def check(config: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "keeper", "config", "check", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(**env),
    )


def defaults(cls: type[Any]) -> dict[str, Any]:
    """Field name -> default (MISSING for required fields) of a config dataclass."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = dataclasses.MISSING
    return out


def comment_above(lines: list[str], key: str, section: str) -> str:
    """The comment block directly above ``key`` inside ``[section]`` of the example file."""
    in_section = False
    for i, line in enumerate(lines):
        header = re.match(r"^\[\[?([\w.]+)\]\]?", line)
        if header:
            in_section = header.group(1) == section
            if header.group(1) != f"{section}.{key}":  # a table-valued key has its own header
                continue
        if (in_section and re.match(rf"^#?\s*{key}\s*=", line)) or (
            header and header.group(1) == f"{section}.{key}"
        ):
            block = []
            j = i - 1
            while j >= 0 and lines[j].startswith("#"):
                block.append(lines[j])
                j -= 1
            return "\n".join(reversed(block))
    raise AssertionError(f"[{section}] {key} is not in {EXAMPLE.name}")


def same(a: object, b: object) -> bool:
    """Equality across TOML and dataclass spellings (list vs tuple, 25 vs 25.0)."""
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return list(a) == list(b)
    return a == b


class TestExampleDocumentsEveryKey:
    def test_sections_match_the_config_dataclass(self) -> None:
        """The example has exactly the top-level sections the Config dataclass has."""
        example = tomllib.loads(EXAMPLE.read_text())
        assert set(example) == {f.name for f in dataclasses.fields(Config)} == set(SECTIONS)

    @pytest.mark.parametrize("section", list(SECTIONS))
    def test_every_key_is_present_and_its_default_shown(self, section: str) -> None:
        """Each key appears; its value is the default, or its comment says default or required."""
        example = tomllib.loads(EXAMPLE.read_text())
        table = example[section][0] if section == "contracts" else example[section]
        lines = EXAMPLE.read_text().splitlines()
        for key, default in defaults(SECTIONS[section]).items():
            if key == "kind":
                continue
            comment = comment_above(lines, key, section)
            assert key in table or comment, f"[{section}] {key} missing"
            if default is dataclasses.MISSING:
                # required, or defaulted by the loader from other keys (rpc_names)
                documented = "required" in comment.lower() or "default" in comment.lower()
                assert documented, f"[{section}] {key}: required key not marked as required"
            elif not same(table.get(key, default), default):
                assert "default" in comment.lower(), (
                    f"[{section}] {key} = {table.get(key)!r} differs from the default "
                    f"{default!r} and its comment does not give the default"
                )

    def test_example_is_a_valid_config(self) -> None:
        """The example passes `keeper config check` as shipped."""
        result = check(EXAMPLE)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["api"]["listen"] == "127.0.0.1:9464"


class TestConfigCheck:
    @pytest.fixture
    def secret_config(self, tmp_path: Path) -> Path:
        path = tmp_path / "keeper.toml"
        path.write_text(
            f"""
[chain]
chain_id = 84532
rpc_urls = ["https://rpc.example/v2/{RPC_KEY}", "https://user:{PASSWORD}@node.example:8545/?key={QUERY_KEY}"]
rpc_names = ["provider", "own-node"]

[[contracts]]
name = "acp"
protocol = "erc8183"
address = "0x00000000000000000000000000000000000000AA"

[verdicts]
sources = [{{ kind = "http", url = "https://ev:{PASSWORD}@evaluator.example/v1/jobs/{{jobId}}?token={SOURCE_TOKEN}" }}]

[keeper]
enabled = true
private_key_env = "MY_KEEPER_KEY"
"""  # noqa: E501
        )
        return path

    def test_prints_the_effective_config_without_secrets(self, secret_config: Path) -> None:
        """Hosts, names and the key's env var name are shown; keys, passwords, tokens are not."""
        result = check(secret_config, MY_KEEPER_KEY=DEV_KEYS[7])
        assert result.returncode == 0, result.stderr
        shown = result.stdout + result.stderr
        for secret in (RPC_KEY, QUERY_KEY, PASSWORD, SOURCE_TOKEN, DEV_KEYS[7], DEV_KEYS[7][2:]):
            assert secret not in shown, secret
        cfg = json.loads(result.stdout)
        assert [u.split("/")[2] for u in cfg["chain"]["rpc_urls"]] == [
            "rpc.example",
            "***@node.example:8545",
        ]
        assert cfg["keeper"]["private_key_env"] == "MY_KEEPER_KEY"
        assert "{jobId}" in cfg["verdicts"]["sources"][0]["url"]
        assert cfg["contracts"][0]["address"] == "0x" + "00" * 19 + "aa"  # lowercased

    def test_env_overrides_are_applied_and_redacted(self, secret_config: Path) -> None:
        """An RPC URL given as KEEPER_CHAIN__RPC_URLS replaces the file's and is redacted too."""
        override = f"https://override.example/rpc/{RPC_KEY}x"
        result = check(
            secret_config,
            MY_KEEPER_KEY=DEV_KEYS[7],
            KEEPER_CHAIN__RPC_URLS=override,
            KEEPER_CHAIN__RPC_NAMES="override",
            KEEPER_KEEPER__SHARDS="3",
            KEEPER_KEEPER__SHARD="2",
        )
        assert result.returncode == 0, result.stderr
        assert RPC_KEY not in result.stdout
        cfg = json.loads(result.stdout)
        assert cfg["chain"]["rpc_urls"] == ["https://override.example/…"]
        assert (cfg["keeper"]["shard"], cfg["keeper"]["shards"]) == (2, 3)

    def test_errors_name_the_key_and_never_echo_a_secret(self, tmp_path: Path) -> None:
        """A rejected secret-bearing URL is reported by key path with the secret masked; exit 2."""
        path = tmp_path / "bad.toml"
        path.write_text(
            f'[chain]\nchain_id = 1\nrpc_urls = ["ftp://user:{PASSWORD}@host/{RPC_KEY}"]\n'
            "[keeper]\nenabled = true\n"
        )
        result = check(path)
        assert result.returncode == 2
        assert "chain.rpc_urls" in result.stderr and "keeper.enabled" in result.stderr
        assert PASSWORD not in result.stderr and RPC_KEY not in result.stderr
        assert result.stdout == ""
