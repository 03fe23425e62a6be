"""Coverage-guided fuzzing of the native getLogs scanner: ``make fuzz`` (scripts/fuzz-logscan).

The scanner reads bytes from any node, so its memory safety is checked beyond the
tests' thousand damaged replies: libFuzzer (through atheris) mutates replies towards
new paths in the C, built by clang with AddressSanitizer and UBSan
(scripts/fuzz-logscan), and every input goes through the tests' own oracle
(``rpc_fixtures.agree``): the scanner answers None or exactly the generic path's
logs. A memory error aborts, a wrong answer raises; libFuzzer then keeps the input.

An input is a query and a body: its first byte chooses which bounds the query has,
the next two the block range and the request id, the rest is the reply.
``test_rpc_logscan`` runs ``check`` on the seeds with the ordinary build.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

# the instrumented scanner, put where keeper.rpc.logs_reply looks for it, before it looks
_INSTRUMENTED = os.environ.get("LOGSCAN_FUZZ_BUILD")
if _INSTRUMENTED:
    _spec = importlib.util.spec_from_file_location("keeper.rpc._logscan", _INSTRUMENTED)
    assert _spec is not None and _spec.loader is not None
    sys.modules["keeper.rpc._logscan"] = _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)

# tests/rpc is on the path: the script's own directory, or the test run's
from rpc_fixtures import ADDR, H1, H2, OTHER, agree, raw_log  # noqa: E402

from keeper.domain.model import Logs  # noqa: E402

# words libFuzzer splices in: the members and shapes the scanner branches on
TOKENS = (
    '"jsonrpc"', '"id"', '"result"', '"error"', '"address"', '"topics"', '"data"',
    '"blockNumber"', '"blockHash"', '"transactionHash"', '"transactionIndex"', '"logIndex"',
    '"removed"', '"blockTimestamp"', '"0x"', "0x", "true", "false", "null", "\\u0000", "[]",
    "{}", '":"', '","', "0x" + "ab" * 32, "0x" + "aa" * 20,
)  # fmt: skip


def query_of(head: bytes) -> tuple[int, dict[str, Any]]:
    """The request id and query bounds a 3-byte input head stands for."""
    flags, low, rid = head[0], head[1], head[2]
    query: dict[str, Any] = {}
    if flags & 1:
        query["addresses"] = [ADDR] if flags & 2 else [ADDR, OTHER]
    if flags & 4:
        query["from_block"] = low
    if flags & 8:
        query["to_block"] = low + (flags >> 5)
    if flags & 16:
        query["block_hash"] = H1 if flags & 2 else H2
    return rid, query


def check(data: bytes) -> Logs | None:
    """One input: the scanner's answer, None or the generic path's (asserted by agree)."""
    if len(data) < 3:
        return None
    rid, query = query_of(data[:3])
    return agree(data[3:], rid, **query)


def seeds() -> list[bytes]:
    """Replies the scanner takes and a few it refuses, each after a head asking for them."""
    logs = [
        raw_log(),
        raw_log(logIndex="0x2", topics=[], data="0x", blockTimestamp="0x64"),
        raw_log(blockNumber="0x11", blockHash=H2, logIndex="0x0", blockTimestamp="0x65"),
    ]
    bodies: list[tuple[int, Any]] = [
        (7, {"jsonrpc": "2.0", "id": 7, "result": logs}),
        (7, {"id": 7, "jsonrpc": "2.0", "result": [raw_log(extra={"a": [1, -2.5e-3, None]})]}),
        (7, {"jsonrpc": "2.0", "id": 7, "result": []}),
        (7, {"jsonrpc": "2.0", "id": 7, "result": [raw_log(removed=True)]}),
        (7, {"jsonrpc": "2.0", "id": 7, "error": {"code": -32000, "message": "range"}}),
        (9, {"jsonrpc": "2.0", "id": 9, "result": [raw_log(topics=["0x" + "CD" * 32] * 4)]}),
    ]
    out = []
    for rid, body in bodies:
        for flags in (0, 1 | 2 | 4 | 8 | (1 << 5), 16 | 2):
            for indent in (None, 1):
                out.append(bytes([flags, 16, rid]) + json.dumps(body, indent=indent).encode())
    return out


def main() -> None:
    import atheris  # only the fuzzing run has it (scripts/fuzz-logscan installs it)

    corpus = Path(sys.argv[1])
    corpus.mkdir(parents=True, exist_ok=True)
    for n, seed in enumerate(seeds()):
        (corpus / f"seed-{n:02}").write_bytes(seed)
    words = corpus.parent / "logscan.dict"
    words.write_text("".join(f"{json.dumps(t)}\n" for t in TOKENS))
    atheris.Setup([sys.argv[0], str(corpus), f"-dict={words}", *sys.argv[2:]], check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
