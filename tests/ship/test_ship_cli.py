"""The command line: help for every command, --version, and one exit-code contract.

Most cases call ``keeper.cli.main`` in-process (they end before any handler
configures logging; the SIGTERM handler `run` installs is restored); the
console entry point itself runs as `python -m keeper` for a few.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from ship_support import clean_env

from keeper import __version__
from keeper.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, build_parser, main

KEEPER = [sys.executable, "-m", "keeper"]

# What each command must offer (the operator docs and compose file rely on these).
EXPECTED_OPTIONS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("run",): ("--config",),
    ("backfill",): ("--config", "--to-block", "--no-progress"),
    ("verify",): ("--config", "--contract", "--id", "--json"),
    ("status",): ("--config", "--json"),
    ("db", "rebuild"): ("--config",),
    ("db", "migrate"): ("--config",),
    ("db", "backup"): ("--config", "--to"),
    ("config", "check"): ("--config",),
    ("devnet",): ("--rpc", "--workdir", "--no-daemon", "--duration"),
}
CONFIG_COMMANDS = [c for c, opts in EXPECTED_OPTIONS.items() if "--config" in opts]


def keeper(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*KEEPER, *args], capture_output=True, text=True, timeout=60, cwd=cwd, env=clean_env()
    )


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Result]:
    """Run ``keeper.cli.main`` in this process with no KEEPER_* overrides in the environment."""
    for name in list(os.environ):
        if name.startswith("KEEPER_"):
            monkeypatch.delenv(name)

    def invoke(*argv: str) -> Result:
        capsys.readouterr()
        previous = signal.getsignal(signal.SIGTERM)
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse: --help, --version, usage errors
            code = int(exc.code or 0)
        finally:
            signal.signal(signal.SIGTERM, previous)
        out = capsys.readouterr()
        return Result(code, out.out, out.err)

    return invoke


def leaf_parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every runnable command of the parser tree, keyed by its words."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {path: parser}
    out: dict[tuple[str, ...], argparse.ArgumentParser] = {}
    for name, child in subs[0].choices.items():
        out.update(leaf_parsers(child, (*path, name)))
    return out


class TestHelp:
    def test_every_command_is_expected_and_every_expected_one_exists(self) -> None:
        """The parser's commands are exactly the documented set (verify has its own parser)."""
        assert set(leaf_parsers(build_parser())) == set(EXPECTED_OPTIONS)

    @pytest.mark.parametrize("command", list(EXPECTED_OPTIONS), ids=" ".join)
    def test_help_exits_0_and_lists_the_options(
        self, command: tuple[str, ...], cli: Callable[..., Result]
    ) -> None:
        """`keeper <command> --help` exits 0 and names each option the command offers."""
        result = cli(*command, "--help")
        assert result.returncode == EXIT_OK, result.stderr
        assert result.stdout.startswith(f"usage: keeper {' '.join(command)}")
        for option in EXPECTED_OPTIONS[command]:
            assert option in result.stdout, (command, option)

    def test_every_option_has_a_help_text(self) -> None:
        """No option is left unexplained in --help (argparse would print a bare flag)."""
        for command, parser in leaf_parsers(build_parser()).items():
            for action in parser._actions:
                if action.option_strings and action.dest != "help":
                    assert action.help, (command, action.option_strings)

    def test_top_level_help_names_every_command_and_the_exit_codes(self) -> None:
        """`keeper --help` lists each command with a summary and the exit code contract."""
        result = keeper("--help")
        assert result.returncode == EXIT_OK
        for word in {c[0] for c in EXPECTED_OPTIONS}:
            assert f"    {word} " in result.stdout, word
        assert "2 usage/config error" in result.stdout and "3 undetermined" in result.stdout

    def test_version(self) -> None:
        """`keeper --version` prints the package version and exits 0."""
        result = keeper("--version")
        assert (result.returncode, result.stdout.strip()) == (EXIT_OK, f"keeper {__version__}")


class TestExitCodes:
    @pytest.mark.parametrize("command", CONFIG_COMMANDS, ids=" ".join)
    def test_missing_config_file_is_a_usage_error(
        self, command: tuple[str, ...], tmp_path: Path, cli: Callable[..., Result]
    ) -> None:
        """A config path that does not exist exits 2 and says which file."""
        missing = tmp_path / "nope.toml"
        backup = command == ("db", "backup")
        extra: tuple[str, ...] = ("--to", str(tmp_path / "b.db")) if backup else ()
        extra += ("--contract", "0x" + "11" * 20, "--id", "1") if command == ("verify",) else ()
        result = cli(*command, "--config", str(missing), *extra)
        assert result.returncode == EXIT_USAGE, result.stderr
        assert str(missing) in result.stderr

    @pytest.mark.parametrize(
        ("text", "needle"),
        [
            ("[chain\nchain_id = 1", "not valid TOML"),
            ('[chain]\nchain_id = 1\nrpc_urls = ["http://a:1"]\npoll_intervall = 1', "mean 'poll_"),
            ('[chain]\nchain_id = "one"\nrpc_urls = ["http://127.0.0.1:1"]', "chain.chain_id"),
        ],
        ids=["syntax", "misspelt-key", "bad-type"],
    )  # fmt: skip
    def test_invalid_config_is_a_usage_error(
        self, text: str, needle: str, tmp_path: Path, cli: Callable[..., Result]
    ) -> None:
        """Syntax errors, unknown keys and wrong types exit 2 with the key named on stderr."""
        path = tmp_path / "bad.toml"
        path.write_text(text)
        for command in (("run",), ("backfill",), ("config", "check")):
            result = cli(*command, "--config", str(path))
            assert result.returncode == EXIT_USAGE, (command, result.stderr)
            assert needle in result.stderr, (command, result.stderr)
            assert result.stdout == ""

    def test_env_override_errors_are_usage_errors(self, tmp_path: Path) -> None:
        """A bad KEEPER_* override fails the same way as a bad file entry (console script)."""
        path = tmp_path / "ok.toml"
        path.write_text('[chain]\nchain_id = 1\nrpc_urls = ["http://127.0.0.1:1"]\n')
        env = clean_env(KEEPER_CHAIN__WINDOW="-3")
        result = subprocess.run(
            [*KEEPER, "config", "check", "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert result.returncode == EXIT_USAGE
        assert "chain.window" in result.stderr

    @pytest.mark.parametrize(
        "argv",
        [(), ("db",), ("config",), ("frobnicate",), ("run",), ("status", "--config")],
        ids=["nothing", "db", "config", "unknown", "run-without-config", "dangling-option"],
    )
    def test_incomplete_command_lines_are_usage_errors(
        self, argv: tuple[str, ...], cli: Callable[..., Result]
    ) -> None:
        """A missing or unknown command or argument exits 2 with guidance on stderr or stdout."""
        result = cli(*argv)
        assert result.returncode == EXIT_USAGE
        assert "usage" in (result.stdout + result.stderr).lower() or "choose" in result.stderr

    def test_status_without_a_database_is_a_failure(
        self, tmp_path: Path, cli: Callable[..., Result]
    ) -> None:
        """`keeper status` on a fresh config finds nothing to report: exit 1, not a crash."""
        path = tmp_path / "ok.toml"
        path.write_text(
            '[chain]\nchain_id = 1\nrpc_urls = ["http://127.0.0.1:1"]\n'
            f'[database]\npath = "{tmp_path / "none.db"}"\n'
        )
        result = cli("status", "--config", str(path))
        assert result.returncode == EXIT_FAILED
        assert "no database" in result.stderr


def test_closed_pipe_is_not_an_error() -> None:
    """`keeper config check | head` exits 0 with no traceback when the reader leaves early."""
    import sys

    example = Path(__file__).resolve().parents[2] / "config" / "keeper.example.toml"
    proc = subprocess.Popen(
        [sys.executable, "-m", "keeper", "config", "check", "--config", str(example)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(),
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the command prints anything
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    assert "Traceback" not in err
