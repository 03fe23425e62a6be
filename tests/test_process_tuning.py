"""The allocator setting the long-running processes make (keeper.process_tuning): freed
blocks of a megabyte or more go back to the system, where glibc's default keeps them in a
heap that small blocks allocated after them pin. Each case runs in a fresh interpreter,
since the setting is for the process's life."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

# one batch's life in a process: a large answer freed (glibc then raises its mmap threshold
# past it), then buffers of a few megabytes each, each followed by a smaller block that
# outlives them (cut from the heap's top, as a batch's rows are), then the buffers freed
PROBE = """
import json, sys
from keeper.process_tuning import tune_allocator, tune_process

def rss_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

tuned = {"none": None, "allocator": tune_allocator, "process": tune_process}[sys.argv[1]]
applied = tuned() if tuned else None
first = b"\\x01" * (8 << 20)
del first
held, kept = [], []
for _ in range(40):
    held.append(b"\\x02" * (3 << 20))
    kept.append(b"\\x03" * (64 << 10))  # too large for the heap's free fragments: after it
before = rss_kb()
held.clear()
print(json.dumps({"applied": applied, "freed_kb": before - rss_kb()}))
"""

pytestmark = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc",
    reason="the allocator setting is glibc's (Linux); other libcs do not hold freed blocks",
)


def _freed_kb(mode: str) -> tuple[object, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True, timeout=60
    )
    got = json.loads(out.stdout)
    return got["applied"], int(got["freed_kb"])


@pytest.mark.parametrize(("mode", "reported"), [("allocator", True), ("process", None)])
def test_freed_large_buffers_leave_the_process(mode: str, reported: object) -> None:
    applied, freed_kb = _freed_kb(mode)
    assert applied is reported  # the allocator reports its setting; tune_process returns nothing
    # 40 buffers of 3 MiB freed: nearly all of their 120 MiB leaves the resident set
    assert freed_kb > 100 * 1024


def test_without_it_the_freed_buffers_stay_resident() -> None:
    """What the setting is for: glibc's default keeps the pages (a regression guard
    on the probe itself, which would otherwise prove nothing if it freed anyway)."""
    applied, freed_kb = _freed_kb("none")
    assert applied is None
    assert freed_kb < 20 * 1024
