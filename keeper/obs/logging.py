"""structlog setup: JSON lines in a container, readable lines on a terminal, secrets never.

Redaction is by registration, not by pattern: a private key and a transaction
hash are both ``0x`` + 64 hex, so guessing by shape would either leak keys or
erase every tx hash from the logs. Whoever loads a secret (the signer, the RPC
layer) registers it here; every log line, including exception text and lines
from third-party libraries routed through the stdlib, passes the redactor last
before rendering.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import threading
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Literal, TextIO
from urllib.parse import parse_qsl, unquote, urlsplit

import structlog
from structlog._config import BoundLoggerLazyProxy
from structlog.typing import EventDict, FilteringBoundLogger, Processor, WrappedLogger

__all__ = [
    "CONTEXT_KEYS",
    "REDACTED",
    "clear_secrets",
    "configure_logging",
    "get_logger",
    "log_context",
    "redact",
    "redact_text",
    "register_database_url",
    "register_rpc_url",
    "register_secret",
]

REDACTED = "[REDACTED]"
CONTEXT_KEYS: tuple[str, ...] = ("chain_id", "contract", "subject", "block", "tx_hash")

# Shorter fragments are not registered from URLs: "v2" or "mainnet" in a path
# is no secret, and redacting it would garble unrelated log text.
_MIN_URL_FRAGMENT = 8

_lock = threading.Lock()
_secrets: set[str] = set()
_pattern: re.Pattern[str] | None = None
# what configure_logging was last given: a child process logs the same way
_configured: tuple[str, str] = ("auto", "info")


def _rebuild() -> None:
    global _pattern
    ordered = sorted(_secrets, key=len, reverse=True)  # longest first: a URL before its key
    _pattern = re.compile("|".join(map(re.escape, ordered)), re.IGNORECASE) if ordered else None


def register_secret(value: str) -> None:
    """Mask ``value`` (case-insensitively) in every later log line.

    A hex key is also masked without its ``0x`` prefix, the form some tools print.
    """
    value = value.strip()
    if not value:
        return
    with _lock:
        _secrets.add(value)
        if value[:2].lower() == "0x" and len(value) > 2:
            _secrets.add(value[2:])
        _rebuild()


def register_rpc_url(url: str) -> None:
    """Mask an RPC URL and the parts of it that carry credentials.

    Providers put API keys in the userinfo, a path segment (``/v2/<key>``) or
    the query; each such fragment is registered so it is masked even when a
    library logs it on its own.
    """
    register_secret(url)
    try:
        parts = urlsplit(url)
    except ValueError:
        return
    fragments: list[str] = []
    if parts.username:
        fragments.append(unquote(parts.username))
    if parts.password:
        fragments.append(unquote(parts.password))
    fragments.extend(unquote(segment) for segment in parts.path.split("/"))
    fragments.extend(value for _, value in parse_qsl(parts.query))
    if parts.path.strip("/"):
        fragments.append(parts.path)
    for fragment in fragments:
        if len(fragment) >= _MIN_URL_FRAGMENT or (fragment and fragment == parts.password):
            register_secret(fragment)


def register_database_url(url: str) -> None:
    """Mask a database URL and its password (not its host or database name, which
    name nothing secret and would mask ordinary words in every line)."""
    register_secret(url)
    try:
        password = urlsplit(url).password
    except ValueError:
        return
    if password:
        register_secret(unquote(password))


def registered_secrets() -> tuple[str, ...]:
    """Every value masked now, for a child process to mask the same (never logged)."""
    with _lock:
        return tuple(sorted(_secrets))


def configured() -> tuple[str, str]:
    """The format and level of the last ``configure_logging``."""
    return _configured


def clear_secrets() -> None:
    """Forget every registered secret (tests, and a daemon reloading its config)."""
    with _lock:
        _secrets.clear()
        _rebuild()


def redact_text(text: str) -> str:
    """``text`` with every registered secret replaced by ``[REDACTED]``."""
    pattern = _pattern
    return pattern.sub(REDACTED, text) if pattern is not None else text


def _redact_value(value: object) -> object:
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {k: _redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_redact_value(v) for v in value]
    if isinstance(value, int | float | bool) or value is None:
        return value
    return redact_text(str(value))  # anything else is rendered as text anyway


def redact(_logger: WrappedLogger, _method: str, event_dict: EventDict) -> EventDict:
    """structlog processor: mask registered secrets in every key and value."""
    if _pattern is None:
        return event_dict
    return {redact_text(str(k)): _redact_value(v) for k, v in event_dict.items()}


def _shared_processors() -> list[Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
        # exceptions become text before redaction, so a secret in a message is caught too
        structlog.processors.format_exc_info,
    ]


def configure_logging(
    fmt: Literal["auto", "json", "console"] | str = "auto",
    level: str = "info",
    stream: TextIO | None = None,
) -> None:
    """Route structlog and stdlib logging to ``stream`` (default stdout) in one format.

    ``auto`` picks JSON lines unless the stream is a terminal, so a container
    gets machine-readable logs and a developer gets readable ones.
    """
    global _configured
    _configured = (fmt, level)
    out = stream if stream is not None else sys.stdout
    as_json = fmt == "json" or (fmt == "auto" and not _isatty(out))
    renderer: Processor = (
        structlog.processors.JSONRenderer(sort_keys=False)
        if as_json
        else structlog.dev.ConsoleRenderer(colors=_isatty(out), pad_event_to=30)
    )
    numeric = logging.getLevelNamesMapping()[level.upper()]
    structlog.configure(
        processors=[*_shared_processors(), redact, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.WriteLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *_shared_processors()],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                redact,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_keeper_handler", False):
            root.removeHandler(old)
    handler._keeper_handler = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(numeric)


_remove_meta = structlog.stdlib.ProcessorFormatter.remove_processors_meta


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def get_logger(name: str | None = None) -> FilteringBoundLogger:
    """A structlog logger; ``name`` is bound as ``logger`` so lines say where they came from.

    Lazy: module-level loggers are created at import, before the daemon calls
    ``configure_logging``; binding now would freeze the default configuration.
    """
    if not name:
        plain: FilteringBoundLogger = structlog.get_logger()
        return plain
    # structlog.get_logger(logger=...) collides with wrap_logger's own ``logger``
    # parameter, so the lazy proxy it would return is built directly
    lazy: FilteringBoundLogger = BoundLoggerLazyProxy(  # type: ignore[assignment]
        None, initial_values={"logger": name}, logger_factory_args=()
    )
    return lazy


@contextlib.contextmanager
def log_context(
    *,
    chain_id: int | None = None,
    contract: str | None = None,
    subject: str | None = None,
    block: int | None = None,
    tx_hash: str | None = None,
) -> Iterator[None]:
    """Bind the standard context keys for the lines logged inside the block (task-local)."""
    values: MutableMapping[str, object] = {
        key: value
        for key, value in (
            ("chain_id", chain_id),
            ("contract", contract),
            ("subject", subject),
            ("block", block),
            ("tx_hash", tx_hash),
        )
        if value is not None
    }
    with structlog.contextvars.bound_contextvars(**values):
        yield
