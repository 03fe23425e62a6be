"""The operator docs agree with the code: alerts, config keys, API routes, commands, links."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]
from ship_support import ROOT

from keeper.cli import build_parser
from keeper.config import (
    ApiConfig,
    ChainConfig,
    ContractConfig,
    DatabaseConfig,
    KeeperConfig,
    LogConfig,
    VerdictsConfig,
)
from keeper.verify.command import build_parser as build_verify_parser

DOCS = ROOT / "docs"
REQUIRED_DOCS = (
    "quickstart.md",
    "configuration.md",
    "cli.md",
    "api.md",
    "metrics.md",
    "runbook.md",
    "operations.md",
    "scaling.md",
)
# The runbook sections the alert rules were specified with (issue 7).
RUNBOOK_ANCHORS = (
    "indexing-halted",
    "head-lag-high",
    "overdue-actions-growing",
    "verdict-mismatch",
    "signer-balance-low",
    "fee-cap-hit",
    "rpc-error-rate-high",
)


def slug(heading: str) -> str:
    """GitHub's anchor for a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def headings(path: Path) -> dict[str, str]:
    """anchor -> the section's text (up to the next heading of the same or higher level)."""
    out: dict[str, str] = {}
    current = None
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        match = None if in_code else re.match(r"^(#{1,6}) (.+)$", line)
        if match:
            current = slug(match.group(2))
            out[current] = ""
        elif current is not None:
            out[current] += line + "\n"
    return out


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


class TestRunbook:
    def test_every_alert_links_to_a_runbook_section(self) -> None:
        """Each rule's runbook_url names docs/runbook.md and an anchor that exists there."""
        rules = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text())
        sections = headings(DOCS / "runbook.md")
        alerts = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
        assert alerts
        for rule in alerts:
            url = rule["annotations"]["runbook_url"]
            page, _, anchor = url.partition("#")
            assert page == "docs/runbook.md", url
            assert anchor in sections, f"{rule['alert']}: no section #{anchor}"
            assert f"`{rule['alert']}`" in sections[anchor], f"{rule['alert']} not named"

    @pytest.mark.parametrize("anchor", RUNBOOK_ANCHORS)
    def test_section_says_what_it_means_and_what_to_do(self, anchor: str) -> None:
        """The specified sections exist and each explains meaning and action."""
        text = headings(DOCS / "runbook.md")[anchor]
        assert "**What it means.**" in text and "**What to do.**" in text

    def test_every_section_has_both_parts(self) -> None:
        """No alert section is left with only half an answer."""
        sections = headings(DOCS / "runbook.md")
        rules = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text())
        for g in rules["groups"]:
            for rule in g["rules"]:
                text = sections[rule["annotations"]["runbook_url"].partition("#")[2]]
                assert "**What it means.**" in text, rule["alert"]
                assert "**What to do.**" in text or "Work through" in text, rule["alert"]


class TestConfigurationReference:
    @pytest.mark.parametrize(
        ("section", "cls"),
        [
            ("chain", ChainConfig),
            ("database", DatabaseConfig),
            ("contracts", ContractConfig),
            ("verdicts", VerdictsConfig),
            ("keeper", KeeperConfig),
            ("api", ApiConfig),
            ("log", LogConfig),
        ],
    )
    def test_every_key_has_a_row_with_default_and_env_name(
        self, section: str, cls: type[object]
    ) -> None:
        """Each config key has a table row naming its default and its KEEPER_ override."""
        text = (DOCS / "configuration.md").read_text()
        for field in dataclasses.fields(cls):  # type: ignore[arg-type]
            rows = [line for line in text.splitlines() if line.startswith(f"| `{field.name}` |")]
            assert rows, f"[{section}] {field.name} has no row"
            env = (
                f"KEEPER_CONTRACTS__<I>__{field.name.upper()}"
                if section == "contracts"
                else f"KEEPER_{section.upper()}__{field.name.upper()}"
            )
            row = next((r for r in rows if env in r), None)
            assert row is not None, f"[{section}] {field.name}: {env} not documented"
            default = row.split("|")[2]
            if field.default is not dataclasses.MISSING:
                shown = json.dumps(field.default) if isinstance(field.default, str) else None
                if shown is not None:
                    assert shown in default, (field.name, default)
                elif isinstance(field.default, bool):
                    assert str(field.default).lower() in default, (field.name, default)
                elif isinstance(field.default, int | float):
                    assert str(field.default) in default.replace("_", ""), (field.name, default)


class TestApiReference:
    def test_every_operation_is_documented(self) -> None:
        """Each method and path of openapi.json has its own heading in api.md."""
        spec = json.loads((ROOT / "keeper/api/openapi.json").read_text())
        text = (DOCS / "api.md").read_text()
        for path, ops in spec["paths"].items():
            for method in ops:
                if method == "parameters":
                    continue
                assert f"### `{method.upper()} {path}`" in text, (method, path)
                for param in ops[method].get("parameters", []):
                    assert f"`{param['name']}`" in text, (path, param["name"])


class TestCommandReference:
    def leaf_options(self) -> dict[str, set[str]]:
        """'db backup' -> {'--config', '--to'} for every command, verify included."""

        def walk(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> dict[str, set[str]]:
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            if not subs:
                return {
                    " ".join(words): {
                        o
                        for a in parser._actions
                        for o in a.option_strings
                        if o.startswith("--") and o != "--help"
                    }
                }
            out: dict[str, set[str]] = {}
            for name, child in subs[0].choices.items():
                out.update(walk(child, (*words, name)))
            return out

        commands = walk(build_parser(), ())
        commands["verify"] = {
            o for a in build_verify_parser()._actions for o in a.option_strings
        } - {"--help", "-h"}
        return commands

    def test_every_command_and_option_is_documented(self) -> None:
        """cli.md has a section per command listing every one of its options."""
        sections = headings(DOCS / "cli.md")
        for command, options in self.leaf_options().items():
            anchor = slug(f"`keeper {command}`")
            assert anchor in sections, command
            for option in options:
                assert option in sections[anchor], (command, option)

    def test_commands_shown_in_the_docs_parse(self) -> None:
        """Every `keeper ...` line in a code block of the docs is a valid command line."""
        parser = build_parser()
        checked = 0
        for path in markdown_files():
            in_code = False
            for line in path.read_text().splitlines():
                if line.strip().startswith("```"):
                    in_code = not in_code
                    continue
                stripped = line.strip().removeprefix(".venv/bin/")
                if not (in_code or line.startswith("    ")) or not stripped.startswith("keeper "):
                    continue
                shell = re.sub(r"\$\([^)]*\)", "X", stripped.split(" #")[0])  # $(date ...)
                words = shlex.split(shell)[1:]
                if not words or "[" in stripped or "COMMAND" in stripped:
                    continue  # a synopsis, not a command line
                if words[0] == "verify":
                    build_verify_parser().parse_args(words[1:])
                else:
                    parser.parse_args(words)
                checked += 1
        assert checked >= 10


class TestLinks:
    def test_readme_links_every_doc_and_keeps_its_first_lines(self) -> None:
        """README links all operator docs and still starts with the two commands."""
        readme = (ROOT / "README.md").read_text()
        assert readme.splitlines()[2].strip().startswith("make demo")
        assert readme.splitlines()[3].strip().startswith("make test")
        for name in REQUIRED_DOCS:
            assert (DOCS / name).exists(), name
            assert f"](docs/{name})" in readme, name

    def test_relative_links_and_anchors_resolve(self) -> None:
        """Every relative link in README and docs/ points at an existing file and anchor."""
        for path in markdown_files():
            for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
                if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"):
                    continue
                file_part, _, anchor = target.partition("#")
                resolved = (path.parent / file_part).resolve() if file_part else path
                assert resolved.exists(), f"{path.name}: broken link {target}"
                if anchor and resolved.suffix == ".md":
                    assert anchor in headings(resolved), f"{path.name}: no #{anchor} in {file_part}"
