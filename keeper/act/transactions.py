"""One signer's transactions: nonces, signing, broadcast, and settling what was sent.

Every attempt is written before it is broadcast; ``reconcile`` then decides
each open nonce from the chain alone (receipt, by-hash, mined count), so the
same code serves a normal tick and a restart after SIGKILL:

- a receipt: the attempt is mined, then confirmed at the configured depth;
  a Multicall3 batch is settled per subject from its logs;
- the nonce spent by a transaction that is none of ours: ``dropped``;
- unknown to the node: the same raw bytes again (after re-simulation);
- pending too long: a replacement with fees up >= 12.5%, or a zero-value
  self-transfer when none of its calls is still wanted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from keeper.act.calls import SimVerdict, classify_revert, encode_aggregate3
from keeper.act.chain import ChainRpc, failure_kind, revert_data
from keeper.act.outcomes import OutcomeRecorder
from keeper.act.receipts import landed, moved_subject
from keeper.act.settings import (
    CANCEL_GAS,
    FEE_HISTORY_BLOCKS,
    TIP_PERCENTILE,
    KeeperSettings,
    TickSummary,
)
from keeper.act.signer import Signer
from keeper.act.simulate import BATCHABLE, Encoder, MulticallUnavailable, SimResult, simulate
from keeper.domain.fees import CapHit, FeeDecision, bump, suggest
from keeper.domain.model import BlockHeader, Protocol
from keeper.domain.nonces import NonceBook, find_gaps
from keeper.domain.planner import Action, ActionKind
from keeper.obs.logging import get_logger
from keeper.obs.metrics import Metrics
from keeper.rpc.errors import ExecutionRevertedError, RpcError
from keeper.store.intents import ACTIVE_ATTEMPT, Attempt, Intent, IntentStore, Outcome

__all__ = ["Transactions", "outcome_of"]

log = get_logger(__name__)

# The detail of an intent put back in flight because its confirmation was reorged out.
REORGED_OUT = "confirmation reorged out"


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


class Transactions:
    """The in-flight side of the keeper for one signer; the caller holds the signer's lock."""

    def __init__(
        self,
        *,
        settings: KeeperSettings,
        chain_id: int,
        rpc: ChainRpc,
        store: IntentStore,
        signer: Signer | None,
        outcomes: OutcomeRecorder,
        metrics: Metrics | None,
        encode: Encoder,
    ) -> None:
        self.settings = settings
        self.encode = encode
        self.chain_id = chain_id
        self.rpc = rpc
        self.store = store
        self.signer = signer
        self.outcomes = outcomes
        self.metrics = metrics
        self.address = signer.address if signer else "0x" + "00" * 20
        # switched off for good if the address turns out not to be Multicall3
        self.multicall = settings.multicall
        self._book = NonceBook()
        self._gaps: list[int] = []
        # intents whose confirmation was reorged out in this process: their next
        # confirmation is the same action, already counted in keeper_actions_total
        # (an intent's detail is no place for this: a fee-cap hold rewrites it)
        self._reconfirming: set[int] = set()

    def restore_nonces(self) -> None:
        """At startup the counter resumes past every nonce this signer ever signed."""
        self._book = NonceBook(self.store.next_nonce_floor(self.address))

    @property
    def next_nonce(self) -> int | None:
        return self._book.next

    def take_gaps(self) -> list[int]:
        """Nonces reserved but never sent that no new transaction filled: to be cancelled."""
        gaps, self._gaps = self._gaps, []
        return gaps

    @property
    def has_gaps(self) -> bool:
        return bool(self._gaps)

    async def reconcile(self, head: BlockHeader, summary: TickSummary) -> None:
        """Settle every open nonce against the chain, then find nonce gaps to fill.

        Runs before anything new is sent, at startup and on every tick.
        """
        # the count at the head this tick decides on, not at some node's "latest": a
        # lagging endpoint's lower count would make mined transactions look stuck (and
        # replaced) or confirmed ones look reorged out (and reopened)
        mined = await self.rpc.get_transaction_count(self.address, head.number)
        pending = await self.rpc.get_transaction_count(self.address, "pending")
        self._book.observe_chain(pending)
        self._reopen_unmined(mined, head)
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

    def _reopen_unmined(self, mined: int, head: BlockHeader) -> None:
        """Confirmed attempts at nonces the chain has not spent were reorged out: reopen them.

        The signer's mined count is the authority here, whatever the depth of
        the reorg or how many heads this keeper skipped while it happened.
        """
        for attempt in self.store.confirmed_from_nonce(self.address, mined):
            log.warning("keeper_confirmed_tx_reorged", tx_hash=attempt.tx_hash, nonce=attempt.nonce)
            self._reopen(attempt, None, head)

    def _reopen(
        self, attempt: Attempt, receipt: Mapping[str, Any] | None, head: BlockHeader
    ) -> None:
        """Put a confirmed attempt (and the intents it confirmed) back in flight."""
        confirmed_by_it = [
            i.id
            for i in self.store.intents(self.store.attempt_intent_ids(attempt.id))
            if i.outcome == "confirmed" and i.tx_hash == attempt.tx_hash
        ]
        self.store.set_outcome(confirmed_by_it, None, status="inflight", detail=REORGED_OUT)
        self._reconfirming.update(confirmed_by_it)
        if receipt is not None:
            self.store.mark_attempt(attempt.id, "mined", receipt=landed(receipt).as_tuple())
        else:
            self.store.mark_attempt(attempt.id, "sent", sent_block=head.number)

    async def _watch_reorgs(self, head: BlockHeader) -> None:
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
            if receipt is not None and landed(receipt).block_hash == attempt.receipt_hash:
                continue  # a lagging node served an old header: the receipt is still there
            log.warning("keeper_confirmed_tx_reorged", tx_hash=attempt.tx_hash)
            self._reopen(attempt, receipt, head)

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
        if nonce < mined and await self._spent_by_another(nonce, live):
            for a in live:
                self.store.mark_attempt(a.id, "dropped")
                ids = self.store.attempt_intent_ids(a.id)
                self.outcomes.finish_ids(ids, "dropped", "nonce used by another transaction")
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
        # Only the chain's next nonce can be stuck on its fee; a later one waits
        # for it, and raising its fee would only burn money.
        if nonce == mined and head.number - sent_block >= self.settings.bump_after_blocks:
            await self._replace(latest, head, summary)

    async def _spent_by_another(self, nonce: int, live: list[Attempt]) -> bool:
        """Whether the chain spent ``nonce`` on a transaction that is none of ours.

        Asked again after the receipts came back empty: a reorg between the
        count and the receipt lookups must not make us give up a transaction
        that is simply being moved to another block.
        """
        if nonce >= await self.rpc.get_transaction_count(self.address, "latest"):
            return False
        for attempt in live:
            if await self.rpc.get_transaction_by_hash(attempt.tx_hash) is not None:
                return False
        return True

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
        linked = self.store.intents(self.store.attempt_intent_ids(hit.id))
        carried = [i for i in linked if i.status == "inflight"]
        if where.status != 1:
            self.outcomes.finish_many(carried, "reverted", "transaction reverted on chain")
            return
        # An older attempt may be the one mined, after a replacement had dropped
        # subjects as preempted: its logs say what it really did, so those count too.
        # Whatever the books say of a linked intent, the receipt is the authority: a
        # successful call did its one action, and a batch's logs say which subjects moved.
        moved = [
            i
            for i in linked
            if i.outcome not in ("confirmed", "not_permitted")
            and (hit.kind == "call" or moved_subject(receipt, i.contract, i.subject))
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
            if intent.id in self._reconfirming:
                self._reconfirming.discard(intent.id)  # counted when first confirmed
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
                tx_hash=hit.tx_hash,
            )
        moved_ids = {i.id for i in moved}
        failed = [i for i in carried if i.id not in moved_ids]
        self.outcomes.finish_many(failed, "preempted", "call failed inside the batch")

    async def _still_wanted(
        self, attempt: Attempt, head: BlockHeader, summary: TickSummary
    ) -> bool:
        """Before resending forgotten bytes: are all its calls still due? Else replace them."""
        intents = self._carried(attempt)
        results = await self.simulate([_action_of(i) for i in intents], "latest")
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

        The calls are simulated again first: subjects that no longer pass are
        dropped from the replacement; if none is left, the nonce is spent on a
        cancel instead so later transactions are not held up.

        A dropped subject is not finished here. It stays in flight on the
        transactions already signed at this nonce, one of which may yet be
        mined: our own pending call is often the very reason it fails now
        (and a lagging node's ``latest`` may not have it at all). Whichever
        transaction spends the nonce decides it; if that is the replacement or
        the cancel, the subject has no live transaction left and is decided
        afresh (``_reopen_orphans``).
        """
        intents = self._carried(latest) if latest.kind != "cancel" else []
        if results is None and intents:
            results = await self.simulate([_action_of(i) for i in intents], "latest")
        keep = [i for i, res in zip(intents, results or [], strict=False) if res.ok]
        market = suggest(await self.fee_history(), self.settings.fee_policy)
        fees = self._above_signed(latest.nonce, market)
        if isinstance(fees, CapHit):
            self.hold_at_cap(keep, fees, summary, status="inflight", what="the replacement")
            return
        if self.metrics:
            self.metrics.tx_replacements.inc()
        log.info("keeper_tx_replace", nonce=latest.nonce, old=latest.tx_hash, keep=len(keep))
        if not keep:
            await self.send_cancel(latest.nonce, head, fees, latest, summary)
            return
        actions = [_action_of(i) for i in keep]
        if not await self.send_actions(actions, keep, head, fees, summary, nonce=latest.nonce):
            await self.send_cancel(latest.nonce, head, fees, latest, summary)

    def _above_signed(self, nonce: int, market: FeeDecision | CapHit) -> FeeDecision | CapHit:
        """Fees for a new signature at ``nonce``: a replacement bump over every fee ever
        signed there. A node that refused one of ours as underpriced, or still holds it,
        takes nothing less, so re-signing at the same fees would be refused forever."""
        signed = self.store.attempts_at(self.address, nonce)
        if not signed:
            return market
        prev = FeeDecision(max(a.max_fee for a in signed), max(a.tip for a in signed))
        return bump(prev, self.settings.max_fee_cap, market)

    def hold_at_cap(
        self,
        intents: Sequence[Intent],
        hit: CapHit,
        summary: TickSummary,
        *,
        status: Literal["open", "inflight"],
        what: str,
    ) -> None:
        """The fee the chain asks is above the cap: the intents wait (not ended), counted."""
        self.outcomes.count_cap(hit)
        summary.fee_cap = True
        self.store.set_outcome(
            [i.id for i in intents],
            "fee_cap",
            status=status,
            detail=f"{what} needs {hit.needed} wei/gas, cap {hit.cap}",
        )

    def _reopen_orphans(self) -> None:
        """Intents marked in flight whose every attempt ended without settling them."""
        ids = self.store.orphaned_inflight()
        if ids:
            self.store.set_outcome(ids, None, status="open", detail="no live transaction")

    async def simulate(self, actions: Sequence[Action], block: int | str) -> list[SimResult]:
        """The simulation gate; a Multicall3 that is not there turns batching off, loudly."""
        try:
            return await simulate(
                self.rpc,
                actions,
                block,
                multicall=self.multicall,
                batch_size=self.settings.batch_size,
                encode=self.encode,
            )
        except MulticallUnavailable as exc:
            log.error("keeper_multicall_unavailable", error=str(exc))
            self.multicall = None
            return await simulate(
                self.rpc,
                actions,
                block,
                multicall=None,
                batch_size=self.settings.batch_size,
                encode=self.encode,
            )

    async def fee_history(self) -> Mapping[str, Any]:
        return await self.rpc.fee_history(FEE_HISTORY_BLOCKS, "latest", [TIP_PERCENTILE])

    def _payload(self, actions: Sequence[Action]) -> tuple[str, bytes, Literal["call", "batch"]]:
        """Permissionless calls go through Multicall3 even alone: with allowFailure a
        keeper that loses a race by a few seconds pays gas but never broadcasts a revert."""
        if self.multicall is None or any(a.action not in BATCHABLE for a in actions):
            if len(actions) != 1:
                raise ValueError("only batchable actions can share a transaction")
            return actions[0].contract, self.encode(actions[0]), "call"
        calls = [(a.contract, self.encode(a)) for a in actions]
        return self.multicall, encode_aggregate3(calls), "batch"

    async def _estimate(self, to: str, data: bytes) -> int:
        """Gas for the call at ``latest`` (the state the gate simulated), plus the margin.

        Not ``pending``, which some nodes default to: another keeper's pooled
        transaction would fail the estimate of a batch that allowFailure
        protects anyway.
        """
        tx = {"from": self.address, "to": to, "data": _hex(data), "value": "0x0"}
        gas = await self.rpc.estimate_gas(tx, "latest")
        return math.ceil(gas * self.settings.gas_margin)

    def _take_nonce(self) -> int:
        """Fill a gap first (a nonce reserved but never sent stalls every later one)."""
        if self._gaps:
            return self._gaps.pop(0)
        return self._book.reserve()

    async def send_actions(
        self,
        actions: list[Action],
        intents: list[Intent],
        head: BlockHeader,
        fees: FeeDecision,
        summary: TickSummary,
        *,
        nonce: int | None = None,
        regate: bool = True,
    ) -> bool:
        """Estimate, sign, persist and broadcast one transaction; False if nothing was sent.

        A call that started failing since the gate makes the estimate revert:
        the calls are simulated again, the failures finished, the rest sent.
        In a replacement (``nonce`` given) failures are left in flight on the
        transactions already at that nonce, as in ``_replace``.
        """
        replacing = nonce is not None
        to, data, kind = self._payload(actions)
        probe = data
        if kind == "batch":
            calls = [(a.contract, self.encode(a)) for a in actions]
            probe = encode_aggregate3(calls, allow_failure=False)
        try:
            gas_limit = await self._estimate(to, probe)
        except ExecutionRevertedError as exc:
            if kind == "call" or not regate:
                verdict, reason = classify_revert(revert_data(exc), actions[0].protocol)
                if kind == "batch":
                    verdict, reason = "reverted_in_simulation", "batch estimate reverted"
                if not replacing:
                    self.outcomes.finish_many(intents, outcome_of(verdict), reason)
                return False
            results = await self.simulate(actions, "latest")
            keep = [(a, i) for a, i, r in zip(actions, intents, results, strict=True) if r.ok]
            for intent, res in zip(intents, results, strict=True):
                if not res.ok and not replacing:
                    self.outcomes.finish(intent, outcome_of(res.verdict), res.reason)
            if not keep:
                return False
            return await self.send_actions(
                [a for a, _ in keep],
                [i for _, i in keep],
                head,
                fees,
                summary,
                nonce=nonce,
                regate=False,
            )
        at = self._take_nonce() if nonce is None else nonce
        if nonce is None:  # a fresh nonce, or a gap once refused as underpriced
            above = self._above_signed(at, fees)
            if isinstance(above, CapHit):  # the nonce stays unsent: a gap the next tick fills
                self.hold_at_cap(intents, above, summary, status="open", what=f"nonce {at}")
                return False
            fees = above
        await self._sign_and_send(
            nonce=at,
            kind=kind,
            to=to,
            data=data,
            gas_limit=gas_limit,
            fees=fees,
            intent_ids=[i.id for i in intents],
            head=head,
            summary=summary,
        )
        return True

    async def send_cancel(
        self,
        nonce: int,
        head: BlockHeader,
        fees: FeeDecision,
        _replacing: Attempt | None,
        summary: TickSummary,
    ) -> None:
        """A zero-value transfer to ourselves: frees ``nonce`` without doing anything."""
        above = self._above_signed(nonce, fees)
        if isinstance(above, CapHit):  # the nonce stays open; the next tick tries again
            self.hold_at_cap([], above, summary, status="open", what=f"a cancel at nonce {nonce}")
            return
        fees = above
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


def outcome_of(verdict: SimVerdict) -> Outcome:
    """A failed simulation's verdict as an intent outcome ('ok' never ends an intent)."""
    if verdict == "ok":
        raise ValueError("a passing simulation is not an outcome")
    return verdict
