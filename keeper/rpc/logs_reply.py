"""An ``eth_getLogs`` reply read straight from its bytes, when it is the common case.

``json.loads`` and ``validate_logs`` build a dict per log and check each field
in Python: most of the fetch process's CPU on a dense backfill. The C scanner
(``keeper/rpc/_logscan.c``) reads a well-formed reply in one pass instead and
answers None for anything else; the transport then parses the body the generic
way, which accepts it or names what is wrong. Both give equal ``Logs`` for every
body the scanner takes (tests/rpc/test_rpc_logscan.py). Where the package was
installed without a C compiler the scanner is absent and every reply goes the
generic way: slower, the same logs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

from keeper.domain.model import Log, Logs
from keeper.rpc.validate import block_timestamps

_Scan = Callable[..., tuple[list[Any], dict[int, str | None]] | None]


def _native() -> _Scan | None:
    try:
        from keeper.rpc._logscan import scan
    except ImportError:  # built without a C compiler (pyproject.toml: optional)
        return None
    return scan


_SCAN: Final = _native()
# whether replies are scanned natively here (the tests insist on it where a compiler is)
NATIVE: Final = _SCAN is not None

_INT64_MAX: Final = 2**63 - 1


def scan_logs_reply(
    body: bytes,
    request_id: int,
    *,
    addresses: Iterable[str] | None = None,
    from_block: int | None = None,
    to_block: int | None = None,
    block_hash: str | None = None,
) -> Logs | None:
    """``validate_logs`` of the reply's result, or None: the generic path decides.

    The same query bounds as ``validate_logs``; ``request_id`` is the id the
    reply must carry.
    """
    if _SCAN is None:
        return None
    found = _SCAN(
        body,
        request_id,
        Log,
        None if addresses is None else {a.lower() for a in addresses},
        -1 if from_block is None else from_block,
        _INT64_MAX if to_block is None else to_block,
        None if block_hash is None else block_hash.lower(),
    )
    if found is None:
        return None
    items, stamps = found
    logs = Logs(items)
    logs.timestamps = block_timestamps(stamps)
    return logs
