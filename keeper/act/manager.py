"""The transaction manager: turns planned actions into transactions, exactly once.

Order of writes and sends, which is what makes crashes harmless:

1. an intent row per (chain, contract, subject, action) before anything is signed;
2. the simulation gate (``eth_call`` at the decision block, then at ``latest``);
3. a nonce from the signer's book, the signed bytes written as an attempt;
4. only then the broadcast.

Every tick first settles what is already in flight (receipts, forgotten
transactions, stuck ones, reorged-out confirmations), so a restart or a lost
send response never leads to a second transaction for the same intent: the
stored hash is found on chain, or the same raw bytes are sent again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from keeper.act.chain import ChainRpc
from keeper.act.detect import DialectBook
from keeper.act.dialect_watch import DialectWatch
from keeper.act.guards import PauseWatch, apply_job_rules, hook_blocked_detail
from keeper.act.outcomes import OutcomeRecorder
from keeper.act.settings import REORG_WATCH_BLOCKS, KeeperSettings, TickSummary
from keeper.act.settle import Settler
from keeper.act.signer import Signer, load_signer
from keeper.act.silent import (
    RESOLVE_PROBE,
    disputes_to_probe,
    silent_finalizes,
    silent_resolutions,
)
from keeper.act.simulate import SimResult, Unanswered, batchable, refusals
from keeper.act.transactions import Transactions, outcome_of
from keeper.config import ContractConfig, KeeperConfig
from keeper.domain.dialects_taskmarket import TASKMARKET_CURRENT
from keeper.domain.fees import CapHit, suggest
from keeper.domain.model import BlockHeader, ChainRead, JobState, Protocol, TaskState
from keeper.domain.planner import Action, ActionKind, plan
from keeper.errors import RetryableError
from keeper.obs.logging import get_logger
from keeper.obs.metrics import Metrics
from keeper.store.claims import Claims
from keeper.store.db import Db
from keeper.store.index_store import IndexStore
from keeper.store.intents import Intent, IntentStore, Outcome
from keeper.store.leases import LeaseLostError
from keeper.store.states import disputed_tasks

__all__ = ["Keeper", "KeeperSettings", "TickSummary"]

# A lazy proxy (not get_logger().bind()), so logging configured after import applies.
log = get_logger(__name__)


class Keeper:
    """Plans and sends the keeper's transactions for one chain and one signer."""

    def __init__(
        self,
        *,
        settings: KeeperSettings,
        chain_id: int,
        rpc: ChainRpc,
        db: Db,
        signer: Signer | None,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
        contracts: Sequence[ContractConfig] = (),
        index: IndexStore | None = None,
    ) -> None:
        if signer is None and not settings.dry_run:
            raise ValueError("a signer is required unless dry_run is set")
        self.settings = settings
        self.chain_id = chain_id
        self.rpc = rpc
        # several keepers on one database: each acts only on intents it claims
        claims = (
            Claims(db, chain_id, signer.address, settings.claim_seconds)
            if signer is not None and not settings.dry_run
            else None
        )
        self.store = IntentStore(db, chain_id, clock, claims)
        self.signer = signer
        self.metrics = metrics
        self.outcomes = OutcomeRecorder(self.store, metrics)
        self.db = db
        # where what a simulation learns that no event says is recorded (keeper.act.silent)
        self.index = index
        self._probed: dict[tuple[str, str, str], int] = {}
        self._disputes_probed: dict[tuple[str, str], int] = {}
        self.contracts = tuple(contracts)
        # detected at start-up (the daemon's detect_dialects, else recover()), and again
        # before each plan for a contract upgraded since
        self.dialect_watch = DialectWatch(rpc, db, chain_id, self.contracts, metrics)
        self.pauses = PauseWatch(db, chain_id, self.contracts, metrics)
        self._jobs: dict[tuple[str, str], JobState] = {}
        self.tx = Transactions(
            settings=settings,
            chain_id=chain_id,
            rpc=rpc,
            store=self.store,
            signer=signer,
            outcomes=self.outcomes,
            metrics=metrics,
            encode=self._encode,
        )
        self.settler = Settler(
            self.tx,
            settings=settings,
            rpc=rpc,
            store=self.store,
            outcomes=self.outcomes,
            metrics=metrics,
        )
        self.address = self.tx.address
        self._lock = asyncio.Lock()  # one nonce sequence per signer: one sender at a time
        self._recovered = False
        self._reported: set[tuple[str, str, str]] = set()
        self.balance_ok = True
        self.last: TickSummary | None = None
        self._highest_head = -1

    @classmethod
    def from_config(
        cls,
        cfg: KeeperConfig,
        *,
        chain_id: int,
        rpc: ChainRpc,
        db: Db,
        multicall: str | None = None,
        metrics: Metrics | None = None,
        environ: Mapping[str, str] | None = None,
        reorg_watch_blocks: int = REORG_WATCH_BLOCKS,
        contracts: Sequence[ContractConfig] = (),
        index: IndexStore | None = None,
    ) -> Keeper:
        """The daemon's constructor: settings and signer from ``[keeper]`` (no signer in dry_run
        unless one is configured, so a dry run needs no key)."""
        settings = KeeperSettings.from_config(
            cfg, multicall=multicall, reorg_watch_blocks=reorg_watch_blocks
        )
        has_key = bool(cfg.private_key_env or cfg.keystore)
        signer = (
            load_signer(
                private_key_env=cfg.private_key_env,
                keystore=cfg.keystore,
                keystore_password_file=cfg.keystore_password_file,
                environ=environ,
            )
            if has_key or not cfg.dry_run
            else None
        )
        return cls(
            settings=settings,
            chain_id=chain_id,
            rpc=rpc,
            db=db,
            signer=signer,
            metrics=metrics,
            contracts=contracts,
            index=index,
        )

    # ------------------------------------------------------------------ entry points

    @property
    def ready(self) -> bool:
        """For /readyz: recovered, and the signer can pay for what it must send."""
        return self._recovered and self.balance_ok

    @property
    def dialects(self) -> DialectBook | None:
        return self.dialect_watch.book

    async def detect_dialects(self) -> DialectBook:
        """Detect and publish every configured contract's dialect (the daemon's start-up)."""
        return await self.dialect_watch.detect()

    async def recover(self) -> None:
        """At startup: check every hash ever sent and still open before anything new is sent."""
        async with self._lock:
            await self._recover()

    async def tick(
        self, head: BlockHeader, jobs: Iterable[JobState], tasks: Iterable[TaskState]
    ) -> TickSummary:
        """Settle what is in flight, then plan and send for this head.

        A head below one already ticked on is skipped, not decided on: it comes
        from a lagging endpoint (the best one failing for a moment), and on it
        our own transactions of the last blocks have not happened yet, so each
        would look due again and the mined counts would look short. The
        newest head decided on survives a restart (it is the intents'
        ``decided_block``), so a daemon that starts against a lagging endpoint
        waits for the chain to pass it too.
        """
        async with self._lock:
            if self._highest_head < 0:  # after a restart: the heads decided on before it
                self._highest_head = self.store.highest_decided_block()
            if head.number < self._highest_head:
                log.info("keeper_head_behind", head=head.number, highest=self._highest_head)
                return TickSummary(head=head.number)
            self._highest_head = head.number
            if not self._recovered:
                await self._recover()
            held = await self.dialect_watch.refresh()
            summary = TickSummary(head=head.number)
            if self.signer is not None and not self.settings.dry_run:
                await self.settler.reconcile(head, summary)
                await self._adopt(head, summary)
            if self.signer is not None:
                summary.balance_ok = await self._check_balance()
            book = self.dialects or DialectBook({})
            live = apply_job_rules(jobs, book)
            self._jobs = {(j.contract, j.job_id): j for j in live}
            summary.paused = self.pauses.paused()
            result = plan(
                live,
                tasks,
                head,
                self.settings.planner,
                self.store.denied(),
                paused=summary.paused.keys(),
                hook_blocked=self.store.hook_blocked(),
            )
            # a contract whose dialect is undetermined is left alone (said once, at start-up),
            # and one upgraded whose detection failed this tick until it succeeds
            result.actions = [
                a for a in result.actions if book.callable(a) and a.contract not in held
            ]
            if self.signer is not None and not self.settings.dry_run:
                self._retire_undue(result.actions)
            summary.reports = result.reports
            for report in result.reports:
                key = (report.contract, report.subject, report.kind.value)
                if key in self._reported:
                    continue  # a hazard stays true every block: say it once per process
                self._reported.add(key)
                log.warning(
                    "keeper_report",
                    kind=report.kind.value,
                    contract=report.contract,
                    subject=report.subject,
                    detail=report.detail,
                )
            todo = self._select(result.actions, head)
            await self._probe_confirmed(result.actions, head)
            summary.planned = len(todo)
            if self.settings.dry_run:
                await self._dry_run(todo, head, summary)
            elif todo or self.tx.has_gaps:
                await self._act(todo, head, summary)
            # after the sends: a probe's failure (the tick's) must not hold a due call back
            await self._probe_disputes(head, book, {*summary.paused, *held}, summary)
            self.last = summary
            return summary

    # ------------------------------------------------------------------ recovery

    async def _recover(self) -> None:
        if self.dialects is None:
            await self.detect_dialects()
        if self.signer is not None and not self.settings.dry_run:
            self.tx.restore_nonces()
            head = await self.rpc.get_block("latest")
            if head is None:
                raise RetryableError("the node has no latest block yet")
            await self.settler.reconcile(head, TickSummary(head=head.number))
            log.info("keeper_recovered", signer=self.address, next_nonce=self.tx.next_nonce)
        self._recovered = True

    async def _adopt(self, head: BlockHeader, summary: TickSummary) -> None:
        """Renew our claims, then settle what keepers that stopped renewing left in flight."""
        claims = self.store.claims
        if claims is None:
            return
        claims.renew()
        for signer in claims.foreign_signers():
            taken = claims.adopt(signer)
            if taken:
                log.warning("keeper_intents_adopted", signer=signer, intents=len(taken))
                if self.metrics:
                    self.metrics.intents_adopted.inc(len(taken))
            await self.settler.settle_adopted(signer, head, summary)

    def _encode(self, action: Action) -> bytes:
        if self.dialects is None:
            raise RuntimeError("dialects are detected at recover(), before any call")
        return self.dialects.encode(action)

    # ------------------------------------------------------------------ selection

    def _retire_undue(self, actions: Sequence[Action]) -> None:
        """End open intents the planner no longer proposes.

        An intent is written before its simulation; a process that dies in
        between, or a fee cap that outlasts the deadline's relevance, leaves it
        open. Once the state has moved on (someone else acted, the task was
        appealed) nothing would ever decide it again, and it would sit in the
        keeper's backlog for good.
        """
        planned = {_key(a) for a in actions}
        stale = [i for i in self.store.open_intents() if i.key not in planned]
        if stale:
            self.outcomes.finish_many(stale, "preempted", "no longer due when planned again")

    def _select(self, actions: Sequence[Action], head: BlockHeader) -> list[Action]:
        """Planned actions that need a decision now (new, waiting, or worth a second look)."""
        existing = self.store.intents_for((a.contract, a.subject, a.action.value) for a in actions)
        out: list[Action] = []
        for action in actions:
            intent = existing.get((action.contract, action.subject, action.action.value))
            if (
                intent is None
                or intent.status == "open"
                or (
                    intent.status == "done"
                    and intent.outcome not in ("confirmed", "not_permitted")
                    and head.number >= intent.decided_block + self.settings.redecide_after_blocks
                )
            ):
                out.append(action)
        return out

    # ------------------------------------------------------------------ sending

    async def _dry_run(self, todo: list[Action], head: BlockHeader, summary: TickSummary) -> None:
        if not todo:
            return
        summary.simulated = await self.tx.simulate(todo, head.number)
        self._observe(summary.simulated, head)
        for res in summary.simulated:
            log.info(
                "keeper_dry_run",
                action=res.action.action.value,
                contract=res.action.contract,
                subject=res.action.subject,
                verdict=res.verdict,
                reason=res.reason,
            )

    async def _act(self, todo: list[Action], head: BlockHeader, summary: TickSummary) -> None:
        intents = self.store.open_decisions(todo, head.number, head.hash) if todo else []
        by_key = {(i.contract, i.subject, i.action): i for i in intents}
        todo = [a for a in todo if _key(a) in by_key]  # the rest another keeper claims
        if not summary.balance_ok:
            log.error("keeper_balance_below_minimum", signer=self.address)
            return
        fees = suggest(await self.tx.fee_history(), self.settings.fee_policy)
        if isinstance(fees, CapHit):
            self.tx.hold_at_cap(intents, fees, summary, status="open", what="sending")
            return
        survivors = await self._gate(todo, head, by_key, summary)
        groups = self._group(survivors)
        estimates = self.tx.start_estimates(groups)
        try:
            for group, estimate in zip(groups, estimates, strict=True):
                intents_of = [by_key[_key(a)] for a in group]
                await self.tx.send_actions(
                    group, intents_of, head, fees, summary, estimate=estimate
                )
        finally:
            await self.tx.drop(estimates)
        for nonce in self.tx.take_gaps():  # no new work filled them: spend them on cancels
            await self.tx.send_cancel(nonce, head, fees, summary)

    async def _gate(
        self,
        todo: list[Action],
        head: BlockHeader,
        by_key: Mapping[tuple[str, str, str], Intent],
        summary: TickSummary,
    ) -> list[Action]:
        """Simulate at the decision block, then at latest; finish every intent that fails."""
        survivors = todo
        for block in (head.number, "latest"):
            if not survivors:
                break
            results = await self.tx.simulate(survivors, block)
            summary.simulated += results
            if block == head.number:
                self._observe(results, head)
            survivors = [r.action for r in results if r.ok]
            failed: dict[tuple[Outcome, str], list[Intent]] = {}
            for res in results:
                hooked = hook_blocked_detail(res, self._jobs.get(_job_key(res.action)))
                if hooked is not None:
                    self.outcomes.finish_hook_blocked([by_key[_key(res.action)]], hooked)
                elif not res.ok:
                    group = failed.setdefault((outcome_of(res.verdict), res.reason), [])
                    group.append(by_key[_key(res.action)])
            for (outcome, reason), intents in failed.items():
                self.outcomes.finish_many(intents, outcome, reason)
        return survivors

    async def _probe_confirmed(self, actions: Sequence[Action], head: BlockHeader) -> None:
        """Simulate again our confirmed finalizes of tasks the index still has Appealing.

        ``_select`` never decides a confirmed intent again; for a finalize that paid no
        award this is the only way the index learns the task ended (keeper.act.silent).
        Once the index has passed the receipt's block; then every few blocks, until the
        task leaves the plan.
        """
        finals = [a for a in actions if a.action is ActionKind.FINALIZE_VERDICT]
        # remembered only while planned: a task that left the plan is never probed again
        planned = {_key(a) for a in finals}
        self._probed = {k: v for k, v in self._probed.items() if k in planned}
        if self.index is None or not finals:
            return
        intents = self.store.intents_for(_key(a) for a in finals)
        every = self.settings.redecide_after_blocks
        due: list[Action] = []
        for action in finals:
            intent = intents.get(_key(action))
            if (
                intent is not None
                and intent.outcome == "confirmed"
                and intent.receipt_block is not None
                and intent.receipt_block <= head.number
                and head.number >= self._probed.get(_key(action), -every) + every
            ):
                self._probed[_key(action)] = head.number
                due.append(action)
        if due:
            self._observe(await self.tx.simulate(due, head.number), head)

    async def _probe_disputes(
        self, head: BlockHeader, book: DialectBook, skip: Iterable[str], summary: TickSummary
    ) -> None:
        """Probe the index's Disputed tasks for a resolution that emitted nothing.

        No keeper call is ever due on a Disputed task, so nothing else would look at
        one; a resolution paying no award leaves no event (keeper.act.silent). Every
        few blocks per task, at the head the index holds, never on a contract in
        ``skip`` nor on one of another dialect than the diamond's: only it has the
        probe's call and its check order.
        """
        if self.index is None:
            return
        other = {
            c.address
            for c in self.contracts
            if c.protocol is Protocol.TASKMARKET
            and book.dialect(c.address) is not TASKMARKET_CURRENT
        }
        probes = disputes_to_probe(
            disputed_tasks(self.index.conn, self.index.chain_id),
            head.number,
            self._disputes_probed,
            self.settings.redecide_after_blocks,
            frozenset({*skip, *other}),
        )
        self._disputes_probed = probes.probed
        summary.disputes_probed = [(t.contract, t.task_id) for t in probes.due]
        if not probes.due:
            return

        answers = await refusals(
            self.rpc,
            [(t.contract, RESOLVE_PROBE.encode(t.task_id)) for t in probes.due],
            head.number,
            multicall=self.tx.multicall,
            batch_size=self.settings.batch_size,
        )
        said = [(t, a) for t, a in zip(probes.due, answers, strict=True)
                if not isinstance(a, Unanswered)]  # fmt: skip
        reads = silent_resolutions(said, head)
        found = {(r.contract, r.subject) for r in reads}
        for task, answer in zip(probes.due, answers, strict=True):
            if isinstance(answer, Unanswered):  # nothing learnt: asked again some blocks on
                outcome = "failed"
                log.warning(
                    "keeper_dispute_probe_failed",
                    contract=task.contract,
                    subject=task.task_id,
                    block=head.number,
                    error=type(answer.error).__name__,
                )
            elif (task.contract, task.task_id) in found:
                outcome = "resolved_silently"
            else:
                outcome = "still_disputed"
            if self.metrics:
                label = self.metrics.contract_label(task.contract)
                self.metrics.dispute_probes.labels(label, outcome).inc()
        self._record(reads, head, "keeper_resolved_silently", "resolve")

    def _observe(self, results: Sequence[SimResult], head: BlockHeader) -> None:
        """Record in the index the silent finalizes these simulations at ``head`` show."""
        reads = silent_finalizes(results, head)
        self._record(reads, head, "keeper_finalized_silently", "finalize")

    def _record(self, reads: Sequence[ChainRead], head: BlockHeader, event: str, how: str) -> None:
        """Write observations to the index; one info line ``event`` per task they moved,
        counted ``how`` it ended."""
        if self.index is None or not reads:
            return
        try:
            touched = self.index.record_observations(reads)
        except LeaseLostError:  # a standby's: the leading daemon's keeper records it
            return
        for contract, subject in sorted(touched):
            log.info(event, contract=contract, subject=subject, block=head.number)
            if self.metrics:
                label = self.metrics.contract_label(contract)
                self.metrics.tasks_ended_silently.labels(label, how).inc()

    def _group(self, actions: list[Action]) -> list[list[Action]]:
        """Batches of batchable actions (when Multicall3 is configured), singles otherwise."""
        size = self.settings.batch_size if self.tx.multicall else 1
        batched = [a for a in actions if batchable(a)]
        singles = [[a] for a in actions if not batchable(a)]
        return [batched[i : i + size] for i in range(0, len(batched), size)] + singles

    async def _check_balance(self) -> bool:
        balance = await self.rpc.get_balance(self.address, "latest")
        if self.metrics:
            self.metrics.signer_balance_wei.set(balance)
        self.balance_ok = balance >= self.settings.min_balance_wei
        return self.balance_ok


def _key(action: Action) -> tuple[str, str, str]:
    return (action.contract, action.subject, action.action.value)


def _job_key(action: Action) -> tuple[str, str]:
    return action.contract, action.subject
