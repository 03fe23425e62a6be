"""The simulation gate: ``eth_call`` every action before it may be signed.

A call that would revert is never broadcast. Batchable actions are simulated
through Multicall3 ``aggregate3`` with ``allowFailure``, which answers for
every subject in one round trip; others one ``eth_call`` each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from keeper.act.calls import SimVerdict, classify_revert
from keeper.act.chain import ChainRpc, revert_data
from keeper.domain.multicall import decode_aggregate3, encode_aggregate3
from keeper.domain.planner import Action, ActionKind
from keeper.errors import FatalError, RetryableError
from keeper.rpc.errors import ExecutionRevertedError, RpcError

__all__ = ["BATCHABLE", "CALLS_AT_ONCE", "Encoder", "MulticallUnavailable", "Refusal",
           "SimResult", "Unanswered", "batchable", "bounded", "refusals",
           "simulate"]  # fmt: skip

T = TypeVar("T")

# eth_calls of one gate in flight at once: a thousand refunds due in one block are twenty
# batches, and made one after another their round trips (not the node's work) spread the
# sends over several blocks; a bound keeps a gate of singles from opening a thousand.
CALLS_AT_ONCE = 8

# Calldata of one action in its contract's dialect (``DialectBook.encode``).
Encoder = Callable[[Action], bytes]

# Actions anyone may call: the same through Multicall3 as from our key. A
# permissioned one (evaluatorTimeout on requester-only contracts) must come
# from the signer itself, so it is never batched.
BATCHABLE = frozenset(
    {ActionKind.CLAIM_REFUND, ActionKind.FINALIZE_VERDICT, ActionKind.REFUND_EXPIRED}
)


def batchable(action: Action) -> bool:
    """Whether ``action`` is simulated and sent through Multicall3 (when configured)."""
    return action.action in BATCHABLE and not action.alone


class MulticallUnavailable(FatalError):
    """The configured Multicall3 address does not answer like Multicall3 and has no code.

    Fatal for batching only: a batch sent there would "succeed" doing nothing. Where
    code is there, a foreign answer is the node's fault and the gate is retried.
    """


@dataclass(frozen=True, slots=True)
class SimResult:
    action: Action
    verdict: SimVerdict
    reason: str = ""
    revert: bytes | None = None  # the revert data, for callers that look deeper (hooks)

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"


async def _single(rpc: ChainRpc, action: Action, block: int | str, encode: Encoder) -> SimResult:
    try:
        await rpc.call(action.contract, encode(action), block)
    except ExecutionRevertedError as exc:
        data = revert_data(exc)
        verdict, reason = classify_revert(data, action.protocol)
        return SimResult(action, verdict, reason, data)
    return SimResult(action, "ok")


async def _batch(
    rpc: ChainRpc, actions: Sequence[Action], block: int | str, multicall: str, encode: Encoder
) -> list[SimResult]:
    data = encode_aggregate3([(a.contract, encode(a)) for a in actions])
    try:
        raw = await rpc.call(multicall, data, block)
    except ExecutionRevertedError as exc:
        # aggregate3 with allowFailure cannot revert for one subject: the batch
        # itself is broken (no Multicall3 there, out of gas). Fall back to singles.
        del exc
        return [await _single(rpc, a, block, encode) for a in actions]
    try:
        results = decode_aggregate3(raw)
        if len(results) != len(actions):
            raise ValueError(f"{len(results)} results for {len(actions)} calls")
    except Exception as exc:  # empty or foreign return data: is Multicall3 there at all?
        if await rpc.get_code(multicall, block):
            # code is there: the node's answer was wrong, not the address. One such
            # answer must not send every later batch alone, at several times the gas
            raise RetryableError(
                f"{multicall} answered aggregate3 with data that is not its results ({exc}): "
                "simulated again on the next tick"
            ) from None
        raise MulticallUnavailable(f"no Multicall3 answering at {multicall}") from None
    out: list[SimResult] = []
    for action, res in zip(actions, results, strict=True):
        if res.success:
            out.append(SimResult(action, "ok"))
        else:
            verdict, reason = classify_revert(res.return_data, action.protocol)
            out.append(SimResult(action, verdict, reason, res.return_data))
    return out


async def simulate(
    rpc: ChainRpc,
    actions: Sequence[Action],
    block: int | str,
    *,
    multicall: str | None,
    batch_size: int,
    encode: Encoder,
) -> list[SimResult]:
    """One result per action, in the input order."""
    results: dict[int, SimResult] = {}
    batched = [i for i, a in enumerate(actions) if batchable(a)]
    chunks: list[list[int]] = []
    if multicall and batched:  # alone too: it is how they will be sent
        chunks = [batched[i : i + batch_size] for i in range(0, len(batched), batch_size)]
        answers = await bounded(
            [_batch(rpc, [actions[i] for i in idx], block, multicall, encode) for idx in chunks]
        )
        for idx, chunk in zip(chunks, answers, strict=True):
            results.update(zip(idx, chunk, strict=True))
    rest = [i for i in range(len(actions)) if i not in results]
    singles = await bounded([_single(rpc, actions[i], block, encode) for i in rest])
    results.update(zip(rest, singles, strict=True))
    return [results[i] for i in range(len(actions))]


@dataclass(frozen=True, slots=True)
class Unanswered:
    """A probe the node did not answer (wrapped: ``bounded`` raises an error it is given)."""

    error: RpcError


# what a probe's eth_call said: its revert data, None when it would not revert, or that
# the node did not say
Refusal = bytes | Unanswered | None


async def refusals(
    rpc: ChainRpc,
    calls: Sequence[tuple[str, bytes]],
    block: int | str,
    *,
    multicall: str | None,
    batch_size: int,
) -> list[Refusal]:
    """Each ``(contract, calldata)`` call's answer at ``block``, in the input order.

    For probes, whose answer is the revert itself: through Multicall3 ``aggregate3``
    (``allowFailure``) when one is configured, ``batch_size`` calls a round trip, as the
    gate simulates batches (on a rate-limited endpoint a hundred open disputes would
    otherwise be a hundred requests every few blocks); one ``eth_call`` each otherwise.
    """
    if not multicall:
        return await _alone(rpc, calls, block)
    chunks = [calls[i : i + batch_size] for i in range(0, len(calls), batch_size)]
    answers = await bounded([_refusals(rpc, chunk, block, multicall) for chunk in chunks])
    return [answer for chunk in answers for answer in chunk]


async def _alone(
    rpc: ChainRpc, calls: Sequence[tuple[str, bytes]], block: int | str
) -> list[Refusal]:
    return await bounded([_refusal(rpc, to, data, block) for to, data in calls])


async def _refusal(rpc: ChainRpc, to: str, data: bytes, block: int | str) -> Refusal:
    try:
        await rpc.call(to, data, block)
    except ExecutionRevertedError as exc:
        return revert_data(exc)
    except RpcError as exc:
        return Unanswered(exc)
    return None


async def _refusals(
    rpc: ChainRpc, chunk: Sequence[tuple[str, bytes]], block: int | str, multicall: str
) -> list[Refusal]:
    try:
        raw = await rpc.call(multicall, encode_aggregate3(chunk), block)
    except ExecutionRevertedError:
        # aggregate3 with allowFailure does not revert for one call: no Multicall3 answers
        # there (the gate's batches find out and stop)
        raw = b""
    except RpcError as exc:
        return [Unanswered(exc)] * len(chunk)
    try:
        results = decode_aggregate3(raw)
    except Exception:  # not aggregate3's results
        results = []
    if len(results) != len(chunk):  # each call alone instead
        return await _alone(rpc, chunk, block)
    return [None if r.success else r.return_data for r in results]


async def bounded(calls: Sequence[Awaitable[T]], limit: int = CALLS_AT_ONCE) -> list[T]:
    """Await ``calls`` with at most ``limit`` in flight; results in order, the first error
    raised once every call has finished (none is left running behind the caller)."""
    gate = asyncio.Semaphore(limit)

    async def one(call: Awaitable[T]) -> T:
        async with gate:
            return await call

    answers = await asyncio.gather(*(one(c) for c in calls), return_exceptions=True)
    out: list[T] = []
    for answer in answers:
        if isinstance(answer, BaseException):
            raise answer
        out.append(answer)
    return out
