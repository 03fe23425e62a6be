"""Functions the sandbox tests run in the worker process.

Kept apart from the test module: the spawned worker imports whatever module
a function lives in, and a test module pulls in conftest and its fixtures.
"""

from __future__ import annotations

import time


def sleep_then(seconds: float, value: int) -> int:
    time.sleep(seconds)
    return value


def raise_oserror() -> None:
    raise OSError("from the worker")
