"""Tuning of the transaction manager and what one tick reports."""

from __future__ import annotations

from dataclasses import dataclass, field

from keeper.act.simulate import SimResult
from keeper.config import KeeperConfig
from keeper.domain.fees import FeePolicy
from keeper.domain.planner import PlannerConfig, Report
from keeper.domain.settlement import Rules
from keeper.store.claims import DEFAULT_CLAIM_SECONDS

__all__ = [
    "CANCEL_GAS",
    "FEE_HISTORY_BLOCKS",
    "TIP_PERCENTILE",
    "KeeperSettings",
    "TickSummary",
]

CANCEL_GAS = 21_000  # a plain value transfer to ourselves: the protocol's fixed cost
# Fee history depth and percentile for the tip: a few blocks smooths one
# outlier; the median tip is what gets included without overpaying.
FEE_HISTORY_BLOCKS = 5
TIP_PERCENTILE = 50.0
# the indexer's default block window (``[chain] window``)
REORG_WATCH_BLOCKS = 128


@dataclass(frozen=True, slots=True)
class KeeperSettings:
    """Everything the manager needs from ``[keeper]``, in wei and blocks.

    ``bump_after_blocks``: a transaction still pending this many heads after it
    was sent gets a replacement (12.5%+ fees); 3 blocks rides out one full
    block without paying up at the first hiccup.
    ``redecide_after_blocks``: an intent that ended preempted/reverted is looked
    at again only if the planner still calls it due this many blocks later,
    which gives the indexer time to see the state change that preempted it and
    stops a stale projection from causing an eth_call every block.
    ``reorg_watch_blocks``: confirmed transactions this close to the head are
    re-checked each tick; matches the indexer's default block window.
    """

    max_fee_cap: int
    dry_run: bool = False
    min_balance_wei: int = 10**16
    confirmations: int = 2
    batch_size: int = 50
    gas_margin: float = 1.2
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    multicall: str | None = None
    bump_after_blocks: int = 3
    redecide_after_blocks: int = 5
    reorg_watch_blocks: int = REORG_WATCH_BLOCKS
    claim_seconds: float = DEFAULT_CLAIM_SECONDS

    @property
    def fee_policy(self) -> FeePolicy:
        return FeePolicy(max_fee_cap=self.max_fee_cap, tip_percentile=TIP_PERCENTILE)

    @property
    def settlement(self) -> Rules:
        return Rules(confirmations=self.confirmations, bump_after_blocks=self.bump_after_blocks)

    @classmethod
    def from_config(
        cls,
        cfg: KeeperConfig,
        *,
        multicall: str | None,
        reorg_watch_blocks: int = REORG_WATCH_BLOCKS,
    ) -> KeeperSettings:
        """Settings from the ``[keeper]`` table; ``multicall`` None sends every action alone.

        ``reorg_watch_blocks`` is the chain's block window (``[chain] window``).
        """
        return cls(
            max_fee_cap=cfg.max_fee_wei,
            dry_run=cfg.dry_run,
            min_balance_wei=cfg.min_balance_wei,
            confirmations=cfg.confirmations,
            batch_size=cfg.batch_size,
            gas_margin=cfg.gas_margin,
            planner=PlannerConfig(
                shard=cfg.shard,
                shards=cfg.shards,
                shard_fallback_seconds=cfg.shard_fallback_seconds,
            ),
            multicall=multicall.lower() if multicall else None,
            reorg_watch_blocks=reorg_watch_blocks,
            claim_seconds=cfg.claim_seconds,
        )


@dataclass(slots=True)
class TickSummary:
    """What one tick did; returned for tests, logs and the API."""

    head: int
    planned: int = 0
    sent: int = 0  # broadcasts the node took or may have (new, replacement, cancel)
    simulated: list[SimResult] = field(default_factory=list)
    reports: list[Report] = field(default_factory=list)
    paused: dict[str, int] = field(default_factory=dict)  # contract -> Paused event block
    # Disputed tasks probed for a silent resolution (keeper.act.silent): (contract, task id)
    disputes_probed: list[tuple[str, str]] = field(default_factory=list)
    fee_cap: bool = False
    balance_ok: bool = True
