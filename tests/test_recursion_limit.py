"""The recursion limit the daemon and ``keeper backfill`` run at
(keeper.process_tuning.tune_recursion). eth_account, which the devnet imports, brings
py_ecc, which raises the limit to 100,000 at its import: a reply nested 99,000 deep then
overflows the C stack inside the JSON parser and kills the process. Tuned, the parser
raises RecursionError, which every reader turns into "not JSON". Each case runs in a
fresh interpreter: the limit is the process's."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

PROBE = """
import json, sys
import eth_account  # py_ecc comes with it
from keeper.process_tuning import tune_process

if sys.argv[1] == "tuned":
    tune_process()
try:
    json.loads(b"[" * 99_000)
except RecursionError:
    print(sys.getrecursionlimit())
"""


def _probe(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=60
    )


def test_a_deep_reply_is_a_recursion_error_in_a_tuned_process() -> None:
    out = _probe("tuned")
    assert (out.returncode, out.stdout.strip()) == (0, "1000"), out.stderr[-2000:]


@pytest.mark.skipif(sys.platform != "linux", reason="the C stack overflow is Linux's SIGSEGV")
def test_without_it_a_deep_reply_kills_the_process() -> None:
    """What the setting is for (and a guard on the probe, which would otherwise prove
    nothing if eth_account stopped raising the limit)."""
    assert _probe("untuned").returncode == -signal.SIGSEGV
