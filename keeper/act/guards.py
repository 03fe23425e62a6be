"""What the keeper checks before and after simulating, beyond the planner's deadlines.

- Each job is planned by its contract's detected dialect (``JOB_RULES``), not only by the
  shape of its own events: an ERC8183 deployment whose JobCreated happens to match an
  older shape still gets ERC8183's grace rule.
- A paused contract (its last Paused/Unpaused event, from the index; an ERC8183 escrow or
  a task market) gets no plans and no simulations; one log line when it pauses and when
  it resumes, and the ``keeper_contract_paused`` gauge, instead of a revert per job or
  task per block.
- A contract upgraded since its dialect was detected (``Upgraded``, ``DiamondCut``, from
  the index) is detected again before the next plan (``keeper.act.dialect_watch``).
- A claimRefund whose simulation reverts with an error no protocol table knows, on a job
  with a hook attached, was blocked by the hook (ERC8183's claimRefund is hookable): it is
  ended as ``hook_blocked`` and the planner keeps it off the chain until the hook is
  detached, instead of simulating it again every few blocks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from keeper.act.detect import DialectBook
from keeper.act.simulate import SimResult
from keeper.config import ContractConfig
from keeper.domain.dialects_erc8183 import JOB_RULES
from keeper.domain.model import JobState
from keeper.domain.planner import ActionKind
from keeper.domain.protocols import classify_error
from keeper.obs.logging import get_logger
from keeper.obs.metrics import Metrics
from keeper.store.db import Db
from keeper.store.queries import pause_state

__all__ = ["PauseWatch", "apply_job_rules", "hook_blocked_detail"]

log = get_logger(__name__)


def apply_job_rules(jobs: Iterable[JobState], book: DialectBook) -> list[JobState]:
    """The jobs with ``dialect`` set from their contract's detected dialect, where known."""
    out = list(jobs)
    for job in out:
        dialect = book.dialect(job.contract)
        if dialect is not None and dialect.name in JOB_RULES:
            job.dialect = JOB_RULES[dialect.name]
    return out


class PauseWatch:
    """Which configured contracts are paused now, said once per change: an ERC8183 escrow
    (OpenZeppelin's Pausable) or a task market diamond (its owner's pause(); refundExpired,
    finalizeVerdict and evaluatorTimeout all revert EnforcedPause meanwhile)."""

    def __init__(
        self,
        db: Db,
        chain_id: int,
        contracts: Sequence[ContractConfig],
        metrics: Metrics | None,
    ) -> None:
        self.db = db
        self.chain_id = chain_id
        self.contracts = list(contracts)
        self.metrics = metrics
        self._paused: dict[str, int] = {}

    def paused(self) -> dict[str, int]:
        """contract -> block of the Paused event, for every contract paused at the index."""
        now: dict[str, int] = {}
        for c in self.contracts:
            state = pause_state(self.db, c.address, chain_id=self.chain_id)
            if state is not None and state[0]:
                now[c.address] = state[1]
            if self.metrics is not None:
                label = self.metrics.contract_label(c.address)
                self.metrics.contract_paused.labels(label).set(1 if c.address in now else 0)
        for contract, block in now.items():
            if contract not in self._paused:
                log.warning(
                    "keeper_contract_paused",
                    contract=contract,
                    since_block=block,
                    effect="nothing is planned or simulated there until it is unpaused",
                )
        for contract in self._paused.keys() - now.keys():
            log.info("keeper_contract_unpaused", contract=contract)
        self._paused = now
        return now


def hook_blocked_detail(result: SimResult, job: JobState | None) -> str | None:
    """The ``hook_blocked`` detail when a failed claimRefund was the job's hook's doing."""
    if (
        result.ok
        or job is None
        or not job.hook
        or result.action.action is not ActionKind.CLAIM_REFUND
        or result.verdict != "reverted_in_simulation"
        or classify_error(result.revert, result.action.protocol) is not None
    ):
        return None
    return f"hook_blocked: hook {job.hook} reverted claimRefund ({result.reason})"
