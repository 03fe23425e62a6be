"""Each configured contract's dialect, kept current while the daemon runs.

Detection asks the contract at the head, so it already reflects every upgrade
indexed before it ran. A later ``Upgraded`` (a UUPS proxy's new implementation) or
``DiamondCut`` (a diamond's facets) may change what the keeper must call: a proxy
moved to ERC8183.sol takes ``claimRefund(uint256,bytes)``, a diamond revision may
reshape ``refundExpired``. The keeper refreshes before each plan; a daemon with the
keeper disabled refreshes on its own, so ``keeper status``, ``/v1/status``, the
``keeper_contract_dialect`` metric and its alert follow an upgrade there too.
"""

from __future__ import annotations

from collections.abc import Sequence

from keeper.act.chain import ChainRpc
from keeper.act.detect import DialectBook, detect_all, publish_dialects, redetect
from keeper.config import ContractConfig
from keeper.obs.logging import get_logger
from keeper.obs.metrics import Metrics
from keeper.rpc.errors import RpcError
from keeper.store.db import Db
from keeper.store.queries import UpgradeMark, latest_upgrade

__all__ = ["DialectWatch", "UpgradeWatch"]

log = get_logger(__name__)


class UpgradeWatch:
    """Configured contracts whose code changed since their dialect was detected: each
    whose latest upgrade event in the index differs from the one seen at detection (a
    new one, or one a rollback took away). It stays pending until detected again."""

    def __init__(self, db: Db, chain_id: int, contracts: Sequence[ContractConfig]) -> None:
        self.db = db
        self.chain_id = chain_id
        self.contracts = list(contracts)
        self._seen: dict[str, UpgradeMark | None] = {}

    def _latest(self, contract: ContractConfig) -> UpgradeMark | None:
        return latest_upgrade(self.db, contract.address, chain_id=self.chain_id)

    def mark(self) -> None:
        """Take the upgrades indexed so far as seen: called before detecting, so one
        indexed while the probes run is looked at again."""
        self._seen = {c.address: self._latest(c) for c in self.contracts}

    def pending(self) -> list[tuple[ContractConfig, UpgradeMark | None]]:
        """The contracts to detect again, each with the upgrade to mark seen once done."""
        out = []
        for c in self.contracts:
            latest = self._latest(c)
            if latest != self._seen.get(c.address):
                out.append((c, latest))
        return out

    def seen(self, contract: ContractConfig, mark: UpgradeMark | None) -> None:
        self._seen[contract.address] = mark


class DialectWatch:
    """The dialect book, detected at start-up and again after each upgrade the index
    records; every change is recorded for status and published as the metric."""

    def __init__(
        self,
        rpc: ChainRpc,
        db: Db,
        chain_id: int,
        contracts: Sequence[ContractConfig],
        metrics: Metrics | None = None,
    ) -> None:
        self.rpc = rpc
        self.db = db
        self.chain_id = chain_id
        self.contracts = tuple(contracts)
        self.metrics = metrics
        self.book: DialectBook | None = None  # None until detect()
        self.upgrades = UpgradeWatch(db, chain_id, self.contracts)
        self._failing: set[str] = set()  # said once per failing streak

    async def detect(self) -> DialectBook:
        """Detect and publish every configured contract's dialect (the daemon's start-up)."""
        self.upgrades.mark()
        self.book = await detect_all(self.rpc, self.contracts)
        publish_dialects(self.book, self.db, self.chain_id, self.metrics)
        return self.book

    async def refresh(self) -> set[str]:
        """Detect again each contract upgraded since its detection.

        Returns the contracts whose detection failed on an RPC error: their old
        dialect may be wrong now, so the keeper plans nothing on them; they are tried
        again on the next call, and every other contract is kept as usual. Said once
        until it succeeds."""
        held: set[str] = set()
        for contract, mark in self.upgrades.pending():
            before = self.book or DialectBook({})
            try:
                self.book = await redetect(
                    self.rpc, before, contract, mark[0] if mark is not None else None
                )
            except RpcError as exc:
                held.add(contract.address)
                if contract.address not in self._failing:
                    self._failing.add(contract.address)
                    log.warning(
                        "contract_redetect_failed",
                        contract=contract.name,
                        address=contract.address,
                        error=str(exc),
                        effect="nothing is planned there until it is detected again",
                    )
                continue
            self._failing.discard(contract.address)
            publish_dialects(self.book, self.db, self.chain_id, self.metrics, before)
            self.upgrades.seen(contract, mark)
        return held
