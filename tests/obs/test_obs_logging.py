"""Tests for keeper.obs.logging: formats, context binding, secret redaction."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from keeper.obs.logging import (
    REDACTED,
    clear_secrets,
    configure_logging,
    get_logger,
    log_context,
    redact_text,
    register_database_url,
    register_rpc_url,
    register_secret,
)

PRIVATE_KEY = "0x" + "4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318"
TX_HASH = "0x" + "9f" * 32
RPC_URL = (
    "https://user:pa55word@eth-mainnet.g.alchemy.com/v2/AbCdEf0123456789xyzKEY?apikey=q1w2e3r4t5"
)


class TtyStream(io.StringIO):
    """An in-memory stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    """Leave global logging as found: structlog defaults, root level, no keeper handler."""
    root_level = logging.getLogger().level
    yield
    logging.getLogger().setLevel(root_level)
    clear_secrets()
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_keeper_handler", False):
            root.removeHandler(handler)


def json_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


class TestFormats:
    def test_auto_is_json_when_not_a_tty(self) -> None:
        """A non-terminal stream gets one JSON object per line with event, level and time."""
        out = io.StringIO()
        configure_logging("auto", "info", out)
        get_logger("unit").info("block_indexed", number=7)
        (line,) = json_lines(out)
        assert line["event"] == "block_indexed"
        assert line["level"] == "info"
        assert line["number"] == 7
        assert line["logger"] == "unit"
        assert line["timestamp"].endswith("Z")

    def test_logger_made_before_configuration_follows_it(self) -> None:
        """A module-level logger created before configure_logging still writes where it says."""
        early = get_logger("early")
        first = io.StringIO()
        configure_logging("json", "info", first)
        early.info("one")
        second = io.StringIO()
        configure_logging("json", "info", second)
        early.info("two")
        assert [line["event"] for line in json_lines(first)] == ["one"]
        assert [(line["event"], line["logger"]) for line in json_lines(second)] == [
            ("two", "early")
        ]

    def test_auto_is_console_on_a_tty(self) -> None:
        """A terminal gets readable key=value lines, not JSON."""
        out = TtyStream()
        configure_logging("auto", "info", out)
        get_logger().info("block_indexed", number=7)
        text = out.getvalue()
        assert "block_indexed" in text and "number" in text
        with pytest.raises(json.JSONDecodeError):
            json.loads(text.splitlines()[0])

    def test_json_forced_on_a_tty(self) -> None:
        """format=json overrides terminal detection."""
        out = TtyStream()
        configure_logging("json", "info", out)
        get_logger().info("x")
        assert json_lines(out)[0]["event"] == "x"

    def test_level_filters(self) -> None:
        """Lines below the configured level are dropped, for structlog and stdlib alike."""
        out = io.StringIO()
        configure_logging("json", "warning", out)
        log = get_logger()
        log.info("quiet")
        log.warning("loud")
        logging.getLogger("aiohttp.access").info("quiet_stdlib")
        logging.getLogger("web3").error("loud_stdlib")
        assert [line["event"] for line in json_lines(out)] == ["loud", "loud_stdlib"]

    def test_stdlib_lines_are_json_with_logger_name(self) -> None:
        """Third-party stdlib logging comes out in the same JSON shape."""
        out = io.StringIO()
        configure_logging("json", "info", out)
        logging.getLogger("aiohttp.access").info("GET /metrics %s", 200)
        (line,) = json_lines(out)
        assert line["event"] == "GET /metrics 200"
        assert line["logger"] == "aiohttp.access"
        assert line["level"] == "info"

    def test_reconfigure_does_not_duplicate_stdlib_lines(self) -> None:
        """Configuring twice leaves one handler, so stdlib lines are not doubled."""
        out = io.StringIO()
        configure_logging("json", "info", io.StringIO())
        configure_logging("json", "info", out)
        logging.getLogger("x").info("once")
        assert len(json_lines(out)) == 1


class TestContext:
    def test_bound_keys_appear_inside_block_only(self) -> None:
        """log_context adds the standard keys to lines logged inside it, and only there."""
        out = io.StringIO()
        configure_logging("json", "info", out)
        log = get_logger()
        with log_context(chain_id=8453, contract="acp", subject="7", block=12, tx_hash=TX_HASH):
            log.info("inside")
        log.info("outside")
        inside, outside = json_lines(out)
        assert {k: inside[k] for k in ("chain_id", "contract", "subject", "block", "tx_hash")} == {
            "chain_id": 8453,
            "contract": "acp",
            "subject": "7",
            "block": 12,
            "tx_hash": TX_HASH,
        }
        assert "contract" not in outside

    def test_none_values_are_not_bound(self) -> None:
        """Unset context keys do not appear as nulls."""
        out = io.StringIO()
        configure_logging("json", "info", out)
        with log_context(contract="acp"):
            get_logger().info("x")
        (line,) = json_lines(out)
        assert "subject" not in line and line["contract"] == "acp"

    async def test_context_is_task_local(self) -> None:
        """Two concurrent tasks keep their own bound subject."""
        out = io.StringIO()
        configure_logging("json", "info", out)

        async def work(subject: str) -> None:
            with log_context(subject=subject):
                await asyncio.sleep(0)
                get_logger().info("step")

        await asyncio.gather(work("1"), work("2"))
        assert sorted(line["subject"] for line in json_lines(out)) == ["1", "2"]


class TestRedaction:
    def test_registered_key_masked_but_tx_hash_kept(self) -> None:
        """A registered key is masked; a tx hash of the same shape is not."""
        out = io.StringIO()
        configure_logging("json", "info", out)
        register_secret(PRIVATE_KEY)
        get_logger().info("signing", key=PRIVATE_KEY, tx_hash=TX_HASH, note=f"k={PRIVATE_KEY}")
        (line,) = json_lines(out)
        assert line["key"] == REDACTED
        assert line["note"] == f"k={REDACTED}"
        assert line["tx_hash"] == TX_HASH

    def test_key_variants_and_nested_values(self) -> None:
        """Upper case, no 0x prefix, and values nested in dicts and lists are all masked."""
        register_secret(PRIVATE_KEY)
        out = io.StringIO()
        configure_logging("json", "info", out)
        get_logger().info(
            "x", upper=PRIVATE_KEY.upper(), bare=PRIVATE_KEY[2:], nested={"a": [PRIVATE_KEY]}
        )
        text = out.getvalue()
        assert PRIVATE_KEY[2:].lower() not in text.lower()
        assert json_lines(out)[0]["nested"] == {"a": [REDACTED]}

    def test_unregistered_hex_is_untouched(self) -> None:
        """Nothing is masked by shape alone."""
        assert redact_text(f"hash {PRIVATE_KEY}") == f"hash {PRIVATE_KEY}"

    def test_exception_text_is_masked(self) -> None:
        """A secret inside an exception message and traceback is masked too."""
        register_secret(PRIVATE_KEY)
        out = io.StringIO()
        configure_logging("json", "info", out)
        try:
            raise ValueError(f"bad key {PRIVATE_KEY}")
        except ValueError:
            get_logger().exception("signer_failed")
        (line,) = json_lines(out)
        assert "ValueError: bad key [REDACTED]" in line["exception"]
        assert PRIVATE_KEY[2:] not in out.getvalue()

    def test_rpc_url_parts_masked_in_stdlib_and_console_lines(self) -> None:
        """The URL, its password, path key and query key never appear, even piecewise."""
        register_rpc_url(RPC_URL)
        for fmt in ("json", "console"):
            out = io.StringIO()
            configure_logging(fmt, "info", out)
            logging.getLogger("web3.providers").warning("request to %s failed", RPC_URL)
            get_logger().info("pieces", path="/v2/AbCdEf0123456789xyzKEY", pw="pa55word")
            get_logger().info("query", q="apikey=q1w2e3r4t5", host="eth-mainnet.g.alchemy.com")
            text = out.getvalue()
            for piece in ("pa55word", "AbCdEf0123456789xyzKEY", "q1w2e3r4t5"):
                assert piece not in text, (fmt, piece)
            assert "eth-mainnet.g.alchemy.com" in text  # the host alone is not secret

    def test_short_url_segments_not_registered(self) -> None:
        """Common short path pieces like 'v2' are not treated as secrets."""
        register_rpc_url(RPC_URL)
        assert redact_text("api v2 user") == "api v2 user"

    def test_database_url_and_password_masked_but_not_its_names(self) -> None:
        """A driver's message with the password alone is masked; the database name stays."""
        url = "postgresql://keeper:s%40cret-pw@db.internal:5432/keeper"
        register_database_url(url)
        out = io.StringIO()
        configure_logging("json", "info", out)
        logging.getLogger("psycopg").warning("connect to %s failed", url)
        get_logger().info("auth", detail='password "s@cret-pw" rejected for user keeper')
        text = out.getvalue()
        assert "s@cret-pw" not in text and "s%40cret-pw" not in text
        assert "user keeper" in text  # the user and database names are not secrets


class TestLoggerNames:
    def test_module_loggers_name_their_module(self) -> None:
        """A transport line says it came from the transport (structlog's own factory drops it)."""
        from keeper.rpc import transport

        out = io.StringIO()
        configure_logging("json", stream=out)
        transport.log.info("rpc_retry")
        assert [(line["event"], line["logger"]) for line in json_lines(out)] == [
            ("rpc_retry", "keeper.rpc.transport")
        ]

    def test_every_module_gets_its_logger_one_way(self) -> None:
        """No keeper module builds a structlog logger itself, so every line carries its source."""
        from pathlib import Path

        import keeper

        root = Path(keeper.__file__).parent
        offenders = [
            str(path.relative_to(root))
            for path in root.rglob("*.py")
            if path.name != "logging.py" and "structlog.get_logger(" in path.read_text()
        ]
        assert offenders == []
