"""Functions the sandbox tests run in the worker process.

Kept apart from the test module: the spawned worker imports whatever module
a function lives in, and a test module pulls in conftest and its fixtures.
"""

from __future__ import annotations

import time
from typing import Any


def sleep_then(seconds: float, value: int) -> int:
    time.sleep(seconds)
    return value


def raise_oserror() -> None:
    raise OSError("from the worker")


def segfault() -> None:
    """Read address 0: the worker dies of SIGSEGV, as native code given hostile input can."""
    import ctypes

    ctypes.string_at(0)


def validate(schema: Any, instance: Any) -> int:
    """Validate in the worker (a looping $ref must end in RecursionError, not a crash)."""
    from jsonschema import Draft202012Validator

    from keeper.verify.schemaeval import _OFFLINE

    return len(list(Draft202012Validator(schema, registry=_OFFLINE).iter_errors(instance)))
