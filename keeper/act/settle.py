"""Settling what one signer sent: gather the chain's facts, decide (pure), apply.

Every open nonce is decided from the chain alone (receipt, by-hash, mined
count), so the same code serves a normal tick and a restart after SIGKILL.
The decisions are ``keeper.domain.settlement``'s; this module asks the node
only what a decision needs, in the order it needs it, and :meth:`Settler.apply`
is the one place that writes what a decision says (attempt and intent rows,
outcome counts, logs) and sends what it asks for (a rebroadcast, a
replacement with fees up >= 12.5%, a cancel).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, assert_never

from keeper.act.chain import ChainRpc
from keeper.act.outcomes import OutcomeRecorder
from keeper.act.receipts import landed, moved_subject
from keeper.act.settings import KeeperSettings, TickSummary
from keeper.act.simulate import SimResult
from keeper.act.transactions import Transactions, action_of
from keeper.domain.fees import CapHit, suggest
from keeper.domain.model import BlockHeader
from keeper.domain.settlement import (
    Cancel,
    Confirm,
    Decision,
    Dropped,
    Mined,
    NonceFacts,
    Rebroadcast,
    Receipt,
    Reopen,
    Replace,
    Resent,
    Wait,
    after_simulation,
    confirmation_lost,
    live_attempts,
    settle_nonce,
)
from keeper.obs.logging import get_logger
from keeper.obs.metrics import Metrics
from keeper.store.intents import Attempt, Intent, IntentStore

__all__ = ["REORGED_OUT", "Settler"]

log = get_logger(__name__)

# The detail of an intent put back in flight because its confirmation was reorged out.
REORGED_OUT = "confirmation reorged out"


class Settler:
    """Settles one signer's open nonces each tick; the caller holds the signer's lock."""

    def __init__(
        self,
        tx: Transactions,
        *,
        settings: KeeperSettings,
        rpc: ChainRpc,
        store: IntentStore,
        outcomes: OutcomeRecorder,
        metrics: Metrics | None,
    ) -> None:
        self.tx = tx
        self.settings = settings
        self.rules = settings.settlement
        self.rpc = rpc
        self.store = store
        self.outcomes = outcomes
        self.metrics = metrics
        self.address = tx.address
        # intents whose confirmation was reorged out in this process: their next
        # confirmation is the same action, already counted in keeper_actions_total
        # (an intent's detail is no place for this: a fee-cap hold rewrites it)
        self._reconfirming: set[int] = set()

    async def reconcile(self, head: BlockHeader, summary: TickSummary) -> None:
        """Settle every open nonce against the chain, then find nonce gaps to fill.

        Runs before anything new is sent, at startup and on every tick.
        """
        # the count at the head this tick decides on, not at some node's "latest": a
        # lagging endpoint's lower count would make mined transactions look stuck (and
        # replaced) or confirmed ones look reorged out (and reopened)
        mined = await self.rpc.get_transaction_count(self.address, head.number)
        pending = await self.rpc.get_transaction_count(self.address, "pending")
        self.tx.observe_chain(pending)
        # The signer's mined count is the authority on confirmations above it, whatever
        # the depth of the reorg or how many heads this keeper skipped while it happened.
        for attempt in self.store.confirmed_from_nonce(self.address, mined):
            log.warning("keeper_confirmed_tx_reorged", tx_hash=attempt.tx_hash, nonce=attempt.nonce)
            await self.apply(Reopen(attempt.id, attempt.tx_hash), head, summary)
        await self._watch_reorgs(head, summary)
        for nonce, attempts in sorted(self.store.open_nonces(self.address).items()):
            facts = await self._facts(nonce, attempts, head, mined)
            decision = settle_nonce(attempts, facts, self.rules)
            await self.apply(decision, head, summary, attempts, facts.linked)
        self._reopen_orphans()
        gaps = self.tx.find_gaps(mined, pending)
        if gaps:
            log.warning("keeper_nonce_gaps", gaps=gaps[:20], count=len(gaps))
        if self.metrics:
            self.metrics.pending_txs.set(len(self.store.open_nonces(self.address)))

    # ------------------------------------------------------------------ facts

    async def _watch_reorgs(self, head: BlockHeader, summary: TickSummary) -> None:
        """A confirmed transaction whose block left the chain is in flight again.

        One header per distinct block is enough while its hash still matches;
        only transactions in a replaced block are looked up one by one.
        """
        since = head.number - self.settings.reorg_watch_blocks
        canonical: dict[int, str | None] = {}
        for attempt in self.store.confirmed_since(self.address, since):
            number = attempt.receipt_block
            assert number is not None  # confirmed attempts always carry their receipt
            if number > head.number:
                continue  # this head is behind the receipt (lagging node): judge on a later one
            if number not in canonical:
                block = await self.rpc.get_block(number)
                canonical[number] = block.hash if block is not None else None
            if canonical[number] == attempt.receipt_hash:
                continue
            receipt = await self.rpc.get_transaction_receipt(attempt.tx_hash)
            now = landed(receipt) if receipt is not None else None
            if confirmation_lost(attempt.receipt_hash, canonical[number], now):
                log.warning("keeper_confirmed_tx_reorged", tx_hash=attempt.tx_hash)
                await self.apply(Reopen(attempt.id, attempt.tx_hash, now), head, summary)

    async def settle_adopted(self, signer: str, head: BlockHeader, summary: TickSummary) -> None:
        """Settle another keeper's open nonces after adopting its intents (it stopped renewing).

        The chain's facts decide as for our own nonces, but nothing is ever
        signed for them here: a receipt confirms (or ends) the intents, a
        transaction the node forgot is rebroadcast from its stored bytes, and
        whatever only its signer could do (replace, cancel) waits for it.
        A nonce its signer spent on something else ends them as dropped,
        after which they are decided afresh.
        """
        mined = await self.rpc.get_transaction_count(signer, head.number)
        for nonce, attempts in sorted(self.store.open_nonces(signer).items()):
            facts = await self._facts(nonce, attempts, head, mined, signer)
            decision = settle_nonce(attempts, facts, self.rules)
            if isinstance(decision, Replace | Cancel):
                log.warning("keeper_adopted_tx_waits", signer=signer, nonce=nonce)
            elif isinstance(decision, Rebroadcast):
                attempt = _find(attempts, decision.attempt)
                log.info("keeper_adopted_rebroadcast", tx_hash=attempt.tx_hash, signer=signer)
                await self.tx.broadcast(attempt, head, resend=True)
            else:
                await self.apply(decision, head, summary, attempts, facts.linked)

    async def _facts(
        self,
        nonce: int,
        attempts: Sequence[Attempt],
        head: BlockHeader,
        mined: int,
        signer: str | None = None,
    ) -> NonceFacts[Intent]:
        """What the node says of one nonce, asked lazily: a receipt ends the questions."""
        facts: NonceFacts[Intent] = NonceFacts(nonce, head.number, mined)
        for attempt in attempts:
            if attempt.status == "failed":
                continue
            receipt = await self.rpc.get_transaction_receipt(attempt.tx_hash)
            if receipt is not None:
                return self._with_receipt(facts, attempt, receipt)
        live = live_attempts(attempts)
        if not live:
            return facts
        if nonce < mined:
            latest_count = await self.rpc.get_transaction_count(signer or self.address, "latest")
            facts = dataclasses.replace(facts, latest_count=latest_count)
            if nonce < latest_count:
                # about to conclude another transaction spent the nonce: one endpoint's
                # nulls prove nothing (a replica may lack our mined transaction), so every
                # endpoint is asked, and an endpoint that does not answer leaves it open
                seen = await self.rpc.seen_anywhere([a.tx_hash for a in live])
                if seen.receipt is not None:
                    tx_hash, receipt = seen.receipt
                    hit = next(a for a in attempts if a.tx_hash == tx_hash)
                    return self._with_receipt(facts, hit, receipt)
                known = True if seen.known else (False if seen.all_answered else None)
                facts = dataclasses.replace(facts, any_live_known=known)
                if known is not True:
                    return facts
        newest = live[-1]
        newest_known = await self.rpc.get_transaction_by_hash(newest.tx_hash) is not None
        facts = dataclasses.replace(facts, newest_known=newest_known)
        if newest_known or newest.kind == "cancel":
            return facts
        # before resending forgotten bytes: are all its calls still due?
        carried = self._carried(newest.id)
        results = await self.tx.simulate([action_of(i) for i in carried], "latest")
        return dataclasses.replace(
            facts, carried=tuple(i.id for i in carried), passing=tuple(r.ok for r in results)
        )

    def _with_receipt(
        self, facts: NonceFacts[Intent], hit: Attempt, receipt: Mapping[str, Any]
    ) -> NonceFacts[Intent]:
        linked = tuple(self.store.intents(self.store.attempt_intent_ids(hit.id)))
        moved = frozenset(i.id for i in linked if moved_subject(receipt, i.contract, i.subject))
        return dataclasses.replace(
            facts, receipt=Receipt(hit.id, landed(receipt), moved), linked=linked
        )

    def _carried(self, attempt_id: int) -> list[Intent]:
        return [
            i
            for i in self.store.intents(self.store.attempt_intent_ids(attempt_id))
            if i.status == "inflight"
        ]

    # ------------------------------------------------------------------ apply

    async def apply(
        self,
        decision: Decision,
        head: BlockHeader,
        summary: TickSummary,
        attempts: Sequence[Attempt] = (),
        linked: Sequence[Intent] = (),
    ) -> None:
        """Write and send what ``decision`` says: the one place a settlement touches the books.

        ``attempts`` are those signed at the decided nonce, ``linked`` the intents
        of the attempt whose receipt was found (what the decision's ids refer to).
        """
        match decision:
            case Confirm():
                await self._confirm(decision, linked)
            case Mined():
                self._mark_replaced(decision.replaced)
                if decision.rewrite:
                    receipt = decision.at.as_tuple()
                    self.store.mark_attempt(decision.attempt, "mined", receipt=receipt)
            case Dropped():
                for dropped in decision.attempts:
                    self.store.mark_attempt(dropped, "dropped")
                    ids = self.store.attempt_intent_ids(dropped)
                    self.outcomes.finish_ids(ids, "dropped", "nonce used by another transaction")
            case Rebroadcast():
                attempt = _find(attempts, decision.attempt)
                log.info("keeper_rebroadcast", tx_hash=attempt.tx_hash, nonce=attempt.nonce)
                if await self.tx.broadcast(attempt, head, resend=True) == "underpriced":
                    # evicted for its fee (base fee above its cap): same calls, higher fees
                    await self.apply(Replace(attempt.id), head, summary, attempts)
            case Replace(keep=None):
                carried = self._carried(decision.attempt)
                results: list[SimResult] = []
                if carried:
                    results = await self.tx.simulate([action_of(i) for i in carried], "latest")
                passing = [r.ok for r in results]
                then = after_simulation(decision.attempt, [i.id for i in carried], passing)
                await self.apply(then, head, summary, attempts)
            case Replace():
                kept = self.store.intents(decision.keep or ())
                await self._replace(_find(attempts, decision.attempt), kept, head, summary)
            case Cancel():
                await self._replace(_find(attempts, decision.attempt), [], head, summary)
            case Resent():
                self.store.mark_attempt(decision.attempt, "sent", sent_block=head.number)
            case Reopen():
                self._reopen(decision, head)
            case Wait():
                pass
            case _:
                assert_never(decision)

    def _mark_replaced(self, attempt_ids: Sequence[int]) -> None:
        for other in attempt_ids:
            self.store.mark_attempt(other, "replaced")

    async def _confirm(self, decision: Confirm, linked: Sequence[Intent]) -> None:
        self._mark_replaced(decision.replaced)
        at = decision.at
        self.store.mark_attempt(decision.attempt, "confirmed", receipt=at.as_tuple())
        if decision.cancel:
            return
        by_id = {i.id: i for i in linked}
        if at.status != 1:
            reverted = [by_id[i] for i in decision.reverted]
            self.outcomes.finish_many(reverted, "reverted", "transaction reverted on chain")
            return
        confirmed = [by_id[i] for i in decision.confirmed]
        self.store.set_outcome(
            decision.confirmed,
            "confirmed",
            status="done",
            tx_hash=decision.tx_hash,
            receipt_block=at.block_number,
            receipt_hash=at.block_hash,
        )
        # the confirming block's time, only when some action here is timed (first confirmed)
        first = any(i.id not in self._reconfirming for i in confirmed)
        block = await self.rpc.get_block(at.block_number) if self.metrics and first else None
        for intent in confirmed:
            if intent.id in self._reconfirming:
                self._reconfirming.discard(intent.id)  # counted and timed when first confirmed
            else:
                self.outcomes.count(intent, "confirmed")
                if self.metrics and block is not None:
                    delay = max(block.timestamp - intent.due_at, 0)
                    self.metrics.action_delay_seconds.labels(intent.action).observe(delay)
            log.info(
                "keeper_action_confirmed",
                action=intent.action,
                contract=intent.contract,
                subject=intent.subject,
                tx_hash=decision.tx_hash,
            )
        preempted = [by_id[i] for i in decision.preempted]
        self.outcomes.finish_many(preempted, "preempted", "call failed inside the batch")

    async def _replace(
        self, latest: Attempt, keep: list[Intent], head: BlockHeader, summary: TickSummary
    ) -> None:
        """Replace a stuck or forgotten transaction at its nonce with higher fees.

        The calls not in ``keep`` no longer passed a simulation; if none is
        left, the nonce is spent on a cancel instead so later transactions are
        not held up.

        A dropped subject is not finished here. It stays in flight on the
        transactions already signed at this nonce, one of which may yet be
        mined: our own pending call is often the very reason it fails now
        (and a lagging node's ``latest`` may not have it at all). Whichever
        transaction spends the nonce decides it; if that is the replacement or
        the cancel, the subject has no live transaction left and is decided
        afresh (``_reopen_orphans``).
        """
        market = suggest(await self.tx.fee_history(), self.settings.fee_policy)
        fees = self.tx.above_signed(latest.nonce, market)
        if isinstance(fees, CapHit):
            self.tx.hold_at_cap(keep, fees, summary, status="inflight", what="the replacement")
            return
        if self.metrics:
            self.metrics.tx_replacements.inc()
        log.info("keeper_tx_replace", nonce=latest.nonce, old=latest.tx_hash, keep=len(keep))
        if not keep:
            await self.tx.send_cancel(latest.nonce, head, fees, summary)
            return
        # a call stays a call: one sent alone was so for a reason (Action.alone)
        alone = latest.kind == "call"
        actions = [dataclasses.replace(action_of(i), alone=alone) for i in keep]
        if not await self.tx.send_actions(actions, keep, head, fees, summary, nonce=latest.nonce):
            await self.tx.send_cancel(latest.nonce, head, fees, summary)

    def _reopen(self, decision: Reopen, head: BlockHeader) -> None:
        """Put a confirmed attempt (and the intents it confirmed) back in flight."""
        confirmed_by_it = [
            i.id
            for i in self.store.intents(self.store.attempt_intent_ids(decision.attempt))
            if i.outcome == "confirmed" and i.tx_hash == decision.tx_hash
        ]
        self.store.set_outcome(confirmed_by_it, None, status="inflight", detail=REORGED_OUT)
        self._reconfirming.update(confirmed_by_it)
        if decision.receipt is not None:
            self.store.mark_attempt(decision.attempt, "mined", receipt=decision.receipt.as_tuple())
        else:
            self.store.mark_attempt(decision.attempt, "sent", sent_block=head.number)

    def _reopen_orphans(self) -> None:
        """Intents marked in flight whose every attempt ended without settling them."""
        ids = self.store.orphaned_inflight()
        if ids:
            self.store.set_outcome(ids, None, status="open", detail="no live transaction")


def _find(attempts: Sequence[Attempt], attempt_id: int) -> Attempt:
    [attempt] = [a for a in attempts if a.id == attempt_id]
    return attempt
