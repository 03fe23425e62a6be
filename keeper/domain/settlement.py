"""Settling one nonce: what we signed there plus what the chain says, one decision.

Pure. ``act/settle`` gathers the facts (receipts, by-hash lookups, the
signer's counts, a fresh simulation when the node forgot a transaction) and
applies the decision (store writes, outcome counting and logging) in one
place, so every branch here can be tested from a table without a node.

The decisions, per open nonce:

- :class:`Confirm`: a receipt at the configured depth; it says which linked
  intents are confirmed, reverted, or failed inside a batch (preempted);
- :class:`Mined`: a receipt not yet deep enough;
- :class:`Dropped`: the nonce was spent by a transaction that is none of ours;
- :class:`Rebroadcast`: the node forgot the newest transaction and its calls
  are all still wanted: the same raw bytes again;
- :class:`Replace` / :class:`Cancel`: stuck or forgotten and no longer wholly
  wanted: new fees over the same nonce, with the calls that still pass, or a
  zero-value self-transfer when none does;
- :class:`Resent`: the node holds a transaction we still had as signed or
  mined (a lost send response, or a reorg put it back in the pool);
- :class:`Wait`: nothing to do yet.

:class:`Reopen` is the reorg watch's one decision: a confirmation the chain
no longer holds is in flight again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Generic, Protocol, TypeAlias, TypeVar

__all__ = [
    "ACTIVE_ATTEMPT",
    "Cancel",
    "Confirm",
    "Decision",
    "Dropped",
    "Landed",
    "Linked",
    "Mined",
    "NonceFacts",
    "Rebroadcast",
    "Receipt",
    "Reopen",
    "Replace",
    "Resent",
    "Rules",
    "Signed",
    "Wait",
    "after_simulation",
    "confirmation_lost",
    "live_attempts",
    "settle_nonce",
    "spent_by_another",
    "still_wanted",
    "stuck",
]

# Attempts whose fate is still open: checked on every tick and at startup.
ACTIVE_ATTEMPT: Final = ("signed", "sent", "mined")
# Linked intents a receipt never confirms (again): already confirmed, or refused by the contract.
_SETTLED: Final = ("confirmed", "not_permitted")


class Signed(Protocol):
    """What the settlement reads of a stored attempt (``store.intents.Attempt``)."""

    @property
    def id(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def tx_hash(self) -> str: ...
    @property
    def sent_block(self) -> int | None: ...
    @property
    def receipt_hash(self) -> str | None: ...


class Linked(Protocol):
    """What the settlement reads of an intent linked to an attempt (``store.intents.Intent``)."""

    @property
    def id(self) -> int: ...
    @property
    def status(self) -> str: ...
    @property
    def outcome(self) -> str | None: ...


L = TypeVar("L", bound=Linked)


@dataclass(frozen=True, slots=True)
class Landed:
    """Where a receipt puts a transaction: block number, block hash, status (1 success)."""

    block_number: int
    block_hash: str
    status: int

    def as_tuple(self) -> tuple[int, str, int]:
        return (self.block_number, self.block_hash, self.status)


@dataclass(frozen=True, slots=True)
class Receipt:
    """The receipt found for one of the nonce's attempts."""

    attempt_id: int
    at: Landed
    # linked intents whose subject the receipt's logs name (what a batch really moved)
    moved: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Rules:
    """The settings a settlement obeys (from ``[keeper]``)."""

    confirmations: int
    bump_after_blocks: int


@dataclass(frozen=True, slots=True)
class NonceFacts(Generic[L]):
    """What the chain said about one nonce this tick, gathered in the order it is needed.

    A fact left ``None`` was not asked for, because an earlier one decided:
    ``latest_count`` only when the nonce is below the mined count,
    ``any_live_known`` only when it is below ``latest_count`` too, ``passing``
    only when the newest live attempt is unknown to the node.
    """

    nonce: int
    head: int
    mined: int  # the signer's transaction count at the tick's head
    # the first receipt among the attempts not refused, oldest first
    receipt: Receipt | None = None
    linked: tuple[L, ...] = ()  # intents linked to the receipt's attempt
    # asked again after the receipts came back empty: a reorg between the counts and the
    # receipt lookups must not make us give up a transaction being moved to another block
    latest_count: int | None = None
    # some live attempt of ours is known to some endpoint (None: not asked, or an endpoint
    # did not answer)
    any_live_known: bool | None = None
    newest_known: bool | None = None  # the newest live attempt is known to the node
    carried: tuple[int, ...] = ()  # in-flight intents of the newest live attempt
    passing: tuple[bool, ...] | None = None  # their simulation at latest, in order


@dataclass(frozen=True, slots=True)
class Confirm:
    """Mark ``attempt`` confirmed with its receipt, the nonce's other live attempts replaced.

    ``confirmed`` end confirmed with this receipt; ``reverted`` end reverted (the
    transaction reverted); ``preempted`` failed inside the batch. A cancel
    confirms nothing (``cancel``).
    """

    attempt: int
    tx_hash: str
    at: Landed
    replaced: tuple[int, ...] = ()
    cancel: bool = False
    confirmed: tuple[int, ...] = ()
    reverted: tuple[int, ...] = ()
    preempted: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Mined:
    """Below the confirmation depth: mark ``attempt`` mined (``rewrite``: the stored receipt
    is missing or from another block), the nonce's other live attempts replaced."""

    attempt: int
    at: Landed
    replaced: tuple[int, ...] = ()
    rewrite: bool = True


@dataclass(frozen=True, slots=True)
class Dropped:
    """The nonce was spent by another transaction: these attempts and their intents end."""

    attempts: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Rebroadcast:
    """Send the stored raw bytes of ``attempt`` again (replaced if refused as underpriced)."""

    attempt: int


@dataclass(frozen=True, slots=True)
class Replace:
    """New fees at the nonce of ``attempt`` for the intents ``keep``.

    ``keep`` None: the carried calls are simulated again first (a stuck
    transaction). Intents not kept stay in flight on the attempts already at
    the nonce: whichever transaction spends it decides them.
    """

    attempt: int
    keep: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class Cancel:
    """Spend the nonce of ``attempt`` on a zero-value self-transfer, fees bumped."""

    attempt: int


@dataclass(frozen=True, slots=True)
class Resent:
    """The node holds ``attempt``: mark it sent at this head (its wait for a bump starts)."""

    attempt: int


@dataclass(frozen=True, slots=True)
class Wait:
    why: str


@dataclass(frozen=True, slots=True)
class Reopen:
    """A confirmation reorged out: the attempt back to mined (``receipt``) or sent, its
    intents back in flight."""

    attempt: int
    tx_hash: str
    receipt: Landed | None = None


Decision: TypeAlias = (
    Confirm | Mined | Dropped | Rebroadcast | Replace | Cancel | Resent | Wait | Reopen
)


def live_attempts(attempts: Sequence[Signed]) -> list[Signed]:
    """Attempts whose fate is open (signed, sent, mined), oldest first."""
    return [a for a in attempts if a.status in ACTIVE_ATTEMPT]


def spent_by_another(facts: NonceFacts[L]) -> bool:
    """The chain spent the nonce (at the head and at latest) and knows none of our hashes."""
    return (
        facts.nonce < facts.mined
        and facts.latest_count is not None
        and facts.nonce < facts.latest_count
        and facts.any_live_known is False
    )


def _spent_unasked(facts: NonceFacts[L]) -> bool:
    """The nonce is spent but an endpoint did not answer for our hashes: nothing is decided
    (a resend, replacement or drop could each be wrong if ours is the one mined)."""
    return (
        facts.latest_count is not None
        and facts.nonce < facts.latest_count
        and facts.nonce < facts.mined
        and facts.any_live_known is None
    )


def still_wanted(facts: NonceFacts[L]) -> bool:
    """Every call of the forgotten transaction still passes at latest (and it has some)."""
    return bool(facts.carried) and facts.passing is not None and all(facts.passing)


def stuck(nonce: int, mined: int, head: int, sent_block: int | None, bump_after: int) -> bool:
    """Pending ``bump_after`` heads since it was sent, at the chain's next nonce.

    Only the chain's next nonce can be stuck on its fee; a later one waits for
    it, and raising its fee would only burn money.
    """
    since = sent_block if sent_block is not None else head
    return nonce == mined and head - since >= bump_after


def after_simulation(
    attempt: int, carried: Sequence[int], passing: Sequence[bool]
) -> Replace | Cancel:
    """A replacement with the calls that still pass, or a cancel when none does."""
    keep = tuple(i for i, ok in zip(carried, passing, strict=False) if ok)
    return Replace(attempt, keep) if keep else Cancel(attempt)


def confirmation_lost(stored_hash: str | None, canonical: str | None, now: Landed | None) -> bool:
    """A confirmed attempt's block is not the chain's at that height, nor does its receipt
    (``now``, looked up again) still sit in the stored block: a lagging node serving an
    old header is not a reorg."""
    if canonical == stored_hash:
        return False
    return now is None or now.block_hash != stored_hash


def settle_nonce(attempts: Sequence[Signed], facts: NonceFacts[L], rules: Rules) -> Decision:
    """The one decision for an open nonce, from every attempt signed at it (oldest first)."""
    if facts.receipt is not None:
        return _on_receipt(attempts, facts, facts.receipt, rules)
    live = live_attempts(attempts)
    if not live:
        return Wait("no live attempt")
    if spent_by_another(facts):
        return Dropped(tuple(a.id for a in live))
    if _spent_unasked(facts):
        return Wait("the nonce is spent and not every endpoint said whether it knows ours")
    newest = live[-1]
    if not facts.newest_known:
        if newest.kind == "cancel" or still_wanted(facts):
            return Rebroadcast(newest.id)
        return after_simulation(newest.id, facts.carried, facts.passing or ())
    if newest.status != "sent":  # signed (response lost) or mined (reorged back to the pool)
        return Resent(newest.id)
    if stuck(facts.nonce, facts.mined, facts.head, newest.sent_block, rules.bump_after_blocks):
        return Cancel(newest.id) if newest.kind == "cancel" else Replace(newest.id)
    return Wait("pending")


def _on_receipt(
    attempts: Sequence[Signed], facts: NonceFacts[L], receipt: Receipt, rules: Rules
) -> Confirm | Mined:
    hit = next(a for a in attempts if a.id == receipt.attempt_id)
    replaced = tuple(a.id for a in live_attempts(attempts) if a.id != hit.id)
    at = receipt.at
    if facts.head - at.block_number + 1 < rules.confirmations:
        rewrite = hit.status != "mined" or hit.receipt_hash != at.block_hash
        return Mined(hit.id, at, replaced, rewrite)
    if hit.kind == "cancel":
        return Confirm(hit.id, hit.tx_hash, at, replaced, cancel=True)
    carried = tuple(i.id for i in facts.linked if i.status == "inflight")
    if at.status != 1:
        return Confirm(hit.id, hit.tx_hash, at, replaced, reverted=carried)
    # Whatever the books say of a linked intent, the receipt is the authority: a
    # successful call did its one action, and a batch's logs say which subjects
    # moved. An older attempt may be the one mined, after a replacement dropped
    # subjects: its logs say what it really did, so those count too.
    moved = tuple(
        i.id
        for i in facts.linked
        if i.outcome not in _SETTLED and (hit.kind == "call" or i.id in receipt.moved)
    )
    preempted = tuple(i for i in carried if i not in moved)
    return Confirm(hit.id, hit.tx_hash, at, replaced, confirmed=moved, preempted=preempted)
