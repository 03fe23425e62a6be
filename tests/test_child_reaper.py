"""The suite's guard against a test leaving a process running (tests/support/child_reaper.py)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from support.child_reaper import children, leaked, reap


def test_a_running_child_is_seen_and_reaped_with_its_command_line() -> None:
    before = children()
    proc = subprocess.Popen(["sleep", "60"])
    born = children() - before
    assert born == {proc.pid}
    # Popen returns once exec has begun; the new command line is written a moment
    # later (an empty /proc cmdline was read here under load), so wait for it
    cmdline = Path(f"/proc/{proc.pid}/cmdline")
    deadline = time.monotonic() + 10
    while not cmdline.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGSTOP)  # a stopped one (a stalled daemon) is killed too
    assert leaked(born) == {proc.pid}
    assert reap(born) == [f"{proc.pid}: sleep 60"]
    assert leaked(born) == set()


def test_a_child_that_exited_is_not_a_leak_even_before_it_is_collected() -> None:
    before = children()
    proc = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while proc.pid in children() and time.monotonic() < deadline:
        time.sleep(0.01)  # exited: a zombie until waited for, which is not running
    assert proc.pid not in children() - before
    proc.wait()
