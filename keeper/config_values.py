"""The value types of the configuration: each a check plus the parser of its override.

Each check takes a raw TOML (or environment-parsed) value and returns it
normalised, or raises :class:`BadValue` with a message that names the problem
and never echoes a value that may be a secret; the reader prefixes the key
path. The ``Annotated`` aliases at the end (``PosInt``, ``RpcUrls``, ...) are
what the dataclass fields in ``keeper.config`` are declared with, so a field's
type, check, override parser and default sit on one line.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any
from urllib.parse import urlsplit

from keeper.domain.digits import UINT256_MAX, at_most
from keeper.domain.text import shown
from keeper.obs.redact import redact_url

ADDRESS_RE = re.compile(r"^0x[0-9a-fA-F]{40}\Z")
NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}\Z")
RPC_SCHEMES = ("http", "https", "ws", "wss")
HTTP_SCHEMES = ("http", "https")


# --------------------------------------------------------------------------- value checks


class BadValue(Exception):
    """One problem with one value; the caller prefixes the key path."""


def integer(value: object) -> int:
    """TOML's integers are 64-bit, as the store's are; Python's reader takes any size."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadValue(f"expected an integer, got {shown(value)}")
    if not -(2**63) <= value < 2**63:
        raise BadValue(f"past TOML's 64-bit integers, got {shown(value)}")
    return value


def nonneg_int(value: object) -> int:
    number = integer(value)
    if number < 0:
        raise BadValue(f"must be >= 0, got {number}")
    return number


def pos_int(value: object) -> int:
    number = integer(value)
    if number < 1:
        raise BadValue(f"must be >= 1, got {number}")
    return number


def big_int(value: object) -> int:
    """A non-negative integer that may exceed TOML's 64-bit range, so a digit string is
    allowed: at most a uint256's largest (an amount of wei a chain can hold)."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        number = at_most(value, UINT256_MAX)  # never int() past its 4,300 digits
        if number is None:
            raise BadValue(f"past any uint256 (2**256 - 1), got {shown(value)}")
        return number
    return nonneg_int(value)


def pos_float(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadValue(f"expected a number, got {shown(value)}")
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise BadValue(f"must be a positive number, got {shown(value)}")
    return number


def share(value: object) -> float:
    """A fraction from 0 to 1, both included."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadValue(f"expected a number from 0 to 1, got {shown(value)}")
    number = float(value)
    if not 0.0 <= number <= 1.0:  # NaN fails both
        raise BadValue(f"must be from 0 to 1, got {shown(value)}")
    return number


def gas_margin(value: object) -> float:
    number = pos_float(value)
    if number < 1.0:
        raise BadValue(f"must be >= 1.0 (a margin below the estimate fails), got {shown(value)}")
    if number > 100.0:
        raise BadValue(f"must be <= 100 (a larger one is a typo, not a margin), got {shown(value)}")
    return number


def gwei(value: object) -> Decimal:
    """Fees below 1 gwei are common on L2s, so decimals are allowed, but never below 1 wei."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise BadValue(f"expected a number of gwei, got {shown(value)}")
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        raise BadValue(f"expected a number of gwei, got {shown(value)}") from None
    if not amount.is_finite() or amount <= 0:
        raise BadValue(f"must be a positive number of gwei, got {shown(value)}")
    if amount * 10**9 != int(amount * 10**9):
        raise BadValue(f"must be a whole number of wei, got {shown(value)} gwei")
    return amount


def boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise BadValue(f"expected true or false, got {shown(value)}")
    return value


def string(value: object) -> str:
    if not isinstance(value, str):
        raise BadValue(f"expected a string, got {shown(value)}")
    return value


def nonempty_str(value: object) -> str:
    text = string(value)
    if not text:
        raise BadValue("must not be empty")
    return text


def name(value: object) -> str:
    text = string(value)
    if not NAME_RE.match(text):
        allowed = "letters, digits, '_', '.', '-'; 1-64 chars"
        raise BadValue(f"not a valid name ({allowed}): {shown(text)}")
    return text


def address(value: object) -> str:
    text = string(value)
    if not ADDRESS_RE.match(text):
        raise BadValue(f"not an address: {shown(text)}")
    return text.lower()


def optional_address(value: object) -> str:
    """An address, or "" for none."""
    return "" if string(value) == "" else address(value)


def choice(*choices: str) -> Callable[[object], str]:
    def check(value: object) -> str:
        text = string(value)
        if text not in choices:
            options = ", ".join(repr(c) for c in choices)
            raise BadValue(f"must be one of {options}, got {shown(text)}")
        return text

    return check


def url(schemes: tuple[str, ...], *, secret: bool) -> Callable[[object], str]:
    def check(value: object) -> str:
        if secret and not isinstance(value, str):
            # a secret URL may sit inside whatever was given instead: name the type only
            raise BadValue(f"expected a string, got a {type_name(value)}")
        text = string(value)
        printable = redact_url(text, marks=True) if secret else text
        try:
            parts = urlsplit(text)
            parts.port  # noqa: B018 -- raises ValueError on a bad port
        except ValueError:
            raise BadValue(f"not a valid URL: {shown(printable)}") from None
        if parts.scheme not in schemes or not parts.hostname:
            raise BadValue(f"not a valid {'/'.join(schemes)} URL: {shown(printable)}")
        return text

    return check


POSTGRES_SCHEMES = ("postgresql", "postgres")


def database_url(value: object) -> str:
    """A PostgreSQL URL (a secret: it may carry the password), or "" for none."""
    if value == "":
        return ""
    return url(POSTGRES_SCHEMES, secret=True)(value)


def api_root(value: object) -> str:
    """An http(s) API root, without a trailing slash (paths are appended to it)."""
    return url(HTTP_SCHEMES, secret=False)(value).rstrip("/")


def listen(value: object) -> str:
    text = string(value)
    host, sep, port = text.rpartition(":")
    port_ok = port.isascii() and port.isdigit() and len(port) <= 5 and 0 < int(port) < 65536
    if not sep or not host or not port_ok:
        raise BadValue(f"expected host:port, got {shown(text)}")
    return text


def pointer(value: object) -> str:
    text = string(value)
    if text and not text.startswith("/"):
        raise BadValue(f"a JSON pointer is empty or starts with '/', got {shown(text)}")
    return text


def type_name(value: object) -> str:
    names = {str: "string", int: "number", float: "number", bool: "boolean", dict: "table"}
    return names.get(type(value), type(value).__name__)


def str_list(item: Callable[[object], str]) -> Callable[[object], tuple[str, ...]]:
    def check(value: object) -> tuple[str, ...]:
        if not isinstance(value, list):
            # the type only, never the value: a single RPC URL given as a string
            # carries its credentials
            raise BadValue(f"expected a list, got a {type_name(value)}")
        out: list[str] = []
        for index, element in enumerate(value):
            try:
                out.append(item(element))
            except BadValue as exc:
                raise BadValue(f"[{index}]: {exc}") from None
        return tuple(out)

    return check


# --------------------------------------------------------------------------- env parsing


def env_scalar(text: str) -> object:
    """Read an env string as TOML would read the literal, falling back to the plain string.

    So ``12`` becomes an int, ``1.5`` a float, ``true`` a bool, ``"x"`` a string;
    anything unparseable stays a string, and the key's own check then reports it.
    """
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except ValueError:  # TOMLDecodeError, or an integer past int()'s 4,300 digits
        return text


def env_list(text: str) -> object:
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            return json.loads(stripped)
        except ValueError as exc:
            raise BadValue(f"not a JSON list: {parse_problem(exc)}") from None
    return [part.strip() for part in stripped.split(",") if part.strip()]


def env_json(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise BadValue(f"not valid JSON: {parse_problem(exc)}") from None


def parse_problem(exc: ValueError) -> str:
    """What a JSON or TOML parser refused, in the operator's words: past 4,300 digits int()
    raises a bare ValueError whose text advises a Python call."""
    if isinstance(exc, json.JSONDecodeError):
        return exc.msg
    text = str(exc)
    return "an integer of more than 4300 digits" if text.startswith("Exceeds the limit") else text


def env_str(text: str) -> object:
    return text


def env_evaluators(text: str) -> object:
    """JSON object, or ``name=0x..,name2=0x..`` for shells where JSON quoting hurts."""
    if text.strip().startswith("{"):
        return env_json(text)
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, address = part.partition("=")
        if not sep:
            raise BadValue(f"expected name=address pairs, got {shown(part)}")
        out[name.strip()] = address.strip()
    return out


# --------------------------------------------------------------------------- declared types


@dataclass(frozen=True, slots=True)
class Check:
    """``Annotated`` metadata of a scalar key: its value check and its override parser."""

    check: Callable[[object], Any]
    env: Callable[[str], object] = env_scalar


@dataclass(frozen=True, slots=True)
class Shape:
    """``Annotated`` metadata of a list or table key: what the error says it expected.

    ``type_only`` names just the type of a wrong value: a list of URL-bearing
    tables given as a string may be a secret URL.
    """

    expected: str
    env: Callable[[str], object] = env_json
    type_only: bool = False


Bool = Annotated[bool, Check(boolean)]
Str = Annotated[str, Check(string, env_str)]
NonEmptyStr = Annotated[str, Check(nonempty_str, env_str)]
Name = Annotated[str, Check(name, env_str)]
Address = Annotated[str, Check(address, env_str)]
OptionalAddress = Annotated[str, Check(optional_address, env_str)]
NonNegInt = Annotated[int, Check(nonneg_int)]
PosInt = Annotated[int, Check(pos_int)]
BigInt = Annotated[int, Check(big_int)]
PosFloat = Annotated[float, Check(pos_float)]
Share = Annotated[float, Check(share)]
GasMargin = Annotated[float, Check(gas_margin)]
Gwei = Annotated[Decimal, Check(gwei)]
Listen = Annotated[str, Check(listen, env_str)]
Pointer = Annotated[str, Check(pointer, env_str)]
ApiRoot = Annotated[str, Check(api_root, env_str)]
SourceUrl = Annotated[str, Check(url(HTTP_SCHEMES, secret=True), env_str)]
DatabaseUrl = Annotated[str, Check(database_url, env_str)]
DatabaseUrls = Annotated[
    tuple[str, ...], Check(str_list(url(POSTGRES_SCHEMES, secret=True)), env_list)
]
RpcUrls = Annotated[tuple[str, ...], Check(str_list(url(RPC_SCHEMES, secret=True)), env_list)]
Names = Annotated[tuple[str, ...], Check(str_list(name), env_list)]
