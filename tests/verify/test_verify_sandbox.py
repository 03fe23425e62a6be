"""Evaluator re-runs in a killable worker: catastrophic regexes and memory hogs stay bounded."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from evaluator_server import EvaluatorServer
from sandbox_targets import raise_oserror, segfault, sleep_then, validate
from verify_helpers import COMPLETE, facts, verdict

from keeper.verify.canonical import keccak_hex
from keeper.verify.failures import Status
from keeper.verify.report import ChainRef
from keeper.verify.sandbox import Sandbox, SandboxFault, SandboxTimeout
from keeper.verify.sources import ContentSource, HttpSource
from keeper.verify.verdict import Verdict, Verifier, verify_verdict

# Exponential backtracking in Python's re: 40 a's then a b take hours without a limit.
REDOS_DESCRIPTION = json.dumps(
    {"brief": "x", "schema": {"properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}}}
)
REDOS_CONTENT = json.dumps({"s": "a" * 40 + "b"}).encode()


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    box = Sandbox(timeout=2.0, memory=1 << 30)
    yield box
    box.close()


def _item(doc: dict[str, object], content: bytes, description: str | None = None) -> Verdict:
    chain_facts = (
        facts(doc, content) if description is None else facts(doc, content, description=description)
    )
    ref = ChainRef(
        31337,
        "0x" + "ab" * 20,
        chain_facts.job_id,
        chain_facts.event_name,
        "0x" + "01" * 32,
        "0x" + "02" * 32,
        1,
        0,
        chain_facts.reason,
        chain_facts.deliverable,
        chain_facts.evaluator,
    )
    return Verdict(ref, chain_facts)


def _verifier(server: EvaluatorServer, sandbox: Sandbox) -> Verifier:
    return Verifier(
        [HttpSource(server.base + "/v1/jobs/{jobId}", "/verdict")],
        [ContentSource(server.base + "/v1/content/{hash}")],
        sandbox=sandbox,
    )


def _publish(server: EvaluatorServer, doc: dict[str, object], content: bytes) -> None:
    server.serve(f"/v1/jobs/{doc['jobId']}", json.dumps({"verdict": doc}).encode())
    server.serve(f"/v1/content/{keccak_hex(content)}", content)


async def test_catastrophic_pattern_is_cut_off(
    evaluator: EvaluatorServer, sandbox: Sandbox
) -> None:
    """A ReDoS pattern ends as not_reproducible after the timeout; the next re-run still works."""
    doc = verdict(7, REDOS_CONTENT, "reject", ["/s: does not match"])
    _publish(evaluator, doc, REDOS_CONTENT)
    started = time.monotonic()
    outcome = await verify_verdict(
        _item(doc, REDOS_CONTENT, REDOS_DESCRIPTION), _verifier(evaluator, sandbox)
    )
    assert outcome.status is Status.NOT_REPRODUCIBLE
    assert "re-run stopped" in outcome.failures[0].detail
    assert time.monotonic() - started < 10
    good = verdict(8, COMPLETE, "complete")
    _publish(evaluator, good, COMPLETE)
    again = await verify_verdict(_item(good, COMPLETE), _verifier(evaluator, sandbox))
    assert again.status is Status.VERIFIED


def test_memory_is_capped(sandbox: Sandbox) -> None:
    """An allocation beyond the worker's address-space limit fails there, not in the daemon."""
    with pytest.raises(MemoryError):
        sandbox.run(bytearray, 2 << 30)
    assert sandbox.run(len, b"still alive") == 11


def test_timeout_raises(sandbox: Sandbox) -> None:
    """A call that overruns raises SandboxTimeout and leaves a working sandbox behind."""
    with pytest.raises(SandboxTimeout):
        sandbox.run(time.sleep, 5)
    assert sandbox.run(sum, [1, 2, 3]) == 6


def test_worker_killed_mid_call_is_reported_at_once() -> None:
    """A worker killed by a group SIGTERM ends the call with SandboxCrashed, not the timeout."""
    import os
    import signal
    import threading

    from keeper.verify.sandbox import SandboxCrashed

    box = Sandbox(timeout=60.0)
    try:
        assert box.run(sleep_then, 0.0, 1) == 1
        assert box._proc is not None
        pid = box._proc.pid
        assert pid is not None
        threading.Timer(0.5, os.kill, (pid, signal.SIGTERM)).start()
        started = time.monotonic()
        with pytest.raises(SandboxCrashed):
            box.run(sleep_then, 30.0, 2)
        assert time.monotonic() - started < 10  # far below the 60 s timeout
        assert box.run(sleep_then, 0.0, 3) == 3  # a fresh worker serves the next call
    finally:
        box.close()


def test_close_interrupts_a_waiting_call() -> None:
    """close() during a long re-run ends it promptly; later calls refuse."""
    import threading

    from keeper.verify.sandbox import SandboxCrashed

    box = Sandbox(timeout=60.0)
    threading.Timer(1.0, box.close).start()
    started = time.monotonic()
    with pytest.raises(SandboxCrashed):
        box.run(sleep_then, 30.0, 1)
    assert time.monotonic() - started < 10
    with pytest.raises(SandboxCrashed):
        box.run(sleep_then, 0.0, 1)


def test_worker_exceptions_are_re_raised_as_they_are() -> None:
    """An OSError raised by the checked function reaches the caller unchanged."""
    box = Sandbox(timeout=30.0)
    try:
        with pytest.raises(OSError, match="from the worker"):
            box.run(raise_oserror)
    finally:
        box.close()


def test_a_worker_that_crashes_on_its_input_is_a_fault_not_a_retry(sandbox: Sandbox) -> None:
    """A SIGSEGV while running the call is the input's doing: SandboxFault (final), and the
    next call gets a fresh worker."""
    with pytest.raises(SandboxFault, match="SIGSEGV"):
        sandbox.run(segfault)
    assert sandbox.run(sleep_then, 0.0, 7) == 7


def test_deep_recursion_ends_in_recursion_error_not_a_crash(sandbox: Sandbox) -> None:
    """A $ref loop the resolver recurses through in native code: on the worker's large call
    stack Python's recursion limit is reached before the C stack overflows."""
    with pytest.raises(RecursionError):
        sandbox.run(validate, {"$anchor": "a", "$ref": "#a", "required": ["x"]}, {"y": 1})
    assert sandbox.run(sleep_then, 0.0, 8) == 8
