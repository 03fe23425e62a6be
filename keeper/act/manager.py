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
import math
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog

from keeper.act.calls import SimVerdict, classify_revert, encode_action, encode_aggregate3
from keeper.act.chain import ChainRpc, failure_kind, revert_data
from keeper.act.receipts import landed, moved_subject
from keeper.act.signer import Signer, load_signer
from keeper.act.simulate import BATCHABLE, SimResult, simulate
from keeper.config import KeeperConfig
from keeper.domain.fees import CapHit, FeeDecision, FeePolicy, bump, suggest
from keeper.domain.model import BlockHeader, JobState, Protocol, TaskState
from keeper.domain.nonces import NonceBook, find_gaps
from keeper.domain.planner import Action, ActionKind, PlannerConfig, Report, plan
from keeper.errors import RetryableError
from keeper.obs.metrics import Metrics
from keeper.rpc.errors import ExecutionRevertedError, RpcError
from keeper.store.intents import ACTIVE_ATTEMPT, Attempt, Intent, IntentStore, Outcome

__all__ = ["Keeper", "KeeperSettings", "TickSummary"]

# A lazy proxy (not get_logger().bind()), so logging configured after import applies.
log = structlog.get_logger(component="keeper.act")

CANCEL_GAS = 21_000  # a plain value transfer to ourselves: the protocol's fixed cost
# Fee history depth and percentile for the tip: a few blocks smooths one
# outlier; the median tip is what gets included without overpaying.
FEE_HISTORY_BLOCKS = 5
TIP_PERCENTILE = 50.0


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
    reorg_watch_blocks: int = 128

    @property
    def fee_policy(self) -> FeePolicy:
        return FeePolicy(max_fee_cap=self.max_fee_cap, tip_percentile=TIP_PERCENTILE)

    @classmethod
    def from_config(cls, cfg: KeeperConfig, *, multicall: str | None) -> KeeperSettings:
        """Settings from the ``[keeper]`` table; ``multicall`` None sends every action alone."""
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
        )


@dataclass(slots=True)
class TickSummary:
    """What one tick did; returned for tests, logs and the API."""

    head: int
    planned: int = 0
    sent: int = 0  # transactions broadcast (new, replacement, cancel)
    simulated: list[SimResult] = field(default_factory=list)
    reports: list[Report] = field(default_factory=list)
    fee_cap: bool = False
    balance_ok: bool = True


def _hex(data: bytes) -> str:
    return "0x" + data.hex()


def _action_of(intent: Intent) -> Action:
    return Action(
        intent.contract,
        intent.subject,
        ActionKind(intent.action),
        intent.due_at,
        Protocol(intent.protocol),
    )


class Keeper:
    """Plans and sends the keeper's transactions for one chain and one signer."""

    def __init__(
        self,
        *,
        settings: KeeperSettings,
        chain_id: int,
        rpc: ChainRpc,
        db: sqlite3.Connection,
        signer: Signer | None,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if signer is None and not settings.dry_run:
            raise ValueError("a signer is required unless dry_run is set")
        self.settings = settings
        self.chain_id = chain_id
        self.rpc = rpc
        self.store = IntentStore(db, chain_id, clock)
        self.signer = signer
        self.metrics = metrics
        self.address = signer.address if signer else "0x" + "00" * 20
        self._lock = asyncio.Lock()  # one nonce sequence per signer: one sender at a time
        self._book = NonceBook()
        self._gaps: list[int] = []
        self._recovered = False
        self.balance_ok = True
        self.last: TickSummary | None = None

    @classmethod
    def from_config(
        cls,
        cfg: KeeperConfig,
        *,
        chain_id: int,
        rpc: ChainRpc,
        db: sqlite3.Connection,
        multicall: str | None = None,
        metrics: Metrics | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Keeper:
        """The daemon's constructor: settings and signer from ``[keeper]`` (no signer in dry_run
        unless one is configured, so a dry run needs no key)."""
        settings = KeeperSettings.from_config(cfg, multicall=multicall)
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
            settings=settings, chain_id=chain_id, rpc=rpc, db=db, signer=signer, metrics=metrics
        )

    # ------------------------------------------------------------------ entry points

    @property
    def ready(self) -> bool:
        """For /readyz: recovered, and the signer can pay for what it must send."""
        return self._recovered and self.balance_ok

    async def recover(self) -> None:
        """At startup: check every hash ever sent and still open before anything new is sent."""
        async with self._lock:
            await self._recover()

    async def tick(
        self, head: BlockHeader, jobs: Iterable[JobState], tasks: Iterable[TaskState]
    ) -> TickSummary:
        """Settle what is in flight, then plan and send for this head."""
        async with self._lock:
            if not self._recovered:
                await self._recover()
            summary = TickSummary(head=head.number)
            if self.signer is not None and not self.settings.dry_run:
                await self._reconcile(head, summary)
            if self.signer is not None:
                summary.balance_ok = await self._check_balance()
            result = plan(jobs, tasks, head, self.settings.planner, self.store.denied())
            summary.reports = result.reports
            for report in result.reports:
                log.warning(
                    "keeper_report",
                    kind=report.kind.value,
                    contract=report.contract,
                    subject=report.subject,
                    detail=report.detail,
                )
            todo = self._select(result.actions, head)
            summary.planned = len(todo)
            if self.settings.dry_run:
                await self._dry_run(todo, head, summary)
            elif todo or self._gaps:
                await self._act(todo, head, summary)
            self.last = summary
            return summary

    # ------------------------------------------------------------------ recovery

    async def _recover(self) -> None:
        if self.signer is not None and not self.settings.dry_run:
            self._book = NonceBook(self.store.next_nonce_floor(self.address))
            head = await self.rpc.get_block("latest")
            if head is None:
                raise RetryableError("the node has no latest block yet")
            await self._reconcile(head, TickSummary(head=head.number))
            log.info("keeper_recovered", signer=self.address, next_nonce=self._book.next)
        self._recovered = True

    # ------------------------------------------------------------------ selection

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
        summary.simulated = await self._simulate(todo, head.number)
        for res in summary.simulated:
            log.info(
                "keeper_dry_run",
                action=res.action.action.value,
                contract=res.action.contract,
                subject=res.action.subject,
                verdict=res.verdict,
                reason=res.reason,
            )

    async def _simulate(self, actions: Sequence[Action], block: int | str) -> list[SimResult]:
        return await simulate(
            self.rpc,
            actions,
            block,
            multicall=self.settings.multicall,
            batch_size=self.settings.batch_size,
        )

    async def _act(self, todo: list[Action], head: BlockHeader, summary: TickSummary) -> None:
        intents = self.store.open_decisions(todo, head.number, head.hash) if todo else []
        if not summary.balance_ok:
            log.error("keeper_balance_below_minimum", signer=self.address)
            return
        fees = suggest(await self._fee_history(), self.settings.fee_policy)
        if isinstance(fees, CapHit):
            summary.fee_cap = True
            self._count_cap(fees)
            self.store.set_outcome(
                [i.id for i in intents],
                "fee_cap",
                status="open",
                detail=f"needs {fees.needed} wei/gas, cap {fees.cap}",
            )
            return
        by_key = {(i.contract, i.subject, i.action): i for i in intents}
        survivors = await self._gate(todo, head, by_key, summary)
        groups = self._group(survivors)
        for group in groups:
            await self._send_actions(group, [by_key[_key(a)] for a in group], head, fees, summary)
        while self._gaps:
            await self._send_cancel(self._gaps.pop(0), head, fees, None, summary)

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
            results = await self._simulate(survivors, block)
            summary.simulated += results
            survivors = [r.action for r in results if r.ok]
            failed: dict[tuple[Outcome, str], list[Intent]] = {}
            for res in results:
                if not res.ok:
                    group = failed.setdefault((_outcome(res.verdict), res.reason), [])
                    group.append(by_key[_key(res.action)])
            for (outcome, reason), intents in failed.items():
                self._finish_many(intents, outcome, reason)
        return survivors

    def _group(self, actions: list[Action]) -> list[list[Action]]:
        """Batches of batchable actions (when Multicall3 is configured), singles otherwise."""
        size = self.settings.batch_size if self.settings.multicall else 1
        batchable = [a for a in actions if a.action in BATCHABLE]
        singles = [[a] for a in actions if a.action not in BATCHABLE]
        return [batchable[i : i + size] for i in range(0, len(batchable), size)] + singles

    def _payload(self, actions: Sequence[Action]) -> tuple[str, bytes, Literal["call", "batch"]]:
        if len(actions) == 1:
            return actions[0].contract, encode_action(actions[0]), "call"
        assert self.settings.multicall is not None
        calls = [(a.contract, encode_action(a)) for a in actions]
        return self.settings.multicall, encode_aggregate3(calls), "batch"

    async def _estimate(self, to: str, data: bytes) -> int:
        gas = await self.rpc.estimate_gas(
            {"from": self.address, "to": to, "data": _hex(data), "value": "0x0"}
        )
        return math.ceil(gas * self.settings.gas_margin)

    def _take_nonce(self) -> int:
        """Fill a gap first (a nonce reserved but never sent stalls every later one)."""
        if self._gaps:
            return self._gaps.pop(0)
        return self._book.reserve()

    async def _send_actions(
        self,
        actions: list[Action],
        intents: list[Intent],
        head: BlockHeader,
        fees: FeeDecision,
        summary: TickSummary,
        *,
        nonce: int | None = None,
    ) -> None:
        to, data, kind = self._payload(actions)
        try:
            gas_limit = await self._estimate(to, data)
        except ExecutionRevertedError as exc:
            # state moved between simulation and estimate: same rules as the gate
            verdict, reason = classify_revert(revert_data(exc))
            for intent in intents:
                self._finish(intent, _outcome(verdict), reason)
            return
        await self._sign_and_send(
            nonce=self._take_nonce() if nonce is None else nonce,
            kind=kind,
            to=to,
            data=data,
            gas_limit=gas_limit,
            fees=fees,
            intent_ids=[i.id for i in intents],
            head=head,
            summary=summary,
        )

    async def _send_cancel(
        self,
        nonce: int,
        head: BlockHeader,
        fees: FeeDecision,
        _replacing: Attempt | None,
        summary: TickSummary,
    ) -> None:
        """A zero-value transfer to ourselves: frees ``nonce`` without doing anything."""
        await self._sign_and_send(
            nonce=nonce,
            kind="cancel",
            to=self.address,
            data=b"",
            gas_limit=CANCEL_GAS,
            fees=fees,
            intent_ids=[],
            head=head,
            summary=summary,
        )

    async def _sign_and_send(
        self,
        *,
        nonce: int,
        kind: Literal["call", "batch", "cancel"],
        to: str,
        data: bytes,
        gas_limit: int,
        fees: FeeDecision,
        intent_ids: list[int],
        head: BlockHeader,
        summary: TickSummary,
    ) -> None:
        assert self.signer is not None
        tx = {
            "type": 2,
            "chainId": self.chain_id,
            "nonce": nonce,
            "to": to,
            "value": 0,
            "data": data,
            "gas": gas_limit,
            "maxFeePerGas": fees.max_fee,
            "maxPriorityFeePerGas": fees.tip,
        }
        signed = self.signer.sign(tx)
        attempt = self.store.record_attempt(
            signer=self.address,
            nonce=nonce,
            kind=kind,
            to_address=to,
            data=data,
            max_fee=fees.max_fee,
            tip=fees.tip,
            gas_limit=gas_limit,
            raw_tx=signed.raw,
            tx_hash=signed.tx_hash,
            intent_ids=intent_ids,
        )
        summary.sent += 1
        await self._broadcast(attempt, head)

    async def _broadcast(
        self, attempt: Attempt, head: BlockHeader, *, resend: bool = False
    ) -> str | None:
        """Send the stored raw bytes; None when the node took them, else the refusal kind.

        A first send that the node refuses outright frees its intents for a new
        decision. A resend of stored bytes is never marked failed here: the
        caller replaces it (underpriced) or the next reconcile sees its nonce
        spent (nonce too low).
        """
        try:
            await self.rpc.send_raw_transaction(attempt.raw_tx)
        except RpcError as exc:
            kind = failure_kind(exc)
            if kind == "already_known":
                pass
            elif kind in ("nonce_too_low", "underpriced", "execution_reverted", "invalid_request"):
                if not resend:
                    self._reject_attempt(attempt, str(kind))
                return str(kind)
            else:
                # timeout, lost response, 5xx: the node may well have it. The
                # next reconcile looks the hash up before anything else is sent.
                log.warning(
                    "keeper_send_unknown", tx_hash=attempt.tx_hash, nonce=attempt.nonce, kind=kind
                )
                return str(kind)
        self.store.mark_attempt(attempt.id, "sent", sent_block=head.number)
        log.info(
            "keeper_tx_sent",
            tx_hash=attempt.tx_hash,
            nonce=attempt.nonce,
            kind=attempt.kind,
            intents=len(self.store.attempt_intent_ids(attempt.id)),
        )
        return None

    def _reject_attempt(self, attempt: Attempt, why: str) -> None:
        """The node refused the bytes outright: the nonce is not ours to use, or fees too low."""
        self.store.mark_attempt(attempt.id, "failed")
        log.warning("keeper_send_refused", tx_hash=attempt.tx_hash, nonce=attempt.nonce, why=why)
        others = [
            a
            for a in self.store.open_nonces(self.address).get(attempt.nonce, [])
            if a.id != attempt.id
        ]
        if not others:
            # nothing else carries these intents: decide them again on the next tick
            ids = self.store.attempt_intent_ids(attempt.id)
            self.store.set_outcome(ids, None, status="open", detail=f"send refused: {why}")

    # ------------------------------------------------------------------ in flight

    async def _check_balance(self) -> bool:
        balance = await self.rpc.get_balance(self.address, "latest")
        if self.metrics:
            self.metrics.signer_balance_wei.set(balance)
        self.balance_ok = balance >= self.settings.min_balance_wei
        return self.balance_ok

    async def _fee_history(self) -> Mapping[str, Any]:
        return await self.rpc.fee_history(FEE_HISTORY_BLOCKS, "latest", [TIP_PERCENTILE])

    async def _reconcile(self, head: BlockHeader, summary: TickSummary) -> None:
        mined = await self.rpc.get_transaction_count(self.address, "latest")
        pending = await self.rpc.get_transaction_count(self.address, "pending")
        self._book.observe_chain(pending)
        await self._watch_reorgs(head)
        open_nonces = self.store.open_nonces(self.address)
        for nonce, attempts in sorted(open_nonces.items()):
            await self._reconcile_nonce(nonce, attempts, head, mined, summary)
        self._reopen_orphans()
        local_next = self._book.next if self._book.next is not None else pending
        self._gaps = find_gaps(mined, local_next, self.store.used_nonces(self.address, mined))
        if self._gaps:
            log.warning("keeper_nonce_gaps", gaps=self._gaps[:20], count=len(self._gaps))
        if self.metrics:
            self.metrics.pending_txs.set(len(self.store.open_nonces(self.address)))

    async def _watch_reorgs(self, head: BlockHeader) -> None:
        """A confirmed transaction whose block left the chain is in flight again."""
        since = head.number - self.settings.reorg_watch_blocks
        for attempt in self.store.confirmed_since(self.address, since):
            receipt = await self.rpc.get_transaction_receipt(attempt.tx_hash)
            if receipt is not None and landed(receipt).block_hash == attempt.receipt_hash:
                continue
            log.warning("keeper_confirmed_tx_reorged", tx_hash=attempt.tx_hash)
            confirmed_by_it = [
                i.id
                for i in self.store.intents(self.store.attempt_intent_ids(attempt.id))
                if i.outcome == "confirmed" and i.tx_hash == attempt.tx_hash
            ]
            self.store.set_outcome(confirmed_by_it, None, status="inflight")
            if receipt is not None:
                self.store.mark_attempt(attempt.id, "mined", receipt=landed(receipt).as_tuple())
            else:
                self.store.mark_attempt(attempt.id, "sent", sent_block=head.number)

    async def _reconcile_nonce(
        self,
        nonce: int,
        attempts: list[Attempt],
        head: BlockHeader,
        mined: int,
        summary: TickSummary,
    ) -> None:
        for attempt in attempts:
            if attempt.status == "failed":
                continue
            receipt = await self.rpc.get_transaction_receipt(attempt.tx_hash)
            if receipt is not None:
                await self._on_receipt(attempt, attempts, receipt, head)
                return
        live = [a for a in attempts if a.status in ACTIVE_ATTEMPT]
        if not live:
            return
        if nonce < mined:
            # the chain spent this nonce and none of our hashes has a receipt
            for a in live:
                self.store.mark_attempt(a.id, "dropped")
                ids = self.store.attempt_intent_ids(a.id)
                self._finish_ids(ids, "dropped", "nonce used by another transaction")
            return
        latest = live[-1]
        known = await self.rpc.get_transaction_by_hash(latest.tx_hash)
        if known is None:
            if latest.kind != "cancel" and not await self._still_wanted(latest, head, summary):
                return
            log.info("keeper_rebroadcast", tx_hash=latest.tx_hash, nonce=nonce)
            if await self._broadcast(latest, head, resend=True) == "underpriced":
                # evicted for its fee (base fee above its cap): same calls, higher fees
                await self._replace(latest, head, summary)
            return
        if latest.status != "sent":  # signed (response lost) or mined (reorged back to pool)
            self.store.mark_attempt(latest.id, "sent", sent_block=head.number)
            return
        sent_block = latest.sent_block if latest.sent_block is not None else head.number
        if head.number - sent_block >= self.settings.bump_after_blocks:
            await self._replace(latest, head, summary)

    async def _on_receipt(
        self,
        hit: Attempt,
        attempts: list[Attempt],
        receipt: Mapping[str, Any],
        head: BlockHeader,
    ) -> None:
        where = landed(receipt)
        for other in attempts:
            if other.id != hit.id and other.status in ACTIVE_ATTEMPT:
                self.store.mark_attempt(other.id, "replaced")
        depth = head.number - where.block_number + 1
        if depth < self.settings.confirmations:
            if hit.status != "mined" or hit.receipt_hash != where.block_hash:
                self.store.mark_attempt(hit.id, "mined", receipt=where.as_tuple())
            return
        self.store.mark_attempt(hit.id, "confirmed", receipt=where.as_tuple())
        if hit.kind == "cancel":
            return
        carried = [
            i
            for i in self.store.intents(self.store.attempt_intent_ids(hit.id))
            if i.outcome != "not_permitted"
        ]
        if where.status != 1:
            self._finish_many(carried, "reverted", "transaction reverted on chain")
            return
        moved = [
            i
            for i in carried
            if hit.kind == "call" or moved_subject(receipt, i.contract, i.subject)
        ]
        self.store.set_outcome(
            [i.id for i in moved],
            "confirmed",
            status="done",
            tx_hash=hit.tx_hash,
            receipt_block=where.block_number,
            receipt_hash=where.block_hash,
        )
        block = await self.rpc.get_block(where.block_number) if self.metrics else None
        for intent in moved:
            self._count(intent, "confirmed")
            if self.metrics and block is not None:
                delay = max(block.timestamp - intent.due_at, 0)
                self.metrics.action_delay_seconds.labels(intent.action).observe(delay)
            log.info(
                "keeper_action_confirmed",
                action=intent.action,
                contract=intent.contract,
                subject=intent.subject,
                tx_hash=hit.tx_hash,
            )
        moved_ids = {i.id for i in moved}
        failed = [i for i in carried if i.id not in moved_ids]
        self._finish_many(failed, "preempted", "call failed inside the batch")

    async def _still_wanted(
        self, attempt: Attempt, head: BlockHeader, summary: TickSummary
    ) -> bool:
        """Before resending forgotten bytes: are all its calls still due? Else replace them."""
        intents = self._carried(attempt)
        results = await self._simulate([_action_of(i) for i in intents], "latest")
        if intents and all(r.ok for r in results):
            return True
        await self._replace(attempt, head, summary, results=results)
        return False

    def _carried(self, attempt: Attempt) -> list[Intent]:
        return [
            i
            for i in self.store.intents(self.store.attempt_intent_ids(attempt.id))
            if i.status == "inflight"
        ]

    async def _replace(
        self,
        latest: Attempt,
        head: BlockHeader,
        summary: TickSummary,
        *,
        results: list[SimResult] | None = None,
    ) -> None:
        """Replace a stuck or forgotten transaction at its nonce with higher fees.

        The calls are simulated again first: subjects that moved meanwhile are
        finished and dropped from the replacement; if none is left, the nonce
        is spent on a cancel instead so later transactions are not held up.
        """
        intents = self._carried(latest) if latest.kind != "cancel" else []
        if results is None and intents:
            results = await self._simulate([_action_of(i) for i in intents], "latest")
        keep: list[Intent] = []
        for intent, res in zip(intents, results or [], strict=False):
            if res.ok:
                keep.append(intent)
            else:
                self._finish(intent, _outcome(res.verdict), res.reason)
        market = suggest(await self._fee_history(), self.settings.fee_policy)
        fees = bump(FeeDecision(latest.max_fee, latest.tip), self.settings.max_fee_cap, market)
        if isinstance(fees, CapHit):
            self._count_cap(fees)
            summary.fee_cap = True
            self.store.set_outcome(
                [i.id for i in keep],
                "fee_cap",
                status="inflight",
                detail=f"replacement needs {fees.needed} wei/gas, cap {fees.cap}",
            )
            return
        if self.metrics:
            self.metrics.tx_replacements.inc()
        log.info("keeper_tx_replace", nonce=latest.nonce, old=latest.tx_hash, keep=len(keep))
        if not keep:
            await self._send_cancel(latest.nonce, head, fees, latest, summary)
            return
        actions = [_action_of(i) for i in keep]
        await self._send_actions(actions, keep, head, fees, summary, nonce=latest.nonce)

    def _reopen_orphans(self) -> None:
        """Intents marked in flight whose every attempt ended without settling them."""
        ids = self.store.orphaned_inflight()
        if ids:
            self.store.set_outcome(ids, None, status="open", detail="no live transaction")

    # ------------------------------------------------------------------ outcomes

    def _finish(self, intent: Intent, outcome: Outcome, detail: str = "") -> None:
        self._finish_many([intent], outcome, detail)

    def _finish_many(self, intents: Sequence[Intent], outcome: Outcome, detail: str) -> None:
        """End intents with one outcome in one transaction; count and log each."""
        self.store.set_outcome(
            [i.id for i in intents], outcome, status="done", detail=detail or None
        )
        for intent in intents:
            self._count(intent, outcome)
            log.info(
                "keeper_action_finished",
                outcome=outcome,
                action=intent.action,
                contract=intent.contract,
                subject=intent.subject,
                detail=detail,
            )

    def _finish_ids(self, ids: Iterable[int], outcome: Outcome, detail: str) -> None:
        self._finish_many(self.store.intents(ids), outcome, detail)

    def _count(self, intent: Intent, outcome: str) -> None:
        if self.metrics:
            self.metrics.actions.labels(intent.contract, intent.action, outcome).inc()

    def _count_cap(self, hit: CapHit) -> None:
        if self.metrics:
            self.metrics.fee_cap_hits.inc()
        log.warning("keeper_fee_cap_hit", needed=hit.needed, cap=hit.cap)


def _outcome(verdict: SimVerdict) -> Outcome:
    """A failed simulation's verdict as an intent outcome ('ok' never ends an intent)."""
    if verdict == "ok":
        raise ValueError("a passing simulation is not an outcome")
    return verdict


def _key(action: Action) -> tuple[str, str, str]:
    return (action.contract, action.subject, action.action.value)
