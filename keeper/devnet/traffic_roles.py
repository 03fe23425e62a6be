"""Who plays in the devnet traffic and how fast its chain time runs: dev keys per role,
the wall/chain timing, and the checksum address of a dev key.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from eth_account import Account

from keeper.devnet.anvil import DEV_KEYS

__all__ = ["KEEPER_KEY", "USDC", "ZERO_ADDRESS", "Roles", "Timing", "address_of"]

# left for the daemon's keeper, so its nonces never race the traffic's
KEEPER_KEY = DEV_KEYS[4]
ZERO_ADDRESS = "0x" + "00" * 20
USDC = 10**6


# the diamond's minimum appeal window (revision 21)
MIN_APPEAL_WINDOW = 300


@dataclass(frozen=True)
class Roles:
    """Dev keys per role; DEV_KEYS[0] deploys, [4] is the daemon's, [9] the treasury."""

    client: str = DEV_KEYS[1]
    provider: str = DEV_KEYS[2]
    evaluator: str = DEV_KEYS[3]
    worker: str = DEV_KEYS[5]
    resolver: str = DEV_KEYS[6]
    fallback_keeper: str = DEV_KEYS[7]


@dataclass(frozen=True)
class Timing:
    """Wall and chain time. Chain seconds per wall second = warp / interval."""

    interval: float = 0.5
    warp: int = 30
    job_ttl: int = 300
    task_ttl: int = 300
    evaluation_window: int = 120
    appeal_window: int = MIN_APPEAL_WINDOW
    # on the requester-only market, how long after the evaluation deadline the requester
    # gets round to timing the evaluator out itself
    requester_patience: int = 240

    def __post_init__(self) -> None:
        # a shorter window makes every evaluated task revert (AppealWindowTooShort), and
        # the traffic would carry on without those scenarios, only logging each failure
        if self.appeal_window < MIN_APPEAL_WINDOW:
            raise ValueError(
                f"appeal_window {self.appeal_window} s is below the Task Market's minimum "
                f"of {MIN_APPEAL_WINDOW} s"
            )


@cache
def address_of(key: str) -> str:
    """Checksum address of a dev key (web3 wants checksums in calls)."""
    return str(Account.from_key(key).address)
