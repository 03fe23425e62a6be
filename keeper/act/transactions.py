"""One signer's transactions: nonces, fees, signing, persisting and broadcasting.

Every attempt is written before it is broadcast, so a crash or a lost reply
leaves bytes that ``act.settle`` finds on chain or sends again; settling what
was sent (receipts, replacements, cancels) is decided there, not here.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from keeper.act.calls import SimVerdict, classify_revert
from keeper.act.chain import ChainRpc, failure_kind, revert_data
from keeper.act.outcomes import OutcomeRecorder
from keeper.act.settings import (
    CANCEL_GAS,
    FEE_HISTORY_BLOCKS,
    TIP_PERCENTILE,
    KeeperSettings,
    TickSummary,
)
from keeper.act.signer import Signer
from keeper.act.simulate import (
    CALLS_AT_ONCE,
    Encoder,
    MulticallUnavailable,
    SimResult,
    batchable,
    simulate,
)
from keeper.domain.fees import CapHit, FeeDecision, above_signed
from keeper.domain.model import BlockHeader, Protocol
from keeper.domain.multicall import encode_aggregate3
from keeper.domain.nonces import NonceBook, find_gaps
from keeper.domain.planner import Action, ActionKind
from keeper.obs.logging import get_logger
from keeper.obs.metrics import Metrics
from keeper.rpc.errors import ExecutionRevertedError, RpcError
from keeper.store.claims import ClaimLostError
from keeper.store.intents import Attempt, Intent, IntentStore, Outcome

__all__ = ["Transactions", "TxDraft", "action_of", "outcome_of"]

log = get_logger(__name__)

# The node's answers that say it did not take the bytes (any other failure may hide a send).
REFUSED: Final = frozenset(
    {"nonce_too_low", "underpriced", "execution_reverted", "invalid_request"}
)


def _hex(data: bytes) -> str:
    return "0x" + data.hex()


def action_of(intent: Intent) -> Action:
    """The planned action an intent stands for (to simulate or send it again)."""
    return Action(
        intent.contract,
        intent.subject,
        ActionKind(intent.action),
        intent.due_at,
        Protocol(intent.protocol),
    )


@dataclass(frozen=True, slots=True)
class TxDraft:
    """One transaction before it is signed: what is persisted with the signature."""

    nonce: int
    kind: Literal["call", "batch", "cancel"]
    to: str
    data: bytes
    gas_limit: int
    fees: FeeDecision
    intent_ids: tuple[int, ...] = ()

    def unsigned(self, chain_id: int) -> dict[str, Any]:
        """The EIP-1559 fields for the signer."""
        return {
            "type": 2,
            "chainId": chain_id,
            "nonce": self.nonce,
            "to": self.to,
            "value": 0,
            "data": self.data,
            "gas": self.gas_limit,
            "maxFeePerGas": self.fees.max_fee,
            "maxPriorityFeePerGas": self.fees.tip,
        }


class Transactions:
    """Nonces, fees, signing and broadcast for one signer; the caller holds the signer's lock."""

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

    def observe_chain(self, pending: int) -> None:
        """The chain's pending count is a floor for the counter (it never goes down)."""
        self._book.observe_chain(pending)

    def find_gaps(self, mined: int, pending: int) -> list[int]:
        """Nonces from ``mined`` up to the counter that carry nothing that may land; kept
        for :meth:`take_gaps` (new work fills them first)."""
        local_next = self._book.next if self._book.next is not None else pending
        self._gaps = find_gaps(mined, local_next, self.store.used_nonces(self.address, mined))
        return self._gaps

    def above_signed(self, nonce: int, market: FeeDecision | CapHit) -> FeeDecision | CapHit:
        """Fees for a new signature at ``nonce``, bumped over every fee signed there."""
        signed = [
            FeeDecision(a.max_fee, a.tip) for a in self.store.attempts_at(self.address, nonce)
        ]
        return above_signed(signed, self.settings.max_fee_cap, market)

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
        if self.multicall is None or not all(map(batchable, actions)):
            if len(actions) != 1:
                raise ValueError("only batchable actions can share a transaction")
            return actions[0].contract, self.encode(actions[0]), "call"
        calls = [(a.contract, self.encode(a)) for a in actions]
        return self.multicall, encode_aggregate3(calls), "batch"

    def start_estimates(self, groups: Sequence[Sequence[Action]]) -> list[asyncio.Task[int]]:
        """Every group's gas estimate, started at once (at most CALLS_AT_ONCE in flight).

        The groups hold disjoint subjects, so no estimate depends on another
        group's transaction; made one after another, their round trips would
        spread a tick's sends over several blocks. Await or ``drop`` them all.
        """
        gate = asyncio.Semaphore(CALLS_AT_ONCE)

        async def one(group: Sequence[Action]) -> int:
            async with gate:
                return await self._estimate_group(group)

        return [asyncio.create_task(one(g)) for g in groups]

    @staticmethod
    async def drop(tasks: Sequence[asyncio.Task[int]]) -> None:
        """Cancel the estimates not awaited (a tick that stopped early) and reap them all."""
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _estimate_group(self, actions: Sequence[Action]) -> int:
        """A batch is estimated without allowFailure, so a call that would fail fails it."""
        to, data, kind = self._payload(actions)
        if kind == "batch":
            calls = [(a.contract, self.encode(a)) for a in actions]
            data = encode_aggregate3(calls, allow_failure=False)
        return await self._estimate(to, data)

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
        estimate: Awaitable[int] | None = None,
    ) -> bool:
        """Estimate, sign, persist and broadcast one transaction; False if nothing was sent.

        ``estimate`` is this group's gas estimate already under way (``start_estimates``).

        A call that started failing since the gate makes the estimate revert:
        the calls are simulated again, the failures finished, the rest sent.
        In a replacement (``nonce`` given) failures are left in flight on the
        transactions already at that nonce (see ``act.settle``).
        """
        replacing = nonce is not None
        to, data, kind = self._payload(actions)
        try:
            gas_limit = await (self._estimate_group(actions) if estimate is None else estimate)
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
            above = self.above_signed(at, fees)
            if isinstance(above, CapHit):  # the nonce stays unsent: a gap the next tick fills
                self.hold_at_cap(intents, above, summary, status="open", what=f"nonce {at}")
                return False
            fees = above
        draft = TxDraft(at, kind, to, data, gas_limit, fees, tuple(i.id for i in intents))
        await self._sign_and_send(draft, head, summary)
        return True

    async def send_cancel(
        self,
        nonce: int,
        head: BlockHeader,
        fees: FeeDecision,
        summary: TickSummary,
    ) -> None:
        """A zero-value transfer to ourselves: frees ``nonce`` without doing anything."""
        above = self.above_signed(nonce, fees)
        if isinstance(above, CapHit):  # the nonce stays open; the next tick tries again
            self.hold_at_cap([], above, summary, status="open", what=f"a cancel at nonce {nonce}")
            return
        draft = TxDraft(nonce, "cancel", self.address, b"", CANCEL_GAS, above)
        await self._sign_and_send(draft, head, summary)

    async def _sign_and_send(self, draft: TxDraft, head: BlockHeader, summary: TickSummary) -> None:
        """Sign, persist (before anything leaves the process), then broadcast."""
        assert self.signer is not None
        signed = self.signer.sign(draft.unsigned(self.chain_id))
        try:
            attempt = self._record(draft, signed.raw, signed.tx_hash)
        except ClaimLostError as exc:
            # another keeper took these intents while we decided: these bytes never
            # leave the process, and the nonce is filled by the next transaction
            log.warning("keeper_claim_lost", nonce=draft.nonce, reason=str(exc))
            if self.metrics:
                self.metrics.claims_lost.inc()
            if self._book.next == draft.nonce + 1:  # the last one reserved: hand it back
                self._book = NonceBook(draft.nonce)
            elif not self.store.attempts_at(self.address, draft.nonce):  # a fresh nonce
                self._gaps = sorted({*self._gaps, draft.nonce})
            return
        if await self.broadcast(attempt, head) not in REFUSED:
            summary.sent += 1  # or may have gone out: the next reconcile looks it up

    def _record(self, draft: TxDraft, raw: bytes, tx_hash: str) -> Attempt:
        return self.store.record_attempt(
            signer=self.address,
            nonce=draft.nonce,
            kind=draft.kind,
            to_address=draft.to,
            data=draft.data,
            max_fee=draft.fees.max_fee,
            tip=draft.fees.tip,
            gas_limit=draft.gas_limit,
            raw_tx=raw,
            tx_hash=tx_hash,
            intent_ids=draft.intent_ids,
        )

    async def broadcast(
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
            elif kind in REFUSED:
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
