"""Nonce rules for one signer: the chain is a floor, the local counter never goes down.

A node's pending count can lag (a load-balanced RPC, a node that dropped our
transaction from its pool) and it can jump (another process using the same
key). Taking the maximum of our own counter and the chain's makes both safe:
a lag never makes us reuse a nonce, a jump never makes us send one that is
already spent. The counter is only ever moved down by an explicit, logged
decision of the caller (none exists today): gaps are filled, not rewound.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["NonceBook", "find_gaps", "next_nonce"]


def next_nonce(local_next: int | None, chain_pending: int) -> int:
    """The next nonce to reserve given what we reserved so far and what the chain counts."""
    if chain_pending < 0:
        raise ValueError("negative transaction count")
    if local_next is None:
        return chain_pending
    return max(local_next, chain_pending)


def find_gaps(chain_mined: int, local_next: int, broadcast: Iterable[int]) -> list[int]:
    """Nonces the chain still waits for that we reserved but never broadcast.

    ``chain_mined`` is the ``latest`` transaction count (every nonce below it is
    spent for good), ``local_next`` our counter, ``broadcast`` every nonce we
    ever handed to a node. A nonce in between that was never sent (a crash
    between reservation and broadcast) stalls every later transaction of the
    signer until something is mined at it.
    """
    sent = set(broadcast)
    return [n for n in range(chain_mined, local_next) if n not in sent]


class NonceBook:
    """The in-memory counter of one signer; the caller holds the signer's lock around it."""

    __slots__ = ("_next",)

    def __init__(self, local_next: int | None = None) -> None:
        self._next = local_next

    @property
    def next(self) -> int | None:
        """The nonce :meth:`reserve` would hand out (None before the chain was seen)."""
        return self._next

    def observe_chain(self, chain_pending: int) -> int:
        """Raise the counter to the chain's pending count if the chain is ahead."""
        self._next = next_nonce(self._next, chain_pending)
        return self._next

    def reserve(self) -> int:
        """Hand out the next nonce and move past it; requires a prior :meth:`observe_chain`."""
        if self._next is None:
            raise RuntimeError("observe the chain's transaction count before reserving")
        nonce = self._next
        self._next = nonce + 1
        return nonce
