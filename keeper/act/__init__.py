"""The keeper's transaction side: signer, simulation gate and transaction manager."""

from keeper.act.manager import Keeper, KeeperSettings, TickSummary
from keeper.act.signer import Signer, load_signer

__all__ = ["Keeper", "KeeperSettings", "Signer", "TickSummary", "load_signer"]
