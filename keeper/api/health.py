"""Readiness: which of the daemon's promises currently hold, decided by a pure function.

The composition root gathers a :class:`ReadinessInputs` snapshot from the
live components; :func:`readiness_checks` turns it into named checks, and
/readyz answers 503 naming every failed one. Kept pure so the thresholds are
tested with plain tables, without a running daemon.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Check", "ReadinessInputs", "readiness_checks"]


@dataclass(frozen=True, slots=True)
class Check:
    ok: bool
    detail: str


@dataclass(frozen=True, slots=True)
class ReadinessInputs:
    """A snapshot of the facts readiness depends on; None means not known yet."""

    rpc_reachable: bool
    halted_reason: str | None
    head_block: int | None
    indexed_block: int | None
    # wall seconds since the cursor last advanced
    cursor_idle_seconds: float | None
    # the cursor may sit still this long when it is not at the head (a few poll intervals)
    max_idle_seconds: float
    # blocks below the head still counted as "at head" (the unfinalized window in flight)
    head_tolerance_blocks: int
    keeper_enabled: bool
    signer_balance_wei: int | None
    min_balance_wei: int
    # False on an API-only daemon: another daemon indexes, this one's cursor never moves
    indexing_here: bool = True


def readiness_checks(inputs: ReadinessInputs) -> dict[str, Check]:
    """Named checks; the daemon is ready only when all are ok."""
    checks: dict[str, Check] = {
        "rpc": Check(True, "an endpoint answers")
        if inputs.rpc_reachable
        else Check(False, "no RPC endpoint answers"),
        "indexing": Check(True, "not halted")
        if inputs.halted_reason is None
        else Check(False, f"halted: {inputs.halted_reason}"),
        "cursor": _cursor(inputs)
        if inputs.indexing_here
        else Check(True, "not indexed here (API-only daemon)"),
    }
    if inputs.keeper_enabled:
        balance = inputs.signer_balance_wei
        if balance is None:
            checks["signer"] = Check(False, "signer balance not known yet")
        elif balance < inputs.min_balance_wei:
            checks["signer"] = Check(
                False, f"signer balance {balance} wei is below {inputs.min_balance_wei} wei"
            )
        else:
            checks["signer"] = Check(True, f"signer balance {balance} wei")
    return checks


def _cursor(inputs: ReadinessInputs) -> Check:
    if inputs.indexed_block is None or inputs.head_block is None:
        return Check(False, "no block indexed yet")
    behind = inputs.head_block - inputs.indexed_block
    if behind <= inputs.head_tolerance_blocks:
        return Check(True, f"at head ({behind} blocks behind)")
    idle = inputs.cursor_idle_seconds
    if idle is not None and idle <= inputs.max_idle_seconds:
        return Check(True, f"catching up ({behind} blocks behind, moving)")
    return Check(False, f"{behind} blocks behind and not moving for {idle or 0:.0f}s")
